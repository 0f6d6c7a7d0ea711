"""A fused draft head in the engine (issue 34, item 3): exported with its ``layer_features`` input, fed by the target
compiled with those outputs, it drafts what the torch ``DraftHead`` computes over a real conversation of the default
model; with its fusion at zero it drafts as the shipped head does; greedy replies stay plain decoding's; a head
reading a layer the target lacks is refused in words."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
import torch
import torch.nn.functional as F
from helpers import PROMPTS, assert_same_or_near_tie, chat_ids, settings

from inference.draft_head import FUSED_HEAD_FORMAT, HEAD_FORMAT, HEAD_MANIFEST, load_head, read_head_manifest
from inference.drafting import HeadDrafter
from inference.engine import Engine
from inference.kv_cache import KVCache
from inference.layer_features import LAYER_FEATURES, add_layer_features
from inference.model import HIDDEN_STATES, ModelLoadError, TokenizerMismatchError, lm_head, load_model
from inference.models.default_head import shipped_head
from inference.models.inspect import PairMismatchError, check_head_pair
from inference.penalties import ReplyPenalties
from inference.precision import PrecisionSettings
from inference.settings import SamplingSettings
from tools.draft_head import import_ir
from tools.draft_head.export import write_head_folder
from tools.draft_head.head import DraftHead, HeadConfig
from tools.draft_head.train import draft_index

#: The layers the long run fuses (``tools/draft_head/fused_run.sh``).
FEATURE_LAYERS = [1, 14]
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def _unfused_state() -> dict:
    """The shipped head (read back from its IR; a fused head since 2026-12-06) without its fusion: its layer norms
    and ``fuse`` weights dropped, a head that reads the final hidden state alone, as ``train.py`` checkpoints one."""
    state = import_ir.head_state(shipped_head())
    head = {name: weight for name, weight in state["head"].items() if not name.startswith(("layer_norms.", "fuse."))}
    return {"head": head, "config": {**state["config"], "fused": 0}, "vocab": state["vocab"]}


def _fused_state(fuse_scale: float, layers: list[int] = FEATURE_LAYERS, seed: int = 0) -> dict:
    """The shipped head without its fusion (``_unfused_state``) made a fused head again: layer norms near 1 and
    ``fuse`` weights of standard deviation ``fuse_scale / sqrt(fused x hidden)`` (0: the head without fusion), as
    ``train.py`` checkpoints one."""
    state = _unfused_state()
    config = {**state["config"], "fused": len(layers)}
    hidden = config["hidden"]
    generator = torch.Generator().manual_seed(seed)
    head = dict(state["head"])
    for i in range(len(layers)):
        head[f"layer_norms.{i}.weight"] = 1 + 0.1 * torch.randn(hidden, generator=generator)
    head["fuse.weight"] = fuse_scale * torch.randn(hidden, len(layers) * hidden, generator=generator) / np.sqrt(
        len(layers) * hidden)
    return {"head": head, "config": config, "vocab": state["vocab"], "feature_layers": layers}


def _torch_head(state: dict) -> DraftHead:
    head = DraftHead(HeadConfig(**state["config"]), state["head"]["table"])
    head.load_state_dict(state["head"])
    return head.eval()


@pytest.fixture(scope="module")
def fused_target(int4_dir):
    """The default model compiled as the engine compiles it for a head fusing FEATURE_LAYERS."""
    return load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=FEATURE_LAYERS)


@pytest.fixture(scope="module")
def conversation(target) -> list[int]:
    """A real conversation: a chat prompt and the default model's greedy reply (64 tokens)."""
    ids = chat_ids(target, PROMPTS[1])
    return ids + Engine(target).generate_text(ids, settings("ar", max_new_tokens=64)).token_ids


@pytest.fixture(scope="module")
def random_fused(int4_dir, tmp_path_factory) -> tuple[dict, object]:
    """A fused head whose ``fuse`` moves its logits by several units, exported float32 (the weights torch has)."""
    state = _fused_state(fuse_scale=3.0)
    folder = tmp_path_factory.mktemp("fused") / "head"
    write_head_folder(folder, state, int4_dir, training={"note": "random fusion, for tests"}, int8=False)
    return state, folder


