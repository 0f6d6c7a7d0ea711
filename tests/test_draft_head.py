"""Draft heads on tiny random models: the exported graph computes the trained network, the target keeps its hidden
states through rollbacks and rolls, the drafter reads the right positions, speculative decoding with a head stays
exact, and a head refuses a target it was not trained for (the shipped head: ``test_shipped_head.py``)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import openvino as ov
import pytest
import torch
from helpers import attention_kinds, settings
from tiny_heads import tiny_head_state, write_tiny_head

from inference.draft_head import DRAFT_HIDDEN, HEAD_CPU_PROPERTIES, HIDDEN_INPUT, load_head
from inference.engine import Engine
from inference.kv_cache import KVCache
from inference.model import HIDDEN_STATES, TokenizerMismatchError, load_model
from inference.precision import PrecisionSettings
from tools.draft_head.train import draft_index

PROMPT = "the cat sat on the mat and the cat sat on the hat so the cat"


@pytest.fixture(scope="module")
def tiny_target(tiny_ir):
    return load_model(tiny_ir["same"], "CPU", PrecisionSettings())


@pytest.fixture(scope="module")
def tiny_vocab(tiny_target) -> list[int]:
    """A draft vocabulary of the tokens the tiny target writes after PROMPT (so some drafts are accepted and
    some rejected), EOS included."""
    engine = Engine(tiny_target)
    reply = engine.generate_text(tiny_target.encode(PROMPT), settings("ar", max_new_tokens=64, n_ctx=512, ignore_eos=True))
    return sorted(set(reply.token_ids) | {0, 1, 2})


@pytest.fixture(scope="module")
def tiny_head_dir(tiny_ir, tiny_vocab, tmp_path_factory):
    return write_tiny_head(tiny_ir["same"], tmp_path_factory.mktemp("tiny-head") / "head", tiny_vocab, seed=1)


def test_the_exported_graph_computes_the_trained_head_with_its_kv_cache(tiny_ir, tiny_vocab, tmp_path):
    """Float32 export against the torch module: 5 positions, then 3 more on top of the head's own KV cache."""
    state = tiny_head_state(tiny_ir["same"], tiny_vocab, seed=2)
    from tools.draft_head.export import write_head_folder

    write_head_folder(tmp_path, state, tiny_ir["same"], training={}, int8=False)
    rng = np.random.default_rng(0)
    hidden = rng.normal(0, 1, (1, 8, 64)).astype(np.float32)
    tokens = np.asarray([[tiny_vocab[1], 5, tiny_vocab[0], 49000, tiny_vocab[-1], 7, tiny_vocab[2], 2]], np.int64)
    to_draft = draft_index(np.asarray(tiny_vocab), 49152)
    module = state["module"]
    with torch.no_grad():
        g, _ = module(torch.from_numpy(hidden), torch.from_numpy(to_draft[tokens]), torch.arange(8)[None])
        expected_logits = module.logits(g).numpy()[0]
    request = ov.Core().compile_model(tmp_path / "openvino_model.xml", "CPU", HEAD_CPU_PROPERTIES)
    request = request.create_infer_request()
    logits, features = [], []
    for start, end in ((0, 5), (5, 8)):
        request.infer({
            "input_ids": tokens[:, start:end], HIDDEN_INPUT: hidden[:, start:end],
            "attention_mask": np.ones((1, end), np.int64), "position_ids": np.arange(start, end)[None],
            "beam_idx": np.zeros(1, np.int32), "logits_to_keep": np.array([end - start]),
        })
        logits.append(request.get_tensor("logits").data[0].copy())
        features.append(request.get_tensor(DRAFT_HIDDEN).data[0].copy())
    np.testing.assert_allclose(np.concatenate(logits), expected_logits, atol=2e-4)
    np.testing.assert_allclose(np.concatenate(features), g.numpy()[0], atol=2e-4)


