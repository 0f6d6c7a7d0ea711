"""The command line's words for a reply's statistics: the line ``generate`` and ``chat`` print after a reply, the JSON
object of ``generate --json``, and the speedup of ``--mode compare`` (no Qt imported here)."""

from __future__ import annotations

from app.backends.remote_stream import REMOTE_MODE
from app.counts import tokens_text
from inference.events import GenerationStats


def describe(stats: GenerationStats) -> str:
    """One line of statistics for humans; the decode speed only where there is one (two tokens or more: a one-token
    reply has no interval between tokens to measure it over). The share of drafts accepted reads as the window's
    footer says it: ``drafts: 75% accepted (6/8)``, ``all drafts: ...`` where several drafters drafted. A remote
    server's reply that does not say how it was decoded reads ``[remote] 24 tokens, TTFT 51.0 ms, 45.0 tokens/s,
    prompt 31 tokens, stop: eos``."""
    if stats.mode == REMOTE_MODE:  # a server that did not say how it decoded: what was measured here
        line = f"[remote] {tokens_text(stats.new_tokens)}, TTFT {stats.ttft_ms:.1f} ms"
        line += f", {stats.decode_tokens_per_s:.1f} tokens/s" if stats.new_tokens > 1 else ""
        line += f", prompt {tokens_text(stats.prompt_tokens)}" if stats.prompt_tokens else ""
        return f"{line}, stop: {stats.stop_reason}"
    mode = stats.mode if stats.drafter is None else f"{stats.mode}/{stats.drafter}"
    line = f"[{mode}] {tokens_text(stats.new_tokens)}, TTFT {stats.ttft_ms:.1f} ms"
    if stats.new_tokens > 1:
        line += f", {stats.decode_tokens_per_s:.1f} tokens/s"
    if stats.acceptance_rate is not None:
        drafts = "all drafts" if len(_drafting(stats)) > 1 else "drafts"
        line += f", {drafts}: {stats.acceptance_rate:.0%} accepted ({stats.accepted}/{stats.drafted})"
        if stats.mode != "auto":  # (Auto's K per drafter is in its steps below)
            line += f", K up to {max(stats.k_steps)}"
    if stats.mode == "auto":
        line += f", steps: {drafter_steps(stats)}"
    elif stats.fallback_tokens:
        line += f", {tokens_text(stats.fallback_tokens)} by plain steps"
    line += f", prefilled {stats.prefilled_tokens}/{stats.prompt_tokens}"
    if stats.fast_prefilled_tokens:
        line += f" ({stats.fast_prefilled_tokens} by the fast prefill)"
    line += f", discarded {stats.discarded_tokens} ({stats.rolls} roll{'' if stats.rolls == 1 else 's'}"
    line += ", part of the system prompt among them)" if stats.system_prompt_dropped else ")"
    line += f", stop: {stats.stop_reason}" + (f", precision: {stats.precision}" if stats.precision else "")
    return line


def drafter_steps(stats: GenerationStats) -> str:
    """What each drafter did, most steps first: ``head 33 (K up to 2, 50% accepted), lookup 2 (...), plain 1``, each
    one's share of drafts accepted where several drafted (one drafter's share is the reply's, which
    :func:`describe` says), as the window's Auto heading does."""
    shares = len(_drafting(stats)) > 1
    parts = []
    for name, use in sorted(stats.by_drafter.items(), key=lambda item: -item[1].steps):
        part = f"{name} {use.steps}"
        if use.drafted:
            share = f", {use.acceptance_rate:.0%} accepted" if shares else ""
            part += f" (K up to {use.k_max}{share})"
        parts.append(part)
    return ", ".join(parts) or "none"


def _drafting(stats: GenerationStats) -> list[str]:
    """The drafters that drafted at some step of the reply."""
    return [name for name, use in stats.by_drafter.items() if use.drafted]


def summary(stats: GenerationStats) -> dict:
    """The JSON object of one mode; its ``tokens_per_s`` null for a reply of one token, which has no decode speed
    (:func:`describe`)."""
    return {
        "mode": stats.mode,
        "drafter": stats.drafter,
        **stats.usage(),
        "text": stats.text,
        "new_tokens": stats.new_tokens,
        "ttft_ms": round(stats.ttft_ms, 3),
        "tokens_per_s": round(stats.decode_tokens_per_s, 3) if stats.new_tokens > 1 else None,
        "acceptance_rate": stats.acceptance_rate,
        "discarded_tokens": stats.discarded_tokens,
        "system_prompt_dropped": stats.system_prompt_dropped,
        "fast_prefilled_tokens": stats.fast_prefilled_tokens,
    }


def compare_speedup(ar: GenerationStats, spec: GenerationStats) -> float | None:
    """Auto's decode rate over plain decoding's; None where either run wrote under two tokens (one token has no
    interval between tokens to measure a decode speed over, :func:`describe`)."""
    if min(ar.new_tokens, spec.new_tokens) < 2 or not ar.decode_tokens_per_s:
        return None
    return spec.decode_tokens_per_s / ar.decode_tokens_per_s


def speedup_text(ar: GenerationStats, spec: GenerationStats, speedup: float | None) -> str:
    """``speedup 1.42x``, or where there is none to compare (:func:`compare_speedup`), why: ``no speedup to
    compare: plain decoding wrote 1 token and Auto 1 token, and a decode speed needs 2 or more``; where Auto drafted
    at no step, ``no speedup: Auto decoded plainly, ...`` with the ratio as the machine's load."""
    if speedup is not None and spec.mode == "auto" and not spec.drafted:
        # (both runs decoded plainly: their ratio is the machine's load, as the window's Compare says it)
        return (f"no speedup: Auto decoded plainly, drafts would not pay at these settings (the two plain runs' "
                f"speeds {speedup:.2f}:1: the machine's load, not the decoding)")
    if speedup is not None:
        return f"speedup {speedup:.2f}x"
    return (f"no speedup to compare: plain decoding wrote {tokens_text(ar.new_tokens)} and Auto "
            f"{tokens_text(spec.new_tokens)}, and a decode speed needs 2 or more")
