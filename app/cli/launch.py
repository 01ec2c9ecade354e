"""`strata launch AGENT [--model NAME] [--oss] [--print] [--no-summary] [-- AGENT ARGS...]`: start a coding agent
(Claude Code, Codex, OpenCode, Qwen Code, Crush, Factory Droid, Pi, Continue CLI, GitHub Copilot CLI, aider,
mini-swe-agent: see app/cli/agents.py) on this machine's Strata service, as `ollama launch` does for Ollama. Launch's
options may come before or after the agent's name; everything after the first `--` that follows the name goes to the
agent.

It checks that the agent is installed (else: its install command, exit 1) and that the service answers at
STRATA_HOST (else: how to start one, exit 1), chooses the model (--model, else the model loaded now, else the
built-in one; it says which and why), asks the service for the context a request gets and the model's
capabilities, and starts the agent with its settings for this server (app/cli/agents.py: environment variables
and command-line options, or settings files in Strata's own folder; the agent's own configuration files are left as
they are). `--print` shows the command and files instead of starting it. It waits for the agent and then says,
from the service's request log, which tools the agent offered and never called in this session and what their
schemas cost (`--no-summary`: exec the agent instead).
Covered by tests/integration/cli/test_cli_launch.py (a real `strata serve`, a stub agent executable, every
documented form of the command line through the real entry point)."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import replace

from app import paths
from app.api_client import ApiClient, ApiError, user_agent_of
from app.cli import configured
from app.cli.agents import AGENTS, Agent, LaunchError, LaunchPlan, Target, plan
from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME

from .loop_thread import LoopThread


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="the model (default: the one loaded now that can call tools, else the first "
                                   "model here that can)")
    p.add_argument("--oss", action="store_true", help="codex only: use Codex's built-in Ollama provider (--oss)")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the command, environment and files instead of starting the agent")
    p.add_argument("--no-summary", dest="no_summary", action="store_true",
                   help="hand the process over to the agent (exec) instead of waiting for it to say, when it "
                        "exits, which offered tools it never called and what their schemas cost")


def register(sub) -> None:
    names = ",".join(sorted(AGENTS))
    p = sub.add_parser(
        "launch", help="start a coding agent (Claude Code, Codex, OpenCode, ...) on this server's model",
        description="Start a coding agent with its settings for this Strata server: base URL, model (every model "
                    "name the agent asks for maps to it), context window, telemetry off. The agent's own config "
                    "files are not changed. Arguments after `--` go to the agent. Agents: "
                    + ", ".join(f"{a.name} ({a.title})" for a in AGENTS.values()) + ".",
        usage=f"strata launch [--model NAME] [--oss] [--print] [--no-summary] {{{names}}} [--model NAME] [--oss] "
              "[--print] [--no-summary] [-- AGENT ARGS...]")
    _add_options(p)
    # The agent's name and everything after it, kept as typed: a positional `agent` argument would swallow a
    # `--` right after the name (argparse's pattern for one positional takes the `--` markers around it), and
    # `strata launch opencode -- run "..."` would hand `run` to launch's own options. split_rest reads them.
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="AGENT [-- AGENT ARGS]", help="which agent: " + names)
    p.set_defaults(func=cmd_launch)


def split_rest(args) -> list[str]:
    """The agent's name, then launch's own options up to `--`, then the agent's arguments: sets `args.agent` (and
    the options written after the name) and returns the agent's arguments. Options may come before the name too
    (argparse has read those). A usage error (exit 2) when the name is missing or unknown, or an option after the
    name is not launch's."""
    words = list(args.words)
    if words[:1] == ["--"]:           # `strata launch --model m -- claude ...`: a `--` before the name
        words = words[1:]
    parser = argparse.ArgumentParser(prog="strata launch", add_help=False)
    if not words or words[0].startswith("-"):
        parser.error(f"which agent? one of: {', '.join(sorted(AGENTS))} "
                     f"(e.g. `strata launch claude --model NAME -- -p \"...\"`)")
    if words[0] not in AGENTS:
        parser.error(f"unknown agent {words[0]!r}: one of {', '.join(sorted(AGENTS))}")
    args.agent = words[0]
    rest = words[1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    own, extra = rest[:cut], rest[cut + 1:]
    parser.prog = f"strata launch {args.agent}"
    _add_options(parser)
    parsed, unknown = parser.parse_known_args(own)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (arguments for the agent go after `--`)")
    for name in ("model", "oss", "print_only", "no_summary"):
        value = getattr(parsed, name)
        if value:
            setattr(args, name, value)
    return extra


def _say(msg: str) -> None:
    print(f"strata launch: {msg}", file=sys.stderr)


def _connect_url() -> tuple[str, str | None]:
    """The service's URL as a client on this machine reaches it (a service bound to every address answers on
    loopback), and its API key."""
    cfg = configured.config()
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    return replace(cfg, host=host).base_url, cfg.api_key


def _not_running_hint(url: str) -> str:
    return (f"no Strata service answers at {url}. Start one in another terminal with `strata serve` (or open the "
            "desktop app: `strata gui`), then run this again. STRATA_HOST chooses another address.")


async def _names(client: ApiClient, capability: str | None = None) -> list[str]:
    out = []
    for m in await client.tags():
        if capability is None or capability in (m.get("capabilities") or ()):
            out.append(m["name"])
    return out


async def choose_model(client: ApiClient, asked: str | None) -> tuple[str, str]:
    """(model, why): the asked one; else a model loaded now that can call tools; else the built-in one if it
    can; else the first model in the store that can. ApiError when no model here can call tools."""
    if asked:
        return asked, "chosen with --model"
    for m in await client.ps():
        if "tools" in ((await client.show(m["name"])).get("capabilities") or ()):
            return m["name"], "loaded now; choose another with --model"
    tools = await _names(client, "tools")
    if DEFAULT_MODEL_NAME in tools:
        return DEFAULT_MODEL_NAME, "the built-in model; choose another with --model"
    if tools:
        return tools[0], "the first model here that can call tools; choose another with --model"
    raise ApiError("no model here can call tools, which a coding agent needs: import or pull one first "
                   "(`strata import FILE.gguf`, `strata pull NAME`), e.g. a Qwen2.5-Coder or Qwen3 GGUF")


async def resolve_target(client: ApiClient, base_url: str, api_key: str | None,
                         asked: str | None) -> tuple[Target, str]:
    """The Target for the chosen model, and why it was chosen. ApiError (with what to do) when the model is
    unknown, cannot chat, or cannot call tools."""
    model, why = await choose_model(client, asked)
    try:
        show = await client.show(model)
    except ApiError as e:
        if e.status == 404:
            names = await _names(client)
            raise ApiError(f"model {model!r} not found. Models here: {', '.join(names) or 'none'}") from None
        raise
    caps = tuple(show.get("capabilities") or ())
    if "completion" not in caps:
        raise ApiError(f"{model} cannot chat (capabilities: {', '.join(caps)}); choose another with --model")
    if "tools" not in caps:
        usable = await _names(client, "tools")
        raise ApiError(f"{model} cannot call tools (its chat template has no tool calling), which a coding agent "
                       f"needs; choose one that can with --model: {', '.join(usable) or 'none here'}")
    try:
        context = await client.context_length(model)
    except ApiError:
        context = int((show.get("details") or {}).get("context_length") or 0)
    if context <= 0:
        raise ApiError(f"the service reports no context length for {model}")
    return Target(base_url=base_url, model=model, context=context, capabilities=caps, api_key=api_key), why


LONG_READ_S = 30.0       # a request reading its prompt this long on a CPU-only model is a long prompt being read


def busy_note(model: str, ps: list[dict], requests: list[dict]) -> str | None:
    """A note when other requests are reading long prompts on `model` and it runs on the CPU alone: the agent's
    first prompt shares the CPU with them (README, "Several agents at once"). `ps`: /api/ps's models, `requests`:
    /api/requests' records."""
    def base(name: str) -> str:
        return name.removesuffix(":latest")

    entry = next((m for m in ps if base(str(m.get("name", ""))) == base(model)), None)
    if entry is None or entry.get("size_vram", 0):
        return None
    reading = [t for r in requests
               if r.get("state") == "running" and r.get("ttft") is None and base(str(r.get("model", ""))) == base(model)
               and (t := _reading_s(r.get("phases") or [])) >= LONG_READ_S]
    if not reading:
        return None
    return (f"note: {len(reading)} other request{'s' if len(reading) > 1 else ''} on {model} "
            f"{'have' if len(reading) > 1 else 'has'} been reading {'their' if len(reading) > 1 else 'its'} prompt "
            f"for up to {max(reading):.0f} s on the CPU: the agent's first prompt (5,000-20,000 tokens) shares the "
            f"CPU with {'them' if len(reading) > 1 else 'it'} and may take several minutes")


def _reading_s(phases: list) -> float:
    """Seconds a running request without output has held its slot: its phases after "queued" (the request log's
    timeline: prepare, load, queued, then the time since)."""
    names = [p[0] for p in phases]
    if "queued" not in names:
        return 0.0
    return sum(p[1] for p in phases[names.index("queued") + 1:])


async def _busy_note(client: ApiClient, model: str) -> str | None:
    try:
        return busy_note(model, await client.ps(), await client.requests(model=model.removesuffix(":latest")))
    except ApiError:
        return None


def _shown_env(p: LaunchPlan, api_key: str | None) -> list[str]:
    lines = []
    for k, v in p.env.items():
        if api_key and api_key in v:
            v = v.replace(api_key, "<STRATA_API_KEY>")
        lines.append(f"{k}={shlex.quote(v)}")
    return lines


def print_plan(agent: Agent, p: LaunchPlan, api_key: str | None) -> None:
    for path, text in p.files.items():
        print(f"# file {path}:")
        print(text.rstrip())
    print("# command (environment added to yours):")
    print(" \\\n  ".join(_shown_env(p, api_key) + [shlex.join(p.argv)]))


def write_files(p: LaunchPlan) -> None:
    for path, text in p.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)


