"""A hostile or crowded hub (tests/hub_server.py): metadata that would name paths outside the staging folder is
refused before anything is written, two downloads of one repository do not mix, and a disk that fills up
mid-download leaves the store clean with a clear message."""

from __future__ import annotations

import errno
import shutil
import threading
from pathlib import Path

import pytest
from hub_server import HubServer

from inference.models import hub as hub_download
from inference.models import store as model_store
from inference.models.errors import ModelImportError
from inference.models.hub import inspect_repo, install_from_hub
from inference.models.progress import ProgressEvent

REPO = "test-org/tiny-ov"
GGUF_REPO = "test-org/smol-gguf"
BIN = "openvino_model.bin"


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(folder))
    monkeypatch.delenv("SPECCHAT_DISK_QUOTA_BYTES", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return folder


@pytest.fixture
def gguf_repo(tmp_path) -> Path:
    """A repository with one small file named like a GGUF (the refusals come before it would be read)."""
    folder = tmp_path / "gguf-repo"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(b"GGUF" + bytes(20_000))
    return folder


def _resolves(hub: HubServer) -> list:
    return [r for r in hub.requests if "/resolve/" in r[1]]


def _store_is_clean() -> bool:
    root = model_store.models_dir()
    return not root.is_dir() or not [p for p in root.iterdir() if p.name.startswith(".partial-")]


@pytest.mark.parametrize("commit", ["0/../../../victim", "main", "../../../victim", "0123456789ABCDEF0123456789ABCDEF01234567"])
def test_a_commit_id_that_is_not_40_hex_digits_is_refused(data, gguf_repo, commit):
    victim = data / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    with HubServer({GGUF_REPO: gguf_repo}, commit=commit) as hub:
        with pytest.raises(ModelImportError, match="which is not a 40-hex-digit commit id"):
            install_from_hub(GGUF_REPO, endpoint=hub.url)
        assert _resolves(hub) == [], "nothing was downloaded"
    assert (victim / "precious.txt").read_text() == "keep me"
    assert model_store.list_models() == [] and _store_is_clean()


@pytest.mark.parametrize(
    "name",
    ["../../../../escaped.gguf", "sub/../../../../../escaped.gguf", "{tmp}/escaped.gguf", "..\\escaped.gguf",
     "C:\\escaped.gguf", "C:escaped.gguf", "./escaped.gguf", "sub//escaped.gguf"],
)  # fmt: skip
def test_a_file_name_that_is_not_a_plain_relative_path_is_refused(data, gguf_repo, tmp_path, name):
    name = name.replace("{tmp}", str(tmp_path))
    (gguf_repo / "model.gguf").rename(gguf_repo / "real.bin")  # served only under the hostile name
    with HubServer({GGUF_REPO: gguf_repo}) as hub:
        hub.aliases[name] = "real.bin"
        with pytest.raises(ModelImportError, match="which is not a plain relative path") as caught:
            install_from_hub(GGUF_REPO, endpoint=hub.url, gguf_file=name)
        assert _resolves(hub) == []
    assert repr(name) in str(caught.value)
    assert not list(tmp_path.rglob("escaped.gguf*")), "nothing was written under the hostile name"
    assert model_store.list_models() == [] and _store_is_clean()


def test_a_path_that_resolves_outside_the_staging_folder_is_refused(data, gguf_repo, tmp_path):
    (gguf_repo / "sub").mkdir()
    (gguf_repo / "model.gguf").rename(gguf_repo / "sub" / "model.gguf")
    outside = tmp_path / "outside"
    outside.mkdir()
    with HubServer({GGUF_REPO: gguf_repo}) as hub:
        stage = hub_download.staging_dir(inspect_repo(GGUF_REPO, endpoint=hub.url))
        stage.mkdir(parents=True)
        (stage / "sub").symlink_to(outside, target_is_directory=True)  # e.g. left by another program
        with pytest.raises(ModelImportError, match="outside"):
            install_from_hub(GGUF_REPO, endpoint=hub.url)
        assert _resolves(hub) == []
    assert list(outside.iterdir()) == []
    assert model_store.list_models() == [] and _store_is_clean()


@pytest.fixture(scope="module")
def ov_repo(tmp_path_factory, tiny_ir) -> Path:
    """A pre-converted OpenVINO repository of a tiny random model."""
    folder = tmp_path_factory.mktemp("hub") / "repo"
    shutil.copytree(tiny_ir["same"], folder)
    return folder


def test_two_downloads_of_the_same_repository_do_not_mix(data, ov_repo):
    results: dict[int, object] = {}
    messages: dict[int, list[str]] = {0: [], 1: []}
    with HubServer({REPO: ov_repo}) as hub:
        hub.throttle_s = 0.002

        def download(index: int) -> None:
            try:
                results[index] = install_from_hub(
                    REPO, endpoint=hub.url, replace=True, progress=lambda event: messages[index].append(event.message)
                )
            except Exception as error:  # noqa: BLE001 - reported by the assertion below
                results[index] = error

        threads = [threading.Thread(target=download, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    folder = model_store.models_dir() / "tiny-ov"
    assert results == {0: folder, 1: folder}, results
    assert sum(any("Waiting for another download" in m for m in lines) for lines in messages.values()) == 1
    for path in ov_repo.iterdir():
        assert (folder / path.name).read_bytes() == path.read_bytes(), path.name
    assert not list(model_store.downloads_dir().rglob("*.part"))
    assert not (model_store.downloads_dir() / "hub").exists() or not any((model_store.downloads_dir() / "hub").iterdir())
    assert _store_is_clean()


def test_a_disk_that_fills_up_during_a_download_leaves_the_store_clean(data, ov_repo, monkeypatch):
    size = (ov_repo / BIN).stat().st_size
    limit = size // 2
    real_open = open

    class FullDisk:
        """A file whose writes fail with ENOSPC once ``limit`` bytes are in it."""

        def __init__(self, path, mode):
            self.file = real_open(path, mode)

        def write(self, chunk: bytes) -> int:
            if self.file.tell() + len(chunk) > limit:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.file.write(chunk)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    def full_disk_open(path, mode="r", *args, **kwargs):
        return FullDisk(path, mode) if str(path).endswith(f"{BIN}.part") else real_open(path, mode, *args, **kwargs)

    with HubServer({REPO: ov_repo}) as hub:
        monkeypatch.setattr(hub_download, "open", full_disk_open, raising=False)
        with pytest.raises(ModelImportError, match="the disk is full") as caught:
            install_from_hub(REPO, endpoint=hub.url)
        message = str(caught.value)
        assert "nothing was added to the model store" in message and "SPECCHAT_DATA_DIR" in message
        assert model_store.list_models() == [] and _store_is_clean()
        parts = list(model_store.downloads_dir().rglob(f"{BIN}.part"))
        assert len(parts) == 1 and 0 < parts[0].stat().st_size <= limit, "what was written is kept, not corrupt"
        # space freed: the same download resumes and installs a model identical to the repository
        monkeypatch.undo()
        monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data))
        events: list[ProgressEvent] = []
        folder = install_from_hub(REPO, endpoint=hub.url, progress=events.append)
    assert any("Resuming" in e.message for e in events)
    assert (folder / BIN).read_bytes() == (ov_repo / BIN).read_bytes()


def test_a_disk_that_fills_up_while_installing_leaves_no_half_model(data, ov_repo, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with HubServer({REPO: ov_repo}) as hub:
        monkeypatch.setattr(model_store, "write_manifest", full_disk)  # the last write of a build
        with pytest.raises(ModelImportError, match=r"the disk is full \(installing test-org/tiny-ov"):
            install_from_hub(REPO, endpoint=hub.url)
    assert model_store.list_models() == [] and not (model_store.models_dir() / "tiny-ov").exists()
    assert _store_is_clean()
    kept = list(model_store.downloads_dir().rglob(BIN))
    assert len(kept) == 1 and kept[0].read_bytes() == (ov_repo / BIN).read_bytes(), "the verified download is kept"


@pytest.mark.parametrize("answer", [b'{"object": "list", "data": []}', b"[1, 2]", b'{"id": 3, "siblings": 7}'])
def test_json_that_is_no_repository_metadata_is_one_clear_refusal(data, answer):
    """Newcomer trial: `models download` against a server that answers JSON of another kind (an OpenAI server, a
    list) printed huggingface_hub's traceback (KeyError: 'id'; 'list' object has no attribute 'get')."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            # the repository's metadata only: huggingface_hub also fetches {endpoint}/api/agent-harnesses and keeps
            # what it got for a day in HF_HOME, so an answer there would reach every later hub call
            body = answer if self.path.startswith("/api/models/") else b"{}"
            self.send_response(200 if body is answer else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ModelImportError, match="is not a repository's metadata|did not say which commit") as refused:
            inspect_repo(GGUF_REPO, endpoint=f"http://127.0.0.1:{server.server_address[1]}")
        assert "\n" not in str(refused.value)  # one line
    finally:
        server.shutdown()
        server.server_close()
    assert model_store.list_models() == [] and _store_is_clean()


def test_a_download_asks_the_hub_nothing_but_the_repository(data, gguf_repo, tmp_path):
    """With huggingface_hub's telemetry on, a metadata request first fetched {endpoint}/api/agent-harnesses and kept
    the answer in HF_HOME for a day (a JSON list there broke every later download: a fresh clone's suite lost 26
    hub tests to it). SpecChat turns the telemetry off: in a fresh process, only the repository is asked for."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_DISABLE_TELEMETRY"}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    with HubServer({GGUF_REPO: gguf_repo}) as hub:
        env["HF_ENDPOINT"] = hub.url  # (huggingface_hub asks its own endpoint setting for the registry)
        script = f"from inference.models.hub import inspect_repo; print(inspect_repo({GGUF_REPO!r}).revision)"
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                                cwd=Path(__file__).resolve().parents[1])
        assert result.returncode == 0, result.stderr
        assert [path for _, path, _ in hub.requests if not path.startswith(f"/api/models/{GGUF_REPO}")] == []
    assert not (tmp_path / "hf-home" / ".agent_harnesses.json").exists()
