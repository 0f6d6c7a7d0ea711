"""Whether a draft model made a reply slower than plain decoding, from what the reply measured.

Two measures, the direct one first:
- a comparison (Compare) ran the same prompt autoregressive, then speculative with the draft model: its
  ``speedup`` (speculative tokens/s over autoregressive tokens/s, ``app.gui.reply_recorder``);
- a single speculative reply whose K is chosen (``--adaptive-k``: ``inference.auto_decoding``) mixes plain decode
  steps with speculative steps: :class:`StepRates` compares their tokens per second of step time.
A fixed-K reply has no plain steps to compare with: it is not judged. Nor is Auto (its own choice between the
draft and plain steps is that comparison), nor a Compare against Auto.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.events import StepStats

#: Steps of each kind a reply needs before its plain and speculative speeds are compared.
MIN_PLAIN_STEPS = 3
MIN_SPEC_STEPS = 6

#: A draft is flagged when speculative decoding reached less than this share of plain decoding's speed (the
#: margin keeps timing noise of a busy machine from flagging a draft that merely breaks even).
SLOWER_THAN = 0.9
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


def is_slow(ratio: float | None) -> bool:
    """True when ``ratio`` (:func:`draft_speed_ratio`) says the draft model made decoding slower."""
    return ratio is not None and ratio < SLOWER_THAN
