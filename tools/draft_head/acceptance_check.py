"""Acceptance of exported draft heads on a data folder's held-out shards, greedy and sampled, side by side, without
torch.

    .venv/bin/python -m tools.draft_head.acceptance_check --data DATA --heads HEAD_DIR [HEAD_DIR ...] [--shards 0 16 32]

``train.py`` evaluates its own checkpoint on a sample of conversations; this check compares heads as the app runs
them (their int8 OpenVINO IR, e.g. the shipped one against a new run's export) on every reply position of the
chosen held-out shards, the same positions for every head (about 3 minutes a head on 3 shards, 2 cores). Per head
and shard, on the greedy replies:

* ``accept_1``: how often the head's first draft (argmax over its draft vocabulary, from the target's hidden state
  ``h_j`` and token ``x_{j+1}``) is the target's argmax at ``j + 1``, the token greedy decoding emits;
* ``accept_2_given_1``: on every ``SECOND_STEP_EVERY``-th position where the first draft was right, how often the
  second draft (from the head's own predicted hidden state, at position ``j + 1``, after the first draft) is the
  target's argmax at ``j + 2``; computed as the engine does it, by masking the later positions of the head's cache;
* ``calibration``: acceptance of the first draft by the head's top probability (bins of 0.1), which says when a
  second draft is worth its pass (EAGLE-2, arXiv 2406.16858, drafts further where the head is confident);

and on the replies sampled at the chat defaults, every position:

* ``sampled``: the expected acceptance of the first draft in
  speculative sampling, ``sum_v min(p(v), q(v))`` (Leviathan et al., arXiv 2211.17192, section 3.3), with ``p`` the
  target's distribution at temperature 0.7, top-p 0.9 (computed from its stored hidden state and LM-head rows; the
  repetition penalty left out, as ``train.evaluate`` does) and ``q`` the head's warped at each of ``DRAFT_WARPS``
  (the app warps it with the reply's own settings, the first), and for a certain draft (the head's argmax, accepted
  with the target's probability of it; what the engine does with a lookup draft). Any ``q`` keeps the output
  exact, so this says whether another draft distribution than the app's would be accepted more often.
Writes nothing; prints Markdown tables (``--json`` for the numbers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov

from inference.draft_head import DRAFT_HIDDEN, HIDDEN_INPUT, load_head
from inference.generation_config import CHAT_DEFAULTS
from inference.layer_features import LAYER_FEATURES
from inference.sampling import warp
from inference.settings import SamplingSettings

from .generate import is_held_out, shard_path
from .target import target_table

SECOND_STEP_EVERY = 4
BINS = np.linspace(0.0, 1.0, 11)
#: (temperature, top-p) of the draft distributions ``sampled_acceptance`` compares; the first is the app's own.
DRAFT_WARPS = ((CHAT_DEFAULTS.temperature, CHAT_DEFAULTS.top_p), (0.6, 0.9), (0.8, 0.9), (0.7, 1.0), (1.0, 1.0))


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _head_pass(request: ov.InferRequest, ids: np.ndarray, hidden: np.ndarray,
               layers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The head over a whole conversation from an empty cache, position ``j`` reading ``h_j`` and ``x_{j+1}``:
    float32 draft logits ``[n - 1, draft_vocab]`` and predicted features ``[n - 1, hidden]`` for ``ids`` ``[n]`` and
    the target's hidden states ``hidden`` ``[n, hidden]``; a fused head also reads the target's layer features
    ``layers`` ``[n, len(feature_layers), hidden]`` (the data folder's, as ``generate.py --layers`` stored them)."""
    fed = len(ids) - 1
    request.reset_state()
    inputs = {"input_ids": ids[1:][None].astype(np.int64), HIDDEN_INPUT: hidden[:fed][None].astype(np.float32),
              "attention_mask": np.ones((1, fed), np.int64), "position_ids": np.arange(fed)[None],
              "beam_idx": np.zeros(1, np.int32), "logits_to_keep": np.array([fed])}
    if layers is not None:
        inputs[LAYER_FEATURES] = layers[:fed][None].astype(np.float32)
    request.infer(inputs)
    return request.get_tensor("logits").data[0].copy(), request.get_tensor(DRAFT_HIDDEN).data[0].copy()


