"""The points the live graph draws, from a reply's engine events: :class:`Series` (one run's decode speed,
acceptance rate, context fill and rolls, as ``StepStats`` / ``PromptProgress`` / ``Finished`` / ``ContextRolled``
events arrive) and :func:`nice_ceiling` (axis limits that change rarely). No Qt: ``live_graph.LiveGraph`` draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inference.events import ContextRolled, Finished, PromptProgress, StepStats

RATE_WINDOW_S = 0.5  # tokens/s is measured over the last half second


@dataclass
class Series:
    """The points of one run (one reply, or one side of a comparison)."""

    key: str
    label: str
    steps: list[tuple[float, int]] = field(default_factory=list)  # (elapsed_s, generated)
    rate: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, tokens/s)
    acceptance: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, cumulative %)
    fill: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, cache_len / n_ctx %)
    rolls: list[float] = field(default_factory=list)  # elapsed_s of each roll
    reply_rolls: int = 0  # rolls after the run's first token (those while its prompt was read are the prompt's cut)
    reply_dropped: int = 0  # tokens those rolls dropped (the footer's "context full …: N earlier tokens dropped")
    drafted: int = 0
    accepted: int = 0
    drafter_steps: dict[str, int] = field(default_factory=dict)  # steps per drafter (``plain``: without drafts)
    drafter_accepted: dict[str, int] = field(default_factory=dict)  # accepted drafts per drafter
    cache_len: int = 0
    reply_id: int | None = None  # the message of the reply it belongs to (None: not known)
    n_ctx: int = 0
    reply_rate: float | None = None  # the finished reply's decode tokens/s (GenerationStats.decode_tokens_per_s)
    reply_tokens: int = 0  # the finished reply's tokens (one has no decode step, nor a speed: 0 tokens/s)
    _window_start: int = 0

    def add(self, event) -> None:
        """Add one engine event."""
        if isinstance(event, StepStats):
            t = event.elapsed_s
            self.steps.append((t, event.generated))
            while (
                self._window_start + 1 < len(self.steps) - 1 and t - self.steps[self._window_start + 1][0] >= RATE_WINDOW_S
            ):
                self._window_start += 1
            t0, g0 = self.steps[self._window_start]
            if len(self.steps) > 1 and t > t0:
                self.rate.append((t, (event.generated - g0) / (t - t0)))
            self.drafted += event.drafted
            self.accepted += event.accepted
            if event.drafter:  # ("": not said, a remote server's step)
                drafter = event.drafter if event.drafted else "plain"
                self.drafter_steps[drafter] = self.drafter_steps.get(drafter, 0) + 1
                self.drafter_accepted[drafter] = self.drafter_accepted.get(drafter, 0) + event.accepted
            if self.drafted:
                self.acceptance.append((t, 100.0 * self.accepted / self.drafted))
            self.cache_len, self.n_ctx = event.cache_len, event.n_ctx
            if event.n_ctx:  # (0: unknown, a remote server's context)
                self.fill.append((t, 100.0 * event.cache_len / event.n_ctx))
        elif isinstance(event, PromptProgress) and event.total and event.done == event.total and not self.steps:
            # the prompt's last pass gives the first token: the first step's time counts, as in the footer's rate
            # (after a long prompt it holds the fast prefill's hand-over to the exact cache, 0.1-1 s)
            self.steps.append((event.elapsed_s, 1))
        elif isinstance(event, Finished):
            self.reply_tokens = event.stats.new_tokens
            if event.stats.decode_tokens_per_s > 0:
                self.reply_rate = event.stats.decode_tokens_per_s
        elif isinstance(event, ContextRolled):
            t = self.steps[-1][0] if self.steps else 0.0
            self.rolls.append(t)
            if self.steps:  # the reply's own roll, as ``ReplyRecorder`` counts those the footer says
                self.reply_rolls += 1
                self.reply_dropped += event.discarded_tokens
            self.cache_len = event.cache_len
            if self.n_ctx:
                self.fill.append((t, 100.0 * event.cache_len / self.n_ctx))

    @property
    def latest_rate(self) -> float | None:
        """Tokens/s: the whole reply's decode rate once it finished (the figure its footer shows), until then the
        last half second's."""
        if self.reply_rate is not None:
            return self.reply_rate
        return self.rate[-1][1] if self.rate else None


def nice_ceiling(value: float, steps: tuple[float, ...] = (1, 2, 5)) -> float:
    """The smallest 1/2/5 x 10^n at or above ``value`` (axis limits that change rarely)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in steps:
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude
