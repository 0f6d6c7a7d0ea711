"""The fused draft head (issue 34, item 3): the target's layer outputs found in its IR, the training-time test over
three drafting steps, a head read back from its IR, and streamed training that resumes to the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
import torch
import torch.nn.functional as F
from tiny_heads import tiny_head_state, tiny_training_sequences

from inference.draft_head import load_head
from inference.layer_features import LAYER_FEATURES, add_layer_features, layer_outputs
from inference.model import lm_head, load_model
from inference.precision import PrecisionSettings
from inference.settings import SamplingSettings
from tools.draft_head import acceptance_check, export, import_ir, train
from tools.draft_head.export import write_head_folder
from tools.draft_head.generate import shard_path
from tools.draft_head.head import DraftHead, HeadConfig


def test_layer_outputs_are_the_residual_stream_the_final_norm_reads(tiny_ir):
    model = ov.Core().read_model(tiny_ir["same"] / "openvino_model.xml")  # one decoder layer
    with pytest.raises(ValueError, match="out of range"):
        layer_outputs(model, [1])
    hidden = lm_head(model).input_value(0)
    model.add_outputs([hidden])
    add_layer_features(model, [0])
    request = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    ids = np.asarray([[1, 5, 9, 13, 17, 21]], dtype=np.int64)
    request.infer({"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(6)[None],
                   "beam_idx": np.zeros(1, dtype=np.int32)})
    features = request.get_tensor(LAYER_FEATURES).data  # [1, 6, 1, hidden], RMS-normalized
    final = list(request.results.values())[-2][0]
    assert features.shape == (1, 6, 1, final.shape[-1])
    # the last layer's output x is what the final norm reads: the LM head's input is w x / sqrt(m + 1e-5) (w: the
    # norm's weight, m: the mean of x^2), the feature x / sqrt(m + 1e-6), so their ratio is w times one number per
    # position (the output of another node would not be)
    ratio = final / features[0, :, 0]
    np.testing.assert_allclose(ratio / ratio[:1], (ratio / ratio[:1])[:, :1] * np.ones_like(ratio), rtol=1e-3)
    np.testing.assert_allclose((features[0, :, 0] ** 2).mean(-1), 1.0, rtol=1e-2)
    assert np.abs((features[0, :, 0] ** 2).mean(-1) - 1).max() > 1e-4  # the eps matters here: the check is not moot


def _random_head(fused: int = 0, seed: int = 0) -> DraftHead:
    torch.manual_seed(seed)
    config = HeadConfig(hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=64, vocab=40, fused=fused)
    head = DraftHead(config, torch.randn(40, 32))
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    return head


def test_unrolled_steps_are_the_drafts_of_a_chain_run_one_position_at_a_time():
    head = _random_head(fused=2)
    t, start = 9, 4
    h, layers = torch.randn(1, t, 32), torch.randn(1, t, 2, 32)
    ids, positions = torch.randint(0, 41, (1, t)), torch.arange(t)[None]
    g1, g2, g3 = head.unroll(h, ids, positions, 3, layers)
    first, second = head(h, ids, positions, second_step=True, layers=layers)
    assert torch.equal(first, g1) and torch.equal(second, g2)
    # the chain as the app drafts it: step 1 over positions 0..start with the target's features, then steps 2 and 3
    # one position each, reading the previous step's output, attending to the cache so far
    x = head._input(h[:, : start + 1], ids[:, : start + 1], layers[:, : start + 1])
    q, k, v = head._qkv(x, positions[:, : start + 1])
    keys, values = [k.repeat_interleave(2, 1)], [v.repeat_interleave(2, 1)]
    out = head._finish(x, F.scaled_dot_product_attention(q, keys[0], values[0], is_causal=True))[:, -1:]
    assert torch.allclose(out[0, 0], g1[0, start])
    for step, j in ((2, start + 1), (3, start + 2)):
        x = head._input(out, ids[:, j : j + 1])
        q, k, v = head._qkv(x, positions[:, j : j + 1])
        keys.append(k.repeat_interleave(2, 1))
        values.append(v.repeat_interleave(2, 1))
        out = head._finish(x, F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2)))
        unrolled = (g2, g3)[step - 2][0, j]
        assert torch.allclose(out[0, 0], unrolled, atol=1e-5), step
        assert not torch.allclose(out[0, 0], (g2, g3)[step - 2][0, j - 1], atol=1e-3)  # a different position's


def test_a_fused_head_begins_as_the_head_it_starts_from():
    plain = _random_head()
    fused = DraftHead(HeadConfig(**{**plain.config.as_dict(), "fused": 2}), plain.table)
    missing, unexpected = fused.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and sorted(missing) == ["fuse.weight", "layer_norms.0.weight", "layer_norms.1.weight"]
    h, ids, positions = torch.randn(2, 6, 32), torch.randint(0, 41, (2, 6)), torch.arange(6).repeat(2, 1)
    layers = torch.randn(2, 6, 2, 32)
    for a, b in zip(plain.unroll(h, ids, positions, 3), fused.unroll(h, ids, positions, 3, layers)):
        assert torch.equal(a, b)
    with torch.no_grad():
        fused.fuse.weight.normal_()
    assert not torch.allclose(fused.unroll(h, ids, positions, 1, layers)[0], plain.unroll(h, ids, positions, 1)[0])


@pytest.mark.parametrize("feature_layers", [(), (0, 0)], ids=["plain", "fused"])
@pytest.mark.parametrize("int8", [False, True])
def test_a_head_is_read_back_from_its_ir(tiny_ir, tmp_path, int8, feature_layers):
    vocab = list(range(3, 40))
    state = tiny_head_state(tiny_ir["same"], vocab, seed=3, feature_layers=feature_layers)
    write_head_folder(tmp_path / "head", state, tiny_ir["same"], training={"note": "test"}, int8=int8)
    read = import_ir.head_state(tmp_path / "head")
    assert read["config"] == state["config"] and list(read["vocab"]) == vocab
    assert read.get("feature_layers", []) == list(feature_layers)
    assert set(read["head"]) == set(state["head"])
    for key, original in state["head"].items():
        value = read["head"][key].numpy()
        original = original.float().numpy()
        if not int8 or key.endswith("norm.weight") or key.startswith("layer_norms."):  # float32 matrices and the
            # norms' weights are stored as they are
            np.testing.assert_array_equal(value, original, err_msg=key)
        else:  # int8 rows (the out-of-vocabulary vector is one): within half of a row's step (max / 127)
            step = np.abs(original).max(axis=-1, keepdims=True) / 127
            assert np.all(np.abs(value - original) <= 0.5 * step + 1e-6), key
            assert not np.array_equal(value, original), key


@pytest.fixture(scope="module")
def fused_data(tiny_ir, tmp_path_factory):
    """Shard 0 (held out) and shards 1 and 2 (training) of the tiny target's sampled replies, with the output of its
    one decoder layer's output as the fused feature: the final hidden state RMS-normalized (the layer's output up to
    the final norm's weight, which the tiny IR folds away)."""
    model = load_model(tiny_ir["same"], "CPU", PrecisionSettings())
    sequences = tiny_training_sequences(model, tiny_ir["same"], model.encode("the cat sat on the mat and the"),
                                        SamplingSettings(temperature=1.0), replies=24)
    folder = tmp_path_factory.mktemp("fused-data")
    entries = []
    for index, part in ((0, sequences[:8]), (1, sequences[8:16]), (2, sequences[16:])):
        lengths = [len(p[0]) for p in part]
        hidden = np.concatenate([p[2] for p in part]).astype(np.float32)
        layer = hidden / np.sqrt((hidden**2).mean(-1, keepdims=True) + 1e-6)
        np.savez(shard_path(folder, index), tokens=np.concatenate([p[0] for p in part]),
                 offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                 prompt_lengths=np.asarray([p[1] for p in part], dtype=np.int32),
                 greedy=np.asarray([i % 2 == 0 for i in range(len(part))]), hidden=hidden.astype(np.float16),
                 lse=np.concatenate([p[3] for p in part]), argmax=np.concatenate([p[4] for p in part]),
                 layers=layer[:, None, :].astype(np.float16))
        entries.append({"index": index, "reply_tokens": int(sum(len(p[0]) - p[1] for p in part))})
    (folder / "manifest.json").write_text(json.dumps({
        "command": "tests", "seed": 0, "model": str(tiny_ir["same"]), "model_sha256": "tiny", "versions": {},
        "feature_layers": [0], "shards": entries}))
    head_dir = folder / "start-head"
    rebuild = {"commands": ["python -m tools.draft_head.export --checkpoint start.pt --out start-head"]}
    write_head_folder(head_dir, tiny_head_state(tiny_ir["same"], list(range(3, 40)), seed=1, scale=0.1),
                      tiny_ir["same"], training={"note": "test", "rebuild": rebuild}, int8=False)
    return folder


