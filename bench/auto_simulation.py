"""Auto's choices against simulated costs: milliseconds a token, Auto against plain decoding, by the head's acceptance.

    .venv/bin/python bench/auto_simulation.py                       # the Zen 5's measured costs, a few seconds
    .venv/bin/python bench/auto_simulation.py --switch-ms 0         # the same without the price of a change of width

The planner (``inference.auto_decoding.StepPlanner``) runs as the engine runs it, but every cost is given by a
model of the machine instead of measured: a target pass over n tokens costs ``--plain-ms + (n - 1) * --token-ms``,
plus ``--switch-ms`` when the pass before it read another number of tokens (OpenVINO re-derives every node's shapes:
``bench/pass_shapes.py``), and the head ``--draft-ms`` a draft; each draft is accepted with probability a / b
(seeded), and during plain steps the head is judged as the engine judges it (``Engine._judge_head``: every
``StepPlanner.shadow_every`` plain steps, one verdict per step, at the cost of ``JUDGE_DRAFTS`` drafts). No model runs, so the
planner's decisions are seen apart from the noise of real timings. Defaults: the Zen 5's figures
(``bench/results/epyc-zen5/PASS_SHAPES.md``; the head's draft as the engine's steps measured it, 2-3 ms).

For each acceptance it prints Auto's milliseconds a token (after the first 20 steps of ``--steps``), plain
decoding's, the head's at its own width every step, and the share of Auto's steps that drafted. Issue 34's bar, in
these terms: Auto at most plain's (0.97x of plain's speed at the worst) at every acceptance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from inference.auto_decoding import PLAIN, Measurements, StepPlanner  # noqa: E402

ACCEPTANCES = ((0, 1), (1, 4), (1, 3), (2, 5), (3, 7), (1, 2), (3, 5), (2, 3), (3, 4))
MS = 1e-3
#: What judging the head during plain steps costs, in drafts: its catch-up over the positions since (one pass of
#: ~2-3 single-draft passes' time, measured in the engine) and the estimates.
JUDGE_DRAFTS = 3


def simulate(accepted_of: tuple[int, int], plain_ms: float, token_ms: float, switch_ms: float, draft_ms: float,
             steps: int, seed: int = 0) -> tuple[float, float]:
    """Run Auto's planner with the head as its only drafter for ``steps`` steps at 100 cached tokens, each draft
    accepted with probability ``accepted_of[0] / accepted_of[1]`` (``seed`` seeds the draws).

    Returns:
        (milliseconds a token after the first 20 steps, share of those steps that drafted).
    """
    rng = np.random.default_rng(seed)
    rate = accepted_of[0] / accepted_of[1]
    planner = StepPlanner(Measurements(), ("head",))
    previous, total, tokens, drafting, verdicts = 0, 0.0, 0, 0, []
    for step in range(steps):
        judge_ms = 0.0
        if len(verdicts) >= planner.shadow_every:  # as Engine._judge_head, before the step's choice
            planner.record_shadow(verdicts, 100)
            verdicts, judge_ms = [], JUDGE_DRAFTS * draft_ms
        choice = planner.choose(100, 16)
        accepted = 0
        while accepted < choice.k and rng.random() < rate:  # drafts are accepted up to the first rejection
            accepted += 1
        if choice.k:
            verdicts = []  # the head's catch-up passed those positions
        else:
            verdicts.append(float(rng.random() < rate))  # what the head's first draft here would have met
        size = choice.k + 1
        pass_ms = plain_ms + token_ms * (size - 1) + (switch_ms if size != previous else 0.0)
        planner.record(choice, choice.k, accepted, draft_ms * choice.k * MS, pass_ms * MS, 100)
        previous = size
        if step >= 20:
            total += pass_ms + draft_ms * choice.k + judge_ms
            tokens += 1 + accepted
            drafting += choice.drafter != PLAIN
    return total / tokens, drafting / (steps - 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain-ms", type=float, default=12.0, help="a one-token pass at its own width")
    parser.add_argument("--token-ms", type=float, default=3.0, help="each further token of a pass")
    parser.add_argument("--switch-ms", type=float, default=3.0, help="more after a pass of another width")
    parser.add_argument("--draft-ms", type=float, default=2.5, help="the head, a draft")
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args(argv)
    print(f"plain {args.plain_ms} ms, +{args.token_ms} ms a token, +{args.switch_ms} ms after another width, "
          f"head {args.draft_ms} ms a draft; {args.steps} steps")
    print("| accepted | Auto, ms a token | plain | head K=1 at its width | Auto / plain speed | steps drafted |")
    print("| --- | --- | --- | --- | --- | --- |")
    for accepted_of in ACCEPTANCES:
        auto_ms, drafted = simulate(accepted_of, args.plain_ms, args.token_ms, args.switch_ms, args.draft_ms,
                                    args.steps)
        head_ms = (args.plain_ms + args.token_ms + args.draft_ms) / (1 + accepted_of[0] / accepted_of[1])
        print(f"| {accepted_of[0]} of {accepted_of[1]} | {auto_ms:.2f} | {args.plain_ms:.2f} | {head_ms:.2f} | "
              f"{args.plain_ms / auto_ms:.3f}x | {drafted:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