def exec_agent(executable: str, p: LaunchPlan) -> int:
    """Replace this process with the agent (it owns the terminal from here); on Windows, run it and wait."""
    env = {**os.environ, **p.env}
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "nt":
        return subprocess.call([executable, *p.argv[1:]], env=env)
    os.execve(executable, [p.argv[0], *p.argv[1:]], env)
    return 0      # not reached


def run_agent(executable: str, p: LaunchPlan) -> int:
    """Run the agent in this terminal and wait for it: its exit status (128 + the signal that ended it). Ctrl-C
    reaches the agent (the terminal's whole foreground group gets it) and leaves launch waiting; a SIGTERM or SIGHUP
    sent to launch is passed on to the agent."""
    env = {**os.environ, **p.env}
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "nt":
        return subprocess.call([executable, *p.argv[1:]], env=env)
    # handlers, not SIG_IGN: a handled signal is back to its default in the agent once it has started
    old = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGQUIT)}
    proc = subprocess.Popen([p.argv[0], *p.argv[1:]], executable=executable, env=env)
    for s in (signal.SIGTERM, signal.SIGHUP):
        old[s] = signal.signal(s, lambda sig, _frame: proc.send_signal(sig))
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


SUMMARY_LIMIT = 1000     # requests read back for the summary at most


