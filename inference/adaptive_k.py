"""Adaptive draft length: tune K from the running acceptance, and stop speculating while it does not pay.

K follows the rule of Hugging Face transformers' ``AssistedCandidateGenerator`` ("heuristic" schedule):
+2 after a step whose drafts were all accepted, -1 otherwise. Independently, the measured tokens/s of
speculative steps is compared with that of plain decode steps (exponential moving averages); while
speculation is slower, decoding falls back to plain autoregressive steps for a while, then probes again.
"""

from __future__ import annotations

from .settings import MAX_K

WARMUP_AR_STEPS = 3
FALLBACK_TOKENS = 32
MIN_SPEC_STEPS = 6
EMA = 0.3


class AdaptiveK:
    """Chooses K for each step.

    Args:
        k: starting draft length, 1 to ``MAX_K`` (which adaptive K never passes); 0 never drafts (autoregressive
            decoding).
        enabled: when False, ``next_k`` always returns ``k`` (fixed K).
    """

    def __init__(self, k: int, enabled: bool):
        self.k = k
        self.enabled = enabled
        self._ar_rate: float | None = None
        self._spec_rate: float | None = None
        self._spec_steps = 0
        self._ar_left = WARMUP_AR_STEPS if enabled else 0
        self.fallback_tokens = 0

    def next_k(self) -> int:
        """Draft length for the next step; 0 means take a plain autoregressive step."""
        return 0 if self._ar_left > 0 else self.k

    def update(self, drafted: int, accepted: int, emitted: int, seconds: float) -> None:
        """Record a finished step: tokens drafted/accepted/emitted and its wall time in seconds."""
        if not self.enabled or seconds <= 0:
            return
        rate = emitted / seconds
        if drafted == 0:
            self._ar_rate = rate if self._ar_rate is None else (1 - EMA) * self._ar_rate + EMA * rate
            if self._ar_left > 0:
                self._ar_left -= 1
                if self._spec_steps:  # a fallback, not the warm-up
                    self.fallback_tokens += emitted
            return
        self.k = min(MAX_K, self.k + 2) if accepted == drafted else max(1, self.k - 1)
        self._spec_rate = rate if self._spec_rate is None else (1 - EMA) * self._spec_rate + EMA * rate
        self._spec_steps += 1
        if self._ar_rate and self._spec_steps >= MIN_SPEC_STEPS and self._spec_rate < self._ar_rate:
            self._ar_left = FALLBACK_TOKENS
            self._spec_rate = None
            self._spec_steps = 1
            self.k = max(1, self.k // 2)
