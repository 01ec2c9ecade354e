"""The settings file (app/settings.py): written by the Settings dialog, read by the service's config at start
(`strata serve` and `strata gui` alike); an environment variable always wins over the file. `strata serve` itself
reading it: tests/integration/cli/test_service_cli.py."""
from __future__ import annotations

import json
import stat

import pytest

from app import settings
from app.service.config import ConfigError, ServiceConfig


def test_save_then_load_keeps_only_what_differs(strata_home, clean_env):
    path = settings.save({"num_ctx": 8192, "api_key": "k", "num_parallel": 4, "origins": ["https://a.example"]})
    assert path == strata_home / "settings.json"
    assert json.loads(path.read_text()) == {"api_key": "k", "num_ctx": 8192, "origins": ["https://a.example"]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600          # it may hold the API key
    assert settings.load() == {"api_key": "k", "num_ctx": 8192, "origins": ["https://a.example"]}
    assert settings.effective()["num_parallel"] == 4 and settings.effective()["num_ctx"] == 8192
    assert [p.name for p in strata_home.iterdir() if p.name.startswith(".settings-")] == []


@pytest.mark.parametrize("values, named", [
    ({"num_ctx": "big"}, "num_ctx"), ({"num_parallel": 0}, "num_parallel"), ({"origins": "x"}, "origins"),
    ({"external_sources": ["ollama", "winamp"]}, "winamp"), ({"no_such": 1}, "no_such"), ({"num_ctx": True}, "num_ctx"),
])
def test_bad_values_are_refused_naming_the_setting(strata_home, values, named):
    with pytest.raises(settings.SettingsError, match=named):
        settings.save(values)
    assert not (strata_home / "settings.json").exists()


def test_a_broken_file_is_a_config_error_naming_it(strata_home, clean_env):
    (strata_home / "settings.json").write_text('{"num_ctx": -5}')
    with pytest.raises(ConfigError, match="num_ctx"):
        ServiceConfig.from_env()
    (strata_home / "settings.json").write_text("{oops")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ServiceConfig.from_env()


def test_config_reads_the_file_and_the_environment_wins(strata_home, clean_env):
    settings.save({"host": "127.0.0.1:12001", "api_key": "from-file", "origins": ["https://a.example"],
                   "num_parallel": 2, "num_ctx": 8192, "keep_alive": "1h", "num_threads": 3, "prompt_cache_mib": 256,
                   "gpu_margin_mib": 1024, "external_sources": ["ollama"]})
    cfg = ServiceConfig.from_env()
    assert (cfg.host, cfg.port, cfg.api_key, cfg.origins) == ("127.0.0.1", 12001, "from-file", ("https://a.example",))
    assert (cfg.num_parallel, cfg.num_ctx, cfg.keep_alive, cfg.n_threads) == (2, 8192, "1h", 3)
    assert (cfg.prompt_cache_mib, cfg.gpu_margin_mib, cfg.external_sources) == (256, 1024, ("ollama",))
    clean_env.setenv("STRATA_NUM_CTX", "2048")
    clean_env.setenv("STRATA_EXTERNAL_MODELS", "lmstudio,huggingface")
    cfg = ServiceConfig.from_env()
    assert cfg.num_ctx == 2048 and cfg.external_sources == ("lmstudio", "huggingface")
    assert cfg.num_parallel == 2                                   # the file still holds for the rest
    assert settings.overridden() == {"num_ctx": "STRATA_NUM_CTX", "external_sources": "STRATA_EXTERNAL_MODELS"}
    settings.save({"external_sources": []})                      # none: nothing of other apps is scanned
    clean_env.delenv("STRATA_EXTERNAL_MODELS")
    assert ServiceConfig.from_env().external_sources == ()


def test_the_gpu_margin_reaches_the_planner(strata_home, clean_env):
    from app.service.generation.options import plan_options

    o = plan_options({}, num_ctx_default=4096, num_parallel=1, n_ctx_train=8192, margin_mib=1024)
    assert o.margin == 1024 << 20


def test_scanned_folders_follow_the_setting(strata_home, clean_env, tmp_path):
    """An LM Studio and a Hugging Face model in the (sandboxed) home: the store lists only the chosen sources."""
    import shutil

    from app.service.store.model_store import ModelStore
    from gguf_factory import write_dense_llama

    home = tmp_path / "user-home"
    lm = home / ".lmstudio" / "models" / "pub" / "repo"
    lm.mkdir(parents=True)
    write_dense_llama(lm / "tiny-lm.gguf")
    snap = home / ".cache" / "huggingface" / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    shutil.copyfile(lm / "tiny-lm.gguf", snap / "tiny-hf.gguf")

    def sources(discover) -> set[str]:
        return {r.source for r in ModelStore(discover_external=discover).list()} - {"builtin", "store"}

    assert sources(True) == {"lmstudio", "huggingface"}
    assert sources(("lmstudio",)) == {"lmstudio"}
    assert sources(()) == set()
    settings.save({"external_sources": ["lmstudio"]})
    assert sources(ServiceConfig.from_env().external_sources) == {"lmstudio"}
    clean_env.setenv("STRATA_EXTERNAL_MODELS", "huggingface")      # the environment wins over the file
    assert sources(ServiceConfig.from_env().external_sources) == {"huggingface"}