def tools_summary(details: list[dict]) -> str | None:
    """What the offered tools cost a session that never called them, from its requests' records with their cache
    detail (GET /api/requests/{id}): the tools offered in some request and called in none, their schemas' tokens
    (in every prompt that offered them) and the seconds those take to read at the measured prefill rate. None
    when no request offered tools."""
    offered: dict[str, int] = {}
    called: set[str] = set()
    rate = None
    asked = 0
    for d in details:
        cache = d.get("cache") or {}
        tools = {p["label"]: p["tokens"] for p in cache.get("anatomy") or () if p.get("kind") == "tool"}
        called.update(cache.get("tools_called") or ())      # (a prompt sent without its tools names them too)
        if not tools:
            continue
        asked += 1
        for name, tokens in tools.items():
            offered[name] = max(tokens, offered.get(name, 0))
        rate = cache.get("prefill_rate") or rate
    if not offered:
        return None
    unused = sorted((n for n in offered if n not in called), key=lambda n: (-offered[n], n))
    def n(count: int, word: str) -> str:
        return f"{count} {word}{'s' if count != 1 else ''}"

    head = (f"this session sent {n(asked, 'request')} offering {n(len(offered), 'tool')}; "
            f"called: {', '.join(sorted(called & set(offered))) or 'none'}")
    if not unused:
        return head
    tokens = sum(offered[n] for n in unused)
    seconds = tokens / rate if rate else 0.0
    took = f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"
    cost = f" (about {took} to read at the measured {rate:,.0f} tokens/s)" if rate else ""
    shown = ", ".join(f"{n} ({offered[n]:,})" for n in unused)
    return (f"{head}\nnever called: {n(len(unused), 'tool')} whose schemas are {tokens:,} tokens of every prompt "
            f"that offers them{cost}: {shown}")


