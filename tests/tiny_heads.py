"""Tiny random draft heads for the tiny random targets of ``tiny_models`` (tests of the head's graph, its drafter
and exactness), written by the exporter the shipped head goes through (``tools/draft_head/export.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tiny_models import FFN, HEADS, HIDDEN, KV_HEADS

from tools.draft_head.export import write_head_folder
from tools.draft_head.head import DraftHead, HeadConfig
from tools.draft_head.target import target_table
from tools.draft_head.train import draft_index


def tiny_head_state(target_dir: Path, vocab: list[int], seed: int = 0, scale: float = 0.3,
                    feature_layers: tuple[int, ...] = ()) -> dict:
    """A random head for the tiny target in ``target_dir``, drafting over ``vocab`` (target token ids), as
    ``train.py`` checkpoints one (``head`` weights, ``config``, ``vocab``, and for a fused head ``feature_layers``);
    ``scale`` sets how far its weights are from the initialization (larger: more varied drafts); ``feature_layers``
    (the target's decoder layers whose outputs it fuses) makes it a fused head."""
    torch.manual_seed(seed)
    table = target_table(target_dir)
    ids = np.asarray(vocab, dtype=np.int64)
    config = HeadConfig(hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, head_dim=HIDDEN // HEADS, intermediate=FFN,
                        rope_theta=10000.0, vocab=len(ids), fused=len(feature_layers))
    head = DraftHead(config, torch.from_numpy(table[ids]))
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(torch.randn_like(parameter) * scale)
    fused = {"feature_layers": list(feature_layers)} if feature_layers else {}
    return {"head": head.state_dict(), "config": config.as_dict(), "vocab": ids, "module": head, **fused}


def write_tiny_head(target_dir: Path, folder: Path, vocab: list[int], seed: int = 0, int8: bool = True) -> Path:
    """Export ``tiny_head_state`` to a head folder (``int8=False``: float32 weights, for exact comparisons)."""
    state = tiny_head_state(target_dir, vocab, seed)
    write_head_folder(folder, state, target_dir, training={"note": "random weights, for tests"}, int8=int8)
    return folder


def tiny_training_sequences(target, target_dir: Path, prompt_ids: list[int], sampling, replies: int = 64,
                            max_new_tokens: int = 12) -> list[tuple]:
    """The tiny target's replies to ``prompt_ids`` sampled with ``sampling`` (seeded 0 .. replies - 1), each as
    ``train.Shards`` holds a conversation: token ids, prompt length, float16 hidden states ``[tokens, hidden]``,
    float32 log-sum-exp of the logits and int32 argmax per position (what ``generate.py`` stores)."""
    from dataclasses import replace

    from inference.engine import Engine
    from inference.kv_cache import KVCache
    from inference.model import HIDDEN_STATES
    from inference.settings import ContextSettings, GenerationSettings

    engine = Engine(target)
    table = target_table(target_dir)
    sequences = []
    for seed in range(replies):
        reply = engine.generate_text(prompt_ids, GenerationSettings(
            sampling=replace(sampling, seed=seed, max_new_tokens=max_new_tokens), context=ContextSettings(n_ctx=512)))
        ids = list(prompt_ids) + reply.token_ids
        cache = KVCache(target.compiled, target.rope, kept_outputs=(HIDDEN_STATES,))
        cache.forward(ids)
        hidden = cache.rows(0, len(ids)).copy()
        logits = hidden.astype(np.float64) @ table.T
        peak = logits.max(axis=-1)
        lse = peak + np.log(np.exp(logits - peak[:, None]).sum(axis=-1))
        sequences.append((np.asarray(ids), len(prompt_ids), hidden.astype(np.float16), lse.astype(np.float32),
                          logits.argmax(axis=-1).astype(np.int32)))
    return sequences


def write_trained_tiny_head(target, target_dir: Path, prompt_ids: list[int], sampling, vocab: list[int], folder: Path,
                            replies: int = 16, steps: int = 20) -> Path:
    """A tiny head trained, with ``train.py``'s own loss, on the tiny target's replies to ``prompt_ids`` sampled with
    ``sampling`` (and its hidden states there), so that its drafts agree with the target often but not always.

    The defaults (16 replies, 20 steps: 1.4 s of CPU on one Xeon core) leave the head of
    ``test_speculative_equivalence`` accepting about half its drafts under that test's penalties (612 of 1,118 over its
    500 seeded replies), as its perturbed draft model does (562 of 1,198). 64 replies and 150 steps (13 s) accepted 947
    of 1,001: at the edge of that test's "some drafts rejected" check, with few rejections to resample from; the
    residual bug its negative control plants, run through the head, then failed the chi-square at p = 1e-4 only,
    against p = 1e-12 with these defaults.

    Args:
        target: the loaded tiny target (``target_dir``'s model).
        prompt_ids: the prompt the replies continue.
        sampling: ``SamplingSettings`` of the replies (seeded 0 .. replies - 1; 12 tokens each).
        vocab: the head's draft vocabulary.
        folder: where the head is written (int8, as shipped).
    """
    from tools.draft_head.train import collate, losses

    table = target_table(target_dir)
    sequences = tiny_training_sequences(target, target_dir, prompt_ids, sampling, replies)
    state = tiny_head_state(target_dir, vocab, scale=0.0)
    head = state["module"]
    to_draft = draft_index(np.asarray(vocab), table.shape[0])
    batch = collate(sequences, list(range(len(sequences))), to_draft, "cpu")
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(steps):
        loss, _ = losses(head, batch, noise=0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    state["head"] = head.state_dict()
    write_head_folder(folder, state, target_dir, training={"note": f"{replies} tiny replies, {steps} steps, for tests"})
    return folder
