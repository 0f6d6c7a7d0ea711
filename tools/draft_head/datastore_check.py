"""Would a datastore of the target's own replies (REST, He et al., arXiv 2311.08252) add to the draft head?

    .venv/bin/python -m tools.draft_head.datastore_check --data DATA [--conversations tools/draft_head/conversations]
        [--datastore-tokens N] [--head FOLDER] [--out RESULT.json]

Teacher-forced on the held-out greedy replies of a ``generate.py`` data folder, at every reply position:

* the head's first draft: the head IR (by default the installed default model's) fed the target's stored hidden
  states, as ``HeadDrafter`` feeds it while decoding;
* the datastore's proposal: the most frequent continuation of the longest suffix (up to ``MAX_NGRAM`` tokens) of
  the context that occurs at least ``MIN_SUPPORT`` times in the training shards' replies, with its share of that
  suffix's continuations (``Datastore``; REST retrieves the same way from a suffix array, and so does prompt lookup
  from the prompt).

Each is compared with the target's own next token (its argmax in the exact teacher-forced pass). Printed: how often
the head is right, the datastore's coverage and hit rate from each confidence up, what "the datastore where it is
that confident, else the head" reaches, and how often either one is right (the most any per-step choice between
the two could reach at K = 1).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from . import corpus
from .generate import is_held_out, shard_path

#: Longest context suffix the datastore matches.
MAX_NGRAM = 4
#: Fewest occurrences of a suffix for its continuations to count (one occurrence says little).
MIN_SUPPORT = 2
CONFIDENCES = (0.0, 0.3, 0.5, 0.7, 0.9)


class Datastore:
    """Continuations of every 1..``max_ngram``-token context in a set of replies.

    Args:
        max_ngram: longest context suffix matched.
    """

    def __init__(self, max_ngram: int = MAX_NGRAM):
        self.max_ngram = max_ngram
        self._next: list[dict[tuple[int, ...], Counter]] = [defaultdict(Counter) for _ in range(max_ngram + 1)]

    def add(self, tokens: list[int], start: int) -> None:
        """Count the continuations of ``tokens[start:]`` (a reply; the tokens before it are its context)."""
        for t in range(max(start, 1), len(tokens)):
            for n in range(1, min(self.max_ngram, t) + 1):
                self._next[n][tuple(tokens[t - n : t])][tokens[t]] += 1

    def propose(self, context: list[int], min_support: int = MIN_SUPPORT) -> tuple[int, float] | None:
        """The most frequent token after the longest suffix of ``context`` seen at least ``min_support`` times in
        the replies, and its share (0-1] of that suffix's continuations; None when no suffix was seen that often."""
        for n in range(min(self.max_ngram, len(context)), 0, -1):
            continuations = self._next[n].get(tuple(context[-n:]))
            if continuations and sum(continuations.values()) >= min_support:
                token, count = continuations.most_common(1)[0]
                return token, count / sum(continuations.values())
        return None


def held_out_greedy_replies(data: Path) -> Iterator[tuple[list[int], np.ndarray, np.ndarray, int]]:
    """Each greedy conversation of ``data``'s held-out shards: its token ids, the target's hidden states
    (float ``[len(tokens), hidden_size]``), the target's argmax after each token (int ``[len(tokens)]``) and its
    prompt length in tokens."""
    for entry in json.loads((data / "manifest.json").read_text())["shards"]:
        if not is_held_out(entry["index"]):
            continue
        with np.load(shard_path(data, entry["index"])) as shard:
            tokens, offsets, hidden, argmax = shard["tokens"], shard["offsets"], shard["hidden"], shard["argmax"]
            for i, prompt_length in enumerate(shard["prompt_lengths"]):
                if shard["greedy"][i]:
                    start, end = int(offsets[i]), int(offsets[i + 1])
                    yield tokens[start:end].tolist(), hidden[start:end], argmax[start:end], int(prompt_length)


def head_first_drafts(head_dir: Path, tokens: list[int], hidden: np.ndarray) -> np.ndarray:
    """int64 ``[len(tokens) - 2]``: the head's first draft of token ``j + 2`` from ``tokens[: j + 2]`` and the
    target's hidden states ``hidden`` (float ``[len(tokens), hidden_size]``), for every j, in one teacher-forced
    pass (position j reads the hidden state after token j and the token j + 1 that followed)."""
    return head_top_drafts(head_dir, tokens, hidden, 1)[:, 0]


