"""OpenAPI 3.1 document for every route of the app. Paths come from the router itself (so a new route can never
be missing); summaries and request bodies from the table below."""
from __future__ import annotations

from aiohttp import web

from app import __version__

OBJ = {"type": "object"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
INT = {"type": "integer"}
KEEP_ALIVE = {"oneOf": [STR, {"type": "number"}], "description": "\"5m\", seconds, 0 = unload now, <0 = forever"}
FORMAT = {"oneOf": [{"type": "string", "enum": ["", "json"]}, OBJ], "description": "\"json\" or a JSON schema"}
OPTIONS = {"type": "object", "description": "Ollama options: num_ctx, num_predict, temperature, top_k, top_p, min_p, "
                                            "seed, stop, repeat_penalty, num_gpu, main_gpu, num_thread, num_batch, ..."}
MESSAGES = {"type": "array", "items": {"type": "object", "properties": {"role": STR, "content": STR},
                                       "required": ["role"]}}


def _obj(props: dict, required=()) -> dict:
    d = {"type": "object", "properties": props}
    if required:
        d["required"] = list(required)
    return d


GEN_COMMON = {"model": STR, "stream": BOOL, "keep_alive": KEEP_ALIVE, "options": OPTIONS, "format": FORMAT,
              "logprobs": BOOL, "top_logprobs": INT, "think": {"oneOf": [BOOL, STR]}}

ROUTES: dict[tuple[str, str], tuple[str, str, dict | None]] = {
    # (method, path): (tag, summary, request schema)
    ("GET", "/"): ("strata", "Liveness text", None),
    ("GET", "/api/version"): ("ollama", "Server version (no API key needed)", None),
    ("GET", "/api/tags"): ("ollama", "List local models", None),
    ("POST", "/api/show"): ("ollama", "Show a model: details, model_info, template, parameters",
                            _obj({"model": STR, "verbose": BOOL}, ["model"])),
    ("POST", "/api/create"): ("ollama", "Create a model from a model or GGUF path (`from`), uploaded GGUF blobs "
                                        "(`files`) or a Modelfile",
                              _obj({"model": STR, "from": STR, "modelfile": STR, "files": OBJ, "adapters": OBJ, "parameters": OBJ,
                                    "template": STR, "system": STR, "license": {"oneOf": [STR, {"type": "array"}]},
                                    "stream": BOOL}, ["model"])),
    ("POST", "/api/copy"): ("ollama", "Copy a model under a new name",
                            _obj({"source": STR, "destination": STR}, ["source", "destination"])),
    ("DELETE", "/api/delete"): ("ollama", "Delete a model", _obj({"model": STR}, ["model"])),
    ("POST", "/api/pull"): ("ollama", "Pull a model from an Ollama registry or Hugging Face (NDJSON progress)",
                            _obj({"model": STR, "insecure": BOOL, "stream": BOOL}, ["model"])),
    ("POST", "/api/push"): ("ollama", "Push a model to a registry you name (NDJSON progress)",
                            _obj({"model": STR, "source": STR, "insecure": BOOL, "stream": BOOL}, ["model"])),
    ("POST", "/api/blobs/{digest}"): ("ollama", "Upload a GGUF blob (raw body) for /api/create `files`", None),
    ("GET", "/api/ps"): ("ollama", "Loaded models, with Strata's layout, predicted/actual bytes, load progress", None),
    ("POST", "/api/generate"): ("ollama", "Generate a completion (NDJSON stream by default); empty prompt loads, "
                                          "keep_alive 0 unloads",
                                _obj({**GEN_COMMON, "prompt": STR, "system": STR, "raw": BOOL, "suffix": STR,
                                      "template": STR, "context": {"type": "array", "items": INT}}, ["model"])),
    ("POST", "/api/chat"): ("ollama", "Chat completion (NDJSON stream by default)",
                            _obj({**GEN_COMMON, "messages": MESSAGES, "tools": {"type": "array"}}, ["model"])),
    ("POST", "/api/embed"): ("ollama", "Embeddings for one or more inputs",
                             _obj({"model": STR, "input": {"oneOf": [STR, {"type": "array", "items": STR}]},
                                   "truncate": BOOL, "dimensions": INT, "keep_alive": KEEP_ALIVE,
                                   "options": OPTIONS}, ["model", "input"])),
    ("POST", "/api/embeddings"): ("ollama", "Legacy: embedding of one prompt",
                                  _obj({"model": STR, "prompt": STR, "keep_alive": KEEP_ALIVE, "options": OPTIONS},
                                       ["model"])),
    ("POST", "/v1/chat/completions"): ("openai", "OpenAI chat completions (SSE when stream=true)",
                                       _obj({"model": STR, "messages": MESSAGES, "stream": BOOL,
                                             "stream_options": OBJ, "max_tokens": INT,
                                             "max_completion_tokens": INT, "temperature": {"type": "number"},
                                             "top_p": {"type": "number"}, "stop": {"oneOf": [STR, {"type": "array"}]},
                                             "seed": INT, "logprobs": BOOL, "top_logprobs": INT,
                                             "response_format": OBJ, "logit_bias": OBJ,
                                             "tools": {"type": "array"}, "tool_choice": {"oneOf": [STR, OBJ]},
                                             "parallel_tool_calls": BOOL, "reasoning_effort": STR},
                                            ["model", "messages"])),
    ("POST", "/apply-template"): ("openai", "llama-server's: the prompt a chat completion body renders to",
                                 _obj({"model": STR, "messages": MESSAGES, "tools": {"type": "array"}},
                                      ["model", "messages"])),
    ("POST", "/v1/completions"): ("openai", "OpenAI text completions (SSE when stream=true)",
                                  _obj({"model": STR, "prompt": STR, "stream": BOOL, "max_tokens": INT,
                                        "echo": BOOL, "logprobs": INT, "stop": {"oneOf": [STR, {"type": "array"}]},
                                        "seed": INT, "suffix": STR}, ["model", "prompt"])),
    ("POST", "/v1/embeddings"): ("openai", "OpenAI embeddings (float or base64)",
                                 _obj({"model": STR, "input": {"oneOf": [STR, {"type": "array", "items": STR}]},
                                       "encoding_format": STR, "dimensions": INT}, ["model", "input"])),
    ("POST", "/v1/messages"): ("anthropic", "Anthropic Messages API (SSE events when stream=true)",
                               _obj({"model": STR, "messages": {"type": "array"}, "max_tokens": INT,
                                     "system": {"oneOf": [STR, {"type": "array"}]}, "stream": BOOL,
                                     "stop_sequences": {"type": "array", "items": STR},
                                     "temperature": {"type": "number"}, "top_p": {"type": "number"}, "top_k": INT,
                                     "tools": {"type": "array"}, "tool_choice": OBJ, "thinking": OBJ},
                                    ["model", "messages", "max_tokens"])),
    ("POST", "/v1/messages/count_tokens"): ("anthropic", "Anthropic: tokens of a Messages request's prompt",
                                            _obj({"model": STR, "messages": {"type": "array"},
                                                  "system": {"oneOf": [STR, {"type": "array"}]},
                                                  "tools": {"type": "array"}}, ["model", "messages"])),
    ("POST", "/v1/responses"): ("openai", "OpenAI Responses API, stateless (SSE events when stream=true)",
                                _obj({"model": STR, "input": {"oneOf": [STR, {"type": "array"}]},
                                      "instructions": STR, "stream": BOOL, "max_output_tokens": INT,
                                      "temperature": {"type": "number"}, "top_p": {"type": "number"},
                                      "tools": {"type": "array"}, "tool_choice": {"oneOf": [STR, OBJ]},
                                      "parallel_tool_calls": BOOL, "reasoning": OBJ, "text": OBJ},
                                     ["model", "input"])),
    ("GET", "/v1/models"): ("openai", "List models", None),
    **{("POST", path): ("rerank", "Rerank documents against a query (llama-server / Jina / Cohere shape; a "
                                  "reranker GGUF)",
                        _obj({"model": STR, "query": STR, "documents": {"type": "array", "minItems": 1},
                              "top_n": INT, "return_documents": BOOL, "truncate": BOOL,
                              "keep_alive": KEEP_ALIVE, "options": OPTIONS}, ["model", "query", "documents"]))
       for path in ("/v1/rerank", "/rerank", "/api/rerank")},
    ("GET", "/v1/models/{model}"): ("openai", "One model", None),
    ("GET", "/api/devices"): ("strata", "Device inventory (GPUs, host RAM); ?refresh=1 discovers again", None),
    ("POST", "/api/layout"): ("strata", "Plan a model's layout without loading it (what-if)",
                              _obj({"model": STR, "options": OBJ, "devices": OBJ}, ["model"])),
    ("GET", "/api/pin"): ("strata", "Every model's pin and default keep_alive that a user set", None),
    ("POST", "/api/pin"): ("strata", "Pin a model (never unloaded for another model, never expires) and/or set its "
                                     "default keep_alive (null: the server's); a field left out keeps its value",
                           _obj({"model": STR, "pinned": BOOL, "keep_alive": KEEP_ALIVE}, ["model"])),
    ("POST", "/api/import"): ("strata", "Import a GGUF file on this machine into the store (NDJSON progress: "
                                        "hashing/copying completed of total; closing the stream cancels)",
                              _obj({"path": STR, "model": STR, "link": BOOL, "stream": BOOL}, ["path"])),
    ("GET", "/api/events"): ("strata", "Server-sent events: load_started, load_progress, loaded, unloaded, "
                                       "load_failed, memory; `: ping` every 15 s. `?include=request,stats` adds "
                                       "a `request` event per request start, lease and end, and a `stats` sample "
                                       "every second (the Server window's feed)", None),
    ("GET", "/api/requests"): ("strata", "The last requests (in memory and on disk; filters client, model, status, "
                                         "path; format=jsonl exports): route, client, status, error, "
                                         "tokens, cache, drafts, time to first token, timeline", None),
    ("GET", "/api/requests/{id}"): ("strata", "One logged request with its headers (credentials masked) and "
                                              "its bodies (bounded)", None),
    ("POST", "/api/requests/{id}/replay"): ("strata", "Send a logged request again as it was; names the new "
                                                      "request's record", None),
    ("GET", "/metrics"): ("strata", "Prometheus metrics (text format)", None),
    ("GET", "/api/openapi.json"): ("strata", "This document", None),
}

ERROR = {"description": "Error", "content": {"application/json": {"schema": _obj({"error": {}})}}}


def _canonical(path: str) -> str:
    return path.replace("{model:.+}", "{model}")


def build_openapi(app: web.Application) -> dict:
    paths: dict[str, dict] = {}
    for route in app.router.routes():
        method = route.method
        if method == "HEAD":
            continue
        info = route.resource.get_info() if route.resource else {}
        path = _canonical(info.get("path") or info.get("formatter") or "")
        if not path:
            continue
        tag, summary, schema = ROUTES.get((method, path), ("other", f"{method} {path}", None))
        op: dict[str, object] = {"tags": [tag], "summary": summary, "operationId": f"{method.lower()}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '').replace('.', '_') or 'root'}",
              "responses": {"200": {"description": "OK"}, "400": ERROR, "404": ERROR}}
        params = [{"name": n, "in": "path", "required": True, "schema": STR}
                  for n in ("model", "digest") if "{" + n + "}" in path]
        if params:
            op["parameters"] = params
        if schema is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
        methods = ("get", "post", "put", "delete") if method == "*" else (method.lower(),)
        for m in methods:
            paths.setdefault(path, {})[m] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Strata local API", "version": __version__,
                 "description": "Ollama- and OpenAI-compatible API plus Strata's layout, devices, events and metrics."},
        "servers": [{"url": "/"}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "only when STRATA_API_KEY is set"}}},
        "paths": paths,
    }
