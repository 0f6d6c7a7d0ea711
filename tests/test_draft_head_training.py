"""The head's training script on a tiny target's data, in ``generate.py``'s folder format: ``--init`` fine-tunes
from another run's weights and draft vocabulary, and the export records where a head started from."""

from __future__ import annotations

import json
import shlex

import numpy as np
import openvino as ov
import pytest
import torch
from tiny_heads import tiny_training_sequences

from inference.draft_head import load_head
from inference.model import load_model
from inference.precision import PrecisionSettings
from inference.sampling import warp
from inference.settings import SamplingSettings
from tools.draft_head import acceptance_check, export, target, train
from tools.draft_head.generate import shard_path
from tools.draft_head.head import DraftHead, HeadConfig


@pytest.fixture(scope="module")
def data_folder(tiny_ir, tmp_path_factory):
    """Shards 0 and 16 (held out) and shard 1 (training) of the tiny target's sampled replies, with a manifest."""
    target = load_model(tiny_ir["same"], "CPU", PrecisionSettings())
    sequences = tiny_training_sequences(target, tiny_ir["same"], target.encode("the cat sat on the mat and the"),
                                        SamplingSettings(temperature=1.0), replies=24)
    folder = tmp_path_factory.mktemp("draft-data")
    for index, part in ((0, sequences[:8]), (16, sequences[8:12]), (1, sequences[12:])):
        lengths = [len(tokens) for tokens, *_ in part]
        np.savez(shard_path(folder, index), tokens=np.concatenate([p[0] for p in part]),
                 offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                 prompt_lengths=np.asarray([p[1] for p in part], dtype=np.int32),
                 greedy=np.asarray([i % 2 == 0 for i in range(len(part))]),
                 hidden=np.concatenate([p[2] for p in part]), lse=np.concatenate([p[3] for p in part]),
                 argmax=np.concatenate([p[4] for p in part]))
    (folder / "manifest.json").write_text(json.dumps({
        "command": "tests", "seed": 0, "model": str(tiny_ir["same"]), "model_sha256": "tiny", "versions": {},
        "shards": [{"index": 0}, {"index": 1}, {"index": 16}]}))
    return folder


def _train(data, out, *extra: str) -> dict:
    assert train.main(["--data", str(data), "--out", str(out), "--epochs", "1", "--vocab", "24", "--batch-tokens",
                       "256", "--device", "cpu", "--precision", "f32", *extra]) == 0
    return torch.load(out / "head.pt", map_location="cpu", weights_only=False)


def test_held_out_shards_chosen_by_index_keep_an_evaluation_comparable_as_the_data_grows(data_folder):
    every = train.Shards(data_folder, held_out=True)
    first = train.Shards(data_folder, held_out=True, only=[0])
    assert every.shards == [0, 16] and first.shards == [0]
    with np.load(shard_path(data_folder, 0)) as shard:
        replies = int(shard["offsets"][-1] - shard["prompt_lengths"].sum())
    assert first.reply_tokens == replies < every.reply_tokens
    assert train.Shards(data_folder, held_out=False, only=[0]).shards == []  # never a training shard


def test_init_starts_from_another_runs_weights_and_vocabulary(data_folder, tmp_path):
    first = _train(data_folder, tmp_path / "first")
    # learning rate 0: a run's weights stay where it started
    fine_tuned = _train(data_folder, tmp_path / "fine-tuned", "--lr", "0", "--init", str(tmp_path / "first" / "head.pt"))
    fresh = _train(data_folder, tmp_path / "fresh", "--lr", "0", "--seed", "0")
    assert np.array_equal(fine_tuned["vocab"], first["vocab"])
    for name, weight in first["head"].items():
        assert torch.equal(fine_tuned["head"][name], weight), name
    trained = [name for name, weight in first["head"].items() if not torch.equal(fresh["head"][name], weight)]
    assert trained, "the first run changed no weight: the comparison above would prove nothing"
    assert fine_tuned["started_from"]["checkpoint"] == str(tmp_path / "first" / "head.pt")
    assert fine_tuned["started_from"]["last_epoch"]["train_reply_tokens"] == first["history"][-1]["train_reply_tokens"]
    assert first["started_from"] is None


