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
    """Every stage is a command runnable from the repository root (no absolute path), and the stages form a chain:
    each training run reads a data folder an earlier stage made and starts from nothing, an earlier run's checkpoint
    (``--init``) or a head an earlier export wrote (``--init-head``); the last stage exports the last run into the
    shipped folder. The runs parse with train.py's own command line, hold out shards 0, 16 and 32 and the last one
    ran the manifest's epochs; the shards trained on are listed, none of them held out."""
    manifest = read_head_manifest(SHIPPED)
    training = manifest["training"]
    commands = [shlex.split(command) for command in training["rebuild"]["commands"]]
    assert "train_command" not in training
    assert not any(word.startswith("/") for words in commands for word in words)
    data_folders, checkpoints, heads, runs = set(), set(), set(), []
    for words in commands:
        stage, options = words[2].removeprefix("tools.draft_head."), words[3:]
        value = {options[i]: options[i + 1] for i in range(len(options) - 1) if options[i].startswith("--")}
        if stage == "generate":
            data_folders.add(Path(value["--out"]))
        elif stage == "train":
            run = train.parser().parse_args(options)
            assert run.data in data_folders and run.held_out_shards == [0, 16, 32]
            assert run.init is None or run.init in checkpoints, run.init
            assert run.init_head is None or run.init_head in heads, run.init_head
            checkpoints.add(run.out / "head.pt")
            runs.append(run)
        else:
            assert stage == "export" and Path(value["--checkpoint"]) in checkpoints
            heads.add(Path(value["--out"]))
    shipped_folder = SHIPPED.relative_to(SHIPPED.parents[3])  # relative to the repository root
    assert commands[-1][2] == "tools.draft_head.export" and Path(commands[-1][-1]) == shipped_folder
    assert Path(commands[-1][commands[-1].index("--checkpoint") + 1]) == runs[-1].out / "head.pt"
    assert runs[-1].epochs == training["epochs"] and runs[-1].draft_steps == 3
    assert training["train_shards"] and not any(index % 16 == 0 for index in training["train_shards"])
    assert manifest["feature_layers"] == [1, 14]
