"""THE HTTP client of the Strata service, used by the GUI (no Qt here; gui/common/bridge.py connects it to Qt) and the
CLI (cli/loop_thread.py runs it from plain code). Only they import it; the service never does.

Coroutines run on an asyncio loop that is not the GUI thread. Every call returns parsed JSON or raises
`ApiError` with the server's message, so the GUI can show it in the chat instead of a traceback.
"""
from __future__ import annotations

import asyncio
import json
import urllib.parse
from contextlib import aclosing
from typing import Any, AsyncIterator

import aiohttp

from app import __version__


class ApiError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


# Long operations (a load can take minutes on a big model) must not be cut by a total timeout; a connect timeout
# still catches a service that is not there.
NO_TOTAL = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10)
SHORT = aiohttp.ClientTimeout(total=30, connect=10)


async def _error_from(resp: aiohttp.ClientResponse) -> ApiError:
    text = await resp.text()
    try:
        msg = json.loads(text).get("error") or text
        if isinstance(msg, dict):      # OpenAI-style {"error": {"message": ...}}
            msg = msg.get("message") or json.dumps(msg)
    except (ValueError, AttributeError):
        msg = text
    return ApiError(f"{resp.status}: {str(msg).strip() or resp.reason}", resp.status)


def user_agent_of(program: str) -> str:
    """The User-Agent a program of this package sends: "strata-desktop/0.1.0"."""
    return f"{program}/{__version__}"


