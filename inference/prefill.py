"""How a prompt is read into the KV cache: the size of each prefill pass (about a second each, so that Stop is
answered between passes), what its rolls discard, which tokens of a prompt longer than n_ctx are kept
(``middle_cut``), and the work left (the reading progress's time estimate).

The passes themselves run in ``Engine._prefill``; these are the pure rules it follows, shared with the tests and
the window's progress bar.
"""

from __future__ import annotations

from dataclasses import dataclass

# Most prompt tokens per prefill pass. Peak memory grows with the pass: +180 MB for 512 tokens, +360 MB for 2,048,
# +790 MB for 4,096.
PREFILL_CHUNK = 2048
# Prefill passes are sized so that each takes about a second on 2 cores with the default model: cancel is checked
# between passes (an OpenVINO pass cannot be stopped midway: InferRequest.cancel() leaves the compiled model unable
# to run again, measured with 2026.4), so Stop answers within about one pass. The sizes are a fixed function of the
# cached tokens, never of timings, so a prompt is always split the same way (the two modes of a comparison share
# their prefill bit for bit). Measured on the default model, 2 cores of a Xeon with AMX, seconds per pass:
#   first pass (empty cache), f32: 128 tokens 0.24, 256 0.55, 512 1.22, 1,024 3.14; bf16 copy: 512 ~0.6, 1,024 ~1.0.
#   a pass after cached tokens costs ~2 ms + 5 us per cached token, per token (f32 and bf16 alike): 128 tokens after
#   1,024 cached 1.1-1.3 s, 64 after 2,048 1.5-1.9 s, 32-64 after 3,900 1.2 s.
# The first pass is the cheapest per token, so it stays as long as a one-pass prefill was before (1,024 tokens): a
# prompt of up to 1,024 tokens keeps its time to first token (split 512 + 512, f32 TTFT measured 1.35-1.47x), at the
# price of Stop answering within ~3 s instead of ~1 s during that first f32 pass.
FIRST_PREFILL_PASS = 1024  # exact (f32): ~3.1 s
FIRST_FAST_PREFILL_PASS = 1024  # the bf16 prefill copy: ~1.0 s
PREFILL_PASS_TOKENS = 400  # tokens per pass after cached ones, divided by 1 + cached / PREFILL_DEPTH_SCALE
PREFILL_DEPTH_SCALE = 400
MIN_PREFILL_PASS = 16


def prefill_pass_size(cached: int, fast: bool) -> int:
    """Prompt tokens of the next prefill pass after ``cached`` KV slots (masked ones count: they are attended to),
    sized so that it takes about a second on 2 cores with the default model (see PREFILL_PASS_TOKENS); ``fast``:
    the bf16 prefill copy computes it."""
    if cached == 0:
        return FIRST_FAST_PREFILL_PASS if fast else FIRST_PREFILL_PASS
    return max(MIN_PREFILL_PASS, min(PREFILL_CHUNK, int(PREFILL_PASS_TOKENS / (1 + cached / PREFILL_DEPTH_SCALE))))


