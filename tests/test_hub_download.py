"""Downloads from a Hugging Face style hub served on 127.0.0.1 (tests/hub_server.py): full, interrupted and
resumed, cancelled, corrupted, and refused for lack of disk space."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pytest
from hub_server import HubServer

from inference.models import convert
from inference.models import hub as hub_download
from inference.models import store as model_store
from inference.models.errors import ModelImportError, OperationCancelled
from inference.models.hub import inspect_repo, install_from_hub
from inference.models.inspect import describe_folder
from inference.models.progress import ProgressEvent

REPO = "test-org/tiny-ov"
BIN = "openvino_model.bin"


@pytest.fixture(scope="module")
def ov_repo(tmp_path_factory, tiny_ir) -> Path:
    """A pre-converted OpenVINO repository (openvino-genai layout) of a tiny random model, with a README."""
    folder = tmp_path_factory.mktemp("hub") / "repo"
    shutil.copytree(tiny_ir["same"], folder)
    (folder / "README.md").write_text("# tiny\n")
    return folder


@pytest.fixture
def hub(ov_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SPECCHAT_DISK_QUOTA_BYTES", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with HubServer({REPO: ov_repo}) as server:
        yield server


def _store_is_clean() -> bool:
    root = model_store.models_dir()
    return not root.is_dir() or not [p for p in root.iterdir() if p.name.startswith(".partial-")]


def _resolves(hub: HubServer, name: str | None = None) -> list[tuple[str, str, str | None]]:
    return [r for r in hub.requests if "/resolve/" in r[1] and (name is None or r[1].endswith("/" + name))]


def test_inspect_repo_lists_files_with_hashes(hub, ov_repo):
    repo = inspect_repo(REPO, endpoint=hub.url)
    assert repo.kind == "openvino" and repo.revision == hub.commit
    files = {f.path: f for f in repo.files}
    assert files[BIN].size == (ov_repo / BIN).stat().st_size and files[BIN].sha256
    assert files["config.json"].blob_id and files["config.json"].sha256 is None
    assert [f.path for f in hub_download.select_files(repo)].count("README.md") == 0


def test_full_download(hub, ov_repo):
    events: list[ProgressEvent] = []
    folder = install_from_hub(REPO, endpoint=hub.url, progress=events.append)
    assert folder == model_store.models_dir() / "tiny-ov"
    manifest = model_store.read_manifest(folder).to_json()
    assert manifest["kind"] == "hub-download"
    assert manifest["source"] == f"hf:{REPO}@{hub.commit}"
    assert manifest["revision"] == hub.commit
    assert manifest["tokenizer_fingerprint"] == describe_folder(ov_repo)["tokenizer_fingerprint"]
    for name in ("openvino_model.xml", BIN, "openvino_tokenizer.xml", "openvino_detokenizer.bin", "config.json"):
        assert (folder / name).read_bytes() == (ov_repo / name).read_bytes()
    assert not (folder / "README.md").exists()
    fractions = [e.fraction for e in events if e.stage == "download" and e.fraction is not None]
    assert fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert f"Downloaded and verified {len(hub_download.select_files(inspect_repo(REPO, endpoint=hub.url)))} files" in [
        e.message for e in events
    ]
    assert not (model_store.data_dir() / "downloads" / "hub").exists() or not any((model_store.data_dir() / "downloads" / "hub").iterdir())
    assert _store_is_clean()
    from inference.model import load_model

    assert load_model(folder).vocab_size == 49152


def test_interrupted_download_resumes(hub, ov_repo):
    size = (ov_repo / BIN).stat().st_size
    cut = size // 3
    hub.cut[BIN] = cut
    with pytest.raises(ModelImportError, match="interrupted.*run the same download again to resume") as caught:
        install_from_hub(REPO, endpoint=hub.url)
    assert f"{cut / 2**20:.1f} MiB of it are kept" in str(caught.value), "binary units say MiB, as the progress does"
    assert not (model_store.models_dir() / "tiny-ov").exists() and _store_is_clean()
    parts = list((model_store.data_dir() / "downloads" / "hub").rglob(f"{BIN}.part"))
    assert len(parts) == 1 and parts[0].stat().st_size == cut
    first_round = len(_resolves(hub, BIN))

    events: list[ProgressEvent] = []
    folder = install_from_hub(REPO, endpoint=hub.url, progress=events.append)
    resumed = _resolves(hub, BIN)[first_round:]
    assert [r[2] for r in resumed if r[0] == "GET"] == [f"bytes={cut}-"]
    assert hub.bytes_sent[BIN] == size, "only the missing bytes were fetched again"
    resuming = [e for e in events if e.message.startswith("Resuming")]
    assert [e.message for e in resuming] == [
        f"Resuming: {e.done / 2**20:.1f} MiB of {e.total / 2**20:.1f} MiB already downloaded" for e in resuming
    ] and len(resuming) == 1 and resuming[0].done >= cut, "binary units say MiB, as the progress does"
    assert (folder / BIN).read_bytes() == (ov_repo / BIN).read_bytes()
    assert not parts[0].exists()


def test_cancelled_download_leaves_nothing(hub):
    hub.throttle_s = 0.01
    cancel = threading.Event()

    def on_progress(event: ProgressEvent) -> None:
        if event.stage == "download" and event.message.startswith(f"Downloading {BIN}") and event.done:
            cancel.set()

    with pytest.raises(OperationCancelled):
        install_from_hub(REPO, endpoint=hub.url, progress=on_progress, cancel=cancel)
    assert model_store.list_models() == []
    assert not (model_store.models_dir() / "tiny-ov").exists() and _store_is_clean()
    hub_dir = model_store.data_dir() / "downloads" / "hub"
    assert not hub_dir.exists() or not any(hub_dir.iterdir()), "the partial download is deleted"


def test_corrupted_file_is_refused(hub):
    hub.corrupt.add(BIN)
    with pytest.raises(ModelImportError, match=f"{BIN} from {REPO} is corrupted.*SHA-256"):
        install_from_hub(REPO, endpoint=hub.url)
    assert model_store.list_models() == [] and _store_is_clean()
    assert not list((model_store.data_dir() / "downloads" / "hub").rglob(BIN)), "the corrupted file is deleted"
    # A small (non-LFS) file is checked against its git blob id (start afresh: the verified files are kept).
    shutil.rmtree(model_store.data_dir() / "downloads" / "hub")
    hub.corrupt = {"config.json"}
    with pytest.raises(ModelImportError, match="config.json from .* is corrupted.*git blob id"):
        install_from_hub(REPO, endpoint=hub.url)
    assert model_store.list_models() == []


def test_full_disk_is_refused_before_starting(hub, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DISK_QUOTA_BYTES", str(1_000_000))
    with pytest.raises(ModelImportError, match="not enough disk space.*SPECCHAT_DATA_DIR") as caught:
        install_from_hub(REPO, endpoint=hub.url)
    message = str(caught.value)
    assert re.search(rf"downloading {REPO} \(\d+ MiB\).*needs about \d+ MiB, and only 1 MiB is free", message), message
    assert " MB" not in message and " GB" not in message, message
    assert _resolves(hub) == [], "no file was requested"
    assert model_store.list_models() == [] and _store_is_clean()


def test_unknown_repository_and_unreachable_hub(hub):
    with pytest.raises(ModelImportError, match="no repository test-org/missing"):
        install_from_hub("test-org/missing", endpoint=hub.url)
    with pytest.raises(ModelImportError, match="not a Hugging Face repository id"):
        install_from_hub("no-slash", endpoint=hub.url)
    with pytest.raises(ModelImportError, match="cannot reach the model hub"):
        install_from_hub(REPO, endpoint="http://127.0.0.1:9")


def test_checkpoint_without_the_conversion_extra_is_refused_before_downloading(tmp_path, monkeypatch, hub):
    from tiny_checkpoints import write_tiny_checkpoint

    checkpoint = write_tiny_checkpoint(tmp_path / "ckpt")
    with HubServer({"test-org/tiny-llama": checkpoint}) as plain:
        monkeypatch.setattr(convert, "missing_extra_modules", lambda: ["torch", "optimum-intel"])
        with pytest.raises(convert.ConversionExtraMissing, match=r"pip install 'specchat\[convert\]'"):
            install_from_hub("test-org/tiny-llama", endpoint=plain.url, bits=4)
        assert _resolves(plain) == []
    assert model_store.list_models() == []


def test_gguf_repository_downloads_one_file_and_imports_it(tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    repo = tmp_path / "gguf-repo"
    repo.mkdir()
    (repo / tiny_ir["gguf"].name).symlink_to(tiny_ir["gguf"])
    (repo / "README.md").write_text("# SmolLM2 GGUF\n")
    with HubServer({"test-org/smol-gguf": repo}) as hub:
        assert inspect_repo("test-org/smol-gguf", endpoint=hub.url).kind == "gguf"
        events: list[ProgressEvent] = []
        folder = install_from_hub("test-org/smol-gguf", endpoint=hub.url, progress=events.append)
    assert "Downloaded and verified 1 file" in [e.message for e in events]  # trial: "1 files"
    manifest = model_store.read_manifest(folder).to_json()
    # named after the repository, as a checkpoint repository's download is, LM Studio lists it and ollama's
    # hf.co/ORG/NAME names it (a newcomer's --model smol-gguf found nothing: it was named after its file)
    assert folder.name == "smol-gguf"
    assert manifest["kind"] == "hub-download" and manifest["source"].startswith("hf:test-org/smol-gguf@")
    assert manifest["bits"] == 4 and manifest["rope_supported"] is True
    assert not list(folder.glob("*.gguf"))


def test_a_download_that_would_take_the_built_in_models_name_is_named_hub(ov_repo, tmp_path, monkeypatch):
    """The default model's own checkpoint (HuggingFaceTB/SmolLM2-135M-Instruct, the catalogue's draft of SmolLM2
    1.7B) converted at 4 bits would be named SmolLM2-135M-Instruct-int4, the built-in model's name, which the store
    refuses to build over: unnamed downloads of it take ``-hub`` after the repository's name; others keep theirs."""
    assert hub_download.download_name("SmolLM2-135M-Instruct", "-int4") == "SmolLM2-135M-Instruct-hub-int4"
    assert hub_download.download_name("SmolLM2-135M-Instruct", "-int8") == "SmolLM2-135M-Instruct-hub-int8"
    assert hub_download.download_name("SmolLM2-1.7B-Instruct", "-int4") == "SmolLM2-1.7B-Instruct-int4"
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with HubServer({"OpenVINO/SmolLM2-135M-Instruct-head": ov_repo}) as server:
        folder = install_from_hub("OpenVINO/SmolLM2-135M-Instruct-head", endpoint=server.url)
    assert folder.name == "SmolLM2-135M-Instruct-head-hub"
    assert model_store.read_manifest(folder).to_json()["repo_id"] == "OpenVINO/SmolLM2-135M-Instruct-head"


