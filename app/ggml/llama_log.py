"""One llama.cpp/ggml log callback per process, routed to Python logging, with line capture for load reports.

`llama_log_set` is global, not thread-safe, and also sets ggml's logger (docs/architecture.md, llama.cpp facts 0), and
llama-cpp-python's own callback maps levels wrongly (it hides ERROR lines). So: `install()` once, early, and keep
the ctypes callback object alive for the life of the process. ggml levels: DEBUG=1, INFO=2, WARN=3, ERROR=4,
CONT=5 (continues the previous message). Messages may arrive in pieces; we join them into whole lines.

    install()
    with capture_log() as lines:       # every whole line logged while inside, any level
        model = L.llama_model_load_from_file(...)
    report = alloc_report.parse_buffer_lines(lines)
"""
from __future__ import annotations

import ctypes
import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from app.ggml import cxx_runtime, mtmd_lib

logger = logging.getLogger("strata.llama")

GGML_LEVELS = {0: logging.INFO, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
GGML_LOG_CONT = 5

_lock = threading.Lock()
_callback = None                 # the CFUNCTYPE object; must stay referenced while llama.cpp may call it
_partial = ""                    # text of the line being assembled
_last_level = 2
_captures: list[list[str]] = []
_level_rules: list = []          # fn(python_level, line) -> python_level, applied in order (see add_level_rule)


def _emit(level: int, line: str) -> None:
    py_level = GGML_LEVELS.get(level, logging.INFO)
    for rule in _level_rules:
        py_level = rule(py_level, line)
    for cap in _captures:
        cap.append(line)
    if logger.isEnabledFor(py_level):
        logger.log(py_level, "%s", line)


def _on_log(level: int, text: bytes | None, _user_data) -> None:
    global _partial, _last_level
    try:
        s = text.decode("utf-8", "replace") if text else ""
        with _lock:
            if level == GGML_LOG_CONT:
                level = _last_level
            else:
                if _partial and level != _last_level:
                    # a new message while the previous one had no newline: flush it as its own line
                    _emit(_last_level, _partial)
                    _partial = ""
                _last_level = level
            _partial += s
            while "\n" in _partial:
                line, _partial = _partial.split("\n", 1)
                _emit(level, line)
    except Exception:  # never let an exception cross into C
        pass


def install() -> None:
    """Install the process-wide callback (idempotent). Importing llama_cpp installs its own first; this replaces it."""
    global _callback
    with _lock:
        if _callback is not None:
            return
        cxx_runtime.preload()                  # before libllama maps (docs/architecture.md, "llama.cpp facts" 15)
        from llama_cpp import llama_cpp as L   # late: maps libllama (child processes only)

        _callback = L.llama_log_callback(_on_log)
        L.llama_log_set(_callback, ctypes.c_void_p(0))


def route_mtmd() -> None:
    """Send mtmd's and clip's log (the vision projector's library) through the same callback, so its buffer lines
    can be captured like llama.cpp's. Child processes only (maps libmtmd); mtmd_lib.VisionUnavailable when the
    llama.cpp build has no libmtmd."""
    M = mtmd_lib.load()
    install()
    M.mtmd_helper_log_set(_callback, ctypes.c_void_p(0))


def add_level_rule(rule) -> None:
    """Let `rule(python_level, line) -> python_level` re-level lines before they reach logging, e.g. the runner
    turns the error lines of a decode it aborted itself into DEBUG. Called on the logging thread with the GIL;
    keep it cheap."""
    with _lock:
        _level_rules.append(rule)


def remove_level_rule(rule) -> None:
    with _lock:
        if rule in _level_rules:
            _level_rules.remove(rule)


@contextmanager
def capture_log() -> Iterator[list[str]]:
    """Collect every whole log line (all levels, without the trailing newline) emitted inside the block.
    Several captures may be active at once (each gets every line)."""
    install()
    lines: list[str] = []
    with _lock:
        _captures.append(lines)
    try:
        yield lines
    finally:
        with _lock:
            if _partial:
                # a message still waiting for its newline belongs to this block
                lines.append(_partial)
            _captures.remove(lines)