def check_shard(request: ov.InferRequest, vocab: np.ndarray, shard: Path, second_every: int = SECOND_STEP_EVERY,
                fused: bool = False) -> dict:
    """Acceptance of one head (its infer request, draft vocabulary int64 ``[draft_vocab]``; ``fused``: it reads the
    shard's layer features at its first draft, zeros at the second, as the engine drafts) on one shard's greedy
    replies, the second draft tried at every ``second_every``-th position where the first was right: ``positions``,
    ``accept_1``, ``second_samples``, ``accept_2_given_1``, and per-position arrays ``top_probability`` float32 and
    ``right`` bool (the first draft's) for the calibration."""
    data = np.load(shard)
    offsets, tokens, hidden, argmax = data["offsets"], data["tokens"], data["hidden"], data["argmax"]
    layers = data["layers"] if fused else None
    no_features = {LAYER_FEATURES: np.zeros((1, 1, layers.shape[1], layers.shape[2]), np.float32)} if fused else {}
    top_probability, right, second = [], [], []
    for i, prompt_length in enumerate(data["prompt_lengths"]):
        if not data["greedy"][i]:
            continue
        start, end = int(offsets[i]), int(offsets[i + 1])
        ids, target_top, n = tokens[start:end], argmax[start:end], end - start
        if n - int(prompt_length) < 3:
            continue
        logits, predicted = _head_pass(request, ids, hidden[start:end], None if layers is None else layers[start:end])
        positions = np.arange(int(prompt_length) - 1, n - 2)  # the reply positions train.py scores
        probs = _softmax(logits[positions])
        first = vocab[probs.argmax(-1)]
        ok = first == target_top[positions + 1]
        top_probability.append(probs.max(-1))
        right.append(ok)
        slots = n - 1  # the head's cache holds the whole conversation
        for j in positions[ok][::second_every]:
            mask = np.zeros((1, slots + 1), np.int64)
            mask[0, : j + 1] = 1  # positions after j are later tokens: masked, as a rollback masks them
            mask[0, -1] = 1
            request.infer({"input_ids": np.array([[first[j - positions[0]]]], np.int64),
                           HIDDEN_INPUT: predicted[j][None, None], "attention_mask": mask,
                           "position_ids": np.array([[j + 1]]), "beam_idx": np.zeros(1, np.int32),
                           "logits_to_keep": np.array([1]), **no_features})
            slots += 1
            second.append(vocab[int(request.get_tensor("logits").data[0, -1].argmax())] == target_top[j + 2])
    top = np.concatenate(top_probability)
    ok = np.concatenate(right)
    return {"positions": int(len(ok)), "accept_1": float(ok.mean()), "second_samples": len(second),
            "accept_2_given_1": float(np.mean(second)) if second else float("nan"), "top_probability": top, "right": ok}


def sampled_acceptance(request: ov.InferRequest, vocab: np.ndarray, shard: Path, table: np.ndarray,
                       warps: tuple[tuple[float, float], ...] = DRAFT_WARPS, fused: bool = False) -> dict:
    """Expected first-draft acceptance on one shard's replies sampled at the chat defaults (see the module
    docstring) of one head (its infer request, draft vocabulary int64 ``[draft_vocab]``; ``fused`` as for
    ``check_shard``); ``table`` float32 ``[target vocab, hidden]`` is the target's LM-head rows
    (``target.target_table``).

    Returns:
        ``positions`` scored, ``accept`` ``{"T/top-p": acceptance}`` per draft warp, ``certain``: acceptance of
        the head's argmax drafted as a certain token.
    """
    data = np.load(shard)
    offsets, tokens, hidden = data["offsets"], data["tokens"], data["hidden"]
    layers = data["layers"] if fused else None
    totals, certain, scored = np.zeros(len(warps)), 0.0, 0
    for i, prompt_length in enumerate(data["prompt_lengths"]):
        start, end = int(offsets[i]), int(offsets[i + 1])
        if data["greedy"][i] or end - start - int(prompt_length) < 3:
            continue
        logits, _ = _head_pass(request, tokens[start:end], hidden[start:end],
                               None if layers is None else layers[start:end])
        positions = np.arange(int(prompt_length) - 1, end - start - 2)  # the reply positions train.py scores
        target = warp(hidden[start + positions + 1].astype(np.float32) @ table.T, CHAT_DEFAULTS)[:, vocab]
        drafts = logits[positions]
        for w, (temperature, top_p) in enumerate(warps):
            q = warp(drafts, SamplingSettings(temperature=temperature, top_p=top_p))
            totals[w] += np.minimum(target, q).sum()
        certain += target[np.arange(len(positions)), drafts.argmax(-1)].sum()
        scored += len(positions)
    return {"positions": scored, "accept": {f"{t}/{p}": float(x / max(1, scored)) for (t, p), x in zip(warps, totals)},
            "certain": float(certain / max(1, scored))}


