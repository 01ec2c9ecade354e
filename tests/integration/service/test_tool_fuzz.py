"""Tool-call fuzzing: every family with a tools template, random-weight models sampled hot, random tool schemas.

One tiny synthetic GGUF per family (random weights, SmolLM2's tokenizer, the family's chat template). Its
vocabulary is edited as a real model of that family has it: the family's markers (`<tool_call>`, `<|python_tag|>`,
`[TOOL_CALLS]`, harmony's `<|channel|>`...) are single tokens, and so are `{\\n` and ` "name"` (Qwen's vocabulary
has `{\\n`: the token whose replay into the lazy grammar aborted the runner). Requests go through the
official `openai` client at temperature 1.0-1.5 with a logit bias toward those tokens, so replies open calls (by
marker or as bare JSON) far more often than noise would, with random tool schemas: nested objects, enums, arrays,
integers and numbers with bounds, booleans, strings whose enum values and property names hold quotes, backslashes,
newlines and non-ASCII text; tool_choice auto / required / named / none, streamed or not, parallel calls on or off.

Checked on every reply: the service answered (no runner abort, no 5xx); every call names an offered tool; every
call's arguments validate against that tool's schema (jsonschema) but the last of a reply cut by max_tokens, a
forced choice made a call (of the named tool), `none` made none and `parallel_tool_calls: false` at most one.
Streamed, each call opens with its id and name (arguments "") and its later pieces carry only arguments, which
add up to JSON (a call that goes malformed after its first pieces is closed where it broke).
At the end the counts (requests, calls, cut replies, aborts) are printed; aborts must be 0.

STRATA_TOOL_FUZZ_REQUESTS requests per family (CI: 20, 220 in all, about 3 minutes on 2 cores; `make fuzz`: 200 per
family).
STRATA_TOOL_FUZZ_SEED changes the draw (default: fixed, so a failure reproduces); STRATA_TOOL_FUZZ_FAMILIES=a,b
runs only those families.
"""
from __future__ import annotations

import json
import os
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest
from gguf import GGUFValueType

from app.engine.chat.formats import format_for
from gguf_factory import tokenizer_keys, write_dense_llama
from gguf_writer import smollm2_tokenizer_kv, template_text

N_PER_FAMILY = int(os.environ.get("STRATA_TOOL_FUZZ_REQUESTS", "20"))
SEED = int(os.environ.get("STRATA_TOOL_FUZZ_SEED", "2024"))

# Families whose templates the fixtures do not hold: small templates with the family's markup (detected by
# chat_facts.detect_family as that family), ChatML turns, tools written as JSON.
_CHATML_TURNS = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content if m.content is string else '' }}"
                 "<|im_end|>\n{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CRAFTED = {
    "mistral": ("{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif -%}"
                "{%- for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
                "{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}</s>"
                "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
                "{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"),
    "qwen3_coder": ("{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
                    "</tools>\nCall as <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n</function>\n"
                    "</tool_call><|im_end|>\n{% endif -%}" + _CHATML_TURNS),
    "functiongemma": ("{%- if tools %}<|im_start|>system\n{% for t in tools %}<start_function_declaration>"
                      "{{ t | tojson }}<end_function_declaration>{% endfor %}Call with <start_function_call>call:"
                      "NAME{args}<end_function_call><|im_end|>\n{% endif -%}" + _CHATML_TURNS),
    "pythonic": ("{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}\nCall as [func_name1(a=1)] or "
                 "```tool_code\nf(a=1)\n```<|im_end|>\n{% endif -%}" + _CHATML_TURNS),
}
# family -> (template, the marker whose token the bias favours: the one that opens a call)
FAMILIES = {
    "hermes": (template_text("Qwen-Qwen3-0.6B.jinja"), "<tool_call>"),
    "hermes-granite": (template_text("ibm-granite-granite-4.0.jinja"), "<tool_call>"),
    "llama3": (template_text("meta-llama-Llama-3.1-8B-Instruct.jinja"), "<|python_tag|>"),
    "llama4": (template_text("meta-llama-Llama-4-Scout-17B-16E-Instruct.jinja"), "<|python_start|>"),
    "mistral": (CRAFTED["mistral"], "[TOOL_CALLS]"),
    "command_r": (template_text("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"), "<|START_ACTION|>"),
    "deepseek": (template_text("deepseek-ai-DeepSeek-V3.1.jinja"), "<｜tool▁calls▁begin｜>"),
    "harmony": (template_text("openai-gpt-oss-120b.jinja"), "<|channel|>"),
    "qwen3_coder": (CRAFTED["qwen3_coder"], "<tool_call>"),
    "functiongemma": (CRAFTED["functiongemma"], "<start_function_call>"),
    "pythonic": (CRAFTED["pythonic"], "["),
}
ONLY = [f for f in os.environ.get("STRATA_TOOL_FUZZ_FAMILIES", "").split(",") if f]     # default: all
PARSER_FAMILY = {"hermes-granite": "hermes", "llama4": "llama3"}
BARE = ("{\n", ' "name"')           # single tokens in the edited vocabulary, as `{\n` is in Qwen's
FREE_IDS = range(3, 17)              # SmolLM2's unused control tokens (<repo_name>...): replaced by the markers
CONTROL, USER_DEFINED = 3, 4
END_IDS = (0, 2)                     # SmolLM2's <|endoftext|> and <|im_end|>


