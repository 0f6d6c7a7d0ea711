"""Why two greedy replies differ: a measured near-tie, or a bug.

Greedy speculative decoding picks the argmax of logits computed by a multi-token verification pass; greedy
autoregressive decoding, by one-token passes. Where the two pass shapes round differently (a u8 KV cache, bf16
compute, dynamic activation quantization; see ``precision``), the argmax can flip where the target's two best
logits are nearly equal, and from there the two texts go their own ways. Any other difference is a bug.

``first_difference`` decides which one it is from measurements, not from a fixed tolerance: at the first
differing token it takes the target's top-2 logit gap (one-token pass, as autoregressive decoding saw it) and
measures how far the target's logits move along the reply up to there when the same tokens are decoded the way
speculative decoding computes them: verification passes of up to K+1 tokens, rejected tails rolled back
(``pass_shape_noise``). Replaying only the last few tokens is not enough: verification passes also write
the KV cache that later steps read, and with a u8 KV cache a rejected draft shares quantization groups with the
tokens before it, so the differences accumulate along the reply (measured: an 8-token window saw 0.0003 where the
replies parted at a gap of 0.02). A gap moves by at most twice the largest change of any logit, and one replay
stands for runs whose drafts were accepted in other patterns, so the noise bound is NOISE_FACTOR times the
largest change measured. With exact settings (f32 compute and KV cache, no dynamic quantization) the bound is
~1e-3 logits and any real difference is flagged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .engine import KV_SLACK, Engine
from .kv_cache import KVCache
from .model import check_can_roll
from .penalties import ReplyPenalties
from .prefill import middle_cut
from .settings import ContextSettings, SamplingSettings

# Largest logit change between pass shapes, times: 2 (a top-2 gap moves by at most twice the largest change of a
# single logit) x 2 (one measured window stands for the noise at other offsets and after other passes).
NOISE_FACTOR = 4.0


@dataclass(frozen=True)
class FirstDifference:
    """Where two greedy replies first differ, and whether measured numerical noise explains it.

    Attributes:
        token: index in the reply of the first differing token (0 = the first generated token).
        top2_gap: the target's top-2 logit gap there, in the one-token pass (logit units, >= 0).
        noise_bound: NOISE_FACTOR x the largest logit difference measured between decoding the reply up to
            there one token per pass and in verification passes (``pass_shape_noise``), logit units.
        near_tie: ``top2_gap <= noise_bound``: the flip is numerical noise; otherwise it is a bug.
    """

    token: int
    top2_gap: float
    noise_bound: float
    near_tie: bool

    def as_dict(self) -> dict:
        """JSON-ready: ``{"token": 57, "top2_gap": 0.02, "noise_bound": 0.12, "near_tie": true}``."""
        values = asdict(self)
        values["top2_gap"] = round(self.top2_gap, 5)
        values["noise_bound"] = round(self.noise_bound, 5)
        return values

    def describe(self) -> str:
        """One line for people, e.g. ``first difference at token 57: top-2 gap 0.020 <= noise 0.120 (near-tie)``."""
        relation = "<=" if self.near_tie else ">"
        verdict = "a numerical near-tie" if self.near_tie else "not a near-tie: a bug, please report it"
        return (
            f"first difference at token {self.token}: the target's top-2 logit gap {self.top2_gap:.4f} "
            f"{relation} measured noise bound {self.noise_bound:.4f} ({verdict})"
        )


def pass_shape_noise(
    engine: Engine,
    prompt_ids: Sequence[int],
    reply_ids: Sequence[int],
    context: ContextSettings,
    k: int,
    system_prompt_tokens: int = 0,
) -> tuple[float, np.ndarray]:
    """How far the target's logits move when the same reply is decoded as speculative decoding computes it
    instead of as autoregressive decoding does: the numerical noise between the two modes, measured.

    The reply is replayed twice in lockstep, on the engine's target cache and on a second request of the same
    compiled model, rolling where both modes roll: (a) one token per pass, as autoregressive decoding; (b) in
    verification passes of 1 .. k+1 reply tokens (cycling), each padded to k+1 tokens with filler that is
    then rolled back (masked), as rejected drafts are. (b) exercises what differs between the modes: pass
    shapes, KV entries written by multi-token passes, quantization groups shared with rejected tokens, dead
    slots. ``first_difference`` compares a top-2 gap with this noise. The engine's caches are reset after.

    Args:
        engine: whose target model replays the reply.
        prompt_ids: the prompt as given to ``generate``.
        reply_ids: the reply tokens before the position of interest.
        context: the rolling-context settings of the generation.
        k: draft tokens per step of the speculative run (verification passes of up to k+1 tokens).
        system_prompt_tokens: as for ``generate``.

    Returns:
        ``(noise, logits)``: the largest absolute logit difference between (a) and (b) over every position
        and vocabulary entry (0.0 without reply tokens: both modes share the prefill), and the float32
        ``[vocab]`` logits of (a) after the last reply token, which autoregressive decoding chose from.

    Raises:
        ValueError: empty prompt, k < 1 or invalid context settings; RopeUnsupportedError as for ``generate``.
    """
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    context.validate(engine.target.max_position_embeddings)
    n_keep, n_discard = context.resolve(system_prompt_tokens)
    n_ctx, reply, target = context.n_ctx, [int(t) for t in reply_ids], engine.target
    chunked = KVCache(target.compiled, target.rope, KV_SLACK, target.sliding_window)
    with engine.emptied_cache() as single:
        try:
            logits = engine.prefill_prompt(list(map(int, prompt_ids)), n_ctx, n_keep, n_discard)
            chunked.copy_from(single)  # both modes share the prefill
            noise, position, accepted = 0.0, 0, k + 1
            while position < len(reply):
                if len(single) + 1 > n_ctx:
                    check_can_roll([target])
                    single.roll(n_keep, n_discard)
                    chunked.roll(n_keep, n_discard)
                room = n_ctx - len(single)
                count = min(accepted, len(reply) - position, room)
                tokens = reply[position : position + count]
                filler = (reply[position + count + 1 :] + reply[:1] * (k + 1))[: min(k + 1, room) - count]
                rows = chunked.forward(tokens + filler, n_ctx)[:count]
                chunked.truncate(len(chunked) - len(filler))
                for token, row in zip(tokens, rows):
                    logits = single.forward([token], n_ctx)[-1]
                    noise = max(noise, float(np.abs(logits - row).max()))
                position += count
                accepted = accepted - 1 if accepted > 1 else k + 1
            return noise, logits
        finally:
            chunked.reset()


def first_index(reference: Sequence[int], candidate: Sequence[int]) -> int | None:
    """Index of the first differing token; where one reply is a prefix of the other, the length of the shorter
    (that one ended there); None when they are equal."""
    if list(reference) == list(candidate):
        return None
    for index, (a, b) in enumerate(zip(reference, candidate)):
        if a != b:
            return index
    return min(len(reference), len(candidate))


def first_difference(
    engine: Engine,
    prompt_ids: Sequence[int],
    reference: Sequence[int],
    candidate: Sequence[int],
    context: ContextSettings = ContextSettings(),
    k: int = 4,
    system_prompt_tokens: int = 0,
    sampling: SamplingSettings = SamplingSettings(),
    message: tuple[int, int] | None = None,
) -> FirstDifference | None:
    """Explain where a greedy reply differs from the greedy autoregressive reply to the same prompt.

    Args:
        engine: the engine that generated both (its caches are reset before and after).
        prompt_ids: the prompt both replies answered.
        reference: the autoregressive reply's token ids.
        candidate: the other reply's token ids (speculative).
        context: the rolling-context settings both ran with.
        k: the speculative run's draft tokens per step (K).
        system_prompt_tokens: as for ``Engine.generate``.
        sampling: the replies' sampling settings; their penalties apply to the logits the gap is taken from, as
            they did when the token was chosen.
        message: as for ``Engine.generate``: a prompt longer than n_ctx is replayed as the replies read it, its
            middle cut (``prefill.middle_cut``; both replies started from an empty cache).

    Returns:
        None when the replies are equal, else a ``FirstDifference``.

    Raises:
        ValueError: k < 1, bad context settings, or an empty prompt.
    """
    index = first_index(reference, candidate)
    if index is None:
        return None
    read = list(prompt_ids)
    if len(read) > context.n_ctx:
        n_keep = context.resolve(system_prompt_tokens)[0]
        cut = middle_cut(
            len(read), context.n_ctx, n_keep, system_prompt_tokens, message or (0, 0), sampling.max_new_tokens
        )
        read = read if cut is None else [token for start, end in cut.spans for token in read[start:end]]
    noise, logits = pass_shape_noise(engine, read, list(reference[:index]), context, k, system_prompt_tokens)
    top = np.sort(ReplyPenalties(sampling, prompt_ids, list(reference[:index])).apply(logits))[-2:]
    gap = float(top[1] - top[0])
    bound = NOISE_FACTOR * noise
    return FirstDifference(token=index, top2_gap=gap, noise_bound=bound, near_tie=gap <= bound)