def test_a_grouped_head_exports_as_multi_head_attention_that_the_cpu_runs_fused(tiny_ir, tiny_vocab, tmp_path):
    """A head trained with fewer key/value heads than query heads is exported with its K/V rows repeated per query
    head and no repeat between its cache and its attention, which the CPU plugin keeps as one fused
    ScaledDotProductAttention (with the GQA repeat it decomposed into MatMul/Softmax/MatMul: 4x slower). The
    IR reads back to the trained weights (``import_ir`` folds the copies)."""
    from tools.draft_head import import_ir
    from tools.draft_head.export import write_head_folder

    state = tiny_head_state(tiny_ir["same"], tiny_vocab, seed=4)
    config = state["config"]
    assert config["kv_heads"] < config["heads"]
    write_head_folder(tmp_path, state, tiny_ir["same"], training={})
    assert "ScaledDotProductAttention" in attention_kinds(load_head(tmp_path).compiled)
    read = import_ir.head_state(tmp_path)
    assert read["config"] == config
    for name in ("k.weight", "v.weight", "q.weight"):
        trained = state["head"][name].numpy()
        assert read["head"][name].shape == trained.shape
        half_step = np.abs(trained).max(axis=1, keepdims=True) / 254 + 1e-7  # int8 rows: half a quantization step
        assert (np.abs(read["head"][name].numpy() - trained) <= half_step).all()


def test_the_target_cache_keeps_hidden_states_through_rollback_and_roll(tiny_target):
    cache = KVCache(tiny_target.compiled, tiny_target.rope, kept_outputs=(HIDDEN_STATES,))
    tokens = tiny_target.encode(PROMPT)[:12]
    cache.forward(tokens[:10])
    first = cache.rows(0, 10).copy()
    fresh = KVCache(tiny_target.compiled, tiny_target.rope)
    fresh.forward(tokens[:10])
    np.testing.assert_allclose(first, fresh.output(HIDDEN_STATES), atol=1e-5)
    cache.truncate(6)  # rejected drafts: rows 6.. are replaced by what is fed next
    cache.forward(tokens[10:12])
    fresh.truncate(6)
    fresh.forward(tokens[10:12])
    np.testing.assert_allclose(cache.rows(6, 8), fresh.output(HIDDEN_STATES), atol=1e-5)
    before = cache.rows(0, 8).copy()
    assert cache.roll(n_keep=2, n_discard=3) == 3
    np.testing.assert_array_equal(cache.rows(0, 5), np.concatenate([before[:2], before[5:8]]))
    with pytest.raises(ValueError, match="not cached"):
        cache.rows(0, 6)


def test_the_head_drafts_from_the_target_hidden_states_of_the_right_positions(tiny_ir, tiny_vocab, tiny_target, tmp_path):
    """HeadDrafter against the torch module: each draft is the module's argmax after the target's real hidden
    states (position j reads h_j and token j + 1), further drafts read the module's own predicted state, and after
    the target accepts one draft and rejects the rest the next proposal starts from the target's states again."""
    from inference.drafting import HeadDrafter
    from inference.penalties import ReplyPenalties
    from tools.draft_head.export import write_head_folder

    state = tiny_head_state(tiny_ir["same"], tiny_vocab, seed=3)
    write_head_folder(tmp_path, state, tiny_ir["same"], training={}, int8=False)
    module, vocab = state["module"], np.asarray(tiny_vocab)
    to_draft = draft_index(vocab, tiny_target.vocab_size)
    cache = KVCache(tiny_target.compiled, tiny_target.rope, kept_outputs=(HIDDEN_STATES,))
    drafter = HeadDrafter(load_head(tmp_path), cache, tiny_target.vocab_size)
    greedy = settings("ar").sampling
    penalties = ReplyPenalties(greedy, [], [])

    def expected(context: list[int], k: int) -> list[int]:
        n = len(context) - 1
        features = [row for row in cache.rows(0, n)]
        tokens = list(context[1:])
        drafts = []
        with torch.no_grad():
            for _ in range(k):
                g, _ = module(torch.from_numpy(np.stack(features)[None]), torch.from_numpy(to_draft[tokens])[None],
                              torch.arange(len(tokens))[None])
                drafts.append(int(vocab[int(module.logits(g[0, -1]).argmax())]))
                features.append(g[0, -1].numpy())
                tokens.append(drafts[-1])
        return drafts

    ids = tiny_target.encode(PROMPT)
    cache.forward(ids[:-1])
    drafter.feed(cache.tokens, 512)
    context = cache.tokens + [ids[-1]]
    drafts, probs = drafter.propose(context, 3, 512, greedy, np.random.default_rng(0), penalties)
    assert probs is None and drafts == expected(context, 3)
    cache.forward([context[-1]] + drafts)  # verification: the first draft is kept, the rest rejected
    cache.truncate(len(context) + 1)
    correction = next(t for t in tiny_vocab if t != drafts[1])
    context = cache.tokens + [correction]
    drafts, _ = drafter.propose(context, 2, 512, greedy, np.random.default_rng(0), penalties)
    assert drafts == expected(context, 2)


