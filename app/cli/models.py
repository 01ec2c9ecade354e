"""`strata list | show NAME | import PATH | cp SRC DST | rm NAME...`: the model store from the command line,
printed the way `ollama list` / `ollama show` print it."""
from __future__ import annotations

import json
import sys
import time

from app.cli import configured
from app.engine.gguf.kv_shape import describe as describe_kv_shape
from app.engine.gguf.model_info import GGUFError, ModelInfo
from app.format import format_bytes, format_count, format_duration
from app.service.store.names import InvalidName
from app.service.store.model_store import ModelStore, StoreError


def register(sub) -> None:
    p = sub.add_parser("list", aliases=["ls"], help="list models (store, built-in, found in Ollama/LM Studio/HF)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show a model's facts from its GGUF header")
    p.add_argument("name")
    p.add_argument("--tensors", action="store_true", help="also print the tensor table")
    p.add_argument("--json", action="store_true", help="print JSON (with --tensors: the tensor table too)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("import", help="add a GGUF file to the store (hard link if possible, else copy)")
    p.add_argument("path")
    p.add_argument("--name", help="name:tag (default: from the file name, tag latest)")
    p.add_argument("--copy", action="store_true", help="always copy, never hard-link")
    p.add_argument("--mmproj", help="a vision projector GGUF (mmproj) for the model: it then takes images")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("cp", help="copy a model to a new name (no file is copied)")
    p.add_argument("src")
    p.add_argument("dst")
    p.set_defaults(func=cmd_cp)

    p = sub.add_parser("rm", help="remove models from the store")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=cmd_rm)


# ---- formatting (pure) -----------------------------------------------------------------------------------

def human_ago(t: float, now: float | None = None) -> str:
    return f"{format_duration((now if now is not None else time.time()) - t)} ago"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def progress_line(phase: str, done: int, total: int, width: int = 30) -> str:
    frac = min(1.0, done / total) if total else 1.0
    filled = int(frac * width)
    bar = '█' * filled + ' ' * (width - filled)
    return f"{phase:<8} {frac * 100:3.0f}% |{bar}| {format_bytes(done, si=True)}/{format_bytes(total, si=True)}"


def show_text(rec, info: ModelInfo) -> str:
    kv_heads = sorted(set(info.n_head_kv))
    rows = [
        ("architecture", info.architecture),
        ("parameters", format_count(info.n_params)),
        ("context length", str(info.context_length)),
        ("embedding length", str(info.n_embd)),
        ("quantization", info.quantization),
        ("layers", str(info.n_layer)),
        ("attention heads", f"{info.n_head} (KV heads {'/'.join(map(str, kv_heads))})"),
        ("head size", f"{info.head_dim_k} (K) / {info.head_dim_v} (V)"),
        ("vocabulary", f"{info.n_vocab} ({info.tokenizer_model or 'unknown'} tokenizer)"),
    ]
    if info.n_expert:
        rows.append(("experts", f"{info.n_expert} ({info.n_expert_used} used per token)"))
    if info.kv is not None:
        rows.append(("attention", describe_kv_shape(info.kv, info.n_layer)))
    if info.is_embedding:
        rows.append(("embedding model", f"pooling type {info.pooling_type}"))
    out = ["  Model"] + [f"    {k:<20}{v}" for k, v in rows]

    totals = {c: sum(layer.bytes_by_class[c] for layer in info.layers) for c in info.layers[0].bytes_by_class}
    wrows = [(f"layers: {c}", format_bytes(totals[c], si=True)) for c in totals if totals[c]]
    wrows.append(("token embedding", format_bytes(info.token_embd_bytes, si=True)))
    output = format_bytes(info.output_bytes, si=True) if info.output_bytes else "tied to token embedding"
    wrows.append(("output", output))
    if info.other_bytes:
        wrows.append(("other", format_bytes(info.other_bytes, si=True)))
    wrows.append(("total", format_bytes(info.weight_bytes, si=True)))
    out += ["", "  Weights"] + [f"    {k:<20}{v}" for k, v in wrows]

    out += ["", "  File"]
    out += [f"    {'name':<20}{rec.name}", f"    {'source':<20}{rec.source}" + (" (read-only)" if rec.read_only else ""),
            f"    {'path':<20}{rec.path}", f"    {'size':<20}{format_bytes(rec.size, si=True)}"]
    if rec.sha256:
        out.append(f"    {'sha256':<20}{rec.sha256}")
    if rec.origin:
        out.append(f"    {'from':<20}{rec.origin}")
    if rec.parameters:
        out += ["", "  Parameters"]
        for k, v in rec.parameters.items():
            for item in (v if isinstance(v, list) else [v]):
                out.append(f"    {k:<20}{json.dumps(item) if isinstance(item, str) else item}")
    if info.sampling:         # the publisher's general.sampling.*: used where no request or PARAMETER sets them
        out += ["", "  Sampling (from the GGUF)"]
        for k, v in info.sampling:
            shadowed = "  (the Modelfile's PARAMETER wins)" if k in (rec.parameters or {}) else ""
            out.append(f"    {k:<20}{v}{shadowed}")
    if rec.system:
        out += ["", "  System", *[f"    {line}" for line in rec.system.splitlines()]]
    return "\n".join(out)


