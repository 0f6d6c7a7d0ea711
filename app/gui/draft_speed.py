"""Whether a draft model made a reply slower than plain decoding, from what the reply measured.

Two measures, the direct one first:
- a comparison (Compare) ran the same prompt autoregressive, then speculative with the draft model: its
  ``speedup`` (speculative tokens/s over autoregressive tokens/s, ``app.gui.reply_recorder``);
- a single speculative reply whose K is chosen (``--adaptive-k``: ``inference.auto_decoding``) mixes plain decode
  steps with speculative steps: :class:`StepRates` compares their tokens per second of step time.
A fixed-K reply has no plain steps to compare with: it is not judged. Nor is Auto (its own choice between the
draft and plain steps is that comparison), nor a Compare against Auto.

One reply is not evidence: the same Compare measured 1.19x and then 0.79x a minute later on a busy laptop. A draft
is called slow only from :data:`MIN_REPLIES` replies or more whose 95% confidence interval of the speed ratio lies
below 1.0 (:class:`DraftSpeedEvidence`: Student's t interval of the mean log ratio, the ratios being products of
timings whose noise is multiplicative).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from inference.events import StepStats

#: Steps of each kind a reply needs before its plain and speculative speeds are compared.
MIN_PLAIN_STEPS = 3
MIN_SPEC_STEPS = 6

#: A draft is flagged when speculative decoding reached less than this share of plain decoding's speed (the
#: margin keeps timing noise of a busy machine from flagging a draft that merely breaks even).
SLOWER_THAN = 0.9
#: Replies measured before a draft may be called slow, and the most recent ones the interval is taken over.
MIN_REPLIES = 3
KEPT_REPLIES = 10
#: Student's t distribution's 0.975 quantile by degrees of freedom (replies - 1): a two-sided 95% interval
#: (standard tables, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2).
T_975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
#: The drafters a reply's statistics name that run a network of their own (a draft model or a draft head).
MODEL_DRAFTERS = ("model", "head")


@dataclass
class StepRates:
    """Tokens and step time of the plain and the speculative decode steps of one run (add its events)."""

    plain_tokens: int = 0
    plain_ms: float = 0.0
    plain_steps: int = 0
    spec_tokens: int = 0
    spec_ms: float = 0.0
    spec_steps: int = 0

    def add(self, events) -> None:
        """Count the :class:`~inference.events.StepStats` among ``events`` (other events are ignored)."""
        for event in events:
            if not isinstance(event, StepStats) or event.step_ms <= 0:
                continue
            if event.drafted:
                self.spec_tokens += event.emitted
                self.spec_ms += event.step_ms
                self.spec_steps += 1
            else:
                self.plain_tokens += event.emitted
                self.plain_ms += event.step_ms
                self.plain_steps += 1

    def ratio(self) -> float | None:
        """Speculative tokens/s over plain tokens/s, or None with fewer steps than MIN_PLAIN_STEPS plain and
        MIN_SPEC_STEPS speculative ones."""
        if self.plain_steps < MIN_PLAIN_STEPS or self.spec_steps < MIN_SPEC_STEPS or not self.plain_tokens:
            return None
        return (self.spec_tokens / self.spec_ms) / (self.plain_tokens / self.plain_ms)


def draft_speed_ratio(stats: dict, rates: StepRates | None = None) -> float | None:
    """How fast a reply drafted by a draft model was, relative to plain decoding (e.g. 0.4 = 0.4x as fast).

    Args:
        stats: the reply's stored statistics (``Message.stats``: one run, or ``{"compare": ...}``).
        rates: the steps of the reply's (speculative) run, for a reply that is not a comparison.

    Returns:
        The ratio, or None when the reply did not use a draft model or did not measure it.
    """
    compare = stats.get("compare")
    if isinstance(compare, dict):
        spec = compare.get("spec") or {}
        speedup = compare.get("speedup")
        judged = spec.get("drafter") in MODEL_DRAFTERS and spec.get("mode") != "auto" and speedup is not None
        return float(speedup) if judged else None
    if stats.get("drafter") not in MODEL_DRAFTERS or stats.get("mode") == "auto" or rates is None:
        return None
    return rates.ratio()


@dataclass
class DraftSpeedEvidence:
    """The speed ratios (:func:`draft_speed_ratio`) of one draft's recent replies, and whether they show it slow.

    Attributes:
        ratios: speculative over plain tokens/s, one per measured reply, oldest first (the last KEPT_REPLIES).
    """

    ratios: list[float] = field(default_factory=list)

    def add(self, ratio: float) -> None:
        """Count one more measured reply (``ratio`` > 0)."""
        self.ratios = [*self.ratios, ratio][-KEPT_REPLIES:]

    def interval(self) -> tuple[float, float, float] | None:
        """``(ratio, low, high)``: the geometric mean of the ratios and its 95% confidence interval (Student's t
        over their logarithms), or None with fewer than MIN_REPLIES replies."""
        if len(self.ratios) < MIN_REPLIES:
            return None
        logs = [math.log(ratio) for ratio in self.ratios]
        mean = statistics.fmean(logs)
        half = T_975[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
        return math.exp(mean), math.exp(mean - half), math.exp(mean + half)

    def slow(self) -> bool:
        """True when the replies show the draft slower than plain decoding: their interval lies below 1.0 and
        their mean below SLOWER_THAN."""
        measured = self.interval()
        return measured is not None and measured[2] < 1.0 and measured[0] < SLOWER_THAN
