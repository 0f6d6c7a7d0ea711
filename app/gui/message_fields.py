"""What a stored message's JSON fields may hold: its reply statistics (``stats``) and accepted-draft spans.

The shapes are those :class:`~app.gui.reply_recorder.ReplyRecorder` writes (``reply_format.stats_dict`` plus
the controller's extras): a flat dict of numbers and texts, or ``{"compare": {"ar": {...}, "spec": {...},
"speedup", "identical", "sampled", "stopped", "first_difference"}}``. The same checks guard what a JSON import writes and
what the chat view draws, so a value of the wrong type (written by an older build, or typed into a file) is
refused with the field's name, or drawn without statistics, never raised while drawing.
"""

from __future__ import annotations

from typing import Any

#: Keys the footer formats as numbers (``f"{value:.1f}"``): a number, never null.
NUMBER_KEYS = frozenset({"ttft_ms", "tokens_per_s"})
#: Keys that hold a number or null.
OPTIONAL_NUMBER_KEYS = frozenset({
    "acceptance_rate", "drafted", "accepted", "new_tokens", "prompt_tokens", "prefilled_tokens", "discarded_tokens",
    "rolls", "final_k", "fallback_tokens", "fast_prefilled_tokens", "k", "seed", "speedup", "prompt_kept_first",
    "prompt_kept_last", "prompt_kept_message", "reply_rolls", "reply_discarded_tokens", "system_prompt_tokens", "n_ctx",
})  # fmt: skip
#: Keys that hold a text or null (``text``, a comparison run's reply, must be a text).
TEXT_KEYS = frozenset({"mode", "drafter", "stop_reason", "precision", "model", "error", "live"})
#: Keys that hold true, false or null.
BOOL_KEYS = frozenset({"identical", "sampled", "stopped", "system_prompt_dropped"})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _flat_stats_problem(stats: Any, name: str) -> str | None:
    if not isinstance(stats, dict):
        return f'"{name}" must be an object, got {_describe(stats)}'
    for key, value in stats.items():
        field = f"{name}.{key}"
        if key in NUMBER_KEYS and not _is_number(value):
            return f'"{field}" must be a number, got {_describe(value)}'
        if key in OPTIONAL_NUMBER_KEYS and value is not None and not _is_number(value):
            return f'"{field}" must be a number or null, got {_describe(value)}'
        if key in TEXT_KEYS and value is not None and not isinstance(value, str):
            return f'"{field}" must be a text or null, got {_describe(value)}'
        if key in BOOL_KEYS and value is not None and not isinstance(value, bool):
            return f'"{field}" must be true, false or null, got {_describe(value)}'
    return None


def stats_problem(stats: Any) -> str | None:
    """What is wrong with a message's statistics, naming the field (``"stats.ttft_ms" must be a number, got
    'fast'``), or None when the chat view can draw them. Keys this SpecChat does not know are accepted as they are."""
    problem = _flat_stats_problem(stats, "stats")
    if problem or "compare" not in stats:
        return problem
    compare = stats["compare"]
    problem = _flat_stats_problem(compare, "stats.compare")
    if problem:
        return problem
    for run in ("ar", "spec"):
        if run in compare:
            problem = _flat_stats_problem(compare[run], f"stats.compare.{run}")
            if problem:
                return problem
            if not isinstance(compare[run].get("text", ""), str):
                return f'"stats.compare.{run}.text" must be a text, got {_describe(compare[run]["text"])}'
    difference = compare.get("first_difference")
    if difference is not None and not isinstance(difference, dict):
        return f'"stats.compare.first_difference" must be an object or null, got {_describe(difference)}'
    return None


def spans_problem(spans: Any, text_length: int) -> str | None:
    """What is wrong with a message's ``draft_spans`` (a list of ``[start, end]`` character ranges with
    ``0 <= start <= end <= text_length``), naming the bad entry, or None."""
    if not isinstance(spans, list):
        return f'"draft_spans" must be a list of [start, end] pairs, got {_describe(spans)}'
    for index, span in enumerate(spans):
        if not (
            isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
        ):
            return f'"draft_spans" entry {index + 1} must be a pair of whole numbers [start, end], got {_describe(span)}'
        if not 0 <= span[0] <= span[1] <= text_length:
            return f'"draft_spans" entry {index + 1} {span} is outside the message\'s {text_length} characters'
    return None