def vocab_edits(family: str):
    """SmolLM2's tokens and types with the family's markers (and BARE) in place of unused control tokens.
    -> (tokenizer_keys extra, {token text: id})."""
    kv = {k: (v, t, it) for k, v, t, it in smollm2_tokenizer_kv()}
    tokens, types = list(kv["tokenizer.ggml.tokens"][0]), list(kv["tokenizer.ggml.token_type"][0])
    markers = [m for m in format_for(PARSER_FAMILY.get(family, family)).shown if m not in tokens]
    ids: dict[str, int] = {}
    for tid, text in zip(FREE_IDS, list(BARE) + markers):
        tokens[tid] = text
        # Qwen's <tool_call>/<think> are added tokens shown as text; the other families' markers are control tokens
        types[tid] = USER_DEFINED if text in BARE or family.startswith("hermes") or family == "qwen3_coder" \
            else CONTROL
        ids[text] = tid
    for text in ("{", '"', "Ċ", "Ġ", "[", ":", "Ġ\""):
        ids.setdefault(text, tokens.index(text))
    extra = (("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, GGUFValueType.STRING),
             ("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY, GGUFValueType.INT32))
    return extra, ids


# ---- random tool schemas ----------------------------------------------------------------------------------------

ODD_TEXT = ('say "hi"', "two\nlines", "back\\slash", "tab\there", "Zürich ü", "emoji 🌍", "a/b", "{brace}", "'single'")
NAMES = ("city", "count", "with space", "dash-name", "snake_case", "quo\"te", "ünï", "n1", "items", "flag")


def rand_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "enum", "integer", "number", "boolean"] + (["array", "object"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        s = {"type": "string"}
        if rng.random() < 0.3:
            s["maxLength"] = rng.randint(1, 12)
        return s
    if kind == "enum":
        return {"type": "string", "enum": rng.sample(ODD_TEXT, rng.randint(1, 4))}
    if kind == "integer":
        s = {"type": "integer"}
        if rng.random() < 0.5:
            s["minimum"] = rng.randint(-5, 5)
            s["maximum"] = s["minimum"] + rng.randint(0, 100)
        return s
    if kind == "number":
        return {"type": "number"}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "array":
        s = {"type": "array", "items": rand_schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["maxItems"] = rng.randint(1, 3)
        return s
    return rand_object(rng, depth + 1)


def rand_object(rng: random.Random, depth: int = 0) -> dict:
    names = rng.sample(NAMES, rng.randint(1, 4))
    props = {n: rand_schema(rng, depth) for n in names}
    for n in names:
        if rng.random() < 0.3:
            props[n]["description"] = rng.choice(ODD_TEXT)
    return {"type": "object", "properties": props, "required": [n for n in names if rng.random() < 0.6]}


def rand_tools(rng: random.Random) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"tool_{i}_{rng.choice(('get', 'set', 'find', 'run'))}",
        "description": rng.choice(ODD_TEXT), "parameters": rand_object(rng)}} for i in range(rng.randint(1, 3))]


# ---- the service and the run ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fuzz_service(live_service, tmp_path_factory, smollm2_path):
    models = tmp_path_factory.mktemp("tool-fuzz-models")
    svc = live_service(num_ctx=2048, num_parallel=2, keep_alive="10m", max_loaded_models=2, max_body=1024 * 1024)
    ids = {}
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        for fam, (template, _) in FAMILIES.items():
            extra, ids[fam] = vocab_edits(fam)
            extra += (("tokenizer.chat_template", template, GGUFValueType.STRING, None),)
            with tokenizer_keys(("tokenizer.chat_template",), extra):
                path = write_dense_llama(models / f"{fam}.gguf", n_layer=1, n_embd=64, n_ff=128, seed=5)
            r = c.post("/api/create", json={"model": f"fuzz-{fam}:test", "from": str(path), "stream": False})
            assert r.status_code == 200, r.text
            shown = c.post("/api/show", json={"model": f"fuzz-{fam}:test"}).json()
            assert "tools" in shown["capabilities"], (fam, shown["capabilities"])
    yield svc, ids


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.by_family: dict[str, Counter] = {}
        self.problems: list[str] = []
        self.bad: Counter = Counter()          # (family, cell) -> replies with a problem

    def add(self, family: str, **kinds) -> None:
        with self.lock:
            fam = self.by_family.setdefault(family, Counter())
            for k, n in kinds.items():
                self.counts[k] += n
                fam[k] += n

    def problem(self, text: str, family: str, cell: str) -> None:
        with self.lock:
            self.problems.append(text)
            self.bad[(family, cell)] += 1

    def table(self, families) -> list[str]:
        """family x (tool_choice, streamed or not): requests / with a problem."""
        cells = [f"{c}{s}" for c in ("auto", "required", "named", "none") for s in ("", "+stream")]
        rows = [f"  {'family':15}" + "".join(f"{c:>17}" for c in cells)]
        for fam in families:
            got = self.by_family.get(fam, Counter())
            marks = [f"{got[c]} " + (f"FAIL {self.bad[(fam, c)]}" if self.bad[(fam, c)] else "ok") for c in cells]
            rows.append(f"  {fam:15}" + "".join(f"{m:>17}" for m in marks))
        return rows


def one_request(ai: openai.OpenAI, family: str, ids: dict, rng: random.Random, tally: Tally) -> None:
    tools = rand_tools(rng)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    choice = rng.choice(("auto", "auto", "auto", "required", "named", "none"))
    named = rng.choice(list(schemas))
    tool_choice = {"type": "function", "function": {"name": named}} if choice == "named" else choice
    parallel = rng.random() < 0.7
    max_tokens = rng.randint(24, 128)
    opener = FAMILIES[family][1]
    bias = {ids[t]: round(rng.uniform(0, 9), 1) for t in ("Ċ", "Ġ", "Ġ\"") if rng.random() < 0.5}
    bias[ids['"']] = round(rng.uniform(3, 10), 1)      # strings close (a hot random model's strings run on)
    if choice == "auto":
        bias[ids[opener]] = round(rng.uniform(4, 14), 1)
        for t in BARE:
            bias[ids[t]] = round(rng.uniform(0, 12), 1)
    if rng.random() < 0.6:                 # end-of-text favoured: replies end once a call is complete, so
        for t in END_IDS:                  # more calls are whole and their arguments checked
            bias[t] = round(rng.uniform(2, 9), 1)
    stream = rng.random() < 0.5
    cell = choice + ("+stream" if stream else "")
    what = f"{family} choice={choice} parallel={parallel} stream={stream} tools={json.dumps(tools)[:200]}"
    kw = dict(model=f"fuzz-{family}:test", messages=[{"role": "user", "content": rng.choice(ODD_TEXT)}],
              tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel, max_tokens=max_tokens,
              temperature=round(rng.uniform(1.0, 1.5), 2), seed=rng.randrange(1 << 30),
              logit_bias={str(k): v for k, v in bias.items()})
    try:
        if stream:
            calls, n_tokens, finish, content = {}, None, None, ""
            for chunk in ai.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
                if chunk.usage:
                    n_tokens = chunk.usage.completion_tokens
                for ch in chunk.choices:
                    finish = ch.finish_reason or finish
                    content += ch.delta.content or ""
                    for tc in ch.delta.tool_calls or ():
                        if tc.index not in calls and not (tc.id and tc.function.name and tc.function.arguments == ""):
                            tally.problem(f"call {tc.index} did not open with its id and name: {tc} ({what})",
                                          family, cell)
                        elif tc.index in calls and (tc.id or tc.function.name):
                            tally.problem(f"call {tc.index} named again: {tc} ({what})", family, cell)
                        c = calls.setdefault(tc.index, {"name": "", "args": ""})
                        c["name"] += tc.function.name or ""
                        c["args"] += tc.function.arguments or ""
            got = [(c["name"], c["args"]) for _, c in sorted(calls.items())]
        else:
            r = ai.chat.completions.create(**kw)
            n_tokens, finish = r.usage.completion_tokens, r.choices[0].finish_reason
            content = r.choices[0].message.content or ""
            got = [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or ()]
    except openai.BadRequestError as e:
        tally.add(family, requests=1, refused=1, **{cell: 1})
        if e.body.get("param") != "tools":
            tally.problem(f"400 not naming tools: {e.body} ({what})", family, cell)
        return
    except (openai.APIError, httpx.HTTPError) as e:
        text = str(e)
        aborted = "ended unexpectedly" in text or "runner" in text
        tally.add(family, requests=1, aborts=int(aborted), errors=int(not aborted), **{cell: 1})
        tally.problem(f"{'ABORT' if aborted else 'error'}: {text[:300]} ({what})", family, cell)
        return
    cut = n_tokens is None or n_tokens >= max_tokens
    tally.add(family, requests=1, calls=len(got), cut=int(cut), with_calls=int(bool(got)), **{cell: 1})
    for i, (name, args) in enumerate(got):
        if name not in schemas:
            tally.problem(f"call of {name!r}, not an offered tool ({what})", family, cell)
            continue
        try:
            parsed = json.loads(args)
            if not cut or i < len(got) - 1:      # only a cut reply's last call may lack arguments
                jsonschema.validate(parsed, schemas[name])
                tally.add(family, validated=1)
        except (ValueError, jsonschema.ValidationError) as e:
            tally.add(family, invalid=1)
            tally.problem(f"invalid arguments {args[:200]!r} of {name}: {str(e)[:200]} ({what})", family, cell)
    if choice == "none" and got:
        tally.problem(f"tool_choice none made {len(got)} calls ({what})", family, cell)
    if not parallel and len(got) > 1:
        tally.problem(f"parallel_tool_calls false made {len(got)} calls ({what})", family, cell)
    if choice in ("required", "named") and not cut and not got:
        tally.problem(f"tool_choice {choice} made no call ({what}; finish {finish}; content {content[:300]!r})", family, cell)
    if choice == "named" and any(n != named for n, _ in got):
        tally.problem(f"tool_choice named {named} called {[n for n, _ in got]} ({what})", family, cell)


def test_tool_calls_fuzzed_on_every_family(fuzz_service):
    svc, ids = fuzz_service
    ai = openai.OpenAI(base_url=svc.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    tally = Tally()
    master = random.Random(SEED)
    families = [f for f in FAMILIES if not ONLY or f in ONLY]
    for family in families:
        rngs = [random.Random(master.randrange(1 << 62)) for _ in range(N_PER_FAMILY)]
        with ThreadPoolExecutor(2) as pool:            # two at a time: both slots of a runner busy
            list(pool.map(lambda rng: one_request(ai, family, ids[family], rng, tally), rngs))
    lines = [f"tool fuzz (seed {SEED}): {dict(tally.counts)}"]
    lines += [f"  {fam:15} {dict(c)}" for fam, c in tally.by_family.items()] + tally.table(families)
    print("\n".join(lines))
    assert tally.counts["aborts"] == 0, "\n".join(lines + tally.problems[:20])
    assert not tally.problems, "\n".join(lines + tally.problems[:30])
    assert tally.counts["requests"] == N_PER_FAMILY * len(families)
