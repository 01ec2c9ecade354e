"""Tools from MCP servers, through the official `mcp` Python SDK (no Qt here; the chat runs these coroutines on
the bridge's asyncio thread, never the GUI thread).

Servers are configured in the `mcpServers` JSON that Claude Desktop, LM Studio and Cursor use, kept in
`mcp.json` in the data dir: `{"mcpServers": {"name": {"command": "...", "args": [...], "env": {...}}}}` for a
server started as a child process (stdio), `{"url": "http://.../mcp"}` for one reached over streamable HTTP.
Each list or call opens its own connection (a stdio server is started for it and stopped after), under a
timeout, so a server that hangs or dies costs that one call and nothing else.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from app import paths

LIST_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""


@dataclass
class McpTool:
    server: str
    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict)

    def as_api_tool(self) -> dict:
        """The tool in the shape /api/chat takes (OpenAI's function tool)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters or {"type": "object",
                                                                                   "properties": {}}}}


def config_path():
    return paths.data_dir() / "mcp.json"


def parse_config(data) -> dict[str, ServerSpec]:
    """The servers in an `mcpServers` document; a malformed one raises ValueError naming the field."""
    if not isinstance(data, dict):
        raise ValueError("the MCP configuration must be a JSON object with an \"mcpServers\" object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ValueError("mcpServers: expected an object of servers by name")
    out = {}
    for name, s in servers.items():
        where = f"mcpServers.{name}"
        if not isinstance(s, dict):
            raise ValueError(f"{where}: expected an object")
        url, command = s.get("url", ""), s.get("command", "")
        if not isinstance(url, str) or not isinstance(command, str):
            raise ValueError(f"{where}: \"command\" and \"url\" must be strings")
        if bool(url) == bool(command):
            raise ValueError(f"{where}: give either \"command\" (stdio) or \"url\" (streamable HTTP)")
        args = s.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}.args: expected a list of strings")
        env = s.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where}.env: expected an object of strings")
        if url and not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}.url: expected an http:// or https:// address")
        out[name] = ServerSpec(name, command, tuple(args), tuple(sorted(env.items())), url)
    return out


def load_config() -> dict[str, ServerSpec]:
    """The configured servers ({} when there is no file); a broken file raises ValueError."""
    p = config_path()
    if not p.is_file():
        return {}
    try:
        return parse_config(json.loads(p.read_text(encoding="utf-8")))
    except json.JSONDecodeError as e:
        raise ValueError(f"{p.name}: not JSON ({e})") from None


def config_text() -> str:
    p = config_path()
    return p.read_text(encoding="utf-8") if p.is_file() else ""


def save_config(text: str) -> None:
    """Check, then write `mcp.json` (an empty text removes it)."""
    p = config_path()
    if not text.strip():
        p.unlink(missing_ok=True)
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    parse_config(data)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _client(spec: ServerSpec):
    from mcp import Client, StdioServerParameters

    if spec.url:
        return Client(spec.url)
    params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None)
    return Client(params)


async def _with_client(spec: ServerSpec, use, timeout: float):
    """`use(client)` on a fresh connection to the server, all of it (start, handshake, call, stop) under `timeout`.
    Plain asyncio here: the SDK (and anyio under it) is imported only when a server is used, so the app (and its
    one-folder bundle, which leaves the SDK out) starts without it."""
    async def session():
        async with _client(spec) as c:
            return await use(c)
    return await asyncio.wait_for(session(), timeout)


async def list_tools(spec: ServerSpec, timeout: float = LIST_TIMEOUT_S) -> list[McpTool]:
    result = await _with_client(spec, lambda c: c.list_tools(), timeout)
    return [McpTool(spec.name, t.name, t.description or "", dict(t.input_schema or {})) for t in result.tools]


async def call_tool(spec: ServerSpec, name: str, arguments: dict, timeout: float = CALL_TIMEOUT_S) -> tuple[str, bool]:
    """The tool's text result (its text blocks joined; other blocks named) and whether it is an error."""
    result = await _with_client(spec, lambda c: c.call_tool(name, arguments or {}), timeout)
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), bool(result.is_error)


def describe_error(e: BaseException) -> str:
    """A message for the chat from what a server did (an ExceptionGroup from the SDK's task group unwrapped)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
        return "it did not answer in time"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