def prefill_discards(cached: int, tokens: int, n_ctx: int, n_keep: int, n_discard: int) -> int:
    """Tokens the rolls of a prefill will discard: ``tokens`` prompt tokens fed after ``cached`` ones (at most
    n_ctx), rolling as ``Engine._prefill`` does: whenever the cache holds n_ctx tokens and more are to come, the
    n_discard after the first n_keep go (``KVCache.roll``), the same number each time. 0 when the prompt fits."""
    overflow = tokens - (n_ctx - cached)
    if overflow <= 0:
        return 0
    per_roll = min(n_discard, n_ctx - n_keep)
    return -(-overflow // per_roll) * per_roll


# The cut of a prompt longer than n_ctx keeps the first tokens of its last message (an instruction is usually there:
# "Summarize this text in two sentences:" then the text), at most this many and at most an eighth of what it keeps.
MESSAGE_HEAD_TOKENS = 256
# ... and leaves the reply room for its max_new_tokens, at most n_ctx / REPLY_ROOM_FRACTION (so that the first decode
# steps do not roll the message's start away at once).
REPLY_ROOM_FRACTION = 4


@dataclass(frozen=True)
class MiddleCut:
    """The tokens of a prompt longer than n_ctx that are kept (``middle_cut``), in prompt indices.

    Attributes:
        spans: ``(start, end)`` ranges of prompt indices kept, in order, disjoint and not touching; the first starts at
            0, the last ends at the prompt's end.
        head_tokens: kept tokens before the last message's text (chat template, system prompt, the message's role).
        message_tokens: the last message's first tokens kept (its text's start), 0 when none is pinned.
        tail_tokens: the prompt's last tokens kept (the last span).
        skipped: prompt tokens not kept; ``head_tokens + message_tokens + tail_tokens + skipped`` is the prompt's
            length.
    """

    spans: tuple[tuple[int, int], ...]
    head_tokens: int
    message_tokens: int
    tail_tokens: int
    skipped: int


def middle_cut(
    prompt_tokens: int,
    n_ctx: int,
    n_keep: int,
    system_tokens: int,
    message: tuple[int, int],
    max_new_tokens: int,
    header_pinned: bool = False,
) -> MiddleCut | None:
    """Which tokens of a prompt longer than n_ctx to keep, as LM Studio's "truncate middle" keeps the system prompt
    and the start of the user's message: the prompt's first tokens (n_keep, or the rendered system prompt when
    longer, up to half of what is kept), the last message from its role up to its text's first
    ``min(MESSAGE_HEAD_TOKENS, kept // 8)`` tokens, and the prompt's end; the middle goes.

    ``n_ctx - min(max_new_tokens, n_ctx // REPLY_ROOM_FRACTION)`` tokens are kept, so that the reply has that room
    before the rolling context drops anything. The message's start is not pinned where it lies in the kept start or
    end already, or where it would leave the end less than a quarter of what is kept.

    Args:
        prompt_tokens: the prompt's length in tokens (more than n_ctx).
        n_ctx: the context length.
        n_keep: the rolling context's sinks: always kept.
        system_tokens: tokens of the rendered system message (0 without one).
        message: ``(turn_start, text_start)``: prompt indices where the last user message's turn (its role header)
            and its text begin; ``(0, 0)`` for a prompt without turns (its own start is pinned).
        max_new_tokens: the most tokens the reply may generate.
        header_pinned: the system tokens end with the message's role header (the first user turn's, the same:
            ``ChatSession.system_prompt_tokens`` counts it): where they are kept whole, the message is kept from its
            text, so that one header stands before it, not two.

    Returns:
        the cut, or None when n_keep leaves no room in what is kept (a prompt then rolls through).
    """
    keep = n_ctx - min(max_new_tokens, n_ctx // REPLY_ROOM_FRACTION)
    front = max(n_keep, min(system_tokens, keep // 2))
    if front + 1 >= keep:
        return None
    turn_start, text_start = message
    if header_pinned and front >= system_tokens:
        turn_start = text_start
    start, end = max(front, turn_start), min(text_start + min(MESSAGE_HEAD_TOKENS, keep // 8), prompt_tokens)
    tail = keep - front - max(0, end - start)
    if end <= start or tail < keep // 4 or prompt_tokens - tail <= end:  # not pinned: only the first and last kept
        start = end = front
        tail = keep - front
    spans = [(0, end)] if start == front else [(0, front), (start, end)]
    spans.append((prompt_tokens - tail, prompt_tokens))
    message_tokens = max(0, end - max(front, text_start))
    return MiddleCut(tuple(spans), keep - message_tokens - tail, message_tokens, tail, prompt_tokens - keep)


def prefill_work(first: int, last: int) -> float:
    """The cost of prefilling cache positions [first, last), in units of a token after an empty cache: each token
    costs 1 + (tokens cached before it) / PREFILL_DEPTH_SCALE (the measurements above ``PREFILL_PASS_TOKENS``)."""
    return (last - first) * (1 + (first + last) / (2 * PREFILL_DEPTH_SCALE))


def prefill_work_left(cached: int, tokens: int, n_ctx: int, n_keep: int, n_discard: int) -> float:
    """The :func:`prefill_work` of feeding ``tokens`` more prompt tokens after ``cached`` ones, rolling as
    ``Engine._prefill`` does (a full cache drops the n_discard after the first n_keep, as ``prefill_discards``
    counts, and the reading goes on from there). Counting only up to n_ctx made a rolling prompt's time estimate
    short by every pass after its first roll."""
    per_roll = min(n_discard, n_ctx - n_keep)
    work = 0.0
    while tokens > 0:
        if cached >= n_ctx:
            if per_roll <= 0:
                break
            cached -= per_roll
        chunk = min(tokens, n_ctx - cached)
        work += prefill_work(cached, cached + chunk)
        cached, tokens = cached + chunk, tokens - chunk
    return work


#: Passes the reading progress's time estimate takes its rate from: the latest ones (about a second each), so that
#: the estimate follows a machine whose load changes while the prompt is read.
RATE_PASSES = 5


def remaining_seconds(passes: list[tuple[float, float]], work_left: float) -> float:
    """Seconds a prefill still needs for ``work_left`` (:func:`prefill_work` units), at the rate of its latest passes.

    ``passes``: ``(seconds, work)`` of each pass so far, the first first. An empty cache's first pass (up to
    ``FIRST_PREFILL_PASS`` tokens at once) costs less per unit of work than the passes after cached tokens (f32:
    3.1 s for its 2,335 units, 1.3 ms each, against ~2 ms after; its bf16 copy ~0.4 ms: the measurements above), so
    it sets the rate only while it is the only pass. Averaged in from the start, it made the estimate short for the
    whole prefill (a newcomer's long paste on a loaded machine: "about 42 s" said, 47 s taken).
    """
    recent = passes[1:][-RATE_PASSES:] or passes
    seconds, work = sum(s for s, _ in recent), sum(w for _, w in recent)
    return seconds * work_left / work if work > 0 else 0.0