def test_the_teacher_forced_first_drafts_are_the_drafters(tiny_ir, tiny_vocab, tiny_target, tiny_head_dir):
    """tools/draft_head/datastore_check.py scores the head in one pass over a whole reply: at every position its
    draft is the one HeadDrafter proposes (K = 1) while decoding that reply."""
    from inference.drafting import HeadDrafter
    from inference.penalties import ReplyPenalties
    from tools.draft_head.datastore_check import head_first_drafts

    ids = tiny_target.encode(PROMPT)
    reply = Engine(tiny_target).generate_text(ids, settings("ar", max_new_tokens=12, n_ctx=512, ignore_eos=True))
    tokens = ids + reply.token_ids
    cache = KVCache(tiny_target.compiled, tiny_target.rope, kept_outputs=(HIDDEN_STATES,))
    cache.forward(tokens)
    teacher_forced = head_first_drafts(tiny_head_dir, tokens, cache.rows(0, len(tokens)))
    greedy = settings("ar").sampling
    penalties = ReplyPenalties(greedy, [], [])
    proposed = []
    for end in range(len(ids), len(tokens)):
        cache.truncate(end - 1)
        drafter = HeadDrafter(load_head(tiny_head_dir), cache, tiny_target.vocab_size)
        drafts, _ = drafter.propose(tokens[:end], 1, 512, greedy, np.random.default_rng(0), penalties)
        proposed.append(drafts[0])
        cache.forward(tokens[end - 1 : len(tokens)])  # back to the whole sequence for the next prefix
    assert len(set(proposed)) > 1, "a head that always drafts the same token would not test the alignment"
    assert list(teacher_forced[len(ids) - 2 :]) == proposed


@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_with_a_head_equals_autoregressive_through_rolls(tiny_target, tiny_head_dir, k):
    engine = Engine(tiny_target, load_head(tiny_head_dir))
    prompt = tiny_target.encode(PROMPT)
    context = {"n_ctx": 40, "n_keep": 4}
    reference = engine.generate_text(prompt, settings("ar", max_new_tokens=80, ignore_eos=True, **context))
    candidate = engine.generate_text(prompt, settings("spec_model", max_new_tokens=80, k=k, ignore_eos=True, **context))
    assert reference.rolls >= 2
    assert candidate.drafter == "head"
    assert 0 < candidate.accepted < candidate.drafted, (candidate.accepted, candidate.drafted)
    assert candidate.token_ids == reference.token_ids
    assert candidate.rolls == reference.rolls


def test_a_head_refuses_a_target_it_was_not_trained_for(tiny_ir, tiny_head_dir, target):
    other_tokenizer = load_model(tiny_ir["other"], "CPU", PrecisionSettings())
    with pytest.raises(TokenizerMismatchError, match="another tokenizer"):
        Engine(other_tokenizer, load_head(tiny_head_dir))
    with pytest.raises(TokenizerMismatchError, match="hidden size 576, the head reads 64"):
        Engine(target, load_head(tiny_head_dir))


