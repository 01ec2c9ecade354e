"""Model names: `name:tag`, the tag defaulting to `latest` (as Ollama). Names are keys in the registry, never
paths, but they are still checked strictly: no '/', '\\', '..', '%', control characters, absolute paths or
anything that could become one after URL-decoding, so a name can never escape the store wherever it is used.
"""
from __future__ import annotations

import re

DEFAULT_TAG = "latest"
MAX_PART = 80
_PART = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SANITIZE = re.compile(r"[^a-z0-9._-]+")


class InvalidName(ValueError):
    """The model name is not a valid `name:tag`; the message says why."""


def parse_name(name: str) -> tuple[str, str]:
    """Split and validate `name[:tag]`; returns (model, tag), both lower-case."""
    if not isinstance(name, str):
        raise InvalidName(f"model name must be a string, not {type(name).__name__}")
    raw = name.strip()
    if not raw:
        raise InvalidName("model name is empty")
    shown = repr(name[:100])
    for bad, why in (("/", "'/'"), ("\\", "'\\'"), ("..", "'..'"), ("%", "'%' (URL-encoding)"), ("\0", "NUL")):
        if bad in raw:
            raise InvalidName(f"invalid model name {shown}: contains {why}; use name:tag with letters, "
                              "digits, '.', '-' and '_'")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise InvalidName(f"invalid model name {shown}: contains control characters")
    if raw.count(":") > 1:
        raise InvalidName(f"invalid model name {shown}: more than one ':' (expected name:tag)")
    model, _, tag = raw.partition(":")
    if ":" in raw and not tag:
        raise InvalidName(f"invalid model name {shown}: empty tag after ':'")
    model, tag = model.lower(), (tag or DEFAULT_TAG).lower()
    for part, what in ((model, "name"), (tag, "tag")):
        if len(part) > MAX_PART:
            raise InvalidName(f"invalid model name {shown}: {what} longer than {MAX_PART} characters")
        if not _PART.match(part):
            raise InvalidName(f"invalid model name {shown}: the {what} {part!r} must start with a letter or "
                              "digit and contain only letters, digits, '.', '-' and '_'")
    return model, tag


def normalize_name(name: str) -> str:
    """`Llama3` -> `llama3:latest`; raises InvalidName."""
    model, tag = parse_name(name)
    return f"{model}:{tag}"


def sanitize_name(text: str, tag: str = DEFAULT_TAG) -> str:
    """Make a valid name from arbitrary text (a file stem, an external repo name): `My Model.Q4` -> `my-model.q4:latest`."""
    def clean(s: str) -> str:
        s = _SANITIZE.sub("-", s.lower()).strip("-._")
        # runs of separators collapse to one ('..' must never survive; '-.' reads badly)
        s = re.sub(r"[-._]{2,}", lambda m: "." if "." in m.group() else m.group()[0], s)
        return s[:MAX_PART].rstrip("-._") or "model"
    return f"{clean(text)}:{clean(tag)}"
