"""Split GGUFs (`name-00001-of-00003.gguf`, written by llama-gguf-split or uploaded that way to Hugging Face).

llama.cpp loads a split model from its first part and finds the others by the file name (llama_split_path:
`PREFIX-%05d-of-%05d.gguf`), so every part must sit next to the first under that name. Here the parts are found
the same way and each is parsed and checked (its `split.no` / `split.count`), so a missing or mismatched part is
refused with a reason instead of failing inside llama.cpp.
"""
from __future__ import annotations

import os
import re

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.parser import GGUFFile, parse_gguf

SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
MAX_SPLITS = 1000


def split_count(gf: GGUFFile) -> int:
    n = gf.get("split.count", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def part_path(prefix: str, index: int, count: int) -> str:
    """The file name llama.cpp expects for part `index` (1-based) of `count`."""
    return f"{prefix}-{index:05d}-of-{count:05d}.gguf"


def sibling_paths(path: str) -> list[str]:
    """Every part's path for a file named like a split part (the file itself included); [] otherwise."""
    d, base = os.path.split(path)
    m = SPLIT_NAME.match(base)
    if not m:
        return []
    count = int(m["count"])
    return [os.path.join(d, part_path(m["prefix"], i, count)) for i in range(1, count + 1)]


def split_parts(path: str, first: GGUFFile) -> list[GGUFFile]:
    """[first] for a whole model; for the first part of a split model every part, parsed and checked."""
    count = split_count(first)
    if count == 1:
        return [first]
    no = first.get("split.no", 0)
    if no != 0:
        raise GGUFError(f"{path}: part {no + 1 if isinstance(no, int) else '?'} of a split GGUF ({count} files); "
                        f"use its first part (...-00001-of-{count:05d}.gguf)")
    if count > MAX_SPLITS:
        raise GGUFError(f"{path}: split into {count} files (at most {MAX_SPLITS})")
    paths = sibling_paths(path)
    if len(paths) != count:
        raise GGUFError(f"{path}: the first part of a split GGUF ({count} files) must be named "
                        f"...-00001-of-{count:05d}.gguf (llama.cpp finds the other parts by that name)")
    parts = [first]
    for i, p in enumerate(paths[1:], start=1):
        if not os.path.isfile(p):
            raise GGUFError(f"{path}: part {i + 1} of {count} is missing ({os.path.basename(p)})")
        gf = parse_gguf(p)
        if gf.get("split.no") != i or split_count(gf) != count:
            raise GGUFError(f"{p}: is not part {i + 1} of {count} (split.no {gf.get('split.no')}, "
                            f"split.count {gf.get('split.count')})")
        parts.append(gf)
    declared = first.get("split.tensors.count")
    n_tensors = sum(len(gf.tensors) for gf in parts)
    if isinstance(declared, int) and declared != n_tensors:
        raise GGUFError(f"{path}: the parts hold {n_tensors} tensors, split.tensors.count says {declared}")
    return parts
