"""A runner's stderr, read by the parent: passed through to the service's own stderr as before, and its last lines
kept in a bounded ring, so that when the runner dies (an abort prints its reason there: `GGML_ASSERT(...)`,
`terminate called after throwing ...`) the error and the service log can say what it printed last.

The child's stderr must be read by the parent: the child's own threads die with it, before they could forward the
last lines. The pipe's write end goes to the child as an inherited descriptor (`InheritedFd`, pickled by
multiprocessing's spawn), and the child makes it its fd 2 (`adopt_as_stderr`).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from multiprocessing import reduction

TAIL_LINES = 40             # lines kept (the service log gets them all when the runner dies)
DETAIL_LINES = 4            # of those, the last ones an error message quotes
DETAIL_LINE_CHARS = 300


def supported() -> bool:
    """Passing a descriptor to a 'spawn' child is POSIX multiprocessing's (Windows passes handles instead): there
    the runner keeps writing to the service's stderr directly, and errors carry no tail."""
    return hasattr(reduction, "DupFd") and os.name == "posix"


class InheritedFd:
    """A file descriptor handed to a 'spawn' child: pickling it (only possible while multiprocessing starts the
    child) registers the descriptor to be passed; the child gets it back from `fd()`."""

    def __init__(self, fd: int):
        self._fd = fd

    def __reduce__(self):
        return _rebuild, (reduction.DupFd(self._fd),)

    def fd(self) -> int:
        return self._fd


def _rebuild(dup) -> InheritedFd:
    return InheritedFd(dup.detach())


def adopt_as_stderr(inherited: InheritedFd | None) -> None:
    """In the child: write fd 2 (llama.cpp's and Python's stderr) into the parent's pipe."""
    if inherited is None:
        return
    fd = inherited.fd()
    if fd != 2:
        os.dup2(fd, 2)
        os.close(fd)


class StderrTail:
    """The parent's end: a pipe, and a thread that reads it until the child (the only writer) is gone."""

    def __init__(self, passthrough_fd: int | None = 2, lines: int = TAIL_LINES):
        self._read_fd, write_fd = os.pipe()
        self.child_end: InheritedFd | None = InheritedFd(write_fd)
        self._passthrough = passthrough_fd
        self._lines: deque[str] = deque(maxlen=lines)
        self._partial = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="strata-runner-stderr", daemon=True)
        self._thread.start()

    def child_started(self) -> None:
        """Close the parent's copy of the write end (the child has its own), so the pipe ends with the child."""
        if self.child_end is not None:
            os.close(self.child_end.fd())
            self.child_end = None

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            if self._passthrough is not None:
                try:
                    os.write(self._passthrough, chunk)
                except OSError:
                    pass        # the service's stderr is gone: keep reading, or the child blocks on a full pipe
            self._keep(chunk)
        self._keep(b"\n")       # the last line, even without its newline
        os.close(self._read_fd)

    def _keep(self, chunk: bytes) -> None:
        *whole, self._partial = (self._partial + chunk).split(b"\n")
        with self._lock:
            for line in whole:
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    self._lines.append(text)
        if len(self._partial) > 8192:   # a line without end: keep its start
            self._keep(b"\n")

    def wait_closed(self, timeout: float) -> None:
        """Wait (bounded) until every line the dead child wrote has been read."""
        self._thread.join(timeout)

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def detail(self) -> str:
        """The last lines, short enough for an error message: 'a | b | c'."""
        last = self.lines()[-DETAIL_LINES:]
        return " | ".join(ln if len(ln) <= DETAIL_LINE_CHARS else ln[:DETAIL_LINE_CHARS] + "..." for ln in last)
