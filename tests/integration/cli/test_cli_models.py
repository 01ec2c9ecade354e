"""`strata list/show/import/cp/rm` as a user runs them: real processes (python -m app, the console script),
real store under the test's STRATA_HOME; exit codes and messages on errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_factory import write_minimal

from app.cli import main
from app.cli.models import human_ago, progress_line
from app.format import format_bytes, format_count


def strata(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                       env=os.environ.copy())
    if check_rc is not None:
        assert r.returncode == check_rc, f"rc={r.returncode}\nstdout:{r.stdout}\nstderr:{r.stderr}"
    return r


def models_dir_files(strata_home: Path) -> list[str]:
    d = strata_home / "models"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_console_script_lists_the_builtin_model():
    exe = Path(sys.executable).parent / "strata"
    assert exe.exists(), "the `strata` console script is not installed (pip install -e .)"
    r = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "MODIFIED", "SOURCE"]
    assert any(row.split()[0] == "smollm2:135m" and row.split()[-1] == "builtin" for row in rows)


def test_import_show_cp_rm_round_trip(tmp_path, strata_home):
    src = write_minimal(tmp_path / "My-Model.gguf", n_layer=2, name="My Model")
    r = strata("import", str(src), "--name", "mine:v1")
    assert r.stdout.startswith("imported mine:v1 (") and "linked" in r.stdout and "sha256:" in r.stdout

    out = strata("list").stdout
    assert "mine:v1" in out and "smollm2:135m" in out

    show = strata("show", "mine:v1").stdout
    assert "  Model" in show and "architecture        llama" in show and "layers              2" in show
    assert "source              store" in show

    data = json.loads(strata("show", "mine:v1", "--json", "--tensors").stdout)
    assert data["model"]["name"] == "mine:v1" and data["info"]["n_layer"] == 2
    assert [t["name"] for t in data["info"]["tensors"]] == ["token_embd.weight", "blk.0.attn_norm.weight"]

    tensors = strata("show", "mine:v1", "--tensors").stdout
    assert "blk.0.attn_norm.weight" in tensors and "norm" in tensors

    assert strata("cp", "mine:v1", "mine:v2").stdout.strip() == "copied 'mine:v1' to 'mine:v2'"
    assert strata("rm", "mine:v1").stdout.strip() == "deleted 'mine:v1'"
    assert len(models_dir_files(strata_home)) == 1          # mine:v2 still uses the blob
    strata("rm", "mine:v2")
    assert models_dir_files(strata_home) == []
    listed = json.loads(strata("list", "--json").stdout)
    assert [m["name"] for m in listed] == ["smollm2:135m"]


def test_import_copy_flag(tmp_path):
    src = write_minimal(tmp_path / "c.gguf")
    r = strata("import", str(src), "--copy")
    assert r.stdout.startswith("imported c:latest") and "copied" in r.stdout


def test_show_builtin_in_process(capsys):
    assert main(["show", "smollm2:135m"]) == 0
    out = capsys.readouterr().out
    for line in ("architecture        llama", "context length      8192", "embedding length    576",
                 "quantization        Q4_1", "layers              30", "attention heads     9 (KV heads 3)",
                 "output              tied to token embedding", "source              builtin (read-only)"):
        assert line in out


@pytest.mark.parametrize("args,message", [
    (["import", "/definitely/not/here.gguf"], "no such file"),
    (["import", "__NOTGGUF__"], "not a GGUF file"),
    (["import", "__GOOD__", "--name", "../../etc/x"], "invalid model name"),
    (["import", "__GOOD__", "--name", "a%2Fb"], "invalid model name"),
    (["import", "__GOOD__", "--name", "smollm2:135m"], "built-in model"),
    (["show", "nope:missing"], "not found"),
    (["show", "bad/../name"], "invalid model name"),
    (["show", "some/name"], "'some/name:latest' not found"),   # a registry reference (Ollama's namespace/model)
    (["cp", "nope", "x"], "not found"),
    (["cp", "smollm2:135m", "x/y/z/w"], "invalid model name"),
    (["rm", "smollm2:135m"], "built-in model"),
    (["rm", "nope"], "not found"),
])
def test_errors_exit_nonzero_and_change_nothing(tmp_path, strata_home, args, message):
    good = write_minimal(tmp_path / "good.gguf")
    bad = tmp_path / "notgguf.gguf"
    bad.write_text("plain text")
    args = [{"__GOOD__": str(good), "__NOTGGUF__": str(bad)}.get(a, a) for a in args]
    before = strata("list", "--json").stdout
    r = strata(*args, check_rc=1)
    assert r.stderr.startswith("Error: ") and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert strata("list", "--json").stdout == before
    assert models_dir_files(strata_home) == []


def test_progress_bar_on_a_terminal(tmp_path):
    """With stderr on a terminal, import draws a bar that reaches 100%."""
    pty = pytest.importorskip("pty")
    src = write_minimal(tmp_path / "p.gguf")
    master, slave = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "app", "import", str(src), "--copy"], stdout=subprocess.PIPE,
                           stderr=slave, text=True, timeout=120)
        os.close(slave)
        chunks = []
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(master)
    assert r.returncode == 0
    drawn = b"".join(chunks).decode()
    assert "copying" in drawn and "100%" in drawn and "|" in drawn


def test_formatting():
    assert format_bytes(512, si=True) == "512 B"
    assert format_bytes(98_362_432, si=True) == "98.4 MB"
    assert format_bytes(4_700_000_000, si=True) == "4.7 GB"
    assert format_bytes(137_000_000, si=True) == "137 MB"
    assert format_bytes(2_000_000, si=True) == "2 MB"
    assert format_count(134_515_008) == "134.52M" and format_count(7_000_000_000) == "7B"
    assert human_ago(100.0, now=100.2) == "Less than a second ago"
    assert human_ago(0, now=3 * 86400 + 5) == "3 days ago"
    assert human_ago(0, now=60) == "1 minute ago"
    line = progress_line("hashing", 50, 100, width=10)
    assert line.startswith("hashing   50% |█████     |")


def test_show_names_the_attention_kind(tmp_path, capsys):
    """`strata show` says what the model's attention means for memory (sliding window, recurrent state, ...)."""
    from gguf_factory import write_family

    for fam, line in (("gemma3", "attention           sliding window 512 on 5 of 6 layers: KV for those layers is "
                                 "sized by the window (512 + one batch per sequence), not the context; the other "
                                 "1 layer keeps the whole context"),
                      ("mamba", "attention           recurrent: 3 of 3 layers keep a fixed recurrent state per "
                                "sequence")):
        src = write_family(fam, tmp_path)
        assert main(["import", str(src), "--name", f"{fam}-fam"]) == 0
        assert main(["show", f"{fam}-fam"]) == 0
        assert line in capsys.readouterr().out


def test_show_lists_the_publishers_sampling(tmp_path, capsys):
    """`strata show` prints a GGUF's general.sampling.* under "Sampling (from the GGUF)", and says which of them a
    Modelfile PARAMETER replaces; `--json` carries them as `info.sampling`."""
    from app.service.store.model_store import ModelStore
    from gguf_variants import write_llama

    src = write_llama(tmp_path / "pub.gguf", n_layer=1, sampling={"temp": 0.6, "top_k": 20})
    assert main(["import", str(src), "--name", "pub:v1"]) == 0
    capsys.readouterr()
    assert main(["show", "pub:v1"]) == 0
    out = capsys.readouterr().out
    assert "  Sampling (from the GGUF)\n    temperature         0.6\n    top_k               20\n" in out
    ModelStore().create("pub:v2", "pub:v1", parameters={"top_k": 5})
    assert main(["show", "pub:v2"]) == 0
    assert "    top_k               20  (the Modelfile's PARAMETER wins)" in capsys.readouterr().out
    assert main(["show", "pub:v1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["info"]["sampling"] == [["temperature", 0.6], ["top_k", 20]]