def _stream(data, out, *extra: str) -> int:
    return train.main(["--data", str(data), "--out", str(out), "--stream-shards", "1", "--epochs", "2",
                       "--batch-tokens", "128", "--device", "cpu", "--precision", "f32", "--draft-steps", "3",
                       "--init-head", str(data / "start-head"), "--eval-every", "1", "--lr", "0.01", "--threads", "1",
                       *extra])


def test_a_run_refuses_to_start_from_a_fused_head_made_for_other_layers(fused_data, tiny_ir, tmp_path):
    other = tmp_path / "other-head"  # fuses layers (0, 0); the data holds layer 0 alone
    write_head_folder(other, tiny_head_state(tiny_ir["same"], list(range(3, 40)), seed=1, feature_layers=(0, 0)),
                      tiny_ir["same"], training={"note": "test"}, int8=False)
    with pytest.raises(SystemExit, match=r"fuses the outputs of layers \[0, 0\].*holds layers \[0\]"):
        train.main(["--data", str(fused_data), "--out", str(tmp_path / "run"), "--stream-shards", "1",
                    "--init-head", str(other), "--device", "cpu", "--threads", "1"])
    assert not (tmp_path / "run" / "head.pt").exists()


def test_streamed_training_starts_from_the_head_learns_and_resumes_to_the_same_weights(fused_data, tmp_path,
                                                                                        monkeypatch):
    assert _stream(fused_data, tmp_path / "whole") == 0
    whole = torch.load(tmp_path / "whole" / "head.pt", map_location="cpu", weights_only=False)
    history = whole["history"]
    assert whole["config"]["fused"] == 1 and whole["feature_layers"] == [0]
    assert whole["position"]["epoch"] == 2 and len(history) == 1 + 4  # before training, then after every group
    assert history[-1]["reply_tokens_seen"] == 2 * sum(e["reply_tokens"] for e in
                                                       json.loads((fused_data / "manifest.json").read_text())["shards"]
                                                       if e["index"] != 0)
    # the first evaluation is the starting head's own, on the same held-out positions as every later one
    start = import_ir.head_state(fused_data / "start-head")
    table = train.target_table(Path(json.loads((fused_data / "manifest.json").read_text())["model"]))
    plain = DraftHead(HeadConfig(**start["config"]), torch.from_numpy(table[start["vocab"]]))
    plain.load_state_dict({k: v for k, v in start["head"].items() if k != "table"}, strict=False)
    held_out = train.Shards(fused_data, held_out=True)
    expected = train.evaluate(plain, held_out, torch.from_numpy(start["vocab"]), torch.from_numpy(table),
                              train.draft_index(start["vocab"], table.shape[0]), "cpu", steps=3)
    for key, value in expected.items():
        assert history[0][key] == pytest.approx(value, abs=1e-6), key
    assert {"greedy_accept_3_given_2", "sampled_accept_3"} <= set(history[0])
    assert history[-1]["sampled_accept_1"] > history[0]["sampled_accept_1"]  # it learned
    assert abs(float(whole["head"]["fuse.weight"].abs().max())) > 0  # the fusion moved from zero
    run = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    assert run["checkpoint"] == "head.pt" and run["position"] == whole["position"] and run["train_shards"] == [1, 2]
    assert export.main(["--checkpoint", str(tmp_path / "whole" / "head.pt"), "--out", str(tmp_path / "head")]) == 0
    training = json.loads((tmp_path / "head" / "draft_head.json").read_text())["training"]
    assert (training["epochs"], training["train_reply_tokens"]) == (2, run["train_reply_tokens"])
    assert training["held_out"]["greedy_accept_1"] == history[-1]["greedy_accept_1"]
    commands = training["rebuild"]["commands"]
    assert commands[0] == f"python -m tools.draft_head.export --checkpoint start.pt --out {fused_data / 'start-head'}"
    assert commands[-2].startswith("python -m tools.draft_head.train ") and len(commands) == 4

    # the same run killed in its third group, then resumed: the same weights, bit for bit
    calls = {"n": 0}
    real = train.losses

    def dies(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > whole["position"]["steps"] // 2 + 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "losses", dies)
    with pytest.raises(KeyboardInterrupt):
        _stream(fused_data, tmp_path / "resumed")
    stopped = torch.load(tmp_path / "resumed" / "head.pt", map_location="cpu", weights_only=False)
    assert 0 < stopped["position"]["steps"] < whole["position"]["steps"]
    monkeypatch.setattr(train, "losses", real)
    assert _stream(fused_data, tmp_path / "resumed", "--resume") == 0
    resumed = torch.load(tmp_path / "resumed" / "head.pt", map_location="cpu", weights_only=False)
    assert resumed["position"] == whole["position"]
    for key, value in whole["head"].items():
        assert torch.equal(resumed["head"][key], value), key
    assert _stream(fused_data, tmp_path / "resumed", "--resume") == 0  # finished: a rerun changes nothing
    again = torch.load(tmp_path / "resumed" / "head.pt", map_location="cpu", weights_only=False)
    assert len(again["history"]) == len(resumed["history"])


def test_the_shipped_head_read_back_computes_what_its_ir_computes():
    """The default model's head (a fused head, and what a longer run starts from, ``fused_run.sh --init-head``), as
    the app runs it: its layer features included."""
    from inference.models.default_head import shipped_head

    folder = shipped_head()
    read = import_ir.head_state(folder)
    head = DraftHead(HeadConfig(**read["config"]), read["head"]["table"])
    head.load_state_dict(read["head"])
    vocab = np.asarray(read["vocab"])
    generator = np.random.default_rng(0)
    count = 12
    ids = vocab[generator.integers(3, 2000, count)][None]  # tokens of the draft vocabulary
    hidden = generator.standard_normal((1, count, head.config.hidden)).astype(np.float32)
    layers = generator.standard_normal((1, count, len(read["feature_layers"]), head.config.hidden)).astype(np.float32)
    assert read["feature_layers"] == [1, 14]
    exact = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    request = ov.Core().compile_model(folder / "openvino_model.xml", "CPU", exact).create_infer_request()  # (not int8
    # activations: OpenVINO's default quantizes them where the CPU has int8 kernels, e.g. a Xeon, off by up to 0.5)
    request.infer({"input_ids": ids, "hidden_states": hidden, "attention_mask": np.ones((1, count), dtype=np.int64),
                   "position_ids": np.arange(count)[None], "beam_idx": np.zeros(1, dtype=np.int32),
                   "logits_to_keep": np.asarray([count]), LAYER_FEATURES: layers})
    expected = request.get_tensor("logits").data[0]
    to_draft = train.draft_index(vocab, int(json.loads((folder / "draft_head.json").read_text())["target"]["vocab_size"]))
    with torch.no_grad():
        g, _ = head(torch.from_numpy(hidden), torch.from_numpy(to_draft[ids]), torch.arange(count)[None],
                    layers=torch.from_numpy(layers))
        logits = head.logits(g)[0].numpy()
    assert logits.shape == expected.shape == (count, len(vocab))
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=2e-3)
    assert (logits.argmax(-1) == expected.argmax(-1)).all()


