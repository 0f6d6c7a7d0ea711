"""Auto decoding: each decode step, the drafter and K (0: a plain step) that maximise the expected tokens per
second, from what this process measures.

Design rules:

* **Measured, then predicted.** Every cost is a running estimate of a wall time measured in this process: the
  target's part of a step over n = K + 1 tokens at the current context length (``PassCosts``: the pass, acceptance,
  rollback and detokenization; everything but drafting), and each drafter's drafting time by K (``DraftCosts``).
  A cost not measured yet is predicted from a measured one and a prior ratio (``PRIOR_PASS_GROWTH``; drafting
  proportional to K for a drafter that runs a model), so the first steps choose something sensible and every
  choice measures what it costs.
* **Robust to a loaded machine.** An estimate is the median of the logs of its first ``WARMUP`` samples, then an
  exponential moving average of the logs whose samples are clipped to [1/2, 2] x the estimate: one step stalled by
  another process moves it by at most ``EMA`` x log 2. A speculative cost (a pass over 2 or more tokens, drafting)
  is trusted only once it has ``WARMUP`` samples, and predicted until then: its first sample is often a cold one (a
  pass shape OpenVINO runs for the first time, a draft head catching up with a whole prompt: 2-3x the steady cost,
  measured on the Zen 5 at the chat defaults), and an estimate that says a drafter is too dear is never measured
  again, since it is never chosen. Plain steps are measured in every context bucket
  (``CONTEXT_BUCKET`` tokens) before speculation is judged there, and again every ``PLAIN_REFRESH`` steps, so the
  speculative costs are always compared with a plain cost measured under the same load.
* **Changing the pass width has a price of its own.** OpenVINO's CPU plugin compiles the model with dynamic
  shapes, and a pass over a different number of tokens than the pass before it re-derives every node's shapes: 2-4
  ms more on the Zen 5, with every node's own time unchanged (``bench/pass_shapes.py``; a one-token pass costs
  ~12 ms). A pass's cost is therefore kept per size from passes that followed one of the same size only, and the
  passes that changed size measure the price of the change (``PassCosts.switch_cost``). A step that would change
  the width is charged ``1 / SWITCH_HORIZON`` of that price (a change is expected to last a few steps). Estimates
  that mixed both kinds of pass misjudged both widths: a plain cost refreshed by plain steps right after
  verification passes rose towards the switched cost, a head cost measured after plain steps likewise. Simulated
  with the Zen 5's costs (``bench/auto_simulation.py``), Auto then drafted where the head was 9% slower than plain
  steps and decoded plainly where it was 3% faster; charged the whole price, it stayed plain unless the head was
  20% faster; charged a quarter, it is within 2.1% of plain decoding at every acceptance and takes the head's
  gain where it pays (the rest is the exploration of a drafter whose acceptance drifted back to its prior). On the
  Xeon with AMX, in real replies, a quarter still changed width too often: greedy Auto decoded 6.6% slower than the
  head at a fixed K = 1 (10 free-chat prompts x 2, side by side), its verification passes 0.8 ms dearer a step;
  charged half, with the steadier acceptance below, 0.5% slower (``DECAY``'s ACCEPTANCE_MEMORY note).
* **Acceptance of this conversation.** ``Acceptance`` keeps, per drafter and per draft position j, the decayed
  count of drafts j verified (all drafts before j accepted) and accepted, over a Beta prior (for j > 0 centred on
  position j - 1's estimate, so K can grow as far as the drafts keep being accepted). The counts decay every
  step, whichever drafter ran, so a drafter not chosen for a while drifts back to its prior and is tried again:
  that is the exploration. Prompt lookup keeps two: matches of fewer than ``LONG_MATCH`` tokens, and longer ones
  (the context is copying), so a reply that starts copying switches to lookup at once and back when it stops.
* **A new conversation starts from this process's earlier ones.** Its prior for a drafter's first position is
  learned (empirical Bayes): the first-position counts of the earlier conversations that used the drafter with
  the same kind of sampling (greedy, sampled: the head accepts 0.70 / 0.55 of held-out drafts), each weighing
  ``HISTORY_DECAY`` times the one after it, over ``PRIOR_ACCEPTANCE`` weighing ``PRIOR_WEIGHT`` drafts
  (``Measurements.prior``). A short reply is otherwise decided by the fixed prior: at the chat defaults, where the
  head accepted 0.46 of its drafts on the free-chat benchmark, a prior of 0.6 made Auto draft and lose in replies
  of ~20 tokens before its own counts could say so.
* **The head is judged during plain steps too.** Drafting to learn whether drafting pays costs a change of pass
  width each way and the drafts' pass, and a head judged by the drift of its counts alone stayed off for a whole
  reply after one rejection, at acceptance 0.7 (its prior, 0.6, was below the break-even the costs then implied).
  The head's catch-up over the positions plain steps emitted runs anyway before it drafts again; run every
  ``SHADOW_EVERY`` plain steps, its rows score the first draft each of those steps would have made against the token
  the target chose, and ``sampling.first_draft_acceptance`` turns them into acceptance estimates
  (``StepPlanner.record_shadow``): evidence without a change of the target's pass width.
* **A seeded sampled reply plans from preset costs.** Which tokens a seed yields depends on the drafts and on how
  many random draws each step takes, so a seeded reply's choices must not depend on timings: it plans with
  ``PresetCosts`` (pass and drafting costs in one-token passes, constants measured with SpecChat's kernels) and the
  acceptance of its own drafts only (a fresh ``Measurements``, not the conversation's), so the same seed gives the
  same reply on every run, and it still takes prompt lookup where the context is copying and plain steps where no
  drafter pays (a fixed drafter and K made Compare at the chat defaults 0.7-0.8x on a copying task).
* **The choice never touches exactness.** It depends only on earlier steps; every step is a complete speculative
  step (Leviathan et al., arXiv 2211.17192, Theorem 1; Chen et al., arXiv 2302.01318), so each token has the
  target's distribution given the tokens before it, whatever K and drafter were chosen, and greedy decoding emits
  the target's argmax (up to floating-point near-ties between pass shapes).

The expected tokens of a step with K drafts whose position-j acceptance is a_j (all earlier ones accepted) are
``1 + sum_{i=1..K} prod_{j<i} a_j`` (Leviathan et al., section 3.1, with one alpha per position instead of one for
all); its expected time is ``draft(K) + pass(K + 1)``, plus the charge for a change of width. Auto takes the
(drafter, K) with the highest ratio.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .settings import MAX_K, GenerationSettings

#: A plain step: no drafter, K = 0.
PLAIN = "plain"
#: Samples averaged before an estimate becomes a moving average.
WARMUP = 3
#: Weight of a new sample in an estimate's moving average of logs.
EMA = 0.2
#: Largest factor one sample moves its estimate by (before the EMA weight).
CLIP = 2.0
#: Cache lengths sharing one set of pass costs (a cached token adds attention work to every pass).
CONTEXT_BUCKET = 512
#: Steps after which a plain step is taken again to re-measure the plain cost under the current load.
PLAIN_REFRESH = 48
#: Prior cost of a pass over n tokens, in one-token passes: 1 + PRIOR_PASS_GROWTH * (n - 1) (a 2-token pass cost
#: 1.08-1.18 one-token passes on 2 cores, 3 and 4 tokens 1.28 and 1.67: README, the free-chat benchmark).
PRIOR_PASS_GROWTH = 0.2
#: Prior drafting cost, in one-token target passes: per draft for a drafter that runs a model, per step for lookup.
PRIOR_DRAFT_COST = {"head": 0.08, "model": 0.3, "lookup": 0.01}
#: A seeded sampled reply's preset costs (``PresetCosts``), in one-token passes, on the dear side of what was
#: measured, since they also stand for the price of changing the pass width that a preset plan cannot measure: a
#: pass over n tokens costs 1 + SEEDED_PASS_GROWTH * (n - 1) (with SpecChat's kernels a 2-token pass measured
#: 1.24-1.48 one-token passes on the Zen 5, the Xeon and under the AVX2 cap, a change of width 0.1-0.4 more:
#: bench/results), a head draft 0.2 (0.17-0.18 measured), a lookup step almost nothing. The head then drafts only
#: while more than ~2 of 3 drafts are accepted (a seeded reply at the chat defaults drafting at acceptance 0.52 with
#: a growth of 0.35 decoded at 0.81x of plain on the Xeon).
SEEDED_PASS_GROWTH = 0.45
SEEDED_DRAFT_COST = {"head": 0.2, "model": 0.3, "lookup": 0.01}
#: Prior acceptance of a drafter's first position before this process measured any, and its weight in pseudo-drafts
#: (also the weight of the learned prior in a conversation: ``Measurements.prior``).
PRIOR_ACCEPTANCE = {"head": 0.6, "model": 0.6, "lookup": 0.3, "lookup_long": 0.8}
PRIOR_WEIGHT = 10.0
#: Weight of a later position's prior, the previous position's rate: a guess that the first second drafts correct
#: (two rejected second drafts bring K back to 1).
LATER_PRIOR_WEIGHT = 2.0
#: Decay of the acceptance counts per step (about the last 100 steps count). ACCEPTANCE_MEMORY: with a head near its
#: break-even (acceptance ~0.5 against ~0.46 on 2 Xeon cores), counts of the last ~30 steps over a prior of 2 drafts
#: swung by +-0.1 from step to step: Auto left the head after two rejections and took K = 2 after a lucky run (its
#: second drafts then accepted less than predicted: 1.76 tokens a K = 2 step against 2.21), paying a change of width
#: each time. The last ~100 steps over a prior of 10: greedy 6.6% -> 0.5% behind a fixed K = 1, the chat defaults
#: 0.948x -> 0.975x of plain decoding (10 free-chat prompts x 2, with SWITCH_HORIZON 4 -> 2).
DECAY = 0.99
#: Weight of a conversation's first-position counts in the learned prior, relative to the conversation after it.
HISTORY_DECAY = 0.7
#: Lookup matches at least this long (the n-gram extended backwards) count as copying.
LONG_MATCH = 8
#: Steps a change of pass width is expected to last: a step that changes the width is charged this fraction of the
#: measured price of the change (``PassCosts.switch_cost``; see the module's design rules).
SWITCH_HORIZON = 2
#: Plain steps after which the draft head catches up on them, and its rows there estimate its acceptance
#: (``StepPlanner.record_shadow``), at most SHADOW_ROWS of them (evenly spread). Every 16 plain steps with every row,
#: it cost 6.3 ms (the head's 16-position pass 4.4, the estimates at the chat defaults 1.8: warping 16 rows): 3% of
#: those steps' time on 2 Xeon cores.
SHADOW_EVERY = 32
SHADOW_ROWS = 16
#: Plain steps between judgements while the head's best step is predicted below FAR_BELOW of a plain step's tokens per
#: second (its acceptance well below what its costs need): a judgement, the head's catch-up pass over the positions,
#: took 7-8.5 ms every 32 plain steps inside decoding (Xeon with AMX, quiet), 2-3% of a reply Auto keeps plain.
#: Each reply starts at SHADOW_EVERY, so a head the learned prior rules out is still judged in every reply that
#: takes 32 plain steps.
SHADOW_EVERY_FAR = 128
FAR_BELOW = 0.9
#: Draft positions reached with a lower probability than this are not considered: a draft there adds less than
#: MIN_REACH expected tokens, while a pass over one more token costs 0.2-0.35 one-token passes (and drafting it
#: more), so it cannot raise the tokens per second of a step that emits at least one token per pass.
MIN_REACH = 0.02


class RunningTime:
    """A robust running estimate of a wall time, in seconds (see the module's design rules)."""

    def __init__(self) -> None:
        self.samples = 0
        self._log = 0.0
        self._first: list[float] = []  # logs of the first WARMUP samples

    def add(self, seconds: float) -> None:
        """Record one measured time (seconds, > 0; others are ignored)."""
        if seconds <= 0:
            return
        value = math.log(seconds)
        if self.samples < WARMUP:
            self._first.append(value)
            self._log = statistics.median(self._first)
        else:
            self._log += EMA * max(-math.log(CLIP), min(math.log(CLIP), value - self._log))
        self.samples += 1

    @property
    def seconds(self) -> float:
        """The estimate (meaningless before the first sample)."""
        return math.exp(self._log)

    @property
    def settled(self) -> bool:
        """Whether it has its ``WARMUP`` samples (a speculative cost is predicted until then)."""
        return self.samples >= WARMUP


def _prior_pass(size: int) -> float:
    return 1.0 + PRIOR_PASS_GROWTH * (size - 1)


class PassCosts:
    """Running estimates of a step's target cost (everything but drafting), by pass size (K + 1 tokens) and
    context bucket (``CONTEXT_BUCKET`` cached tokens), from passes that followed a pass of the same size, and of
    the price of changing the size (see the module's design rules); kept for the process: the machine, not the
    conversation."""

    def __init__(self) -> None:
        self._times: dict[tuple[int, int], RunningTime] = {}
        self._switch = RunningTime()  # seconds a pass costs more right after a pass of another size
        self.since_plain = 0  # steps since the last plain one measured at its own width

    def record(self, size: int, cache_len: int, seconds: float, switched: bool = False) -> None:
        """One step's target cost: a pass over ``size`` tokens after ``cache_len`` cached ones took ``seconds``;
        ``switched``: the pass before it (the prompt's, for a reply's first step) read another number of tokens.
        A switched pass measures the price of the change (its excess over the size's estimate, once that is
        settled), not the size's cost."""
        key = (cache_len // CONTEXT_BUCKET, size)
        if switched:
            steady = self._times.get(key)
            if steady is not None and steady.settled:
                self._switch.add(max(seconds - steady.seconds, 1e-6))
            self.since_plain += 1
            return
        self._times.setdefault(key, RunningTime()).add(seconds)
        self.since_plain = 0 if size == 1 else self.since_plain + 1

    @property
    def switch_cost(self) -> float:
        """Seconds a pass costs more right after a pass of another size (0 before one was measured)."""
        return self._switch.seconds if self._switch.samples else 0.0

    def wants_plain(self, cache_len: int) -> bool:
        """Whether the next step should be plain to measure the plain cost: fewer than WARMUP plain steps at their
        own width in this context bucket, or PLAIN_REFRESH steps since the last one (a refresh after speculative
        steps takes two plain steps: the first pays the change of width)."""
        one = self._times.get((cache_len // CONTEXT_BUCKET, 1))
        return one is None or one.samples < WARMUP or self.since_plain >= PLAIN_REFRESH

    def predict(self, size: int, cache_len: int) -> float | None:
        """Predicted seconds of a pass over ``size`` tokens after ``cache_len`` cached ones (``predict_upto``); None
        before any one-token step was measured."""
        predicted = self.predict_upto(size, cache_len)
        return None if predicted is None else predicted[-1]

    def predict_upto(self, most: int, cache_len: int) -> list[float] | None:
        """Predicted seconds of passes over 1 .. ``most`` tokens after ``cache_len`` cached ones (item ``size - 1``),
        in one scan of the estimates: a size measured in this bucket (settled: ``RunningTime.settled``) is its estimate;
        another is the one-token cost
        of the nearest bucket that measured one, times the size's cost in one-token passes, measured in the nearest
        bucket that has both, else that of the largest such size below it scaled by the prior (the prior alone when
        there is none). None before any one-token step was measured."""
        bucket = cache_len // CONTEXT_BUCKET
        ones = {b: t.seconds for (b, s), t in self._times.items() if s == 1 and t.samples}
        if not ones:
            return None
        one = ones[min(ones, key=lambda b: (abs(b - bucket), b))]
        ratios: dict[int, tuple[int, int, float]] = {}  # size: (distance, bucket, ratio) of the nearest bucket
        for (b, s), t in self._times.items():
            if s > 1 and t.settled and b in ones:
                ratios[s] = min(ratios.get(s, (abs(b - bucket) + 1, 0, 0.0)), (abs(b - bucket), b, t.seconds / ones[b]))
        predicted = [one]
        base, base_ratio = 1, 1.0
        for size in range(2, most + 1):
            if size in ratios:
                base, base_ratio = size, ratios[size][2]
            measured = self._times.get((bucket, size))
            if measured is not None and measured.settled:
                predicted.append(measured.seconds)
            else:
                predicted.append(one * base_ratio * _prior_pass(size) / _prior_pass(base))
        return predicted


class DraftCosts:
    """Running estimates of one drafter's drafting time by K, kept for the process.

    Args:
        kind: ``head``, ``model`` or ``lookup``; a drafter that runs a model costs about K times its one-draft
            time (predicted so until measured), a lookup the same for any K.
    """

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._times: dict[int, RunningTime] = {}

    def record(self, k: int, seconds: float) -> None:
        self._times.setdefault(k, RunningTime()).add(seconds)

    def predict_upto(self, most: int, one_pass: float) -> list[float]:
        """Predicted seconds to draft 1 .. ``most`` tokens (item ``k - 1``), in one scan of the estimates: a K
        measured (settled) is its estimate; another is scaled from the nearest settled K (per draft for a drafter
        that runs a model, the same for lookup), else the prior (``PRIOR_DRAFT_COST`` one-token passes of
        ``one_pass`` seconds)."""
        per_draft = self._kind != "lookup"
        settled = sorted((m, time.seconds) for m, time in self._times.items() if time.settled)
        if not settled:
            return [PRIOR_DRAFT_COST[self._kind] * one_pass * (k if per_draft else 1) for k in range(1, most + 1)]
        predicted = []
        for k in range(1, most + 1):
            near, seconds = min(settled, key=lambda item: (abs(item[0] - k), item[0]))
            predicted.append(seconds * (k / near if per_draft else 1.0))
        return predicted


@dataclass(frozen=True)
class PresetCosts:
    """Fixed costs, in one-token passes, that a seeded sampled reply plans with (no timing: see the module's
    design rules)."""

    pass_growth: float = SEEDED_PASS_GROWTH
    draft_cost: dict[str, float] = field(default_factory=lambda: dict(SEEDED_DRAFT_COST))

    def passes_upto(self, most: int) -> list[float]:
        """Cost of passes over 1 .. ``most`` tokens (item ``size - 1``)."""
        return [1.0 + self.pass_growth * (size - 1) for size in range(1, most + 1)]

    def drafting(self, drafter: str, k: int) -> float:
        """Cost of drafting ``k`` tokens with ``drafter`` (per draft for a drafter that runs a model, per step for
        lookup)."""
        return self.draft_cost[drafter] * (1 if drafter == "lookup" else k)


def _posterior(accepted: float, verified: float, prior: float, position: int) -> float:
    """The mean of a Beta posterior: ``accepted`` of ``verified`` (decayed counts) over ``prior`` weighing
    ``PRIOR_WEIGHT`` drafts at the first position and ``LATER_PRIOR_WEIGHT`` at later ones."""
    weight = PRIOR_WEIGHT if position == 0 else LATER_PRIOR_WEIGHT
    return (accepted + weight * prior) / (verified + weight)


class Acceptance:
    """Decayed acceptance counts of one drafter in this conversation, per draft position, over a Beta prior.

    Args:
        prior: prior acceptance of the first position (weight ``PRIOR_WEIGHT`` drafts; later positions' priors are
            the previous position's rate, weight ``LATER_PRIOR_WEIGHT``).
    """

    def __init__(self, prior: float, age: int = 0) -> None:
        self._prior = prior
        self._verified = [0.0] * MAX_K  # decayed count of drafts at position j verified (all before accepted)
        self._accepted = [0.0] * MAX_K
        self._age = age  # steps the counts have been decayed for
        self.first_verified = 0.0  # first-position drafts (and estimates) this conversation, not decayed
        self.first_accepted = 0.0

    def rate(self, position: int) -> float:
        """Estimated probability that draft ``position`` is accepted given that those before it were: its counts
        over a prior at the previous position's rate (the drafter's prior for the first), so a position rarely
        reached is expected to do as the one before it."""
        prior = self._prior
        for j in range(position + 1):
            prior = _posterior(self._accepted[j], self._verified[j], prior, j)
        return prior

    def expected_tokens(self, k: int) -> float:
        """Expected tokens a step with ``k`` drafts emits: ``1 + sum_{i=1..k} prod_{j<i} rate(j)``."""
        return self.expected_tokens_upto(k)[k]

    def expected_tokens_upto(self, most: int) -> list[float]:
        """``expected_tokens(k)`` for k = 0 .. ``most``, in one pass over the positions (``most + 1`` floats), or
        fewer: the list stops after the first K whose last draft is reached with probability below ``MIN_REACH``."""
        totals, reach, prior = [1.0], 1.0, self._prior
        for j in range(most):
            prior = _posterior(self._accepted[j], self._verified[j], prior, j)
            reach *= prior
            totals.append(totals[-1] + reach)
            if reach < MIN_REACH:
                break
        return totals

    def record(self, drafted: int, accepted: int) -> None:
        """A verified step: ``drafted`` drafts, the first ``accepted`` accepted."""
        for position in range(min(drafted, accepted + 1)):
            self._verified[position] += 1.0
            self._accepted[position] += position < accepted
        if drafted:
            self.first_verified += 1.0
            self.first_accepted += accepted > 0

    def record_estimates(self, estimates: list[float]) -> None:
        """First drafts that were not made: each estimate, in [0, 1], the probability that one would have been
        accepted (``sampling.first_draft_acceptance``), counts as a draft at position 0 accepted that much."""
        self._verified[0] += float(len(estimates))
        self._accepted[0] += float(sum(estimates))
        self.first_verified += float(len(estimates))
        self.first_accepted += float(sum(estimates))

    def age_to(self, steps: int) -> None:
        """Age the counts to ``steps`` steps (toward the prior by ``DECAY`` per step since the last call): decaying
        lazily, when the counts are read or added to, costs a plain step nothing."""
        if steps > self._age:
            factor = DECAY ** (steps - self._age)
            self._verified = [v * factor for v in self._verified]
            self._accepted = [a * factor for a in self._accepted]
            self._age = steps


@dataclass(frozen=True)
class Choice:
    """What one step does: ``drafter`` (``plain``, ``head``, ``model`` or ``lookup``) drafts ``k`` tokens."""

    drafter: str
    k: int


#: A plain step, and each drafter's choice of K by K (item 0 unused): made once, since a step rates them all.
_PLAIN_STEP = Choice(PLAIN, 0)
_CHOICES = {drafter: [Choice(drafter, k) for k in range(MAX_K + 1)] for drafter in PRIOR_DRAFT_COST}


@dataclass
class Measurements:
    """What Auto measures for the process (``PassCosts``, ``DraftCosts`` per drafter, the acceptance of earlier
    conversations) and for the current conversation (``Acceptance`` per drafter and kind of sampling;
    ``new_conversation`` moves it into the history)."""

    passes: PassCosts = field(default_factory=PassCosts)
    drafting: dict[str, DraftCosts] = field(default_factory=dict)
    acceptance: dict[tuple[str, bool], Acceptance] = field(default_factory=dict)
    #: (key, greedy) -> [accepted, verified]: earlier conversations' first-position counts (``HISTORY_DECAY``)
    history: dict[tuple[str, bool], list[float]] = field(default_factory=dict)
    steps: int = 0  # steps recorded: every acceptance decays once per step, whichever drafter ran

    def new_conversation(self) -> None:
        """Start a new conversation (it accepts differently): the current one's first-position counts join the
        history its prior is learned from (``prior``); the costs stay."""
        for key, acceptance in self.acceptance.items():
            if acceptance.first_verified:
                past = self.history.setdefault(key, [0.0, 0.0])
                past[0] = HISTORY_DECAY * past[0] + acceptance.first_accepted
                past[1] = HISTORY_DECAY * past[1] + acceptance.first_verified
        self.acceptance.clear()

    def prior(self, key: str, greedy: bool) -> float:
        """The first-position prior of ``key`` (a drafter, or ``lookup_long``) for a conversation sampling greedily
        or not: the earlier conversations' counts over ``PRIOR_ACCEPTANCE[key]`` weighing ``PRIOR_WEIGHT`` drafts
        (that prior itself before any)."""
        accepted, verified = self.history.get((key, greedy), (0.0, 0.0))
        return (accepted + PRIOR_WEIGHT * PRIOR_ACCEPTANCE[key]) / (verified + PRIOR_WEIGHT)

    def acceptance_of(self, key: str, greedy: bool) -> Acceptance:
        """The acceptance of ``key`` (a drafter, or ``lookup_long``) in this conversation with this kind of
        sampling, created at its learned prior (``prior``), decayed for every step recorded so far."""
        acceptance = self.acceptance.get((key, greedy))
        if acceptance is None:
            acceptance = self.acceptance[key, greedy] = Acceptance(self.prior(key, greedy), self.steps)
        acceptance.age_to(self.steps)
        return acceptance

    def drafting_of(self, drafter: str) -> DraftCosts:
        return self.drafting.setdefault(drafter, DraftCosts(drafter))


class StepPlanner:
    """Chooses each step's drafter and K for one reply.

    Args:
        measurements: the engine's ``Measurements`` (shared by its replies).
        drafters: the drafters the reply may use (``head``, ``model``, ``lookup``; none: every step is plain).
        fixed_k: draft this many tokens with the only drafter every step (no choice, no plain steps); None: choose.
        preset: choose from these costs instead of measured times, and measure none (a seeded sampled reply; give
            it a ``Measurements`` of its own, so its acceptance is its own drafts' alone).
        greedy: whether the reply decodes greedily (its acceptance is kept apart from sampled replies').
    """

    def __init__(self, measurements: Measurements, drafters: tuple[str, ...], fixed_k: int | None = None,
                 preset: PresetCosts | None = None, greedy: bool = True):
        if fixed_k is not None and len(drafters) != 1:
            raise ValueError(f"a fixed K needs exactly one drafter, got {drafters}")
        if fixed_k is not None and preset is not None:
            raise ValueError("a fixed K chooses nothing: it takes no preset costs")
        self._measured = measurements
        self._drafters = drafters
        self._fixed_k = fixed_k
        self._preset = preset
        self._greedy = greedy
        self._last_size: int | None = None  # tokens of this reply's last pass (None: the prompt's came last)
        #: Plain steps after which the engine judges the head (``record_shadow``): SHADOW_EVERY, or SHADOW_EVERY_FAR
        #: while the last judgement found the head far from paying.
        self.shadow_every = SHADOW_EVERY

    @property
    def drafters(self) -> tuple[str, ...]:
        """The drafters this planner gives steps to (none: every step is plain)."""
        return self._drafters

    @property
    def chooses(self) -> bool:
        """Whether the planner chooses (False: fixed K, or no drafter)."""
        return self._fixed_k is None and bool(self._drafters)

    @property
    def follows_timings(self) -> bool:
        """Whether its choices follow measured times (False: fixed K, preset costs, or no drafter)."""
        return self.chooses and self._preset is None

    def choose(self, cache_len: int, limit: int, lookup_drafts: int = 0, lookup_match: int = 0) -> Choice:
        """The next step's drafter and K.

        Args:
            cache_len: tokens in the target's cache before the step.
            limit: most drafts the step may take (room in n_ctx, tokens the reply may still emit); <= 0: plain.
            lookup_drafts: how many drafts prompt lookup offers now (0: no match).
            lookup_match: length of its match (``PromptLookupDrafter.match_length``).

        Returns:
            The choice of highest expected tokens per second; a plain step while the plain cost is being measured
            (``PassCosts.wants_plain``).
        """
        if not self.may_draft(cache_len, limit):
            return Choice(PLAIN, 0)
        if self._fixed_k is not None:
            return Choice(self._drafters[0], min(self._fixed_k, limit))
        rates = self._rates(cache_len, min(limit, MAX_K), lookup_drafts, lookup_match)
        return max(rates, key=lambda choice: (rates[choice], choice.drafter == PLAIN))

    def _rates(self, cache_len: int, top: int, lookup_drafts: int, lookup_match: int) -> dict[Choice, float]:
        """Expected tokens per second of a plain step and of each drafter's K = 1 .. ``top`` (as far as a draft is
        worth considering: ``MIN_REACH``), each step's time its drafting and its pass, charged for a change of width
        (see ``choose``)."""
        tokens_of = {  # expected tokens by K
            drafter: self._acceptance(self._acceptance_key(drafter, lookup_match)).expected_tokens_upto(
                min(top, lookup_drafts) if drafter == "lookup" else top)
            for drafter in self._drafters
        }
        most = max(map(len, tokens_of.values()))
        if self._preset is not None:
            pass_s = self._preset.passes_upto(most)
        else:
            pass_s = self._measured.passes.predict_upto(most, cache_len)
            change = self._measured.passes.switch_cost / SWITCH_HORIZON if self._last_size is not None else 0.0
            pass_s = [seconds + (change if size != self._last_size else 0.0) for size, seconds in enumerate(pass_s, 1)]
        one = pass_s[0]
        rates = {_PLAIN_STEP: 1.0 / one}
        for drafter, tokens in tokens_of.items():
            most = len(tokens) - 1
            draft_s = (self._measured.drafting_of(drafter).predict_upto(most, one) if self._preset is None
                       else [self._preset.drafting(drafter, k) for k in range(1, most + 1)])
            choices = _CHOICES[drafter]
            for k in range(1, most + 1):
                rates[choices[k]] = tokens[k] / (draft_s[k - 1] + pass_s[k])
        return rates

    def cut_by_room(self, choice: Choice, limit: int) -> bool:
        """Whether the room left (``limit``, as given to ``choose``) may have made ``choice`` smaller than the K it
        would have been with room enough: a fixed K cut short, or a choice that reached a limit below ``MAX_K``
        (a plain step at ``limit`` <= 0 included). Such a step's K says what the reply's end left, not what the
        decoding chose (``GenerationStats.final_k``)."""
        if self._fixed_k is not None:
            return choice.k < self._fixed_k
        return choice.k >= limit and limit < MAX_K

    def may_draft(self, cache_len: int, limit: int) -> bool:
        """Whether the next step may draft (False: ``choose`` returns a plain step whatever the drafters offer, so
        the engine asks prompt lookup nothing and the step costs what a plain decode step costs): there is room
        (``limit`` > 0), a drafter, and the plain cost is not being measured (``PassCosts.wants_plain``; a fixed K
        never measures it)."""
        if limit <= 0 or not self._drafters:
            return False
        if self._fixed_k is not None or self._preset is not None:
            return True
        return not self._measured.passes.wants_plain(cache_len)

    def record(self, choice: Choice, drafted: int, accepted: int, draft_s: float, pass_s: float, cache_len: int,
               lookup_match: int = 0) -> None:
        """A finished step: what it chose, the drafts it verified (fewer than K where the drafter or a grammar cut
        them), how many were accepted, the seconds of drafting and of the rest of the step, the cache length before
        it (times are not recorded with preset costs)."""
        if self._preset is None:
            self._measured.passes.record(drafted + 1, cache_len, pass_s, switched=self._last_size != drafted + 1)
        self._last_size = drafted + 1
        self._measured.steps += 1
        if choice.drafter == PLAIN:
            return
        if drafted and self._preset is None:
            self._measured.drafting_of(choice.drafter).record(drafted, draft_s)
        self._acceptance(self._acceptance_key(choice.drafter, lookup_match)).record(drafted, accepted)

    @property
    def judges_head_in_plain_steps(self) -> bool:
        """Whether the engine should collect the head's acceptance estimates during plain steps
        (``record_shadow``): the planner chooses, and the head is one of its drafters."""
        return self.chooses and "head" in self._drafters

    def record_shadow(self, estimates: list[float], cache_len: int) -> None:
        """The head's first-draft acceptance estimated at positions plain steps emitted (see the module's design
        rules); nothing when there are none. Sets ``shadow_every``: ``SHADOW_EVERY_FAR`` where, with these
        estimates, the head's best step at ``cache_len`` would decode below ``FAR_BELOW`` of a plain step's tokens per
        second (a judgement costs the head's catch-up pass: fewer of them where the head is far from paying), else
        ``SHADOW_EVERY``."""
        if not estimates:
            return
        self._acceptance("head").record_estimates(estimates)
        if self._preset is None and self._measured.passes.predict(1, cache_len) is None:
            return
        rates = self._rates(cache_len, MAX_K, 0, 0)
        head = max(rate for choice, rate in rates.items() if choice.drafter == "head")
        far = head < FAR_BELOW * rates[_PLAIN_STEP]
        self.shadow_every = SHADOW_EVERY_FAR if far else SHADOW_EVERY

    def _acceptance(self, key: str) -> Acceptance:
        return self._measured.acceptance_of(key, self._greedy)

    @staticmethod
    def _acceptance_key(drafter: str, lookup_match: int) -> str:
        return "lookup_long" if drafter == "lookup" and lookup_match >= LONG_MATCH else drafter


def seeded_sampling(settings: GenerationSettings) -> bool:
    """Whether a reply samples with a seed and must therefore be reproducible: Auto then chooses each step's
    drafter and K from ``PresetCosts`` and its own drafts' acceptance instead of measured times. Exact speculative sampling (Leviathan et al., arXiv
    2211.17192) gives the target's distribution whatever K is, but which tokens a given seed yields depends on the
    drafts and on how many random draws each step takes, so timing-driven choices would make a seeded reply differ
    from run to run; choices that depend on the reply's own tokens do not. Greedy replies keep Auto's measured
    choices: their tokens do not depend on them (up to near-ties)."""
    return settings.sampling.seed is not None and not settings.sampling.greedy