def head_top_drafts(head_dir: Path, tokens: list[int], hidden: np.ndarray, width: int) -> np.ndarray:
    """int64 ``[len(tokens) - 2, width]``: the head's ``width`` likeliest first drafts of token ``j + 2``, likeliest
    first, teacher-forced as in :func:`head_first_drafts`."""
    request, vocab = _head(head_dir)
    request.reset_state()
    count = len(tokens) - 1
    request.infer({
        "input_ids": np.asarray([tokens[1:]], dtype=np.int64),
        "hidden_states": np.asarray(hidden[:-1], dtype=np.float32)[None],
        "attention_mask": np.ones((1, count), dtype=np.int64),
        "position_ids": np.arange(count, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, dtype=np.int32),
        "logits_to_keep": np.array([count], dtype=np.int64),
    })
    logits = request.get_tensor("logits").data[0, :-1]
    top = np.argpartition(-logits, width - 1, axis=-1)[:, :width]
    order = np.argsort(-np.take_along_axis(logits, top, axis=-1), axis=-1, kind="stable")
    return vocab[np.take_along_axis(top, order, axis=-1)]


@functools.cache
def _head(head_dir: Path):
    """The head's infer request (compiled in f32) and its draft vocabulary (int64 target ids)."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(head_dir / "openvino_model.xml"), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    vocab = json.loads((head_dir / "draft_head.json").read_text())["draft_vocab"]
    return compiled.create_infer_request(), np.asarray(vocab, dtype=np.int64)


def measure(data: Path, head_dir: Path, conversations: Path | None = None, max_tokens: int | None = None) -> dict:
    """The comparison of the module docstring over ``data``'s held-out greedy replies; the datastore holds the
    training shards' replies of ``data``, or of the corpus ``conversations`` (token ids suffice), up to
    ``max_tokens`` reply tokens (None: all)."""
    store = Datastore()
    train_reply_tokens = 0
    source = conversations or data
    indices = [s["index"] for s in json.loads((source / "manifest.json").read_text())["shards"]]
    for index in sorted(i for i in indices if not is_held_out(i)):
        if conversations is not None:
            arrays = corpus.read_shard(conversations, index)[0]
        else:
            with np.load(shard_path(data, index)) as shard:
                arrays = {name: shard[name] for name in corpus.TOKEN_ARRAYS}
        tokens, offsets = arrays["tokens"], arrays["offsets"]
        for i, prompt_length in enumerate(arrays["prompt_lengths"]):
            if max_tokens is not None and train_reply_tokens >= max_tokens:
                break
            store.add(tokens[offsets[i] : offsets[i + 1]].tolist(), int(prompt_length))
            train_reply_tokens += int(offsets[i + 1] - offsets[i] - prompt_length)
    head_right, proposals = [], []  # per position: the head right?; (datastore right?, confidence) or None
    for tokens, hidden, argmax, prompt_length in held_out_greedy_replies(data):
        drafts = head_first_drafts(head_dir, tokens, hidden)
        for j in range(prompt_length - 1, len(tokens) - 2):
            truth = int(argmax[j + 1])  # the target's token after tokens[: j + 2]
            head_right.append(int(drafts[j]) == truth)
            proposal = store.propose(tokens[: j + 2])
            proposals.append(None if proposal is None else (proposal[0] == truth, proposal[1]))
    rows = []
    for confidence in CONFIDENCES:
        chosen = [p if p is not None and p[1] >= confidence else None for p in proposals]
        covered = [c[0] for c in chosen if c is not None]
        rows.append({
            "min_confidence": confidence, "coverage": len(covered) / len(proposals),
            "datastore_right": float(np.mean(covered)) if covered else 0.0,
            "datastore_else_head": float(np.mean([c[0] if c is not None else h for c, h in zip(chosen, head_right)])),
        })
    either = np.mean([h or (p is not None and p[0]) for h, p in zip(head_right, proposals)])
    return {"positions": len(head_right), "train_reply_tokens": train_reply_tokens, "head": str(head_dir),
            "head_right": float(np.mean(head_right)), "either_right": float(either), "by_confidence": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--head", type=Path, help="head folder (default: the installed default model's)")
    parser.add_argument("--conversations", type=Path,
                        help="build the datastore from this corpus's training shards (e.g. tools/draft_head/"
                             "conversations) instead of the data folder's")
    parser.add_argument("--datastore-tokens", type=int, help="at most this many training reply tokens in the datastore")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    if args.head is None:
        from inference.models.default_head import default_head_dir

        args.head = default_head_dir()
    result = measure(args.data, args.head, args.conversations, args.datastore_tokens)
    print(f"{result['positions']:,} held-out greedy reply positions; datastore of {result['train_reply_tokens']:,} "
          f"training reply tokens. Head right: {result['head_right']:.3f}; head or datastore right: "
          f"{result['either_right']:.3f}")
    print("| datastore confidence >= | coverage | datastore right there | datastore there, else head |")
    print("| --- | --- | --- | --- |")
    for row in result["by_confidence"]:
        print(f"| {row['min_confidence']:.1f} | {row['coverage']:.3f} | {row['datastore_right']:.3f} | "
              f"{row['datastore_else_head']:.3f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
