"""`strata launch` as a user runs it: a real `strata serve` process with Qwen2.5-Coder-0.5B in its store, and
`strata launch claude|codex|opencode` run as a real process. Only the agent is a stand-in: an executable named
like the agent, first on PATH, that records the arguments, environment and the files they name, asks the
server the agent would ask (its base URL, with its credentials) and exits. So what is checked is what the agent
would get: the command line, the environment, the files, and that they lead to this server's model.

Also: the error with the npm command when the agent is not installed, the hint when no service answers, a
model that cannot call tools refused with the ones that can, the default model chosen and said, `--print`."""
from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import textwrap
import tomllib

import httpx
import pytest

from app.cli.agents import AGENTS
from serve_process import free_port, strata_serve

MODEL = "coder:test"
# the stand-in agent: records what it was given and checks the server answers at the URL it was given
STUB = textwrap.dedent('''\
    #!{python}
    import json, os, sys, urllib.request
    name = os.path.basename(sys.argv[0])
    env = {{k: v for k, v in os.environ.items()
            if k.startswith(("ANTHROPIC_", "CLAUDE_CODE_", "DISABLE_", "CODEX_", "OPENCODE_", "STRATA_API"))}}
    files = {{}}
    for a in sys.argv[1:]:
        if a.startswith("model_catalog_json="):
            path = json.loads(a.split("=", 1)[1])
            files[path] = json.load(open(path))
    base = env.get("ANTHROPIC_BASE_URL") or env.get("CODEX_OSS_BASE_URL")
    if name == "opencode":
        base = json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"]["strata"]["options"]["baseURL"]
    for a in sys.argv[1:]:
        if a.startswith("model_providers.strata.base_url="):
            base = json.loads(a.split("=", 1)[1])
    url = base.rstrip("/") + ("/models" if base.rstrip("/").endswith("/v1") else "/v1/models")
    headers = {{}}
    token = env.get("ANTHROPIC_AUTH_TOKEN") or env.get("STRATA_API_KEY")
    if token:
        headers["Authorization"] = "Bearer " + token
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        served = [m["id"] for m in json.load(r)["data"]]
    out = os.path.join(os.environ["STUB_OUT"], name + ".json")
    json.dump({{"argv": sys.argv[1:], "env": env, "files": files, "served": served, "cwd": os.getcwd()}}, open(out, "w"))
    sys.exit(int(os.environ.get("STUB_EXIT", "0")))
''')


@pytest.fixture(scope="module")
def serve(qwen_coder_path, tmp_path_factory):
    home = tmp_path_factory.mktemp("launch-home")
    with strata_serve(home / "serve.log", STRATA_HOME=str(home), STRATA_NUM_CTX="4096") as (url, env, _):
        r = httpx.post(url + "/api/create", json={"model": MODEL, "from": str(qwen_coder_path), "stream": False},
                       timeout=120)
        assert r.status_code == 200, r.text
        yield url, env


@pytest.fixture()
def stubs(tmp_path):
    bindir, out = tmp_path / "bin", tmp_path / "out"
    bindir.mkdir()
    out.mkdir()
    for name in ("claude", "codex", "opencode"):
        p = bindir / name
        p.write_text(STUB.format(python=sys.executable))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return bindir, out


