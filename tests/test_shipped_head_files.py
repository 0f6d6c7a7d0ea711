"""The shipped draft head's bytes are checked against its manifest's SHA-256s: a damaged installed copy (one byte
flipped, a truncated file, a missing file) is found at install and before loading, and reinstalled from the package
with a log line; a damaged package copy is a clear error; the manifest says how to rebuild the head."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
from pathlib import Path

import pytest

from app.backends.worker import _ModelCache
from inference.draft_head import damaged_files, load_head, read_head_manifest
from inference.model import ModelLoadError
from inference.models import default_head
from inference.models.default_head import default_head_dir, ensure_default_head, repair_default_head
from inference.models.errors import ModelImportError
from tools.draft_head import train

SHIPPED = default_head.SHIPPED_HEAD


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store of its own, with the shipped head installed."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    assert ensure_default_head() == default_head_dir()
    return default_head_dir()


def flip_byte(path: Path, offset: int) -> None:
    """Flip one bit of the byte at ``offset``, and date the file a second later, as any later write does (the
    hashes are remembered per size and modification time)."""
    before = path.stat()
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def truncate(path: Path) -> None:
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2)


def test_the_manifest_records_every_file_and_they_match():
    manifest = read_head_manifest(SHIPPED)
    assert set(manifest["sha256"]) == {"openvino_model.xml", "openvino_model.bin", "config.json"}
    assert damaged_files(SHIPPED, manifest) == []


@pytest.mark.parametrize("damage, name, why", [
    (lambda path: flip_byte(path, path.stat().st_size // 2), "openvino_model.bin", "its SHA-256 differs"),
    (truncate, "openvino_model.xml", "its SHA-256 differs"),
    (Path.unlink, "config.json", "missing"),
])
def test_a_damaged_installed_copy_is_found_and_reinstalled_with_a_log_line(store, damage, name, why, caplog):
    assert ensure_default_head() == store  # verified undamaged: hashed and remembered
    damage(store / name)
    assert damaged_files(store, read_head_manifest(store)) == [f"{name} ({why})"]
    with caplog.at_level(logging.WARNING, logger="inference.models.default_head"):
        assert ensure_default_head() == store
    assert f"is damaged: {name} ({why}): reinstalling it from the package" in caplog.text
    assert (store / name).read_bytes() == (SHIPPED / name).read_bytes()
    assert damaged_files(store, read_head_manifest(store)) == []


def test_loading_refuses_a_damaged_head_and_the_app_repairs_the_shipped_one_first(store, caplog):
    flip_byte(store / "openvino_model.bin", 1000)
    with pytest.raises(ModelLoadError, match=r"damaged: openvino_model\.bin \(its SHA-256 differs\); reinstall it"):
        load_head(store)
    with caplog.at_level(logging.WARNING, logger="inference.models.default_head"):
        head, loaded = _ModelCache().get(store, "CPU", None)  # the worker's loading
    assert loaded and head.folder == store and "reinstalling it from the package" in caplog.text
    assert (store / "openvino_model.bin").read_bytes() == (SHIPPED / "openvino_model.bin").read_bytes()


def test_repair_before_loading_leaves_other_heads_alone(store, tmp_path):
    other = tmp_path / "other-head"
    shutil.copytree(store, other)
    flip_byte(other / "openvino_model.bin", 1000)
    repair_default_head(other)
    assert damaged_files(other, read_head_manifest(other)) == ["openvino_model.bin (its SHA-256 differs)"]


def test_an_unchanged_file_is_not_hashed_again_in_a_process(store, monkeypatch):
    manifest = read_head_manifest(store)
    assert damaged_files(store, manifest) == []
    monkeypatch.setattr(Path, "open", lambda *args, **kwargs: pytest.fail("hashed again"))
    assert damaged_files(store, manifest) == []
    monkeypatch.undo()
    flip_byte(store / "config.json", 0)  # changed: hashed again
    assert damaged_files(store, manifest) == ["config.json (its SHA-256 differs)"]


@pytest.mark.parametrize("damage", [lambda path: flip_byte(path / "openvino_model.bin", 5000),
                                    lambda path: (path / "openvino_model.xml").unlink()])
def test_a_damaged_package_copy_is_a_clear_error(tmp_path, monkeypatch, damage):
    package = tmp_path / "package" / default_head.DEFAULT_HEAD_NAME
    shutil.copytree(SHIPPED, package)
    damage(package)
    monkeypatch.setattr(default_head, "SHIPPED_HEAD", package)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ModelImportError, match=r"the draft head shipped with SpecChat in .* is damaged: openvino_model"
                                               r"\.(bin \(its SHA-256 differs\)|xml \(missing\)); reinstall SpecChat"):
        ensure_default_head()
    assert not default_head_dir().exists()


def test_the_manifest_says_how_to_rebuild_the_head_from_the_repository():
    """Every stage is a command runnable from the repository root (no absolute path): the unfused head it started
    from (its data, two runs, its export into the folder the fused run starts from), the fused data and run, the
    export; the runs parse with train.py's own command line; the shards trained on are listed."""
    training = read_head_manifest(SHIPPED)["training"]
    commands = training["rebuild"]["commands"]
    assert "train_command" not in training
    assert not any(word.startswith("/") for command in commands for word in shlex.split(command))
    stages = [shlex.split(command)[2] for command in commands]
    assert stages == ["tools.draft_head." + stage for stage in
                      ("generate", "train", "train", "export", "generate", "train", "export")]
    first, second, fused = (train.parser().parse_args(shlex.split(commands[i])[3:]) for i in (1, 2, 5))
    assert (first.epochs, first.lr, first.init) == (2, 0.002, None)
    assert second.init == first.out / "head.pt" and (second.epochs, second.lr) == (3, 0.001)
    assert first.held_out_shards == second.held_out_shards == fused.held_out_shards == [0, 16, 32]
    assert commands[0].startswith(f"python -m tools.draft_head.generate --out {first.data} ")
    start_head = shlex.split(commands[3])[-1]
    assert commands[3].endswith(f"--checkpoint {second.out / 'head.pt'} --out {start_head}")
    assert fused.init_head == Path(start_head) and fused.draft_steps == 3 and fused.epochs == training["epochs"]
    assert commands[4].startswith(f"python -m tools.draft_head.generate --out {fused.data} ")
    assert "--layers 1 14" in commands[4]
    shipped_folder = SHIPPED.relative_to(SHIPPED.parents[3])  # relative to the repository root
    assert commands[-1].endswith(f"--checkpoint {fused.out / 'head.pt'} --out {shipped_folder}")
    assert training["train_shards"] == [index for index in range(50, 83) if index % 16 != 0]
    assert read_head_manifest(SHIPPED)["feature_layers"] == [1, 14]
