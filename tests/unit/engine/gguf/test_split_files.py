"""Split GGUFs (engine/gguf/split.py): llama.cpp's part names, the siblings of a part, and a split model read as
all its parts, with each way a set of parts can be wrong refused by a GGUFError naming it. Synthetic parts from
gguf_factory.write_split_dense_llama; importing and loading them for real: test_store.py, test_pull_hf_push.py."""
from __future__ import annotations

import os

import pytest

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.parser import parse_gguf
from app.engine.gguf.split import part_path, sibling_paths, split_count, split_parts
from gguf_factory import write_split_dense_llama


def test_part_names_are_llama_cpps():
    assert part_path("/m/qwen", 2, 3) == "/m/qwen-00002-of-00003.gguf"
    assert sibling_paths("/m/qwen-00002-of-00003.gguf") == [f"/m/qwen-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert sibling_paths("/m/qwen.gguf") == []


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return write_split_dense_llama(tmp_path_factory.mktemp("split") / "dense.gguf", n_parts=3)


def test_the_first_part_brings_every_part(parts):
    first = parse_gguf(str(parts[0]))
    assert split_count(first) == 3
    got = split_parts(str(parts[0]), first)
    assert [gf.get("split.no") for gf in got] == [0, 1, 2]
    assert sum(len(gf.tensors) for gf in got) == first.get("split.tensors.count")


def test_a_later_part_is_refused_naming_the_first(parts):
    with pytest.raises(GGUFError, match=r"part 2 of a split GGUF \(3 files\); use its first part"):
        split_parts(str(parts[1]), parse_gguf(str(parts[1])))


def test_a_missing_part_is_named(parts, tmp_path):
    copies = []
    for p in parts[:2]:                                   # the third part left out
        copies.append(tmp_path / os.path.basename(p))
        copies[-1].write_bytes(p.read_bytes())
    with pytest.raises(GGUFError, match=r"part 3 of 3 is missing \(dense-00003-of-00003.gguf\)"):
        split_parts(str(copies[0]), parse_gguf(str(copies[0])))


def test_a_renamed_first_part_is_refused(parts, tmp_path):
    renamed = tmp_path / "dense.gguf"
    renamed.write_bytes(parts[0].read_bytes())
    with pytest.raises(GGUFError, match=r"must be named \.\.\.-00001-of-00003.gguf"):
        split_parts(str(renamed), parse_gguf(str(renamed)))


def test_a_whole_model_is_its_own_only_part(tmp_path):
    from gguf_factory import write_minimal

    path = str(write_minimal(tmp_path / "whole.gguf"))
    first = parse_gguf(path)
    assert split_count(first) == 1 and split_parts(path, first) == [first]