def test_the_exported_manifest_says_where_training_started_and_how_to_rebuild_it(data_folder, tmp_path):
    """``training.rebuild`` holds every stage as a shell command (data, both runs with their real options, the
    export), which train.py's own parser reads back to the arguments the runs had; the shards trained on are listed."""
    _train(data_folder, tmp_path / "first", "--held-out-shards", "0", "16")
    _train(data_folder, tmp_path / "fine-tuned", "--init", str(tmp_path / "first" / "head.pt"))
    assert export.main(["--checkpoint", str(tmp_path / "fine-tuned" / "head.pt"), "--out", str(tmp_path / "head")]) == 0
    training = json.loads((tmp_path / "head" / "draft_head.json").read_text())["training"]
    data, first, second, exported = training["rebuild"]["commands"]
    assert data == "tests" and "train_command" not in training
    assert exported == shlex.join(["python", "-m", "tools.draft_head.export", "--checkpoint",
                                   str(tmp_path / "fine-tuned" / "head.pt"), "--out", str(tmp_path / "head")])
    parsed = [train.parser().parse_args(shlex.split(command)[3:]) for command in (first, second)]
    assert parsed[0].held_out_shards == [0, 16] and parsed[0].init is None and parsed[0].out == tmp_path / "first"
    assert parsed[1].init == tmp_path / "first" / "head.pt" and parsed[1].held_out_shards is None
    assert parsed[1].epochs == 1 and not parsed[1].resume
    assert training["train_shards"] == [1]
    assert training["started_from"]["checkpoint"] == str(tmp_path / "first" / "head.pt")


def test_rebuild_commands_name_paths_inside_the_repository_relative_to_its_root():
    inside = export.REPO / "build" / "draft_head" / "data"
    assert export.repo_relative(str(inside)) == "build/draft_head/data"
    assert export.repo_relative("/elsewhere/data") == "/elsewhere/data" and export.repo_relative("cpu") == "cpu"
    command = export.train_command({"data": str(inside), "epochs": "3", "held_out_shards": "[0, 16, 32]",
                                    "train_tokens": "None", "resume": "False", "init": "None", "precision": "bf16"})
    assert command == ("python -m tools.draft_head.train --data build/draft_head/data --epochs 3 "
                       "--held-out-shards 0 16 32 --precision bf16")


def test_a_run_from_an_exported_head_is_rebuilt_after_that_head_s_own_stages(tmp_path):
    """``--init-head`` reads a head folder: its recorded stages come first, its export writing to that folder, so the
    run that follows finds it; a head without recorded stages cannot be rebuilt and says so."""
    start = export.REPO / "build" / "draft_head" / "start-head"
    start_manifest = {"training": {"rebuild": {"commands": [
        "python -m tools.draft_head.generate --out build/draft_head/data --shards 50",
        "python -m tools.draft_head.train --data build/draft_head/data --out build/draft_head/runs/a",
        "python -m tools.draft_head.export --checkpoint build/draft_head/runs/a/head.pt --out shipped/elsewhere"]}}}
    folder = tmp_path / "start-head"
    folder.mkdir()
    (folder / "draft_head.json").write_text(json.dumps(start_manifest))
    state = {"args": {"data": str(export.REPO / "build" / "draft_head" / "fused"), "init_head": str(start)},
             "data_manifest": {"command": "python -m tools.draft_head.generate --out build/draft_head/fused --only 0 50"},
             "started_from": {"head": str(folder)}}
    commands = export.rebuild_commands(state, export.REPO / "build" / "run" / "head.pt", tmp_path / "out")
    assert commands[:2] == start_manifest["training"]["rebuild"]["commands"][:2]
    assert commands[2].endswith(f"--checkpoint build/draft_head/runs/a/head.pt --out {folder}")
    assert commands[3] == state["data_manifest"]["command"]
    assert commands[4] == ("python -m tools.draft_head.train --data build/draft_head/fused "
                           "--init-head build/draft_head/start-head")
    assert commands[5] == f"python -m tools.draft_head.export --checkpoint build/run/head.pt --out {tmp_path / 'out'}"
    (folder / "draft_head.json").write_text(json.dumps({"training": {}}))
    with pytest.raises(ValueError, match="records no rebuild commands"):
        export.rebuild_commands(state, tmp_path / "head.pt", tmp_path / "out")


