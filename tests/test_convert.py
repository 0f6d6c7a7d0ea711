"""Converting a tiny random transformers checkpoint at 4, 8 and 16 bits (hidden size 192, which the usual
group size 128 does not divide); the converted models load and generate in the engine.

The conversions need the conversion extra (torch, transformers, optimum-intel, nncf) and take about 45 s each
on 2 cores; they are marked slow (CI runs them).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from helpers import settings
from hub_server import HubServer
from tiny_checkpoints import write_tiny_checkpoint

from inference.models import convert
from inference.models import store as model_store
from inference.models.convert import ConversionExtraMissing, choose_group_size, convert_checkpoint
from inference.models.errors import ModelImportError, OperationCancelled
from inference.models.inspect import PairMismatchError, check_pair, describe_folder
from inference.models.progress import ProgressEvent

needs_extra = pytest.mark.skipif(not convert.conversion_available(), reason="needs the conversion extra: pip install 'specchat[convert]'")


def _config_only(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (dict(hidden_size=576, num_attention_heads=9, head_dim=64, intermediate_size=1536), 64),  # SmolLM2-135M
        (dict(hidden_size=4096, num_attention_heads=32, intermediate_size=11008), 128),  # Llama-2-7B
        (dict(hidden_size=96, num_attention_heads=3, head_dim=32, intermediate_size=160), 32),
        (dict(hidden_size=100, num_attention_heads=4, intermediate_size=300), -1),
    ],
)
def test_group_size_divides_every_compressed_layer(tmp_path, config, expected):
    size, reason = choose_group_size(_config_only(tmp_path / "ckpt", **config))
    assert size == expected
    if expected == 64:
        assert "128 does not divide 576" in reason
    if expected == -1:
        assert "per-channel" in reason


def test_group_size_from_safetensors_shapes(tmp_path):
    checkpoint = write_tiny_checkpoint(tmp_path / "ckpt")
    size, reason = choose_group_size(checkpoint)
    assert size == 64 and "128 does not divide 192" in reason
    channels = convert.compressed_input_channels(checkpoint)
    assert "model.embed_tokens.weight" not in channels
    assert channels["model.layers.0.mlp.down_proj.weight"] == 384


def test_missing_extra_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "missing_extra_modules", lambda: ["torch", "nncf"])
    with pytest.raises(ConversionExtraMissing, match=r"torch, nncf missing.*pip install 'specchat\[convert\]'"):
        convert_checkpoint(tmp_path, 4)


def test_not_a_checkpoint_is_refused(tmp_path):
    if not convert.conversion_available():
        pytest.skip("needs the conversion extra")
    with pytest.raises(ModelImportError, match="no config.json"):
        convert_checkpoint(tmp_path, 4)
    with pytest.raises(ValueError, match="bits must be one of 4, 8, 16"):
        convert_checkpoint(tmp_path, 3)


@pytest.fixture(scope="module")
def converted(tmp_path_factory, data_dir, int4_dir):
    """A data folder for this module with the tiny checkpoint converted at 4 and 16 bits, and at 8 bits
    through the hub (a transformers repository served on 127.0.0.1).

    (``int4_dir`` first, so the default model is built in the session's data folder, not in this module's.)"""
    if not convert.conversion_available():
        pytest.skip("needs the conversion extra: pip install 'specchat[convert]'")
    root = tmp_path_factory.mktemp("convert")
    checkpoint = write_tiny_checkpoint(root / "tiny-llama")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECCHAT_DATA_DIR", str(root / "data"))
    events: dict[int, list[ProgressEvent]] = {4: [], 8: [], 16: []}
    try:
        folders = {
            4: convert_checkpoint(checkpoint, 4, progress=events[4].append),
            16: convert_checkpoint(checkpoint, 16, progress=events[16].append),
        }
        from inference.models.hub import install_from_hub

        with HubServer({"test-org/tiny-llama": checkpoint}) as hub:
            folders[8] = install_from_hub("test-org/tiny-llama", bits=8, endpoint=hub.url, progress=events[8].append)
        yield {"checkpoint": checkpoint, "folders": folders, "events": events, "root": root}
    finally:
        patch.undo()


@pytest.mark.slow
@pytest.mark.parametrize("bits", [4, 8, 16])
def test_converted_model_loads_and_generates(converted, bits):
    from inference.engine import Engine
    from inference.model import load_model

    folder = converted["folders"][bits]
    manifest = model_store.read_manifest(folder).to_json()
    assert manifest["bits"] == bits
    assert manifest["rope_supported"] is True
    assert manifest["vocab_size"] == json.loads((converted["checkpoint"] / "config.json").read_text())["vocab_size"]
    types = manifest["weight_types"]
    if bits == 4:
        assert manifest["group_size"] == 64 and "128 does not divide 192" in manifest["group_size_reason"]
        assert types.get("u4", 0) > 0
        assert any("group size 64" in e.message for e in converted["events"][4])
    elif bits == 8:
        assert manifest["kind"] == "hub-convert" and manifest["source"].startswith("hf:test-org/tiny-llama@")
        assert types.get("u8", 0) > 0 and "u4" not in types
        assert any(e.stage == "download" for e in converted["events"][8])
    else:
        assert "u4" not in types and "u8" not in types and types.get("f16", 0) > 0
    assert [e.done for e in converted["events"][bits] if e.stage == "convert" and e.done is not None][-1] >= 3

    model = load_model(folder)
    prompt = model.encode(model.tokenizer.apply_chat_template([{"role": "user", "content": "Hello, world!"}], add_generation_prompt=True))
    stats = Engine(model).generate_text(prompt, settings(max_new_tokens=8, n_ctx=256, ignore_eos=True))
    assert stats.new_tokens == 8
    assert all(0 <= t < model.vocab_size for t in stats.token_ids)


@pytest.mark.slow
def test_converted_models_pair_with_each_other_not_with_the_default(converted, int4_dir):
    folders = converted["folders"]
    check_pair(folders[16], folders[4])
    with pytest.raises(PairMismatchError, match="vocabulary size differs"):
        check_pair(int4_dir, folders[4])


@pytest.mark.slow
def test_import_of_an_optimum_folder_without_tokenizer_irs_creates_them(converted, tmp_path, monkeypatch):
    from inference.models.importing import import_ir_folder

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(converted["root"] / "data"))
    source = converted["folders"][16]
    bare = tmp_path / "optimum-layout"
    shutil.copytree(source, bare, ignore=shutil.ignore_patterns("openvino_*tokenizer.*", model_store.MANIFEST_NAME))
    assert (bare / "tokenizer.json").is_file() and not (bare / "openvino_tokenizer.xml").exists()
    folder = import_ir_folder(bare, "re-tokenized")
    manifest = model_store.read_manifest(folder).to_json()
    assert manifest["original_layout"] == "optimum-intel"
    assert manifest["tokenizer_fingerprint"] == describe_folder(source)["tokenizer_fingerprint"]


@pytest.mark.slow
def test_cancelled_conversion_leaves_nothing(converted, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(converted["root"] / "data"))
    before = sorted(p.name for p in model_store.models_dir().iterdir())
    cancel = threading.Event()

    def on_progress(event: ProgressEvent) -> None:
        if event.stage == "convert":
            cancel.set()

    with pytest.raises(OperationCancelled):
        convert_checkpoint(converted["checkpoint"], 8, name="cancelled", progress=on_progress, cancel=cancel)
    assert sorted(p.name for p in model_store.models_dir().iterdir()) == before