def test_a_name_already_installed_is_refused_before_downloading(hub):
    """Newcomer trial: downloading a repository whose model name was taken (downloaded before, or imported under
    that name) fetched every file first and only then said "already installed", a wasted download of gigabytes for
    a real model. The name is checked once the repository is looked up, before any file is requested."""
    (model_store.models_dir() / "tiny-ov").mkdir(parents=True)
    with pytest.raises(ModelImportError, match=r"a model named 'tiny-ov' is already installed"):
        install_from_hub(REPO, endpoint=hub.url)
    assert _resolves(hub) == []
    with pytest.raises(ModelImportError, match=r"SpecChat's own SmolLM2-135M-Instruct"):
        install_from_hub(REPO, endpoint=hub.url, name="SmolLM2-135M-Instruct-int8")
    assert _resolves(hub) == []


def test_a_gguf_chosen_among_several_is_named_after_the_repository(tiny_ir, tmp_path, monkeypatch):
    """Newcomer trial: `models download me/tiny-gguf --file tiny.F16.gguf` installed ``tiny.F16``, so ``--model
    tiny-gguf`` found no model. The file chosen is named after its repository; a second file of the same repository
    is refused before any byte is downloaded, with the advice to name it."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    repo = tmp_path / "gguf-repo"
    repo.mkdir()
    for name in ("tiny.F16.gguf", "tiny.Q8_0.gguf"):
        (repo / name).symlink_to(tiny_ir["gguf"])
    with HubServer({"me/tiny-gguf": repo}) as hub:
        folder = install_from_hub("me/tiny-gguf", endpoint=hub.url, gguf_file="tiny.F16.gguf")
        assert folder.name == "tiny-gguf" and model_store.find_model("tiny-gguf") == folder
        with pytest.raises(ModelImportError, match="a model named 'tiny-gguf' is already installed") as caught:
            install_from_hub("me/tiny-gguf", endpoint=hub.url, gguf_file="tiny.Q8_0.gguf")
        assert "--name" in str(caught.value)
    assert [m.store_name for m in model_store.installed_models()] == ["tiny-gguf"]