def launch(env, *args, path=None, timeout=120):
    env = dict(env)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "app", "launch", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_stub(serve, stubs, *args):
    url, env = serve
    bindir, out = stubs
    r = launch({**env, "STUB_OUT": str(out)}, *args, path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    name = args[0]
    return json.loads((out / f"{name}.json").read_text()), r.stderr


def test_claude_gets_the_server_and_the_model_for_every_tier(serve, stubs):
    got, said = run_stub(serve, stubs, "claude", "--model", MODEL, "--", "-p", "create hello.txt")
    url, _ = serve
    assert got["argv"] == ["--model", MODEL, "-p", "create hello.txt"]
    e = got["env"]
    assert e["ANTHROPIC_BASE_URL"] == url
    assert {e[k] for k in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                           "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_FABLE_MODEL",
                           "CLAUDE_CODE_SUBAGENT_MODEL", "CLAUDE_CODE_AUTO_MODE_MODEL",
                           "CLAUDE_CODE_BG_CLASSIFIER_MODEL")} == {MODEL}
    assert e["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "4096" and e["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "1024"
    assert e["DISABLE_TELEMETRY"] == "1" and e["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert MODEL in got["served"]
    assert f"Claude Code on {MODEL} (chosen with --model); context 4096 tokens" in said


def test_codex_gets_a_provider_and_a_catalog_in_stratas_folder(serve, stubs):
    got, _ = run_stub(serve, stubs, "codex", "--model", MODEL, "--", "exec", "create hello.txt")
    url, env = serve
    pairs = dict(a.split("=", 1) for a in got["argv"] if "=" in a)
    assert json.loads(pairs["model_providers.strata.base_url"]) == url + "/v1"
    assert tomllib.loads(f"v = {pairs['model_providers.strata.wire_api']}")["v"] == "responses"
    assert got["argv"][-2:] == ["exec", "create hello.txt"]
    (path, catalog), = got["files"].items()
    assert path.startswith(env["STRATA_HOME"])
    entry, = catalog["models"]
    assert entry["slug"] == MODEL and entry["context_window"] == 4096
    assert MODEL in got["served"]


def test_codex_oss_points_codexs_ollama_provider_here(serve, stubs):
    got, _ = run_stub(serve, stubs, "codex", "--oss", "--model", MODEL)
    url, _ = serve
    assert got["argv"][:5] == ["--oss", "--local-provider", "ollama", "-m", MODEL]
    assert got["env"]["CODEX_OSS_BASE_URL"] == url + "/v1"


def test_opencode_gets_an_inline_config(serve, stubs):
    got, _ = run_stub(serve, stubs, "opencode", "--model", MODEL, "--", "run", "create hello.txt")
    assert got["argv"] == ["run", "create hello.txt"]
    cfg = json.loads(got["env"]["OPENCODE_CONFIG_CONTENT"])
    assert cfg["model"] == f"strata/{MODEL}"
    assert cfg["provider"]["strata"]["models"][MODEL]["limit"] == {"context": 4096, "input": 3072, "output": 1024}
    assert MODEL in got["served"]


def test_without_model_a_model_that_can_call_tools_is_chosen_and_said(serve, stubs):
    got, said = run_stub(serve, stubs, "claude")
    assert got["env"]["ANTHROPIC_MODEL"] == MODEL
    assert "the first model here that can call tools" in said


def test_a_model_without_tools_is_refused_naming_those_with(serve, stubs):
    url, env = serve
    bindir, out = stubs
    r = launch({**env, "STUB_OUT": str(out)}, "claude", "--model", "smollm2:135m",
               path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 1
    assert "cannot call tools" in r.stderr and MODEL in r.stderr
    assert not (out / "claude.json").exists()


def test_an_unknown_model_is_named(serve, stubs):
    url, env = serve
    bindir, _ = stubs
    r = launch(env, "opencode", "--model", "nope:1b", path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 1 and "'nope:1b' not found" in r.stderr and MODEL in r.stderr


def test_an_agent_that_is_not_installed_gets_the_npm_command(serve, tmp_path):
    _, env = serve
    empty = tmp_path / "empty"
    empty.mkdir()
    for agent, package in (("claude", "@anthropic-ai/claude-code"), ("codex", "@openai/codex"),
                           ("opencode", "opencode-ai")):
        r = launch(env, agent, path=str(empty))
        assert r.returncode == 1
        assert f"npm install -g {package}" in r.stderr


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_every_agent_not_installed_is_told_its_install_command(strata, monkeypatch, tmp_path, agent):
    monkeypatch.setenv("PATH", str(tmp_path))            # an empty folder: no agent on PATH
    rc, out, err = strata("launch", agent, "--", "x")
    a = AGENTS[agent]
    assert rc == 1 and out == ""
    assert f"{a.title} is not installed (no `{a.command}` on PATH)" in err and a.install_hint in err
    # --print still shows what it would run, and says how to install it
    rc, out, err = strata("launch", agent, "--print", "--", "x")
    assert rc == 0 and printed_command(out)[1][0] == a.command and a.install_hint in err


def test_no_service_says_how_to_start_one(stubs):
    bindir, _ = stubs
    env = {**os.environ, "STRATA_HOST": f"127.0.0.1:{free_port()}"}
    r = launch(env, "codex", path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 1 and "strata serve" in r.stderr


def test_print_shows_the_command_and_starts_nothing(serve, stubs):
    url, env = serve
    bindir, out = stubs
    r = launch({**env, "STUB_OUT": str(out)}, "codex", "--model", MODEL, "--print",
               path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    assert "model_catalog_json=" in r.stdout and f'"{url}/v1"' in r.stdout
    assert not (out / "codex.json").exists()


# ---- every documented form, as a user types it -------------------------------------------------------------------
# `strata launch` read through the real entry point (app.cli.main) with --print, so nothing starts: what the agent
# would be given is read back from the printed command. The forms: launch options before or after the agent's
# name, none at all, and `--` right after the name (which argparse used to swallow, refusing `run`/`-p`/`exec`).

def printed_command(stdout: str) -> tuple[dict[str, str], list[str]]:
    """(environment added, argv) of the command --print shows."""
    text = stdout.split("# command (environment added to yours):\n", 1)[1]
    words = shlex.split(text.replace(" \\\n", " "))
    env = {}
    while words and re.match(r"[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


@pytest.fixture()
def strata(serve, monkeypatch, capsys):
    """`strata ARGS...` in this process, pointed at the test's server: (exit status, stdout, stderr)."""
    _, env = serve
    for key, value in env.items():
        if key.startswith("STRATA_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("STRATA_API_KEY", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        from app.cli import main
        try:
            rc = main(list(argv))
        except SystemExit as e:           # argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 1
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


# (what the user types after `strata launch`, the agent's arguments the agent must get)
FORMS = [
    (["opencode", "--print", "--", "run", "create hello.txt"], ["run", "create hello.txt"]),
    (["--print", "opencode", "--", "run", "create hello.txt"], ["run", "create hello.txt"]),
    (["opencode", "--model", MODEL, "--print", "--", "run", "x"], ["run", "x"]),
    (["--model", MODEL, "--print", "opencode", "--", "run", "x"], ["run", "x"]),
    (["opencode", "--print"], []),
    (["claude", "--print", "--", "-p", "create hello.txt"], ["-p", "create hello.txt"]),
    (["--print", "claude", "--", "-p", "x", "--max-turns", "8"], ["-p", "x", "--max-turns", "8"]),
    (["claude", "--model", MODEL, "--print", "--", "-p", "x"], ["-p", "x"]),
    (["--print", "--model", MODEL, "claude", "--", "-p", "x"], ["-p", "x"]),
    (["--print", "claude"], []),
    (["codex", "--print", "--", "exec", "--skip-git-repo-check", "x"], ["exec", "--skip-git-repo-check", "x"]),
    (["--print", "codex", "--model", MODEL, "--", "exec", "x"], ["exec", "x"]),
    (["codex", "--model", MODEL, "--print", "--", "exec", "--", "x"], ["exec", "--", "x"]),   # a later `--` is the agent's
    (["codex", "--oss", "--print", "--", "exec", "x"], ["exec", "x"]),
    (["--oss", "--print", "codex", "--model", MODEL, "--", "exec", "x"], ["exec", "x"]),
    (["--print", "codex"], []),
]


# every other agent: `--` right after the name, and options before the name
FORMS += [(form, ["hello", "--x"]) for name in sorted(AGENTS) if name not in ("claude", "codex", "opencode")
          for form in ([name, "--print", "--", "hello", "--x"],
                       ["--print", "--model", MODEL, name, "--", "hello", "--x"])]


@pytest.mark.parametrize("words,agent_args", FORMS, ids=[" ".join(w) for w, _ in FORMS])
def test_every_documented_form_reaches_the_agent(strata, words, agent_args):
    rc, out, err = strata("launch", *words)
    assert rc == 0, err
    env, argv = printed_command(out)
    name = next(w for w in words if not w.startswith("-") and w != MODEL)
    assert argv[0] == AGENTS[name].command
    assert MODEL in out
    assert argv[len(argv) - len(agent_args):] == agent_args
    if name == "codex":
        assert ("--oss" in argv) == ("--oss" in words)
        assert argv[argv.index("-m") + 1] == MODEL
    elif name == "claude":
        assert argv[:3] == ["claude", "--model", MODEL] and env["ANTHROPIC_MODEL"] == MODEL
    elif name == "opencode":
        assert json.loads(env["OPENCODE_CONFIG_CONTENT"])["model"] == f"strata/{MODEL}"
        assert argv == ["opencode", *agent_args]


@pytest.mark.parametrize("words,tail", [
    (["opencode", "--", "run", "create hello.txt"], ["run", "create hello.txt"]),
    (["claude", "--", "-p", "create hello.txt"], ["-p", "create hello.txt"]),
    (["codex", "--", "exec", "--skip-git-repo-check", "x"], ["exec", "--skip-git-repo-check", "x"]),
    (["codex", "--oss", "--", "exec", "x"], ["exec", "x"]),
])
def test_dash_dash_right_after_the_name_as_typed(serve, stubs, words, tail):
    """The forms the issue names, exactly as typed (no --print: the stand-in agent starts and records its
    arguments), through a new process (`python -m app`, the `strata` script's main)."""
    got, _ = run_stub(serve, stubs, *words)
    assert got["argv"][-len(tail):] == tail


@pytest.mark.parametrize("words,said", [
    (["claude", "-p", "x"], "unrecognized arguments: -p x (arguments for the agent go after `--`)"),
    (["codex", "exec", "x"], "unrecognized arguments: exec x"),
    (["nope", "--print"], "unknown agent 'nope'"),
    (["--print"], "which agent?"),
    ([], "which agent?"),
])
def test_a_mistyped_launch_is_a_usage_error_that_says_why(strata, words, said):
    rc, _, err = strata("launch", *words)
    assert rc == 2 and said in err, err


def test_a_model_chosen_after_dash_dash_is_refused(strata):
    rc, out, err = strata("launch", "opencode", "--print", "--", "--model", "other")
    assert rc == 2 and "instead of '--model' after `--`" in err and out == ""


# ---- after the agent exits: the tools it never called -----------------------------------------------------------
# A stand-in Claude Code that sends two /v1/messages requests offering three tools, the second after a read_file
# call; `strata launch` waits for it, then reads the session's requests back from the log (their cache detail:
# tools_called, the anatomy's tool parts) and says which tools were never called and what their schemas cost.
# On the Qwen2.5-Coder fixture's tokenizer twin (random weights: a prompt costs milliseconds).
TOOLS_STUB = textwrap.dedent('''\
    #!{python}
    import json, os, sys, urllib.request
    def tool(name, what):
        return {{"name": name, "description": what,
                 "input_schema": {{"type": "object", "properties": {{"path": {{"type": "string"}}}}}}}}
    tools = [tool("read_file", "Read a file."), tool("write_file", "Write a file, replacing what it held."),
             tool("web_search", "Search the web and return the first results with their titles and addresses.")]
    turns = [[{{"role": "user", "content": "what is in a.txt?"}}]]
    turns.append(turns[0] + [
        {{"role": "assistant", "content": [{{"type": "tool_use", "id": "t1", "name": "read_file",
                                            "input": {{"path": "a.txt"}}}}]}},
        {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "t1", "content": "hello"}}]}}])
    for messages in turns:
        body = {{"model": os.environ["ANTHROPIC_MODEL"], "max_tokens": 1, "tools": tools, "messages": messages}}
        req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),
                                     {{"content-type": "application/json",
                                       "user-agent": "claude-cli/2.1.197 (external, sdk-cli)"}})
        urllib.request.urlopen(req, timeout=120).read()
    sys.exit(3)
''')


def test_after_the_agent_exits_launch_names_the_tools_it_never_called(serve, qwen_coder_path, tmp_path):
    from agent_replay import write_tokenizer_twin
    url, env = serve
    twin = write_tokenizer_twin(qwen_coder_path, tmp_path / "twin.gguf", n_ctx=4096)
    r = httpx.post(url + "/api/create", json={"model": "twin:tools", "from": str(twin), "stream": False}, timeout=120)
    assert r.status_code == 200, r.text
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "claude"
    stub.write_text(TOOLS_STUB.format(python=sys.executable))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    r = launch(env, "claude", "--model", "twin:tools", path=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 3, r.stderr                  # the agent's own exit status
    said = r.stderr.split("this session sent ", 1)[1]
    assert said.startswith("2 requests offering 3 tools; called: read_file\n"), said
    unused = said.split("never called: ", 1)[1]
    assert unused.startswith("2 tools whose schemas are ")
    names = unused.split(": ", 1)[1]
    assert "web_search (" in names and "write_file (" in names and "read_file" not in names
    # the tokens said are the anatomy's: read back from the log, the unused tools' parts add up to them
    rows = httpx.get(url + "/api/requests", params={"client": "claude-cli"}).json()["requests"]
    last = httpx.get(f"{url}/api/requests/{rows[0]['id']}").json()["cache"]
    assert last["tools_called"] == ["read_file"] and sorted(last["tools_unused"]["names"]) == ["web_search",
                                                                                               "write_file"]
    assert f"schemas are {last['tools_unused']['tokens']:,} tokens" in unused