def _reference(model_dir, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The target's final hidden states float32 ``[S, hidden]`` and layer features ``[S, layers, hidden]`` over
    ``ids``, as training computes them (``tools/draft_head/generate.py``: the IR as exported, exact f32, one
    teacher-forced pass), not through the engine."""
    model = ov.Core().read_model(model_dir / "openvino_model.xml")
    model.add_outputs([lm_head(model).input_value(0)])
    add_layer_features(model, FEATURE_LAYERS)
    request = ov.Core().compile_model(model, "CPU", EXACT).create_infer_request()
    count = len(ids)
    request.infer({"input_ids": np.asarray([ids]), "attention_mask": np.ones((1, count), dtype=np.int64),
                   "position_ids": np.arange(count)[None], "beam_idx": np.zeros(1, dtype=np.int32)})
    return request.get_output_tensor(1).data[0].copy(), request.get_output_tensor(2).data[0].copy()


def _torch_drafts(head: DraftHead, vocab: np.ndarray, target_vocab: int, ids: list[int], hidden: np.ndarray,
                  layers: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The torch head's two greedy drafting steps after every prefix ``ids[:n + 1]``, n >= 1, as ``HeadDrafter``
    runs them: step 1 at position ``n - 1`` over the target's features of positions ``< n``, step 2 at ``n``
    reading step 1's output and draft, and no layer features. Returns float32 ``[len(ids) - 1, vocab]`` logits of
    each step (row ``n - 1``: after ``ids[:n + 1]``)."""
    to_draft = torch.from_numpy(draft_index(vocab, target_vocab))
    count = len(ids) - 1
    tokens = to_draft[torch.as_tensor(ids[1:])][None]
    positions = torch.arange(count)[None]
    with torch.no_grad():
        h = torch.from_numpy(hidden[:count])[None]
        x = head._input(h, tokens, torch.from_numpy(layers[:count])[None] if layers is not None else None)
        q, k, v = head._qkv(x, positions)
        groups = head.config.heads // head.config.kv_heads
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        g1 = head._finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))[0]
        first = head.logits(g1)
        second = []
        for n in range(1, count + 1):
            draft = to_draft[vocab[int(first[n - 1].argmax())]]
            x2 = head._input(g1[None, n - 1 : n], draft.view(1, 1))
            q2, k2, v2 = head._qkv(x2, torch.tensor([[n]]))
            keys = torch.cat([k[:, :, :n], k2.repeat_interleave(groups, 1)], 2)
            values = torch.cat([v[:, :, :n], v2.repeat_interleave(groups, 1)], 2)
            second.append(head.logits(head._finish(x2, F.scaled_dot_product_attention(q2, keys, values)))[0, 0])
    return first.numpy(), torch.stack(second).numpy()


def _engine_drafts(target, head, ids: list[int]) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """``HeadDrafter``'s greedy drafts (K = 2) after every prefix ``ids[:n + 1]``, n >= 1, with the target's cache
    holding the conversation, and the draft-vocabulary logits of its two steps (float32 ``[len(ids) - 1, vocab]``
    each)."""
    cache = KVCache(target.compiled, target.rope, kept_outputs=(HIDDEN_STATES, LAYER_FEATURES))
    cache.forward(ids)
    drafter = HeadDrafter(head, cache, target.vocab_size)
    rows: list[np.ndarray] = []
    full_row = drafter._full_row
    drafter._full_row = lambda logits: (rows.append(logits.copy()), full_row(logits))[1]
    greedy = SamplingSettings()
    drafts = [drafter.propose(ids[: n + 1], 2, 4096, greedy, np.random.default_rng(0),
                              ReplyPenalties(greedy, ids[: n + 1], []))[0] for n in range(1, len(ids))]
    return drafts, np.stack(rows[0::2]), np.stack(rows[1::2])


