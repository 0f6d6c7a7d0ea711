"""Rebuild the shipped draft head from the committed corpus and check it (``make head``).

    .venv/bin/python -m tools.draft_head.rebuild [--out build/draft_head/head] [--dry-run]

Runs the stages the shipped head's manifest records (``training.rebuild.commands`` of
``inference/models/data/SmolLM2-135M-Instruct-head/draft_head.json``: the data folder rebuilt from
``tools/draft_head/conversations``, the two runs of the unfused head it started from and that head's export under
``build/``, the data folder with the target's layer features 1 and 14 for shards 0, 16, 32 and 50-82, the fused run
from that head, the export) from the repository root with this Python, the last export writing to ``--out`` instead
of over the shipped head. Then it compares the rebuilt head's held-out acceptance (``train.py``'s evaluation on the
same held-out shards, which the export records) with the manifest's: the greedy and the sampled acceptance of the
first draft must each reach the shipped value less :data:`TOLERANCE`.

Needs the conversion extra (torch) and the 4-bit default model (``specchat models fetch-default``); on 2 cores about
7 hours: the unfused head about 3.5 (the hidden states of 50 shards about 1.5 hours, its two runs 45 and 65
minutes), the layer features of 36 shards about 2.5 (235-560 s a shard on one thread), the fused run about 1.5
(2,357 steps, 230-360 s per 150 on one thread on an otherwise idle Xeon). The data folders resume where they
stopped, and so does the fused run (``--resume``); the unfused runs start over.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from inference.draft_head import read_head_manifest
from inference.models.default_head import SHIPPED_HEAD

REPO = Path(__file__).resolve().parents[2]
#: How far below the shipped head's held-out acceptance a rebuild may land, absolute. Less than any training stage
#: added (the second run lifted greedy acceptance 0.653 -> 0.696, sampled 0.505 -> 0.549), more than the rounding
#: of bf16 on another CPU moves it.
TOLERANCE = 0.02
#: The held-out figures compared (``training.held_out`` of a head manifest).
CHECKED = ("greedy_accept_1", "sampled_accept_1")


def stages(manifest: dict, out: Path) -> list[list[str]]:
    """The manifest's rebuild commands as argument lists: ``python`` is this interpreter, and the last stage (the
    export of the head itself; an earlier export writes the head a later training run starts from) writes to
    ``out``.

    Raises:
        ValueError: the manifest records no rebuild commands (a head exported before they were recorded).
    """
    commands = manifest.get("training", {}).get("rebuild", {}).get("commands")
    if not commands:
        raise ValueError("the head's manifest records no rebuild commands (training.rebuild.commands)")
    result = []
    for command in commands:
        words = shlex.split(command)
        if words[0] == "python":
            words[0] = sys.executable
        result.append(words)
    last = result[-1]
    if "tools.draft_head.export" in last and "--out" in last:  # an earlier export writes a head a later run starts from
        last[last.index("--out") + 1] = str(out)
    return result


def shortfalls(rebuilt: dict, shipped: dict, tolerance: float = TOLERANCE) -> list[str]:
    """Where a rebuilt head's held-out acceptance falls more than ``tolerance`` below the shipped head's (both
    manifests' ``training.held_out``), e.g. ``["greedy_accept_1 0.650 < 0.696 - 0.02"]``; empty when it does not."""
    new, old = rebuilt["training"]["held_out"], shipped["training"]["held_out"]
    return [f"{name} {new[name]:.3f} < {old[name]:.3f} - {tolerance}" for name in CHECKED
            if new[name] < old[name] - tolerance]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "draft_head" / "head",
                        help="where the rebuilt head is exported (default: build/draft_head/head)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    shipped = read_head_manifest(SHIPPED_HEAD)
    for words in stages(shipped, args.out.resolve()):
        print("$ " + shlex.join(words), flush=True)
        if not args.dry_run and (code := subprocess.run(words, cwd=REPO).returncode) != 0:
            print(f"that stage failed (exit code {code}); fix what it said and run again", file=sys.stderr)
            return code
    if args.dry_run:
        return 0
    rebuilt = json.loads((args.out / "draft_head.json").read_text(encoding="utf-8"))
    missed = shortfalls(rebuilt, shipped)
    figures = ", ".join(f"{name} {rebuilt['training']['held_out'][name]:.3f} (shipped "
                        f"{shipped['training']['held_out'][name]:.3f})" for name in CHECKED)
    verdict = f"FAILED: {'; '.join(missed)}" if missed else f"within {TOLERANCE}"
    print(f"rebuilt head in {args.out}: {figures}; {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