# ---- commands --------------------------------------------------------------------------------------------

def _store() -> ModelStore:
    return configured.store()


def _fail(e: BaseException) -> int:
    print(f"Error: {e}", file=sys.stderr)
    return 1


def _errors():
    return (StoreError, GGUFError, InvalidName, OSError)


def cmd_list(args) -> int:
    try:
        store = _store()
        records = store.list()
    except _errors() as e:
        return _fail(e)
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    rows = [["NAME", "ID", "SIZE", "MODIFIED", "SOURCE"]]
    for r in records:
        digest = r.manifest_digest or r.sha256          # Ollama's ID: a pulled model's manifest digest
        if not digest and r.source == "builtin":
            try:
                digest = store.sha256(r.name)      # cached after the first time
            except OSError:
                digest = None
        rows.append([r.name, digest[:12] if digest else "-", format_bytes(r.size, si=True), human_ago(r.modified_at),
                     r.source])
    print(table(rows))
    return 0


def cmd_show(args) -> int:
    try:
        store = _store()
        rec = store.get(args.name)
        info = store.info(rec.name)
        rec = store.with_sha256(rec) if rec.size < (1 << 30) or rec.sha256 else rec
    except _errors() as e:
        return _fail(e)
    if args.json:
        print(json.dumps({"model": rec.to_dict(), "info": info.to_dict(with_tensors=args.tensors)}, indent=2))
        return 0
    print(show_text(rec, info))
    if args.tensors:
        rows = [["TENSOR", "SHAPE", "TYPE", "BYTES", "LAYER", "CLASS"]]
        rows += [[t.name, "x".join(map(str, t.shape)), t.ggml_type, str(t.n_bytes),
                  "-" if t.layer is None else str(t.layer), t.weight_class] for t in info.tensors]
        print()
        print(table(rows))
    return 0


class _Bar:
    """A one-line progress bar on stderr, only when it is a terminal (redraws at most every 1%)."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.last = (None, -1)
        self.phase = None      # "hashing" (the file was hard-linked) or "copying"

    def __call__(self, phase: str, done: int, total: int) -> None:
        self.phase = phase
        if not self.tty:
            return
        pct = int(done * 100 / total) if total else 100
        if (phase, pct) != self.last:
            self.last = (phase, pct)
            sys.stderr.write("\r" + progress_line(phase, done, total))
            sys.stderr.flush()

    def end(self) -> None:
        if self.tty and self.last[0] is not None:
            sys.stderr.write("\n")


def cmd_import(args) -> int:
    bar = _Bar()
    try:
        rec = _store().import_gguf(args.path, name=args.name, link=not args.copy, progress=bar, mmproj=args.mmproj)
    except _errors() as e:
        bar.end()
        return _fail(e)
    bar.end()
    how = "copied" if bar.phase == "copying" else "linked"
    print(f"imported {rec.name} ({format_bytes(rec.size, si=True)}, {how}) sha256:{rec.sha256}"
          + (f", vision projector {rec.projector}" if rec.projector else ""))
    return 0


def cmd_cp(args) -> int:
    try:
        rec = _store().copy(args.src, args.dst)
    except _errors() as e:
        return _fail(e)
    print(f"copied '{args.src}' to '{rec.name}'")
    return 0


def cmd_rm(args) -> int:
    store = _store()
    rc = 0
    for name in args.names:
        try:
            rec = store.remove(name)
            print(f"deleted '{rec.name}'")
        except _errors() as e:
            rc = _fail(e)
    return rc