def test_the_top_drafts_are_distinct_and_led_by_the_first_draft(tiny_target, tiny_head_dir):
    """tools/draft_head/tree_check.py ranks the head's W likeliest drafts; the first of them is the first draft."""
    from tools.draft_head.datastore_check import head_first_drafts, head_top_drafts

    ids = tiny_target.encode(PROMPT)
    reply = Engine(tiny_target).generate_text(ids, settings("ar", max_new_tokens=12, n_ctx=512, ignore_eos=True))
    tokens = ids + reply.token_ids
    cache = KVCache(tiny_target.compiled, tiny_target.rope, kept_outputs=(HIDDEN_STATES,))
    cache.forward(tokens)
    hidden = cache.rows(0, len(tokens))
    top = head_top_drafts(tiny_head_dir, tokens, hidden, 3)
    assert top.shape == (len(tokens) - 2, 3)
    assert (top[:, 0] == head_first_drafts(tiny_head_dir, tokens, hidden)).all()
    assert all(len(set(row)) == 3 for row in top.tolist())


def test_a_tree_is_predicted_from_hit_rates_and_pass_costs():
    from tools.draft_head.tree_check import predicted_speedups

    free_chat = {"pass_costs": {"ratio": {"target_2": 1.2, "target_3": 1.3, "head_1": 0.05}},
                 "bars": [{"sampling": "greedy", "acceptance": 0.5, "held_out_now": 0.625, "efficiency": 0.9}]}
    speedups = predicted_speedups({1: 0.625, 2: 0.75, 3: 0.8}, free_chat)
    assert speedups[1] == pytest.approx((1 + 0.5) / 1.25 * 0.9)
    assert speedups[2] == pytest.approx((1 + 0.6) / 1.35 * 0.9)
    assert 3 not in speedups  # no measured cost of a 4-token pass


def test_the_exported_graph_masks_rolled_back_slots_and_later_tokens(tiny_ir, tiny_vocab, tmp_path):
    """The attention mask (``export._attention_bias``) against the torch module: 8 tokens cached, the last 3 rolled
    back (dead slots in the mask), then 4 others in one pass; each of the 4 sees the 5 kept tokens and the new ones up
    to itself, as the module computing the 9 tokens afresh does."""
    state = tiny_head_state(tiny_ir["same"], tiny_vocab, seed=3)
    from tools.draft_head.export import write_head_folder

    write_head_folder(tmp_path, state, tiny_ir["same"], training={}, int8=False)
    head = load_head(tmp_path)
    rng = np.random.default_rng(1)
    hidden = rng.normal(0, 1, (1, 12, 64)).astype(np.float32)
    tokens = [tiny_vocab[i % len(tiny_vocab)] for i in range(3, 15)]
    cache = KVCache(head.compiled, head.rope)
    cache.forward(tokens[:8], inputs={HIDDEN_INPUT: hidden[:, :8]})
    cache.truncate(5)
    logits = cache.forward(tokens[8:], inputs={HIDDEN_INPUT: hidden[:, 8:]})
    assert cache.physical_length == 12 and len(cache) == 9
    kept = [*range(5), *range(8, 12)]
    to_draft = draft_index(np.asarray(tiny_vocab), 49152)
    with torch.no_grad():
        g, _ = state["module"](torch.from_numpy(hidden[:, kept]), torch.from_numpy(to_draft[np.asarray(tokens)[kept]])[None],
                               torch.arange(9)[None])
        expected = state["module"].logits(g).numpy()[0, 5:]
    np.testing.assert_allclose(logits, expected, atol=2e-4)


def test_the_exported_graph_runs_as_few_cpu_nodes(tiny_head_dir):
    """What the CPU plugin runs of an exported head (``export.py``'s module docstring): RoPE fused into one node each
    for q and k, an attention mask without ``Range``/``ShapeOf`` of the lengths, and the logits straight from their
    product, with no ``Slice`` after it."""
    compiled = load_head(tiny_head_dir).compiled
    runtime = compiled.get_runtime_model()
    kinds = Counter(op.get_rt_info()["layerType"].astype(str) for op in runtime.get_ops())
    assert kinds["RoPE"] == 2 and kinds["Split"] == 0
    assert kinds["Range"] == kinds["ShapeOf"] == 0
    index = next(i for i, output in enumerate(compiled.outputs) if "logits" in output.get_names())
    producer = runtime.get_results()[index].input_value(0).get_node()
    assert producer.get_rt_info()["layerType"].astype(str) == "FullyConnected"


