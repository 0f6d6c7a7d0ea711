"""Train the draft head on data from ``generate.py`` (torch, CPU or CUDA).

    .venv/bin/python -m tools.draft_head.train --data DATA_DIR --out RUN_DIR [--train-tokens N] [--epochs 4]

Loss, per reply position ``j`` (predicting token ``x_{j+2}``), for the first drafting step and the second
(``head.DraftHead``): the cross-entropy of the head's draft-vocabulary distribution against the target's own
distribution there (soft targets, ``exp(E_v . h_{j+1} - lse_{j+1})``; the target's mass outside the vocabulary is
left out), plus ``REGRESSION_WEIGHT`` times a smooth-L1 loss between the head's feature and ``h_{j+1}``
(EAGLE's feature regression). The target's features get uniform noise of ``FEATURE_NOISE`` during training (EAGLE,
section 4.2), since the app feeds them from passes of other shapes.

Reports on the held-out shards (``evaluate``): greedy acceptance of the first draft (its argmax is the target's
argmax, the token greedy decoding emits) and of the second given the first, and the expected acceptance of
speculative sampling at the chat defaults (``sum_v min(p(v), q(v))`` with both distributions at temperature 0.7,
top-p 0.9; Leviathan et al., arXiv 2211.17192, section 3.3). Checkpoints go to ``RUN_DIR/head.pt`` after every
epoch (``--resume`` continues from it); ``RUN_DIR/metrics.json`` holds the evaluation after each. ``--init
OTHER_RUN/head.pt`` starts from another run's weights and draft vocabulary with a fresh optimizer and schedule
(fine-tuning on a grown data set costs an epoch over it instead of a run from scratch).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .generate import is_held_out, shard_path
from .head import DraftHead, HeadConfig
from .target import final_norm_weight, target_table

REGRESSION_WEIGHT = 0.2
FEATURE_NOISE = 0.05
SPECIAL_TOKENS = (0, 1, 2)  # always in the draft vocabulary (EOS ends most replies)


class Shards:
    """Conversations of a data folder: token ids, prompt lengths and the target's features, in memory.

    Args:
        folder: a data folder of ``generate.py``.
        held_out: read the held-out shards instead of the training ones.
        max_reply_tokens: stop adding shards once this many reply tokens are loaded (None: all).
        only: read only these shard indices (None: every shard of the split), e.g. to evaluate on the same
            held-out shards as an earlier run after the data folder grew.
    """

    def __init__(self, folder: Path, held_out: bool, max_reply_tokens: int | None = None,
                 only: list[int] | None = None):
        manifest = json.loads((folder / "manifest.json").read_text())
        # (tokens, prompt length, hidden, lse, argmax[, layers float16 [S, fused, hidden] where the folder has them])
        self.sequences: list[tuple] = []
        self.greedy: list[bool] = []  # whether conversation i's reply was greedy (else at the chat defaults)
        self.reply_tokens = 0
        self.shards: list[int] = []
        for entry in manifest["shards"]:
            if is_held_out(entry["index"]) != held_out or (only is not None and entry["index"] not in only):
                continue
            if max_reply_tokens is not None and self.reply_tokens >= max_reply_tokens:
                break
            data = np.load(shard_path(folder, entry["index"]))
            offsets = data["offsets"]
            tokens, hidden, lse, argmax = data["tokens"], data["hidden"], data["lse"], data["argmax"]
            layers = data["layers"] if "layers" in data.files else None
            for i, prompt_length in enumerate(data["prompt_lengths"]):
                s, e = int(offsets[i]), int(offsets[i + 1])
                if e - s - int(prompt_length) < 3:
                    continue
                sequence = (tokens[s:e], int(prompt_length), hidden[s:e], lse[s:e], argmax[s:e])
                self.sequences.append(sequence + ((layers[s:e],) if layers is not None else ()))
                self.greedy.append(bool(data["greedy"][i]))
                self.reply_tokens += e - s - int(prompt_length)
            self.shards.append(entry["index"])

    def token_counts(self, vocab_size: int) -> np.ndarray:
        """How often each token id occurs in the replies, int64 ``[vocab_size]``."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        for tokens, prompt_length, *_ in self.sequences:
            np.add.at(counts, tokens[prompt_length:], 1)
        return counts


