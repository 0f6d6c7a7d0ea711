"""Repetition, presence and frequency penalties: logits lowered for tokens the conversation already used.

* **Repetition penalty** (CTRL, Keskar et al., arXiv 1909.05858, section 4.1), as llama.cpp (``penalty_repeat``)
  and Hugging Face transformers (``RepetitionPenaltyLogitsProcessor``) apply it: each distinct token among the
  latest ``repeat_last_n`` tokens of the conversation, *prompt included* (llama.cpp's window, default 64), has
  its logit divided by the penalty if it is positive and multiplied by it otherwise, however often it occurs.
* **Presence and frequency penalties** as the OpenAI API defines them: ``mu[j] -> mu[j] - c[j] * frequency -
  float(c[j] > 0) * presence``, where ``c[j]`` counts how often token j was sampled *in this reply* before the
  current position (the prompt does not count; llama.cpp counts its repetition window instead).

The repetition penalty is applied first, then the subtraction (llama.cpp's order), to the raw logits before
temperature, top-k and top-p (llama.cpp's sampler chain and transformers' logits processors both penalize first).

Speculative decoding stays exact because a penalty depends only on the tokens before the position it scores:
``ReplyPenalties.rows`` penalizes verification row i with the reply followed by drafts ``[:i]``, which is the
prefix autoregressive decoding would have there once those drafts are accepted, and the draft model's row i is
penalized with the same tokens, so the draft distribution q is the one its drafts were sampled from.

A grammar (structured output, ``inference.constraints``) is the same kind of rule with an infinite penalty: after
the penalties, ``ReplyPenalties`` sets the logits of the tokens the grammar forbids after the reply and the drafts
before the row to -inf, so every drafter that penalizes its logits through ``apply`` also drafts only what the
grammar allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from .settings import SamplingSettings

if TYPE_CHECKING:
    from .constraints import GrammarMask


def penalize(
    logits: np.ndarray, settings: SamplingSettings, recent: Sequence[int], generated: Sequence[int]
) -> np.ndarray:
    """Logits with the repetition, presence and frequency penalties applied.

    Args:
        logits: float32 ``[vocab]``, raw model outputs for one position.
        settings: ``repetition_penalty``, ``presence_penalty`` and ``frequency_penalty`` are read.
        recent: the latest ``settings.repeat_last_n`` token ids before the position (prompt and reply); the
            repetition penalty applies to each distinct one.
        generated: every token id sampled in the reply before the position; presence and frequency count them.

    Returns:
        float32 ``[vocab]``: a penalized copy (``logits`` itself when ``settings.penalized`` is False).
    """
    if not settings.penalized:
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    if settings.repetition_penalty != 1.0 and len(recent):
        ids = np.unique(np.asarray(recent, dtype=np.int64))
        values = out[ids]
        out[ids] = np.where(values > 0, values / settings.repetition_penalty, values * settings.repetition_penalty)
    if (settings.presence_penalty or settings.frequency_penalty) and len(generated):
        ids, counts = np.unique(np.asarray(generated, dtype=np.int64), return_counts=True)
        out[ids] -= (counts * settings.frequency_penalty + settings.presence_penalty).astype(np.float32)
    return out


class ReplyPenalties:
    """The penalties of one reply, and its grammar, following its tokens as they are chosen.

    Args:
        settings: the reply's sampling settings.
        prompt_ids: the whole conversation before the reply (its tail is in the repetition window).
        reply: the reply's token ids so far; this list is read, not copied, so appending to it is seen.
        grammar: the reply's grammar mask (structured output), or None.
    """

    def __init__(
        self, settings: SamplingSettings, prompt_ids: Sequence[int], reply: list[int], grammar: GrammarMask | None = None
    ):
        self.settings = settings
        self._prompt_tail = [int(t) for t in prompt_ids[max(0, len(prompt_ids) - settings.repeat_last_n) :]]
        self._reply = reply
        self._grammar = grammar

    @property
    def active(self) -> bool:
        """True when a penalty or a grammar changes the logits."""
        return self.settings.penalized or self._grammar is not None

    def apply(self, logits: np.ndarray, drafted: Sequence[int] = ()) -> np.ndarray:
        """Penalized float32 ``[vocab]`` logits for the token after the reply and then ``drafted`` (see ``penalize``),
        -inf where the grammar forbids a token there; ``logits`` itself when neither applies.

        Raises:
            GrammarError: the grammar does not allow the reply and ``drafted`` (a drafter proposed past its mask).
        """
        drafted = [int(t) for t in drafted]
        if self.settings.penalized:
            last_n = self.settings.repeat_last_n
            recent = (self._prompt_tail + self._reply[max(0, len(self._reply) - last_n) :] + drafted)[-last_n:]
            logits = penalize(logits, self.settings, recent, self._reply + drafted)
        if self._grammar is not None:
            logits = np.where(self._grammar.allowed(self._reply + drafted), logits, np.float32(-np.inf))
        return logits

    def rows(self, logits: np.ndarray, drafts: Sequence[int]) -> np.ndarray:
        """Penalized float32 ``[n, vocab]`` logits of a verification pass: row i scores the token after the reply
        and ``drafts[:i]`` (n <= len(drafts) + 1); ``logits`` itself when no penalty or grammar is set."""
        if not self.active:
            return logits
        return np.stack([self.apply(row, drafts[:i]) for i, row in enumerate(logits)])

    def allowed_drafts(self, drafts: Sequence[int]) -> int:
        """How many of ``drafts`` (proposed after the reply) the grammar allows in order; all without a grammar."""
        if self._grammar is None:
            return len(drafts)
        reply = len(self._reply)
        return self._grammar.allowed_prefix(self._reply + [int(t) for t in drafts], reply) - reply