def _differences(vocab: np.ndarray, drafts: list[list[int]], engine: tuple[np.ndarray, np.ndarray],
                 reference: tuple[np.ndarray, np.ndarray]) -> tuple[float, float, np.ndarray]:
    """The largest logit difference of the first drafting step, of the second where both drafted the same first
    token (it reads that draft), and where they did (bool ``[len(drafts)]``)."""
    same = np.asarray([d[0] for d in drafts]) == vocab[reference[0].argmax(-1)]
    return (float(np.abs(engine[0] - reference[0]).max()), float(np.abs(engine[1] - reference[1])[same].max()),
            same)


@pytest.fixture(scope="module")
def noise(target, int4_dir, conversation, tmp_path_factory) -> float:
    """The largest logit difference between the engine's drafting and torch's for the head without fusion (the
    shipped head's other weights, exported float32): the numerical noise of the head as the app compiles it (the
    CPU's default precision, bf16 on CPUs with AVX512_BF16) and of the target's features computed by the engine."""
    state = _unfused_state()
    folder = tmp_path_factory.mktemp("plain") / "head"
    write_head_folder(folder, state, int4_dir, training={"note": "the shipped head unfused, float32"}, int8=False)
    hidden, _ = _reference(int4_dir, conversation)
    first, second = _torch_drafts(_torch_head(state), state["vocab"], target.vocab_size, conversation, hidden, None)
    drafts, engine_first, engine_second = _engine_drafts(target, load_head(folder), conversation)
    return max(_differences(state["vocab"], drafts, (engine_first, engine_second), (first, second))[:2])


def test_a_fused_head_drafts_what_torch_computes_over_a_real_conversation(fused_target, int4_dir, conversation,
                                                                           random_fused, noise):
    state, folder = random_fused
    head = load_head(folder)
    assert head.feature_layers == tuple(FEATURE_LAYERS)
    hidden, layers = _reference(int4_dir, conversation)
    torch_head = _torch_head(state)
    vocab = state["vocab"]
    first, second = _torch_drafts(torch_head, vocab, fused_target.vocab_size, conversation, hidden, layers)
    drafts, engine_first, engine_second = _engine_drafts(fused_target, head, conversation)
    tolerance = 3 * noise + 1e-3  # the fused head's two more inputs (features, fusion) may add noise of their own
    # the fusion matters: without the layer features the same head computes other logits, by far more than the noise
    unfused, _ = _torch_drafts(torch_head, vocab, fused_target.vocab_size, conversation, hidden, np.zeros_like(layers))
    assert np.abs(unfused - first).max() > 20 * tolerance, (np.abs(unfused - first).max(), tolerance)
    first_difference, second_difference, same = _differences(vocab, drafts, (engine_first, engine_second),
                                                             (first, second))
    assert first_difference <= tolerance and second_difference <= tolerance, (first_difference, second_difference,
                                                                              noise)
    # the drafts are torch's, but where torch's top two logits are within the tolerance (a near-tie)
    top2 = np.sort(first, axis=-1)[:, -2:]
    assert np.all(same | (top2[:, 1] - top2[:, 0] <= 2 * tolerance)), np.flatnonzero(~same)
    assert same.mean() >= 0.9, same.mean()
    second_same = np.asarray([d[1] for d in drafts]) == vocab[second.argmax(-1)]
    top2 = np.sort(second, axis=-1)[:, -2:]
    assert np.all(~same | second_same | (top2[:, 1] - top2[:, 0] <= 2 * tolerance))