async def session_requests(client: ApiClient, after: int, agent_client: str = "") -> list[dict]:
    """The work requests logged after request `after` (the agent's session), with their detail: those whose client
    contains `agent_client` when some do, else every client but Strata's own programs."""
    rows = [r for r in await client.requests(limit=SUMMARY_LIMIT)
            if int(r["id"]) > after and r.get("cache") and not str(r.get("client", "")).startswith("strata-")]
    mine = [r for r in rows if agent_client and agent_client.lower() in str(r.get("client", "")).lower()]
    return [await client.request_detail(int(r["id"])) for r in (mine or rows)]


async def _last_request_id(client: ApiClient) -> int:
    try:
        rows = await client.requests(limit=1)
    except ApiError:
        return 0
    return int(rows[0]["id"]) if rows else 0


def _say_summary(url: str, api_key: str | None, after: int, agent: Agent) -> None:
    loop, client = LoopThread(), ApiClient(url, api_key, user_agent=user_agent_of("strata-launch"))
    try:
        text = tools_summary(loop.run(session_requests(client, after, agent.client)))
    except (ApiError, KeyError, ValueError, TypeError):
        text = None
    finally:
        loop.run(client.close())
        loop.close()
    for line in (text or "").splitlines():
        _say(line)


def cmd_launch(args) -> int:
    extra = split_rest(args)
    agent = AGENTS[args.agent]
    executable = shutil.which(agent.command)
    if executable is None and not args.print_only:
        _say(f"{agent.title} is not installed (no `{agent.command}` on PATH). Install it with:\n"
             f"    {agent.install_hint}\nthen run `strata launch {agent.name}` again.")
        return 1
    url, api_key = _connect_url()
    loop, client = LoopThread(), ApiClient(url, api_key, user_agent=user_agent_of("strata-launch"))
    try:
        if not loop.run(client.alive()):
            _say(_not_running_hint(url))
            return 1
        target, why = loop.run(resolve_target(client, url, api_key, args.model))
        busy = loop.run(_busy_note(client, target.model))
        after = loop.run(_last_request_id(client))
    except ApiError as e:
        _say(str(e))
        return 1
    finally:
        loop.run(client.close())
        loop.close()
    try:
        launch_plan = plan(agent, target, extra, oss=args.oss, state_dir=paths.data_dir() / "launch")
    except LaunchError as e:
        _say(str(e))
        return 2
    _say(f"{agent.title} on {target.model} ({why}); context {target.context} tokens, replies up to "
         f"{target.max_output}; server {url}")
    for note in launch_plan.notes:
        _say(note)
    warning = agent.context_warning(target)
    if warning:
        _say(warning)
    if busy:
        _say(busy)
    if args.print_only:
        print_plan(agent, launch_plan, api_key)
        if executable is None:
            _say(f"{agent.title} is not installed: {agent.install_hint}")
        return 0
    write_files(launch_plan)
    assert executable is not None
    if args.no_summary:
        return exec_agent(executable, launch_plan)
    rc = run_agent(executable, launch_plan)
    _say_summary(url, api_key, after, agent)
    return rc