def calibration(top: np.ndarray, right: np.ndarray) -> list[dict]:
    """Share of positions and first-draft acceptance per bin of the head's top probability."""
    rows = []
    for low, high in zip(BINS[:-1], BINS[1:]):
        chosen = (top >= low) & ((top < high) if high < 1 else (top <= high))
        rows.append({"top_probability": f"{low:.1f}-{high:.1f}", "share": float(chosen.mean()),
                     "accept_1": float(right[chosen].mean()) if chosen.any() else float("nan")})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a data folder of generate.py")
    parser.add_argument("--heads", type=Path, nargs="+", required=True, help="exported head folders")
    parser.add_argument("--shards", type=int, nargs="+", help="held-out shards (default: every held-out shard)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    manifest = json.loads((args.data / "manifest.json").read_text())
    shards = args.shards or [s["index"] for s in manifest["shards"] if is_held_out(s["index"])]
    training = [index for index in shards if not is_held_out(index)]
    if training:
        parser.error(f"shards {training} are training shards: acceptance there says nothing about new text")
    table = target_table(Path(manifest["model"]))
    results = {}
    for folder in args.heads:
        head = load_head(folder)  # compiled as the app compiles it
        fused = bool(head.feature_layers)
        if fused and list(head.feature_layers) != manifest.get("feature_layers", []):
            parser.error(f"{folder} reads decoder layers {list(head.feature_layers)}; {args.data} holds "
                         f"{manifest.get('feature_layers', [])} (generate.py --layers)")
        per_shard = {index: check_shard(head.compiled.create_infer_request(), head.vocab, shard_path(args.data, index),
                                        fused=fused) for index in shards}
        top = np.concatenate([r.pop("top_probability") for r in per_shard.values()])
        right = np.concatenate([r.pop("right") for r in per_shard.values()])
        seconds = sum(r["second_samples"] for r in per_shard.values())
        results[str(folder)] = {
            "shards": per_shard, "positions": int(len(right)), "accept_1": float(right.mean()),
            "accept_2_given_1": sum(r["accept_2_given_1"] * r["second_samples"] for r in per_shard.values()) / max(1, seconds),
            "calibration": calibration(top, right),
            "sampled": _pooled([sampled_acceptance(head.compiled.create_infer_request(), head.vocab,
                                                   shard_path(args.data, index), table, fused=fused)
                                for index in shards]),
        }
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"Greedy acceptance on held-out shards {shards} (every greedy reply position; the same positions for each head)\n")
    print("| head | positions | first draft | second given first | " + " | ".join(f"shard {i}" for i in shards) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in shards) + " |")
    for name, result in results.items():
        print(f"| {name} | {result['positions']:,} | {result['accept_1']:.3f} | {result['accept_2_given_1']:.3f} | "
              + " | ".join(f"{result['shards'][i]['accept_1']:.3f}" for i in shards) + " |")
    print("\nFirst-draft acceptance by the head's top probability (share of positions / acceptance):\n")
    print("| head | " + " | ".join(row["top_probability"] for row in next(iter(results.values()))["calibration"]) + " |")
    print("| --- | " + " | ".join("---" for _ in BINS[1:]) + " |")
    for name, result in results.items():
        print(f"| {name} | " + " | ".join(f"{row['share']:.2f} / {row['accept_1']:.2f}" for row in result["calibration"]) + " |")
    print("\nExpected first-draft acceptance on replies sampled at the chat defaults, by the head's draft distribution "
          "(temperature / top-p; the app's is the first):\n")
    sampled = next(iter(results.values()))["sampled"]
    print("| head | positions | " + " | ".join(sampled["accept"]) + " | certain (argmax) |")
    print("| --- | --- | " + " | ".join("---" for _ in sampled["accept"]) + " | --- |")
    for name, result in results.items():
        row = result["sampled"]
        print(f"| {name} | {row['positions']:,} | " + " | ".join(f"{v:.3f}" for v in row["accept"].values())
              + f" | {row['certain']:.3f} |")
    return 0


def _pooled(per_shard: list[dict]) -> dict:
    """``sampled_acceptance`` results of several shards, weighted by their positions."""
    positions = sum(r["positions"] for r in per_shard)

    def mean(values: list[float]) -> float:
        return sum(v * r["positions"] for v, r in zip(values, per_shard)) / max(1, positions)

    return {"positions": positions, "certain": mean([r["certain"] for r in per_shard]),
            "accept": {key: mean([r["accept"][key] for r in per_shard]) for key in per_shard[0]["accept"]}}


if __name__ == "__main__":
    sys.exit(main())