def choose_vocab(counts: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` most frequent reply tokens (special tokens always), int64, most frequent first."""
    order = np.argsort(-counts, kind="stable")
    chosen = list(SPECIAL_TOKENS) + [int(t) for t in order if int(t) not in SPECIAL_TOKENS]
    return np.asarray(chosen[:size], dtype=np.int64)


def draft_index(vocab: np.ndarray, target_vocab: int) -> np.ndarray:
    """int64 ``[target_vocab]``: each target token's row in the draft vocabulary ``vocab``, ``len(vocab)`` (the
    out-of-vocabulary row) for the tokens outside it."""
    to_draft = np.full(target_vocab, len(vocab), dtype=np.int64)
    to_draft[vocab] = np.arange(len(vocab))
    return to_draft


def batches(sequences: list, max_tokens: int, rng: np.random.Generator | None) -> list[list[int]]:
    """Indices of ``sequences`` grouped by length into batches of at most ``max_tokens`` padded tokens."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    groups, current, longest = [], [], 0
    for i in order:
        length = len(sequences[i][0])
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            groups.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        groups.append(current)
    if rng is not None:
        rng.shuffle(groups)
    return groups


def collate(sequences: list, indices: list[int], to_draft: np.ndarray, device: str) -> dict:
    """Padded tensors of one batch: h ``[B, T, H]``, draft ids of ``x_{j+1}``, positions, the loss mask (reply
    positions ``j`` with ``prompt_length - 1 <= j <= length - 3``), next features ``h_{j+1}``, ``lse_{j+1}`` and
    the target's argmax token ``argmax_{j+1}``; and the fused layer outputs ``layers`` ``[B, T, fused, H]`` where the
    sequences have them."""
    longest = max(len(sequences[i][0]) for i in indices) - 1
    b = len(indices)
    size = sequences[indices[0]][2].shape[1]
    h = np.zeros((b, longest, size), dtype=np.float32)
    h_next = np.zeros((b, longest, size), dtype=np.float32)
    lse_next = np.zeros((b, longest), dtype=np.float32)
    argmax_next = np.zeros((b, longest), dtype=np.int64)
    ids = np.zeros((b, longest), dtype=np.int64)
    mask = np.zeros((b, longest), dtype=bool)
    fused = len(sequences[indices[0]]) > 5
    layers = np.zeros((b, longest) + sequences[indices[0]][5].shape[1:], dtype=np.float32) if fused else None
    for row, i in enumerate(indices):
        tokens, prompt_length, hidden, lse, argmax = sequences[i][:5]
        n = len(tokens) - 1
        h[row, :n] = hidden[:n]
        h_next[row, :n] = hidden[1 : n + 1]
        lse_next[row, :n] = lse[1 : n + 1]
        argmax_next[row, :n] = argmax[1 : n + 1]
        ids[row, :n] = to_draft[tokens[1 : n + 1]]
        mask[row, prompt_length - 1 : n - 1] = True
        if fused:
            layers[row, :n] = sequences[i][5][:n]
    positions = np.broadcast_to(np.arange(longest), (b, longest))
    tensors = dict(h=h, h_next=h_next, lse_next=lse_next, argmax_next=argmax_next, ids=ids, mask=mask,
                   positions=np.ascontiguousarray(positions))
    if fused:
        tensors["layers"] = layers
    return {key: torch.from_numpy(value).to(device) for key, value in tensors.items()}


def losses(head: DraftHead, batch: dict, noise: float, steps: int = 2) -> tuple[torch.Tensor, dict]:
    """Training loss of one batch (``steps`` drafting steps, ``DraftHead.unroll``) and its parts (``step1``...)."""
    h = batch["h"]
    layers = batch.get("layers")
    if noise:
        h = h + (torch.rand_like(h) * 2 - 1) * noise
        if layers is not None:
            layers = layers + (torch.rand_like(layers) * 2 - 1) * noise
    features = head.unroll(h, batch["ids"], batch["positions"], steps, layers)
    mask = batch["mask"]
    h_next = batch["h_next"][mask]
    with torch.no_grad():
        target = torch.exp(head.logits(h_next) - batch["lse_next"][mask][:, None])
    parts, total = {}, 0.0
    for step, feature in enumerate(features, 1):
        name = f"step{step}"
        f = feature[mask]
        ce = -(target * F.log_softmax(head.logits(f), dim=-1)).sum(-1).mean()
        regression = F.smooth_l1_loss(f, h_next)
        total = total + ce + REGRESSION_WEIGHT * regression
        parts[name] = float(ce.detach())
    return total, parts


def warp(logits: torch.Tensor, temperature: float, top_p: float, head: int = 512) -> torch.Tensor:
    """Probabilities after temperature and top-p (nucleus) truncation, rows of ``logits`` ``[N, V]``, as
    ``inference.sampling.warp`` computes them. The nucleus is looked for among the ``head`` most likely tokens
    (at temperature 0.7 it is almost always far smaller), then among 4 times as many until every row's fits."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    width = min(head, probs.shape[-1])
    top, order = probs.topk(width, dim=-1)
    while width < probs.shape[-1] and bool((top.sum(-1) < top_p).any()):
        width = min(4 * width, probs.shape[-1])
        top, order = probs.topk(width, dim=-1)
    top = top * ((top.cumsum(-1) - top) < top_p)
    result = torch.zeros_like(probs).scatter(-1, order, top)
    return result / result.sum(-1, keepdim=True)


@torch.no_grad()
def evaluate(head: DraftHead, data: Shards, vocab: torch.Tensor, full_table: torch.Tensor, to_draft: np.ndarray,
             device: str, conversations: int = 150, steps: int = 2) -> dict:
    """Acceptance on held-out conversations (see the module docstring), on ``conversations`` evenly spaced greedy
    replies and as many sampled ones; ``full_table`` float32 ``[target vocab, hidden]`` is the target's whole
    embedding (for its full distribution).

    Returns:
        ``greedy_accept_1``: on greedy replies, how often the first draft is the target's argmax;
        ``greedy_accept_2_given_1``: how often the second draft is, where the first was;
        ``sampled_accept_1`` / ``sampled_accept_2``: on sampled replies, the expected acceptance of speculative
        sampling at temperature 0.7, top-p 0.9 (``sum min(p, q)``) of the first and of the second draft step;
        with ``steps`` 3 also ``greedy_accept_3_given_2`` (the third draft, where the first two were the target's)
        and ``sampled_accept_3``;
        ``positions``: reply positions scored.
    """
    head.eval()
    totals = {"greedy_1": 0.0, "greedy_2": 0.0, "greedy_2_of": 0, "greedy_n": 0, "sampled_1": 0.0, "sampled_2": 0.0,
              "sampled_n": 0, "greedy_3": 0, "greedy_3_of": 0, "sampled_3": 0.0}
    for kind in ("greedy", "sampled"):
        chosen = [i for i, greedy in enumerate(data.greedy) if greedy == (kind == "greedy")]
        chosen = chosen[:: max(1, len(chosen) // conversations)][:conversations]
        for indices in batches([data.sequences[i] for i in chosen], 8192, None):
            batch = collate([data.sequences[i] for i in chosen], indices, to_draft, device)
            features = head.unroll(batch["h"], batch["ids"], batch["positions"], max(2, steps), batch.get("layers"))
            g, g2 = features[0], features[1]
            mask = batch["mask"]
            totals[f"{kind}_n"] += int(mask.sum())
            if kind == "greedy":
                target_top = batch["argmax_next"]
                first = (vocab[head.logits(g).argmax(-1)] == target_top) & mask
                second = (vocab[head.logits(g2).argmax(-1)] == target_top) & mask
                # step 2 at position j drafts after step 1 at j - 1 drafted the token there: a chain of two
                after_first = torch.zeros_like(first)
                after_first[:, 1:] = first[:, :-1]
                totals["greedy_1"] += int(first.sum())
                totals["greedy_2"] += int((second & after_first).sum())
                totals["greedy_2_of"] += int(after_first.sum())
                if steps >= 3:  # step 3 at j continues step 2 at j - 1, which continued step 1 at j - 2
                    third = (vocab[head.logits(features[2]).argmax(-1)] == target_top) & mask
                    after_second = torch.zeros_like(first)
                    after_second[:, 1:] = (second & after_first)[:, :-1]
                    totals["greedy_3"] += int((third & after_second).sum())
                    totals["greedy_3_of"] += int(after_second.sum())
            else:
                target_p = warp(batch["h_next"][mask] @ full_table.T, 0.7, 0.9)[:, vocab]
                totals["sampled_1"] += float(torch.minimum(target_p, warp(head.logits(g[mask]), 0.7, 0.9)).sum())
                totals["sampled_2"] += float(torch.minimum(target_p, warp(head.logits(g2[mask]), 0.7, 0.9)).sum())
                if steps >= 3:
                    totals["sampled_3"] += float(torch.minimum(
                        target_p, warp(head.logits(features[2][mask]), 0.7, 0.9)).sum())
    head.train()
    third = {}
    if steps >= 3:
        third = {"greedy_accept_3_given_2": totals["greedy_3"] / max(1, totals["greedy_3_of"]),
                 "sampled_accept_3": totals["sampled_3"] / max(1, totals["sampled_n"])}
    return third | {
        "positions": totals["greedy_n"] + totals["sampled_n"],
        "greedy_accept_1": totals["greedy_1"] / max(1, totals["greedy_n"]),
        "greedy_accept_2_given_1": totals["greedy_2"] / max(1, totals["greedy_2_of"]),
        "sampled_accept_1": totals["sampled_1"] / max(1, totals["sampled_n"]),
        "sampled_accept_2": totals["sampled_2"] / max(1, totals["sampled_n"]),
    }


def default_precision() -> str:
    """``bf16`` on CUDA and on CPUs with native bf16 (AVX512_BF16 or AMX: 2.4x faster than f32 on a Zen 5), else
    ``f32``."""
    if torch.cuda.is_available():
        return "bf16"
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "bf16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "f32"


def shard_lengths(folder: Path, index: int) -> list[int]:
    """Token counts of the conversations ``Shards`` keeps of data shard ``index`` (read without its features)."""
    with np.load(shard_path(folder, index)) as data:
        offsets, prompt_lengths = data["offsets"], data["prompt_lengths"]
    return [int(offsets[i + 1] - offsets[i]) for i in range(len(prompt_lengths))
            if int(offsets[i + 1] - offsets[i]) - int(prompt_lengths[i]) >= 3]


def stream_plan(shards: list[int], group: int, seed: int, epoch: int) -> list[list[int]]:
    """Epoch ``epoch``'s groups of training shards: the shards in a seeded order, ``group`` at a time."""
    order = [shards[int(i)] for i in np.random.default_rng([seed, epoch]).permutation(len(shards))]
    return [order[i : i + group] for i in range(0, len(order), group)]


def warmup_cosine(optimizer, total_steps: int):
    """The learning-rate schedule of every run: linear warm-up over min(200, 10%) of ``total_steps`` steps, then a
    cosine from the full rate down to a tenth of it."""
    warmup = min(200, total_steps // 10)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total_steps - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def optimizer_step(head, batch: dict, optimizer, scheduler, autocast, draft_steps: int) -> dict:
    """One optimizer step on ``batch`` (the loss of ``losses``, gradients clipped to norm 1); returns the loss parts."""
    with autocast:
        loss, parts = losses(head, batch, FEATURE_NOISE, draft_steps)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return parts


def train_streaming(args: argparse.Namespace) -> int:
    """``--stream-shards``: train on every training shard of a data folder too large for memory, resumable at every
    group of shards.

    Each epoch visits the training shards (those of the data folder's manifest when the run started, kept in the
    checkpoint) in a seeded order, ``--stream-shards`` at a time; a group's conversations are batched and shuffled
    together (seeded by epoch and group), trained on, and dropped. After every group the checkpoint
    (``OUT/head.pt``: weights, optimizer, schedule, where the run is) is replaced atomically and ``OUT/manifest.json``
    names it with the run's command, data and progress; ``--resume`` continues after the last finished group.
    The learning rate follows ``main``'s schedule over the run's total steps, counted before training from the
    shards' conversation lengths. With ``--init-head`` the run starts from an exported head (its draft vocabulary,
    its weights read back by ``import_ir``; the fusion of the data folder's layer features, if any, at zero): the
    evaluation before the first step is that head's, on the same held-out positions as every later one.
    Evaluations (``evaluate``, ``--draft-steps`` steps) run every ``--eval-every`` groups and at each epoch's end,
    into ``OUT/metrics.json`` with the reply tokens trained on so far.
    """
    from .import_ir import head_state

    autocast = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.precision == "bf16")
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((args.data / "manifest.json").read_text())
    fused = len(manifest.get("feature_layers", []))
    checkpoint = args.out / "head.pt"
    state = None
    if args.resume and checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)  # our own: it holds NumPy arrays
    plan = state["plan"] if state else [e["index"] for e in manifest["shards"] if not is_held_out(e["index"])]
    reply_tokens = {e["index"]: e["reply_tokens"] for e in manifest["shards"] if "reply_tokens" in e}
    table = target_table(Path(manifest["model"]))
    initial = head_state(args.init_head) if args.init_head else None
    if initial and initial.get("feature_layers", manifest.get("feature_layers", [])) != manifest.get("feature_layers", []):
        raise SystemExit(f"{args.init_head} fuses the outputs of layers {initial['feature_layers']}, the data in "
                         f"{args.data} holds layers {manifest.get('feature_layers', [])}: start from a head made for "
                         "this data, or from a plain head")
    if initial:
        vocab = np.asarray(initial["vocab"])
    elif state:
        vocab = np.asarray(state["vocab"])
    else:
        counts = np.zeros(table.shape[0], dtype=np.int64)
        for index in plan:
            with np.load(shard_path(args.data, index)) as data:
                offsets, prompt_lengths, tokens = data["offsets"], data["prompt_lengths"], data["tokens"]
            for i, prompt_length in enumerate(prompt_lengths):
                np.add.at(counts, tokens[int(offsets[i]) + int(prompt_length) : int(offsets[i + 1])], 1)
        vocab = choose_vocab(counts, args.vocab)
    to_draft = draft_index(vocab, table.shape[0])
    base = initial["config"] if initial else {"hidden": table.shape[1], "vocab": len(vocab)}
    config = HeadConfig(**{**base, "fused": fused})
    head = DraftHead(config, torch.from_numpy(table[vocab]))
    if initial:
        weights = {k: v for k, v in initial["head"].items() if k != "table"}  # the target's own rows, not int8 ones
        missing, unexpected = head.load_state_dict(weights, strict=False)
        if unexpected or any(not k.startswith(("fuse.", "layer_norms.", "table")) for k in missing):
            raise SystemExit(f"{args.init_head}: weights do not fit ({missing}, {unexpected})")
    else:
        scale = final_norm_weight(Path(manifest["model"]))
        if scale is not None and scale.shape == (config.hidden,):
            with torch.no_grad():
                head.final_norm.weight.copy_(torch.from_numpy(scale))
    head = head.to(args.device)
    full_table = torch.from_numpy(table).to(args.device)
    vocab_t = torch.from_numpy(vocab).to(args.device)
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    lengths = {index: shard_lengths(args.data, index) for index in plan}

    def group_batches(group: list[int], rng: np.random.Generator | None) -> list[list[int]]:
        return batches([(np.empty(n),) for index in group for n in lengths[index]], args.batch_tokens, rng)

    total_steps = sum(len(group_batches(group, None)) for epoch in range(args.epochs)
                      for group in stream_plan(plan, args.stream_shards, args.seed, epoch))
    scheduler = warmup_cosine(optimizer, total_steps)
    history: list[dict] = []
    position = {"epoch": 0, "group": 0, "steps": 0, "reply_tokens_seen": 0}
    if state:
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        history, position = state["history"], state["position"]
        torch.set_rng_state(state["torch_rng"])  # the feature noise: a resumed run is the uninterrupted one
    held_out = Shards(args.data, held_out=True, only=args.held_out_shards)
    started_from = {"head": str(args.init_head)} if args.init_head else None
    command = " ".join([Path(sys.executable).name, "-m", "tools.draft_head.train", *(sys.argv[1:] if __name__ ==
                                                                                      "__main__" else [])])

    def evaluation(note: str) -> None:
        started = time.time()
        with autocast:
            metrics = evaluate(head, held_out, vocab_t, full_table, to_draft, args.device, steps=args.draft_steps)
        metrics.update(position, note=note, eval_seconds=round(time.time() - started),
                       held_out_shards=held_out.shards)
        history.append(metrics)
        print(json.dumps(metrics), flush=True)

    def save() -> None:
        state = {
            "head": head.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "epoch": position["epoch"], "position": position, "plan": plan, "history": history,
            "config": config.as_dict(), "vocab": vocab, "args": {k: str(v) for k, v in vars(args).items()},
            "coverage": None, "feature_layers": manifest.get("feature_layers", []),
            "data_manifest": {k: manifest[k] for k in ("command", "seed", "model_sha256", "versions")},
            "train_shards": plan, "started_from": started_from, "torch_rng": torch.get_rng_state(),
        }
        torch.save(state, checkpoint.with_suffix(".tmp"))
        os.replace(checkpoint.with_suffix(".tmp"), checkpoint)
        (args.out / "metrics.json").write_text(json.dumps(history, indent=1))
        run = {"checkpoint": checkpoint.name, "data": str(args.data), "command": command, "position": position,
               "total_steps": total_steps, "epochs": args.epochs, "train_shards": plan,
               "train_reply_tokens": sum(reply_tokens.get(i, 0) for i in plan), "feature_layers":
               manifest.get("feature_layers", []), "draft_steps": args.draft_steps, "started_from": started_from,
               "last_evaluation": history[-1] if history else None, "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
        (args.out / "manifest.json").with_suffix(".tmp").write_text(json.dumps(run, indent=1))
        os.replace((args.out / "manifest.json").with_suffix(".tmp"), args.out / "manifest.json")

    print(f"streaming {len(plan)} training shards ({sum(reply_tokens.get(i, 0) for i in plan)} reply tokens), "
          f"{args.stream_shards} at a time, {args.epochs} epochs, {total_steps} steps; fused layers "
          f"{manifest.get('feature_layers', [])}; {args.draft_steps} draft steps; at {position}", flush=True)
    if not history:
        evaluation("before training" + (f": {args.init_head}" if args.init_head else ""))
        save()
    while position["epoch"] < args.epochs:
        groups = stream_plan(plan, args.stream_shards, args.seed, position["epoch"])
        group = groups[position["group"]]
        started = time.time()
        data = Shards(args.data, held_out=False, only=group)
        running = []
        rng = np.random.default_rng([args.seed, position["epoch"], position["group"]])
        for indices in batches(data.sequences, args.batch_tokens, rng):
            batch = collate(data.sequences, indices, to_draft, args.device)
            running.append(optimizer_step(head, batch, optimizer, scheduler, autocast, args.draft_steps))
        del data
        position = {**position, "group": position["group"] + 1, "steps": position["steps"] + len(running),
                    "reply_tokens_seen": position["reply_tokens_seen"] + sum(reply_tokens.get(i, 0) for i in group)}
        means = {k: round(float(np.mean([r[k] for r in running])), 4) for k in running[0]} if running else {}
        print(f"epoch {position['epoch']} group {position['group']}/{len(groups)} (shards {group}): "
              f"{len(running)} steps, ce {means} ({time.time() - started:.0f} s); {position['steps']}/{total_steps} "
              f"steps", flush=True)
        if position["group"] == len(groups):
            position = {**position, "epoch": position["epoch"] + 1, "group": 0}
            evaluation(f"end of epoch {position['epoch'] - 1}")
        elif position["group"] % args.eval_every == 0:
            evaluation(f"epoch {position['epoch']}, group {position['group']}")
        save()
    print("done", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.draft_head.train`` (a head manifest's rebuild commands are its lines)."""
    command_line = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    command_line.add_argument("--data", type=Path, required=True)
    command_line.add_argument("--out", type=Path, required=True)
    command_line.add_argument("--train-tokens", type=int, help="reply tokens to train on (default: all training shards)")
    command_line.add_argument("--epochs", type=int, default=4)
    command_line.add_argument("--min-steps", type=int, default=0,
                        help="train more epochs than --epochs if needed to take at least this many optimizer steps "
                             "(small data sets need more passes)")
    command_line.add_argument("--held-out-shards", type=int, nargs="+",
                        help="evaluate on these held-out shards only (default: all held-out shards of the data folder)")
    command_line.add_argument("--vocab", type=int, default=8192, help="draft vocabulary size")
    command_line.add_argument("--batch-tokens", type=int, default=2048)
    command_line.add_argument("--lr", type=float, default=2e-3)
    command_line.add_argument("--seed", type=int, default=0)
    command_line.add_argument("--resume", action="store_true")
    command_line.add_argument("--init", type=Path, help="start from this checkpoint's weights and draft vocabulary")
    command_line.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    command_line.add_argument("--precision", choices=("bf16", "f32"), default=default_precision(),
                        help="autocast precision of the matrix products (default: bf16 where the CPU has it natively)")
    command_line.add_argument("--draft-steps", type=int, default=2,
                        help="drafting steps trained and evaluated (the training-time test; EAGLE-3 uses 3 and more)")
    command_line.add_argument("--threads", type=int, help="torch threads (default: torch's, every core)")
    command_line.add_argument("--stream-shards", type=int,
                        help="stream the training shards this many at a time (for data folders larger than memory, "
                             "e.g. with layer features): see train_streaming; checkpoints after every group")
    command_line.add_argument("--init-head", type=Path,
                        help="with --stream-shards: start from an exported head folder's weights (import_ir), fused "
                             "features (the data folder's) starting at zero")
    command_line.add_argument("--eval-every", type=int, default=6, help="with --stream-shards: evaluate every N groups")
    return command_line


def main(argv: list[str] | None = None) -> int:
    command_line = parser()
    args = command_line.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.stream_shards:
        return train_streaming(args)
    if args.init_head:
        command_line.error("--init-head needs --stream-shards")
    autocast = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.precision == "bf16")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((args.data / "manifest.json").read_text())
    started = time.time()
    train = Shards(args.data, held_out=False, max_reply_tokens=args.train_tokens)
    held_out = Shards(args.data, held_out=True, only=args.held_out_shards)
    table = target_table(Path(manifest["model"]))
    initial = torch.load(args.init, map_location="cpu", weights_only=False) if args.init else None
    vocab = np.asarray(initial["vocab"]) if initial else choose_vocab(train.token_counts(table.shape[0]), args.vocab)
    to_draft = draft_index(vocab, table.shape[0])
    config = HeadConfig(hidden=table.shape[1], vocab=len(vocab))
    head = DraftHead(config, torch.from_numpy(table[vocab]))
    scale = final_norm_weight(Path(manifest["model"]))
    if scale is not None and scale.shape == (config.hidden,):
        with torch.no_grad():
            head.final_norm.weight.copy_(torch.from_numpy(scale))
    started_from = None
    if initial:
        head.load_state_dict(initial["head"])
        started_from = {"checkpoint": str(args.init), "train_command_args": initial["args"],
                        "last_epoch": initial["history"][-1], "started_from": initial.get("started_from")}
        del initial
    head = head.to(args.device)
    full_table = torch.from_numpy(table).to(args.device)
    vocab_t = torch.from_numpy(vocab).to(args.device)
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    groups = batches(train.sequences, args.batch_tokens, None)
    args.epochs = max(args.epochs, -(-args.min_steps // len(groups)))
    total_steps = args.epochs * len(groups)
    scheduler = warmup_cosine(optimizer, total_steps)
    checkpoint = args.out / "head.pt"
    history: list[dict] = []
    first_epoch = 0
    if args.resume and checkpoint.is_file():
        state = torch.load(checkpoint, map_location=args.device, weights_only=False)  # our own checkpoint: it holds NumPy RNG state
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        history, first_epoch = state["history"], state["epoch"] + 1
        rng = np.random.default_rng([args.seed, first_epoch])
    coverage = float(train.token_counts(table.shape[0])[vocab].sum() / max(1, train.reply_tokens))
    print(f"training on {train.reply_tokens} reply tokens ({len(train.sequences)} conversations, shards "
          f"{train.shards[:3]}...), held out {held_out.reply_tokens}; vocabulary {len(vocab)} covers "
          f"{coverage:.3f} of the training replies; {len(groups)} batches per epoch", flush=True)
    for epoch in range(first_epoch, args.epochs):
        epoch_start = time.time()
        running = []
        for step, indices in enumerate(batches(train.sequences, args.batch_tokens, rng)):
            batch = collate(train.sequences, indices, to_draft, args.device)
            running.append(optimizer_step(head, batch, optimizer, scheduler, autocast, args.draft_steps))
            if step % 200 == 0:
                recent = running[-200:]
                print(f"epoch {epoch} step {step}/{len(groups)}: ce1 {np.mean([r['step1'] for r in recent]):.3f} "
                      f"ce2 {np.mean([r['step2'] for r in recent]):.3f} ({time.time() - epoch_start:.0f} s)", flush=True)
        final = epoch == args.epochs - 1
        metrics = {}
        if final or (epoch + 1) % max(1, args.epochs // 4) == 0:  # about four evaluations per run
            with autocast:
                metrics = evaluate(head, held_out, vocab_t, full_table, to_draft, args.device,
                                   steps=args.draft_steps)
        metrics.update(epoch=epoch, train_reply_tokens=train.reply_tokens, seconds=round(time.time() - epoch_start),
                       train_ce1=float(np.mean([r["step1"] for r in running[-500:]])), final=final,
                       steps=(epoch + 1) * len(groups))
        history.append(metrics)
        print(json.dumps(metrics), flush=True)
        state = {
            "head": head.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "epoch": epoch, "history": history, "config": config.as_dict(), "vocab": vocab,
            "args": {k: str(v) for k, v in vars(args).items()}, "coverage": coverage,
            "data_manifest": {k: manifest[k] for k in ("command", "seed", "model_sha256", "versions")},
            "train_shards": train.shards, "started_from": started_from,
        }
        torch.save(state, checkpoint.with_suffix(".tmp"))
        os.replace(checkpoint.with_suffix(".tmp"), checkpoint)
        (args.out / "metrics.json").write_text(json.dumps(history, indent=1))
    print(f"done in {time.time() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