def test_training_warps_as_the_engine_does_also_where_the_nucleus_is_wider_than_its_first_search():
    logits = np.random.default_rng(0).normal(0, 0.1, (3, 3000)).astype(np.float32)  # nearly flat
    expected = warp(logits, SamplingSettings(temperature=0.7, top_p=0.9))
    warped = train.warp(torch.from_numpy(logits), 0.7, 0.9).numpy()
    assert ((warped > 0).sum(-1) > 2000).all()  # far more than the 512 tokens searched first
    np.testing.assert_allclose(warped, expected, atol=1e-6)


def test_the_acceptance_check_of_an_exported_head_agrees_with_training_s_own_evaluation(data_folder, tiny_ir, tmp_path):
    """The check runs the exported IR position by position as the engine does (second drafts on a masked cache);
    ``train.evaluate`` runs the torch head on whole sequences: on the same held-out replies they must agree.

    What is asserted is agreement on one head, not its quality: 60 steps leave its acceptance strictly between 0
    and 1 as 300 did (60 s -> 27 s quiet on a Zen 5). Planted: the check comparing a first draft with the target's
    token at its own position instead of the next fails it at 60 steps as at 300."""
    # the whole tiny vocabulary (its argmax tokens are rarely among the 24 most frequent), steps enough to learn some
    state = _train(data_folder, tmp_path / "run", "--vocab", "100000", "--min-steps", "60")
    export.write_head_folder(tmp_path / "head", state, tiny_ir["same"], {}, int8=False)  # float32: same numbers
    head = load_head(tmp_path / "head")
    f32 = ov.Core().compile_model(head.ir_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})  # as torch computes
    checked = acceptance_check.check_shard(f32.create_infer_request(), head.vocab, shard_path(data_folder, 0),
                                           second_every=1)
    torch_head = DraftHead(HeadConfig(**state["config"]), torch.zeros(state["config"]["vocab"], state["config"]["hidden"]))
    torch_head.load_state_dict(state["head"])
    table = torch.from_numpy(target.target_table(tiny_ir["same"]))
    vocab = np.asarray(state["vocab"])
    to_draft = train.draft_index(vocab, table.shape[0])
    evaluated = train.evaluate(torch_head, train.Shards(data_folder, held_out=True, only=[0]), torch.from_numpy(vocab),
                               table, to_draft, "cpu")
    assert checked["positions"] > 20 and checked["second_samples"] > 0
    assert 0 < checked["accept_1"] < 1  # neither trivially right nor wrong: the comparison can fail
    # rounding (OpenVINO against torch) may flip one near-tie, never more
    assert checked["accept_1"] == pytest.approx(evaluated["greedy_accept_1"], abs=1.01 / checked["positions"])
    assert checked["accept_2_given_1"] == pytest.approx(evaluated["greedy_accept_2_given_1"],
                                                        abs=1.01 / checked["second_samples"])
    sampled = acceptance_check.sampled_acceptance(f32.create_infer_request(), head.vocab, shard_path(data_folder, 0),
                                                  table.numpy())
    app_warp = f"{acceptance_check.DRAFT_WARPS[0][0]}/{acceptance_check.DRAFT_WARPS[0][1]}"
    assert sampled["positions"] > 20 and 0.05 < sampled["accept"][app_warp] < 0.95
    # the same sum of min(p, q) over the same positions; f32 rounding moves it far less than a position's weight
    assert sampled["accept"][app_warp] == pytest.approx(evaluated["sampled_accept_1"], abs=0.1 / sampled["positions"])
    # a certain draft is accepted with the target's probability of it: a probability, neither 0 nor certain
    assert 0 < sampled["certain"] < 1
