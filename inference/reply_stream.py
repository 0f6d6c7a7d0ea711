"""A reply's tokens as it streams: text deltas (stop strings held back, log-probabilities when asked) and when it
ends (EOS, a stop string, max_new_tokens, cancel)."""

from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from .detokenizer import IncrementalDetokenizer
from .events import TextDelta, TokenLogprob
from .model import LoadedModel
from .sampling import logprobs
from .settings import SamplingSettings
from .stop_strings import StopStringFilter
from .vocabulary import Vocabulary, vocabulary


class ReplyStream:
    """Turns generated token ids into TextDelta events (with their log-probabilities when ``top_logprobs`` is not
    None) and decides when the reply ends."""

    def __init__(
        self,
        model: LoadedModel,
        sampling: SamplingSettings,
        top_logprobs: int | None,
        cancel: threading.Event | None,
        text_vocabulary: Vocabulary | None = None,
    ):
        self._sampling, self._top_logprobs = sampling, top_logprobs
        self._pieces = vocabulary(model).pieces if top_logprobs is not None else []
        self._eos = set() if sampling.ignore_eos else model.eos_token_ids
        self._max = sampling.max_new_tokens
        self._detokenizer = IncrementalDetokenizer(model.tokenizer, text_vocabulary)
        self._stops = StopStringFilter(sampling.stop_strings)
        self._cancel = cancel
        self.tokens: list[int] = []
        self.text = ""
        self.stop_reason: str | None = None

    def emit(self, token_ids: list[int], from_draft: bool, logits: np.ndarray) -> Iterator[TextDelta]:
        """Yield a TextDelta per token until the reply ends (EOS, stop string, max_new_tokens, cancel); ``logits``
        (float32 ``[len(token_ids), vocab]``, penalized) are those each token was chosen from."""
        scores = [(None, ())] * len(token_ids)
        if self._top_logprobs is not None:
            scores = [
                (self._scored(token, logprob), tuple(self._scored(i, value) for i, value in top))
                for token, (logprob, top) in zip(token_ids, logprobs(logits, token_ids, self._sampling, self._top_logprobs))
            ]
        for token, (logprob, top) in zip(token_ids, scores):
            if self.stop_reason is not None:
                return
            if token in self._eos:
                self.stop_reason = "eos"
                return
            self.tokens.append(token)
            text = self._stops.push(self._detokenizer.push(token))
            self.text += text
            yield TextDelta(text=text, token_id=token, from_draft=from_draft, logprob=logprob, top_logprobs=top)
            if self._stops.stopped:
                self.stop_reason = "stop_string"
            elif len(self.tokens) >= self._max:
                self.stop_reason = "max_new_tokens"
            elif self._cancel is not None and self._cancel.is_set():
                self.stop_reason = "cancelled"

    def _scored(self, token: int, logprob: float) -> TokenLogprob:
        return TokenLogprob(int(token), self._pieces[token], logprob)

    def flush(self) -> Iterator[TextDelta]:
        """Yield the text held back by the stop-string filter, if any."""
        text = self._stops.flush()
        if text:
            self.text += text
            yield TextDelta(text=text, token_id=-1, from_draft=False)
