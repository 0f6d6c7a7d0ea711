"""Would verifying several first drafts at once (a tree of drafts) reach the free-chat bar where one draft does not?

    .venv/bin/python -m tools.draft_head.tree_check --data DATA [--head FOLDER] [--out RESULT.json]

A depth-1 tree of width W feeds the target the head's W likeliest next tokens side by side, each attending to the
context but not to the others (a tree attention mask: SpecInfer, Miao et al., arXiv 2305.09781; EAGLE-2, Li et al.,
arXiv 2406.16858), and keeps the one the target agrees with. Greedy, a step then yields 1 + hit@W tokens, where
hit@W is how often the target's own next token is among the head's top W. Teacher-forced on the held-out greedy
replies of a ``generate.py`` data folder, this prints hit@W for W = 1..MAX_WIDTH, and the speedup a W-wide tree
would predict at the pass costs of the committed free-chat benchmark (``bench/results/free_chat.json``: a target
pass over W + 1 tokens and one head pass, in one-token target passes, and its measured / predicted efficiency),
with hit@W scaled by that run's ratio of benchmark to held-out acceptance. SpecChat's stateful IR takes a 2-D
attention mask only, so such a tree needs a 4-D mask input added to the target's graph first: this check says
whether that work would pay.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .datastore_check import head_top_drafts, held_out_greedy_replies

MAX_WIDTH = 4
FREE_CHAT = Path(__file__).resolve().parents[2] / "bench" / "results" / "free_chat.json"


def hit_rates(data: Path, head_dir: Path, width: int = MAX_WIDTH) -> dict:
    """hit@1..width of the head on ``data``'s held-out greedy replies (see the module docstring)."""
    ranks = []  # per position: the target token's rank in the head's top ``width`` (width: not there)
    for tokens, hidden, argmax, prompt_length in held_out_greedy_replies(data):
        top = head_top_drafts(head_dir, tokens, hidden, width)
        for j in range(prompt_length - 1, len(tokens) - 2):
            found = np.flatnonzero(top[j] == int(argmax[j + 1]))
            ranks.append(int(found[0]) if found.size else width)
    ranks = np.asarray(ranks)
    return {"positions": int(ranks.size), "hit": {w: float(np.mean(ranks < w)) for w in range(1, width + 1)}}


def predicted_speedups(hit: dict[int, float], free_chat: dict) -> dict[int, float]:
    """Greedy speedup of a W-wide depth-1 tree at ``free_chat``'s pass costs, efficiency and benchmark / held-out
    acceptance ratio: (1 + hit@W x ratio) / (target pass over W + 1 tokens + one head pass) x efficiency."""
    ratios = free_chat["pass_costs"]["ratio"]
    greedy = next(row for row in free_chat["bars"] if row["sampling"] == "greedy")
    scale, efficiency = greedy["acceptance"] / greedy["held_out_now"], greedy["efficiency"]
    return {w: (1 + h * scale) / (ratios[f"target_{w + 1}"] + ratios["head_1"]) * efficiency
            for w, h in hit.items() if f"target_{w + 1}" in ratios}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--head", type=Path, help="head folder (default: the installed default model's)")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    if args.head is None:
        from inference.models.default_head import default_head_dir

        args.head = default_head_dir()
    result = hit_rates(args.data, args.head)
    speedups = predicted_speedups(result["hit"], json.loads(FREE_CHAT.read_text()))
    result["predicted_greedy_speedup"] = speedups
    print(f"{result['positions']:,} held-out greedy reply positions")
    print("| tree width W | hit@W (held out) | predicted greedy speedup |")
    print("| --- | --- | --- |")
    for w, h in result["hit"].items():
        print(f"| {w} | {h:.3f} | {speedups[w]:.2f}x |" if w in speedups else f"| {w} | {h:.3f} | — |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