def test_the_acceptance_check_runs_a_fused_head_as_training_evaluates_it(fused_data, tiny_ir, tmp_path):
    """``acceptance_check`` feeds a fused head the shard's layer features at its first draft (zeros at the second,
    as the engine drafts): its figures are ``train.evaluate``'s on the same held-out replies, and its drafts move
    with the features (the control that shows they are fed)."""
    table = train.target_table(tiny_ir["same"])
    # the whole tiny vocabulary: the target's tokens are rarely among a few dozen
    state = tiny_head_state(tiny_ir["same"], list(range(table.shape[0])), seed=2, feature_layers=(0,))
    with torch.no_grad():
        state["module"].fuse.weight.mul_(10)  # the features move the drafts (the control below)
    state["head"] = state["module"].state_dict()
    write_head_folder(tmp_path / "head", state, tiny_ir["same"], training={}, int8=False)
    head = load_head(tmp_path / "head")
    f32 = ov.Core().compile_model(head.ir_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})  # as torch computes
    vocab = np.asarray(state["vocab"])
    evaluated = train.evaluate(state["module"].eval(), train.Shards(fused_data, held_out=True, only=[0]),
                               torch.from_numpy(vocab), torch.from_numpy(table),
                               train.draft_index(vocab, table.shape[0]), "cpu")
    shard = shard_path(fused_data, 0)
    checked = acceptance_check.check_shard(f32.create_infer_request(), head.vocab, shard, second_every=1, fused=True)
    assert checked["accept_1"] == pytest.approx(evaluated["greedy_accept_1"], abs=1.01 / checked["positions"])
    sampled = acceptance_check.sampled_acceptance(f32.create_infer_request(), head.vocab, shard, table, fused=True)
    app_warp = f"{acceptance_check.DRAFT_WARPS[0][0]}/{acceptance_check.DRAFT_WARPS[0][1]}"
    assert 0.01 < sampled["accept"][app_warp] < 0.99
    tolerance = 0.1 / sampled["positions"]  # f32 rounding moves it far less than a position's weight
    assert sampled["accept"][app_warp] == pytest.approx(evaluated["sampled_accept_1"], abs=tolerance)
    with np.load(shard) as data:  # the control: the features reach the drafts
        ids, hidden, layers = (data[name][: data["offsets"][1]] for name in ("tokens", "hidden", "layers"))
    request = f32.create_infer_request()
    fed, _ = acceptance_check._head_pass(request, ids, hidden, layers)
    zeroed, _ = acceptance_check._head_pass(request, ids, hidden, np.zeros_like(layers))
    assert np.abs(fed - zeroed).max() > 1.0
