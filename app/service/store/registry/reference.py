"""Model references as a user types them for a pull or push, and the local store name each one becomes.

Ollama registry (OCI distribution), Ollama's own grammar (types/model/name.go):
    llama3.2                      -> https://registry.ollama.ai/v2/library/llama3.2/manifests/latest
    llama3.2:3b, user/model:tag, host:port/namespace/model:tag, http://host:port/namespace/model:tag
Hugging Face (GGUF repositories, through huggingface_hub):
    hf.co/<user>/<repo>[:<quant>]     Ollama's spelling (huggingface.co/... too)
    <user>/<repo>:<quant>             llama-server's `-hf` spelling, recognised when the repository name says
                                      GGUF or the tag is a quantization name (Q4_K_M, IQ4_XS, F16, ...); any
                                      other `user/model:tag` is an Ollama namespace, as in Ollama.

Everything is checked before any network use: a reference with credentials (`user:pw@host`), a query, a
fragment, `..`, percent-encoding, whitespace or an over-long part is refused (InvalidReference, a 400), so a
name can neither leak a secret into logs nor steer a request anywhere the user did not name.

A pulled model is stored under the reference as the user wrote it, spelt the shortest way, as Ollama lists it
(`Reference.local_name()`, Ollama's DisplayShortest): the default host `registry.ollama.ai` and the `library/`
namespace are left out and the tag defaults to `latest`: `registry.ollama.ai/library/llama3.2:3b` -> `llama3.2:3b`,
`user/model` -> `user/model:latest`, `127.0.0.1:5000/team/m:v1` stays whole; a Hugging Face reference is
`hf.co/<user>/<repo>:<tag>` (`huggingface.co/...` and llama-server's `<user>/<repo>:<quant>` are spelt so too).
Names of the default library are lower-case (they are plain Strata names, app/service/store/names.py); any other keeps
the case it was written in and is matched without regard to case. `canonical_name()` turns whatever a request
names (a plain name or a reference) into that stored spelling, so `show`, `run`, `rm`... find the model by exactly
what was pulled.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from app.service.store.names import InvalidName, normalize_name, sanitize_name

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
HF_HOSTS = ("hf.co", "huggingface.co")
MAX_REFERENCE = 500                      # host (350) + namespace + model + tag, with separators
MAX_HOST = 350
MAX_PART = 80                            # Ollama's limit for namespace, model and tag
MAX_HF_PART = 96                         # Hugging Face allows 96-character repository names

# Ollama's part rules: the first character alphanumeric or '_', then also '-', '_', '.' ('.' not in a
# namespace); ':' only in the host (a port). Hugging Face user names may contain '.'.
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")
_QUANT = re.compile(r"^(i?q[1-8](_[0-9a-z]+)*|f16|bf16|f32|mxfp4(_[0-9a-z]+)*|tq[12]_0)$", re.IGNORECASE)


class InvalidReference(InvalidName):
    """A pull/push reference that cannot be used; the message says which part and why (a 400)."""


@dataclass(frozen=True)
class Reference:
    kind: str                 # "ollama" | "hf"
    scheme: str               # "https", or "http" when written so (needs insecure)
    host: str                 # registry.ollama.ai, 127.0.0.1:5000, hf.co
    namespace: str            # library, a user, an HF user or organisation
    model: str                # the model or the HF repository
    tag: str                  # latest, 3b, or the HF quantization (latest = let Strata choose)
    explicit_http: bool = False

    @property
    def repository(self) -> str:
        return f"{self.namespace}/{self.model}"

    def display(self) -> str:
        """The shortest spelling, as Ollama prints it (DisplayShortest)."""
        if self.kind == "hf":
            return f"hf.co/{self.repository}:{self.tag}"
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host.lower()}/{self.repository}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.repository}:{self.tag}"
        return f"{self.model}:{self.tag}"

    def local_name(self) -> str:
        """The store name of what this reference pulls (see the module docstring)."""
        if self.kind == "ollama" and self.host.lower() == DEFAULT_HOST and self.namespace.lower() == DEFAULT_NAMESPACE:
            try:
                return normalize_name(f"{self.model}:{self.tag}")
            except InvalidName:
                return sanitize_name(self.model, self.tag)
        return self.display()

    def old_local_name(self) -> str:
        """The name Strata stored a pull under before names kept their reference (the store migrates them)."""
        if self.kind == "ollama" and self.host.lower() == DEFAULT_HOST and self.namespace == DEFAULT_NAMESPACE:
            return self.local_name()
        return sanitize_name(f"{self.namespace}-{self.model}", self.tag)

    def base_url(self, insecure: bool) -> str:
        scheme = "http" if insecure or self.explicit_http else "https"
        return f"{scheme}://{self.host}"


def _shown(s: str) -> str:
    """The name as it may be echoed in an error: cut short, and with anything before an '@' hidden (a password)."""
    if "@" in s:
        s = "***@" + s.rsplit("@", 1)[1]
    return repr(s[:80] + ("..." if len(s) > 80 else ""))


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise InvalidReference(f"model name must be a string, not {type(text).__name__}")
    s = text.strip()
    if not s:
        raise InvalidReference("model name is empty")
    shown = _shown(s)
    if len(s) > MAX_REFERENCE:
        raise InvalidReference(f"model name {shown} is too long ({len(s)} characters, at most {MAX_REFERENCE})")
    if any(ord(c) < 33 or ord(c) == 127 for c in s):
        raise InvalidReference(f"model name {shown} contains whitespace or control characters")
    for bad, why in (("@", "credentials or a digest ('@')"), ("?", "a query ('?')"), ("#", "a fragment ('#')"),
                     ("%", "percent-encoding"), ("\\", "'\\'"), ("..", "'..'")):
        if bad in s:
            raise InvalidReference(f"invalid model name {shown}: contains {why}; use [host/][namespace/]model[:tag]")
    return s


def _part(value: str, what: str, shown: str, *, limit: int = MAX_PART, dots: bool = True) -> str:
    if not value:
        raise InvalidReference(f"invalid model name {shown}: the {what} is empty")
    if len(value) > limit:
        raise InvalidReference(f"invalid model name {shown}: the {what} is longer than {limit} characters")
    if not _PART.match(value) or (not dots and "." in value):
        allowed = "letters, digits, '-' and '_'" + ("" if not dots else " and '.'")
        raise InvalidReference(f"invalid model name {shown}: the {what} {value!r} must start with a letter, digit "
                               f"or '_' and contain only {allowed}")
    return value


def _looks_hf(repo: str, tag: str | None) -> bool:
    return "gguf" in repo.lower() or (tag is not None and bool(_QUANT.match(tag)))


def parse_reference(text) -> Reference:
    """A pull/push reference (see the module docstring); raises InvalidReference."""
    s = _check_text(text)
    shown = _shown(s)
    scheme, explicit_http = "https", False
    explicit_scheme = "://" in s
    if explicit_scheme:
        scheme, s = s.split("://", 1)
        if scheme.lower() not in ("http", "https"):
            raise InvalidReference(f"invalid model name {shown}: only http:// or https:// registries")
        scheme = scheme.lower()
        explicit_http = scheme == "http"
    tag = None
    if s.rfind(":") > s.rfind("/"):
        s, tag = s.rsplit(":", 1)
        _part(tag, "tag", shown)
    parts = s.split("/")
    if len(parts) > 3 or any(not p for p in parts):
        raise InvalidReference(f"invalid model name {shown}: expected [host/][namespace/]model[:tag]")
    host = parts[0] if len(parts) == 3 else None
    if host is not None and (len(host) > MAX_HOST or not _HOST.match(host)):
        raise InvalidReference(f"invalid model name {shown}: {host!r} is not a host name (host or host:port)")
    if host is None and explicit_scheme:
        raise InvalidReference(f"invalid model name {shown}: a URL needs host/namespace/model")
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    model = parts[-1]
    is_hf = (host or "").lower() in HF_HOSTS or (host is None and len(parts) == 2 and _looks_hf(model, tag))
    if is_hf:
        if len(parts) != 3 and host is not None:
            raise InvalidReference(f"invalid model name {shown}: expected hf.co/<user>/<repo>[:<quant>]")
        _part(namespace, "Hugging Face user", shown, limit=MAX_HF_PART)
        _part(model, "Hugging Face repository", shown, limit=MAX_HF_PART)
        return Reference("hf", "https", "hf.co", namespace, model, tag or DEFAULT_TAG)
    _part(namespace, "namespace", shown, dots=False)
    _part(model, "model", shown)
    return Reference("ollama", scheme, host or DEFAULT_HOST, namespace, model, tag or DEFAULT_TAG, explicit_http)


def canonical_name(name) -> str:
    """The store's spelling of a model name: a plain `name[:tag]` normalised (app/service/store/names.py), a reference
    (it has a '/') as a pull of it is stored (`Reference.local_name()`). Raises InvalidName / InvalidReference."""
    if isinstance(name, str) and "/" in name:
        return parse_reference(name).local_name()
    return normalize_name(name)
