"""Registry manifests (app/service/store/registry/ollama.py) parsed and checked in-process: what Ollama's registry
sends is read into layers in Ollama's pull order and written back byte-compatible; anything else (a digest that is
no sha256:HEX, which would become a file name; a size out of range; a manifest list; not JSON) is a RegistryError
that says what is wrong. tests/integration/service/test_pull.py pulls through the client against a live registry."""
from __future__ import annotations

import hashlib
import json

import pytest

from app.service.store.registry.download import RegistryError
from app.service.store.registry.ollama import (MANIFEST_V2, MAX_LAYER_SIZE, MEDIA_CONFIG, MEDIA_MODEL, MEDIA_PARAMS,
                                               MEDIA_TEMPLATE, Layer, Manifest, parse_manifest)


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


MODEL = {"mediaType": MEDIA_MODEL, "digest": digest(b"weights"), "size": 27_000_000}
TEMPLATE = {"mediaType": MEDIA_TEMPLATE, "digest": digest(b"{{ .Prompt }}"), "size": 13}
PARAMS = {"mediaType": MEDIA_PARAMS, "digest": digest(b'{"stop":["x"]}'), "size": 14}
CONFIG = {"mediaType": MEDIA_CONFIG, "digest": digest(b"{}"), "size": 2}


def doc(**over) -> dict:
    d = {"schemaVersion": 2, "mediaType": MANIFEST_V2, "config": CONFIG, "layers": [MODEL, TEMPLATE, PARAMS]}
    d.update(over)
    return d


def raw(d) -> bytes:
    return json.dumps(d).encode()


def test_a_manifest_as_ollama_sends_it():
    body = raw(doc())
    m = parse_manifest(body)
    assert m.config == Layer(MEDIA_CONFIG, CONFIG["digest"], 2)
    assert [x.media_type for x in m.layers] == [MEDIA_MODEL, MEDIA_TEMPLATE, MEDIA_PARAMS]
    assert m.layers[0].hex == hashlib.sha256(b"weights").hexdigest() and m.layers[0].size == 27_000_000
    assert m.all_layers == m.layers + (m.config,)              # Ollama's pull order: layers, then the config
    assert m.raw == body                                        # kept as sent (Ollama stores these bytes)


def test_written_back_it_reads_the_same():
    m = parse_manifest(raw(doc()))
    again = parse_manifest(m.to_bytes())
    assert again == m and json.loads(m.to_bytes())["mediaType"] == MANIFEST_V2
    bare = Manifest(None, m.layers)
    assert parse_manifest(bare.to_bytes()) == bare and bare.all_layers == m.layers


@pytest.mark.parametrize("layer,why", [
    ({**MODEL, "digest": "sha256:" + "A" * 64}, "sha256 digest"),            # upper case: not the file name form
    ({**MODEL, "digest": "sha256:../../etc/passwd"}, "sha256 digest"),
    ({**MODEL, "digest": "md5:" + "0" * 32}, "sha256 digest"),
    ({k: v for k, v in MODEL.items() if k != "mediaType"}, "mediaType"),
    ({**MODEL, "size": -1}, "valid size"),
    ({**MODEL, "size": MAX_LAYER_SIZE + 1}, "valid size"),
    ({**MODEL, "size": True}, "valid size"),
    ({**MODEL, "size": "27"}, "valid size"),
    ("sha256:abc", "not an object"),
])
def test_a_bad_layer_is_refused_naming_it(layer, why):
    with pytest.raises(RegistryError, match=f"layer 1 .*{why}"):
        parse_manifest(raw(doc(layers=[MODEL, layer])))
    with pytest.raises(RegistryError, match="config"):
        parse_manifest(raw(doc(config=layer)))


@pytest.mark.parametrize("body,why", [
    (b"<html>", "not JSON"), (b"\xff\xfe", "not JSON"),
    (raw([1, 2]), "schemaVersion 2"), (raw(doc(schemaVersion=1)), "schemaVersion 2"),
    (raw(doc(manifests=[{"digest": MODEL["digest"]}])), "manifest list"),
    (raw(doc(layers=[])), "no layers"), (raw(doc(layers=MODEL)), "no layers"),
    (raw(doc(layers=[MODEL] * 1001)), "no layers"),
])
def test_what_is_not_a_model_manifest_is_refused(body, why):
    with pytest.raises(RegistryError, match=why):
        parse_manifest(body)
