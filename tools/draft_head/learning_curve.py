"""Acceptance against training data: the head trained on growing prefixes of the training shards.

    .venv/bin/python -m tools.draft_head.learning_curve --data DATA --out CURVE --tokens 100000 400000 1600000

Each size is a separate ``train.py`` run (same seed, batch size and epochs, or more epochs where a small set needs
them to take ``--min-steps`` optimizer steps) in ``CURVE/t<tokens>``; a run already finished there is reused. Writes ``CURVE/curve.json`` and prints a Markdown table of the held-out acceptance after
the last epoch of each run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, nargs="+", required=True, help="training reply tokens of each run")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--min-steps", type=int, default=800, help="optimizer steps each run takes at least")
    args = parser.parse_args(argv)
    rows = []
    for tokens in args.tokens:
        run = args.out / f"t{tokens}"
        metrics = run / "metrics.json"
        done = metrics.is_file() and json.loads(metrics.read_text())[-1].get("final", False)
        if not done:
            train.main(["--data", str(args.data), "--out", str(run), "--train-tokens", str(tokens), "--epochs",
                        str(args.epochs), "--min-steps", str(args.min_steps), "--batch-tokens", str(args.batch_tokens),
                        "--resume"])
        rows.append(json.loads(metrics.read_text())[-1])
    (args.out / "curve.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("| training reply tokens | greedy: 1st draft | greedy: 2nd given 1st | sampled: 1st draft | sampled: 2nd |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['train_reply_tokens']:,} | {row['greedy_accept_1']:.3f} | {row['greedy_accept_2_given_1']:.3f} | "
              f"{row['sampled_accept_1']:.3f} | {row['sampled_accept_2']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