def test_a_model_whose_folder_was_removed_since_loading_keeps_its_tokenizer_fingerprint(tiny_ir, tiny_head_dir,
                                                                                         tmp_path):
    """The fingerprint was read again from the model's folder: removed since the load (`specchat models remove`),
    pairing a head or a draft failed with openvino-genai's "Detokenizer model has not been provided"."""
    import shutil

    from inference.model import check_same_tokenizer
    from inference.tokenizer_cache import tokenizer_fingerprint

    loaded = {}
    for name in ("target", "draft"):
        shutil.copytree(tiny_ir["same"], tmp_path / name)
        loaded[name] = load_model(tmp_path / name, "CPU", PrecisionSettings())
        shutil.rmtree(tmp_path / name)
    target, draft = loaded["target"], loaded["draft"]
    assert target.tokenizer_fingerprint == draft.tokenizer_fingerprint == tokenizer_fingerprint(tiny_ir["same"],
                                                                                              target.vocab_size)
    check_same_tokenizer(target, draft)
    assert Engine(target, load_head(tiny_head_dir)).draft.folder == tiny_head_dir


def test_a_head_without_its_config_says_to_reinstall_specchats_head_or_delete_it(tiny_target, tiny_vocab, tiny_ir,
                                                                                tmp_path):
    """A head folder without config.json (its RoPE unknown) drafting past n_ctx was refused with "this model's RoPE
    parameters are unknown ... raise n_ctx", and its load and its store entry said "Re-import or re-download the
    model", advice for a chat model: a head is neither imported nor downloaded. It says the head's own words:
    reinstall SpecChat (whose draft head it is) or delete the folder, each front end in its words."""
    import json

    from app.gui.store_words import MAIN_WINDOW_ADVICE, WINDOW_ADVICE
    from inference.advice import in_words
    from inference.models.errors import CLI_ADVICE
    from inference.models.inspect import rope_support
    from inference.rope import RopeUnsupportedError

    folder = write_tiny_head(tiny_ir["same"], tmp_path / "head", tiny_vocab, seed=1)
    (folder / "config.json").unlink()
    manifest = json.loads((folder / "draft_head.json").read_text())
    manifest.get("sha256", {}).pop("config.json", None)  # as a head exported before the manifest recorded hashes
    (folder / "draft_head.json").write_text(json.dumps(manifest))
    reason = (f"{folder}/config.json is missing: RoPE parameters are unknown, so the rolling context cannot shift the "
              "draft head's KV cache")
    assert rope_support(folder) == (False, f"{reason}. Reinstall SpecChat to restore its draft head, or delete the "
                                    f"folder {folder} to chat without it.")
    engine = Engine(tiny_target, load_head(folder))
    with pytest.raises(RopeUnsupportedError) as refused:
        engine.generate_text(tiny_target.encode(PROMPT), settings("spec_model", max_new_tokens=80, ignore_eos=True,
                                                                  n_ctx=40, n_keep=4))
    said = f"the conversation needs more than n_ctx tokens, but head cannot be rolled: {reason}"
    assert str(refused.value) == (f"{said}. Reinstall SpecChat to restore its draft head, or delete the folder "
                                  f"{folder} to chat without it.")
    assert in_words(refused.value, CLI_ADVICE) == (f"{said}. Reinstall SpecChat to restore its draft head, or delete "
                                                   f"it (`specchat models remove head`) to chat without it.")
    assert in_words(refused.value, MAIN_WINDOW_ADVICE) == (f"{said}. Reinstall SpecChat to restore its draft head, or "
                                                           "remove head in Models > Manage models… to chat without it.")
    assert in_words(refused.value, WINDOW_ADVICE) == (f"{said}. Reinstall SpecChat to restore its draft head, or "
                                                      "remove head on the Installed tab to chat without it.")
