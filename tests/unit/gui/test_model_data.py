"""The model manager's plain data (gui/models/model_data.py, no Qt): table rows from /api/tags, /api/ps and /api/show
answers, and the progress of a pull and an import read from their NDJSON streams (Ollama's pull stream exactly).
The manager window on a live service: tests/gui/test_gui_manager.py, tests/gui/test_gui_pull.py."""
from __future__ import annotations

from app.gui.models.model_data import ImportProgress, PullProgress, model_rows

TAGS = [{"name": "smollm2:135m", "size": 100, "digest": "d1",
         "details": {"quantization_level": "Q4_1", "family": "llama", "parameter_size": "134.52M"},
         "strata": {"source": "builtin", "read_only": True, "path": "/site/smollm2.gguf"}},
        {"model": "other:latest", "size": 5, "details": {}},
        {"name": "busy:latest", "size": 7, "details": {}}]


def test_rows_join_tags_running_models_shown_facts_and_progress():
    ps = [{"name": "other:latest", "strata": {"state": "ready"}}, {"name": "busy:latest"}]
    shown = {"smollm2:135m": {"capabilities": ["completion", "tools"],
                             "model_info": {"general.parameter_count": 134515008}}}
    rows = {r.name: r for r in model_rows(TAGS, ps, shown, {"busy:latest": 0.5})}
    s = rows["smollm2:135m"]
    assert (s.size, s.quantization, s.architecture, s.parameters, s.parameter_count, s.capabilities) == \
        (100, "Q4_1", "llama", "134.52M", 134515008, ("completion", "tools"))
    assert (s.source, s.read_only, s.path, s.state) == ("builtin", True, "/site/smollm2.gguf", "")
    assert rows["other:latest"].state == "ready" and rows["other:latest"].source == "store"
    assert rows["busy:latest"].state == "loading"          # a load in progress wins over "loaded"
    assert rows["smollm2:135m"].source_label == "Built-in"


def test_pull_progress_follows_ollamas_stream_to_success():
    p = PullProgress("m")
    for line in ({"status": "pulling manifest"},
                 {"status": "pulling 0123456789ab", "digest": "sha256:0123456789ab" + "0" * 52, "total": 400},
                 {"status": "pulling 0123456789ab", "digest": "sha256:0123456789ab" + "0" * 52, "completed": 100},
                 {"status": "pulling fedcba987654", "digest": "sha256:fedcba987654" + "0" * 52, "total": 100,
                  "completed": 100}):
        p.update(line)
    assert p.fraction == 200 / 500 and len(p.files) == 2 and not p.success
    assert next(iter(p.files.values())).describe().startswith("0123456789ab: ")
    for line in ({"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}):
        p.update(line)
    assert p.success and p.status == "success" and not p.error


def test_an_error_line_ends_a_pull_with_its_message():
    p = PullProgress("m")
    p.update({"status": "pulling manifest"})
    p.update({"error": "pull model manifest: file does not exist"})
    assert p.error == "pull model manifest: file does not exist" and not p.success and p.status == "pulling manifest"


def test_import_progress_phases_and_percent():
    i = ImportProgress("/x/model.gguf")
    assert i.percent == 0 and i.describe() == "Starting"
    i.update({"status": "hashing", "completed": 25, "total": 100})
    assert i.percent == 25 and i.describe().startswith("Checking ")
    i.update({"status": "copying", "completed": 100})
    i.update({"status": "success", "model": "model:latest"})
    assert i.percent == 100 and i.model == "model:latest" and i.phase == "success"