class ApiClient:
    """`user_agent` names the program in the service's request log (the Server window tells its own requests
    apart by it)."""

    def __init__(self, base_url: str, api_key: str | None = None, user_agent: str = user_agent_of("strata")):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict:
        h = {"User-Agent": self.user_agent}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def session(self) -> aiohttp.ClientSession:
        # Created lazily inside the loop that uses it (aiohttp binds a session to its loop).
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers())
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # plain requests ---------------------------------------------------------------------------------------------
    async def request(self, method: str, path: str, body: Any = None, timeout=SHORT) -> Any:
        try:
            async with self.session().request(method, self.base_url + path, json=body, timeout=timeout) as resp:
                if resp.status >= 400:
                    raise await _error_from(resp)
                text = await resp.text()
                return json.loads(text) if text.strip() else {}
        except aiohttp.ClientError as e:
            raise ApiError(f"cannot reach the service at {self.base_url}: {e}") from e

    async def version(self) -> dict:
        return await self.request("GET", "/api/version")

    async def alive(self, timeout: float = 2.0) -> bool:
        """Whether a Strata (or any Ollama-compatible) service answers here."""
        try:
            answer = await self.request("GET", "/api/version", timeout=aiohttp.ClientTimeout(total=timeout))
        except (ApiError, asyncio.TimeoutError):
            return False
        return isinstance(answer, dict) and "version" in answer

    async def tags(self) -> list[dict]:
        return (await self.request("GET", "/api/tags")).get("models", [])

    async def ps(self) -> list[dict]:
        return (await self.request("GET", "/api/ps")).get("models", [])

    async def devices(self) -> dict:
        return await self.request("GET", "/api/devices")

    async def layout(self, model: str, options: dict | None = None, devices: dict | None = None) -> dict:
        body: dict = {"model": model, "options": options or {}}
        if devices is not None:
            body["devices"] = devices
        return await self.request("POST", "/api/layout", body, timeout=NO_TOTAL)

    async def load(self, model: str, keep_alive: str | int | None = None) -> dict:
        """Ollama's way: /api/generate with no prompt loads the model and answers when it is ready."""
        body: dict = {"model": model, "stream": False}
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        return await self.request("POST", "/api/generate", body, timeout=NO_TOTAL)

    async def unload(self, model: str) -> dict:
        return await self.request("POST", "/api/generate", {"model": model, "keep_alive": 0, "stream": False},
                                  timeout=NO_TOTAL)

    async def pins(self) -> list[dict]:
        """Every model's pin and default keep_alive that a user set (GET /api/pin)."""
        return (await self.request("GET", "/api/pin")).get("models", [])

    async def pin(self, model: str, pinned: bool | None = None, keep_alive: str | None | bool = False) -> dict:
        """Set a model's pin and/or default keep_alive (POST /api/pin); `keep_alive` None clears it, False leaves
        it as it is."""
        body: dict = {"model": model}
        if pinned is not None:
            body["pinned"] = pinned
        if keep_alive is not False:
            body["keep_alive"] = keep_alive
        return await self.request("POST", "/api/pin", body)

    async def show(self, model: str) -> dict:
        return await self.request("POST", "/api/show", {"model": model})

    async def context_length(self, model: str) -> int:
        """The context per sequence a request that sets no num_ctx gets now: the loaded model's, else the one a
        load would choose from the free memory (/api/show's `strata.context`; /api/ps's when show has none)."""
        ctx = ((await self.show(model)).get("strata") or {}).get("context") or {}
        if ctx.get("num_ctx"):
            return int(ctx["num_ctx"])
        loaded = next((m for m in await self.ps() if m.get("name") == model), {})
        if loaded.get("context_length"):
            return int(loaded["context_length"])
        raise ApiError(f"the service reports no context length for {model}: {ctx.get('error') or 'not known'}")

    async def count_tokens(self, model: str, messages: list[dict], system: str | None = None) -> int:
        """Tokens of a chat's prompt through the model's tokenizer and chat template (Anthropic's count_tokens
        route; `messages` are user/assistant turns with text content). Loads the model if it is not loaded."""
        body = {"model": model, "messages": messages, **({"system": system} if system else {})}
        r = await self.request("POST", "/v1/messages/count_tokens", body, timeout=NO_TOTAL)
        return int(r["input_tokens"])

    async def copy(self, source: str, destination: str) -> dict:
        return await self.request("POST", "/api/copy", {"source": source, "destination": destination})

    async def delete(self, model: str) -> dict:
        return await self.request("DELETE", "/api/delete", {"model": model})

    # streams ----------------------------------------------------------------------------------------------------
    async def chat_stream(self, body: dict) -> AsyncIterator[dict]:
        """POST /api/chat with stream=true; yields each NDJSON object. Leaving the iteration early (or the
        task being cancelled) closes the HTTP stream, which is how the service learns to stop generating."""
        # aclosing: when the bridge closes this generator, the inner one (and its HTTP stream) closes now too
        async with aclosing(self.ndjson("/api/chat", body)) as stream:
            async for obj in stream:
                yield obj

    async def import_stream(self, path: str, name: str | None = None) -> AsyncIterator[dict]:
        """POST /api/import: a GGUF on this machine into the store; yields {"status": "hashing" | "copying",
        "completed", "total"} then {"status": "success", "model"}. Closing the stream cancels the import."""
        body: dict = {"path": path}
        if name:
            body["model"] = name
        async with aclosing(self.ndjson("/api/import", body)) as stream:
            async for obj in stream:
                yield obj

    async def pull_stream(self, model: str, insecure: bool = False) -> AsyncIterator[dict]:
        """POST /api/pull, Ollama's progress stream: {"status": "pulling manifest"}, per layer {"status",
        "digest", "total", "completed"}, "verifying sha256 digest", "writing manifest", "success".
        `insecure`: the registry may be plain http (Ollama's --insecure)."""
        body = {"model": model, "insecure": True} if insecure else {"model": model}
        async with aclosing(self.ndjson("/api/pull", body)) as stream:
            async for obj in stream:
                yield obj

    async def ndjson(self, path: str, body: dict) -> AsyncIterator[dict]:
        """POST `body` with stream=true and yield each NDJSON object; an {"error"} line raises ApiError."""
        body = dict(body, stream=True)
        try:
            async with self.session().post(self.base_url + path, json=body, timeout=NO_TOTAL) as resp:
                if resp.status >= 400:
                    raise await _error_from(resp)
                async for line in resp.content:
                    line = line.strip()
                    if not line:
                        continue
                    obj = json.loads(line)
                    if obj.get("error"):
                        raise ApiError(str(obj["error"]))
                    yield obj
        except aiohttp.ClientError as e:
            raise ApiError(f"connection to the service lost: {e}") from e

    async def requests(self, **filters) -> list[dict]:
        """The service's request log, newest first (GET /api/requests); `filters`: client, model, status, path,
        before, limit (those that are set)."""
        query = urllib.parse.urlencode({k: v for k, v in filters.items() if v not in (None, "")})
        return (await self.request("GET", "/api/requests" + (f"?{query}" if query else ""))).get("requests", [])

    async def replay(self, rid: int) -> dict:
        """Send a logged request again (POST /api/requests/{id}/replay): {"replayed", "record", "status"}."""
        return await self.request("POST", f"/api/requests/{int(rid)}/replay", timeout=NO_TOTAL)

    async def request_detail(self, rid: int) -> dict:
        """One logged request with its headers and bounded bodies (GET /api/requests/{id})."""
        return await self.request("GET", f"/api/requests/{int(rid)}")

    async def events(self, include: str = "") -> AsyncIterator[tuple[str, dict]]:
        """GET /api/events (server-sent events); yields ("connected", {}) once the stream is open, then each
        (type, data). Comment lines (`: ping`) are skipped. `include` ("request,stats"): the event types only
        asked-for subscribers get."""
        url = self.base_url + "/api/events" + (f"?include={include}" if include else "")
        try:
            async with self.session().get(url, timeout=NO_TOTAL) as resp:
                if resp.status >= 400:
                    raise await _error_from(resp)
                yield "connected", {}            # the stream is open (the server may stay silent a while)
                async for ev in parse_sse(resp.content):
                    yield ev
        except aiohttp.ClientError as e:
            raise ApiError(f"event stream lost: {e}") from e


async def parse_sse(lines: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, dict]]:
    """Server-sent events -> (event type, JSON data). Events end at a blank line; `data:` lines join with \\n."""
    etype, data = "message", []
    async for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    payload = json.loads(text)
                except ValueError:
                    payload = {"text": text}
                yield etype, payload if isinstance(payload, dict) else {"value": payload}
            etype, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            etype = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