def test_a_fused_head_with_its_fusion_at_zero_drafts_as_the_head_without_fusion(target, fused_target, int4_dir,
                                                                                 conversation, tmp_path):
    """How a fused run begins: its head, fusion at zero, drafts what the head it starts from drafts."""
    write_head_folder(tmp_path / "zero", _fused_state(fuse_scale=0.0), int4_dir, training={"note": "fuse = 0"})
    write_head_folder(tmp_path / "plain", _unfused_state(), int4_dir, training={"note": "no fusion"})
    zero, plain = load_head(tmp_path / "zero"), load_head(tmp_path / "plain")  # int8 as shipped: the same int8 rows
    assert zero.feature_layers == tuple(FEATURE_LAYERS) and plain.feature_layers == ()
    drafts, first, second = _engine_drafts(fused_target, zero, conversation)
    plain_drafts, plain_first, plain_second = _engine_drafts(target, plain, conversation)
    assert drafts == plain_drafts
    np.testing.assert_allclose(first, plain_first, atol=1e-4)
    np.testing.assert_allclose(second, plain_second, atol=1e-4)


def test_greedy_replies_with_a_fused_head_are_plain_decodings(fused_target, int4_dir, tmp_path):
    """With a fusion mild enough that its drafts are often accepted (``random_fused``'s are not), int8 as shipped."""
    write_head_folder(tmp_path / "mild", _fused_state(fuse_scale=0.5), int4_dir, training={"note": "test"})
    engine = Engine(fused_target, load_head(tmp_path / "mild"))
    ids = chat_ids(fused_target, PROMPTS[2])
    replies = {}
    for decoding in ("ar", "spec_model"):
        engine.reset()
        replies[decoding] = engine.generate_text(ids, settings(decoding, max_new_tokens=64, k=2))
    assert_same_or_near_tie(engine, ids, replies["ar"], replies["spec_model"], {}, "fused head", 2)
    assert replies["spec_model"].accepted > 0, replies["spec_model"].drafted


def test_a_head_reading_a_layer_the_target_lacks_is_refused_in_words(target, int4_dir, tmp_path):
    folder = tmp_path / "layer-99"
    write_head_folder(folder, _fused_state(fuse_scale=1.0, layers=[1, 99]), int4_dir, training={"note": "test"})
    with pytest.raises(ModelLoadError, match=r"decoder layers \[1, 99\].*decoder layer 99 out of range: the graph "
                                             r"has 30 decoder layers"):
        Engine.load(int4_dir, draft_dir=folder)
    with pytest.raises(TokenizerMismatchError, match="the head reads decoder layer 99, the target has 30"):
        Engine(target, load_head(folder))
    with pytest.raises(PairMismatchError, match="the head reads decoder layer 99, the target has 30"):
        check_head_pair(int4_dir, folder)
    # a target loaded without the features of a head it could give them to is refused too, saying how to load it
    ok = tmp_path / "layers-1-14"
    write_head_folder(ok, _fused_state(fuse_scale=1.0), int4_dir, training={"note": "test"})
    with pytest.raises(TokenizerMismatchError, match=r"loaded with the outputs of decoder layers \[\], the head reads "
                                                     r"those of \[1, 14\]"):
        Engine(target, load_head(ok))


def test_a_fused_head_is_written_in_its_own_format_which_plain_heads_never_claim(int4_dir, tmp_path):
    """A version that reads only format 1 (plain heads) must refuse a fused head by its format, in words, rather
    than fail inside OpenVINO on the extra input; and a manifest whose format and layers disagree is refused."""
    import json

    fused = tmp_path / "fused"
    write_head_folder(fused, _fused_state(fuse_scale=1.0), int4_dir, training={"note": "test"})
    manifest = json.loads((fused / HEAD_MANIFEST).read_text())
    assert (manifest["format"], manifest["feature_layers"]) == (FUSED_HEAD_FORMAT, [1, 14])
    assert read_head_manifest(fused)["feature_layers"] == [1, 14]
    for format_, layers in ((HEAD_FORMAT, [1, 14]), (FUSED_HEAD_FORMAT, [])):
        (fused / HEAD_MANIFEST).write_text(json.dumps({**manifest, "format": format_, "feature_layers": layers}))
        with pytest.raises(ModelLoadError, match=rf"format {format_} with feature_layers .*reinstall the draft head"):
            read_head_manifest(fused)
