"""Reply statistics as stored with a message (a JSON dict) and as shown in its footer, and durations in words.

Why one module of ~740 lines: its one job is the words a reply's statistics are said in, which the footer, a
Compare's columns, the live graph's summary and the export share (what Auto used, timing noise, acceptance), so
that they agree; split, one vocabulary would be spread over modules that call one another.
"""

from __future__ import annotations

import math

from inference.events import GenerationStats, PromptProgress

from ..backends.remote_stream import REMOTE_CUT, REMOTE_MODE
from ..counts import NOTHING_GENERATED, cut_text, ended_at_once, nothing_generated_text, tokens_text

#: What the window calls the two modes ("autoregressive" is the field's word; "plain" says it to everyone).
MODE_NAMES = {"ar": "Plain decoding", "spec": "Speculative", "auto": "Auto"}
DRAFTER_NAMES = {"model": "draft model", "head": "draft head", "lookup": "prompt lookup", "plain": "plain"}
STOPPED_BEFORE_FIRST_TOKEN = "Stopped before the first token"
NBSP = "\u00a0"  # a space no line breaks at
#: The speed ratios, as shown (two decimals), that a Compare calls about the same speed as plain decoding: two
#: plain runs of one prompt differ this much by timing alone (the ratio :func:`no_drafts` calls timing noise read
#: 0.97 and 1.11), so one pair of runs cannot tell 1.03× from 1.00× (a newcomer read "Speedup 1.03× over plain
#: decoding" at 12% acceptance, and "Speedup 1.00×" at 0%).
TIMING_NOISE = (0.97, 1.03)


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: ``850 ms`` under a second, ``4.2 s`` under ten, ``42 s`` under a minute,
    ``2 min 14 s`` under an hour, ``1 h 5 min`` beyond (each rounded to its last unit, so 59.96 s is ``1 min 0 s``).

    Args:
        seconds: the duration in seconds (a float; a negative one reads as ``0 ms``).

    Returns:
        The words; ``unknown`` for NaN or an infinity (a corrupt statistic is never worth a crash).
    """
    if not math.isfinite(seconds):
        return "unknown"
    seconds = max(0.0, seconds)
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min"


def progress_dict(progress: PromptProgress, in_memory: int = 0) -> dict:
    """A prompt's reading progress as a streaming reply's ``stats["prefill"]`` holds it (never saved):
    ``{"done": int, "total": int, "elapsed_s": float, "remaining_s": float or None}``, and ``"in_memory": int``
    when ``in_memory`` > 0: tokens of the prompt kept that the model holds from an earlier reply, which it does not
    read again (``total`` leaves them out)."""
    memory = {"in_memory": in_memory} if in_memory > 0 else {}
    return {"done": progress.done, "total": progress.total, "elapsed_s": progress.elapsed_s,
            "remaining_s": progress.remaining_s, **memory}  # fmt: skip


def reading_text(progress: dict) -> str:
    """What a prompt's reading progress (``progress_dict``) says in words: ``Reading your message: 12,288 of 39,935
    tokens · 1 min 2 s so far, about 40 s left`` ("" for a dict that is not one); with ``in_memory``, ``… of 3,362
    tokens (+4 in memory already) · …``, so that the tokens kept add up to what the context-length note says (a
    newcomer read 3,362 here against the 9,504 - 6,138 = 3,366 tokens kept: the first 4 were in the model's memory
    from the earlier reply)."""
    done, total = progress.get("done"), progress.get("total")
    elapsed, remaining = progress.get("elapsed_s"), progress.get("remaining_s")
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (done, total)):
        return ""
    words = f"Reading your message: {done:,} of {total:,} tokens"
    in_memory = progress.get("in_memory")
    if isinstance(in_memory, int) and not isinstance(in_memory, bool) and in_memory > 0:
        words += f" (+{in_memory:,} in memory already)"
    if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool):
        words += f" · {duration_text(elapsed)} so far"
    if isinstance(remaining, (int, float)) and not isinstance(remaining, bool) and done < total:
        words += f", about {duration_text(remaining)} left"
    return words


def stats_dict(stats: GenerationStats, **extra) -> dict:
    """The JSON-serialisable statistics of one reply (``extra`` adds keys such as k, model, device, seed)."""
    return {
        "mode": stats.mode,
        "drafter": stats.drafter,
        "ttft_ms": round(stats.ttft_ms, 2),
        "tokens_per_s": round(stats.decode_tokens_per_s, 2),
        "acceptance_rate": None if stats.acceptance_rate is None else round(stats.acceptance_rate, 4),
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "new_tokens": stats.new_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "discarded_tokens": stats.discarded_tokens,
        "rolls": stats.rolls,
        **({"system_prompt_dropped": True, "system_prompt_tokens": stats.system_prompt_tokens}
           if stats.system_prompt_dropped else {}),
        "final_k": stats.final_k,
        "fallback_tokens": stats.fallback_tokens,
        **stats.usage(),
        "stop_reason": stats.stop_reason,
        "precision": stats.precision,
        **extra,
    }


def mode_text(stats: dict) -> str:
    """``Plain decoding``, or ``Speculative (prompt lookup, K 4)``; ``Speculative`` alone for a remote reply whose
    server named no drafter and no K."""
    mode = MODE_NAMES.get(stats.get("mode"), stats.get("mode") or "?")
    if stats.get("mode") == "spec":
        parts = [DRAFTER_NAMES.get(stats["drafter"], stats["drafter"])] if stats.get("drafter") else []
        if stats.get("k"):
            parts.append(f"K {stats['k']}")
        mode += f" ({', '.join(parts)})" if parts else ""
    elif stats.get("mode") == "auto" and auto_steps(stats):
        mode += f" ({auto_steps(stats)})"
    return mode


def second_run_name(compare: dict) -> str:
    """What a comparison's second column runs: ``Auto (draft head 12 steps…)`` or ``Speculative (prompt lookup, K 4)``
    once it began, its planned decoding before (``spec_mode``: ``Auto``), ``Speculative`` for a comparison stored
    before that was recorded."""
    spec = compare.get("spec") or {}
    if spec.get("mode"):
        return mode_text(spec)
    return MODE_NAMES.get(compare.get("spec_mode"), MODE_NAMES["spec"])


def auto_drafters(steps_by_drafter: dict[str, int], accepted_by_drafter: dict[str, int] | None = None) -> str:
    """What Auto drafted with, in a few words, from its steps per drafter (``plain`` for steps without drafts) and
    the drafts each had accepted: ``draft head``, ``mostly prompt lookup`` (of several, the one whose accepted drafts
    gave most tokens, more steps first among equals), ``plain`` (no drafts); "" when nothing is known (a newcomer
    trial read "Auto: 27.0 tokens/s, acceptance rate 61%" with two drafters blended and none named outside the
    Compare column's heading). A drafter none of whose drafts was accepted gained nothing and is not named (a later
    trial read "Auto (prompt lookup): 50.6 tokens/s, acceptance rate 0%" for 65 plain steps and one lookup step
    with 0% accepted); one whose accepted drafts are not counted is."""
    accepted = accepted_by_drafter or {}
    drafting = {
        name: steps for name, steps in steps_by_drafter.items()
        if name != "plain" and steps > 0 and accepted.get(name) != 0
    }  # fmt: skip
    if not drafting:
        return "plain" if steps_by_drafter else ""
    most = max(drafting, key=lambda name: (accepted.get(name, 0), drafting[name], name))
    return ("mostly " if len(drafting) > 1 else "") + DRAFTER_NAMES.get(most, most)


def _auto_drafters_of(stats: dict) -> str:
    """:func:`auto_drafters` of a reply's stored statistics (their ``drafters``: steps, and drafts per drafter)."""
    drafters = stats.get("drafters")
    if not isinstance(drafters, dict):
        return ""
    steps: dict[str, int] = {}
    accepted: dict[str, int] = {}
    for name, use in drafters.items():
        if isinstance(use, dict) and isinstance(use.get("steps"), int):
            key = name if use.get("drafted") else "plain"  # (a drafter's steps that drafted nothing were plain)
            steps[key] = steps.get(key, 0) + use["steps"]
            if isinstance(use.get("accepted"), int):
                accepted[key] = accepted.get(key, 0) + use["accepted"]
    return auto_drafters(steps, accepted)


def _second_decoding(compare: dict) -> str:
    """The second run's decoding in a sentence: ``Auto decoding (mostly draft head)``, ``speculative decoding
    (prompt lookup)``."""
    spec = compare.get("spec") or {}
    if (spec.get("mode") or compare.get("spec_mode")) == "auto":
        words = _auto_drafters_of(spec)
        return f"Auto decoding ({words})" if words else "Auto decoding"
    drafter = DRAFTER_NAMES.get(spec.get("drafter"), "")
    return f"speculative decoding ({drafter})" if drafter else "speculative decoding"


def _drafting(stats: dict) -> list[str]:
    """The drafters of a reply's stored statistics (their ``drafters``) that drafted at some step, those Auto's
    heading gives a share of accepted drafts (:func:`auto_steps`)."""
    drafters = stats.get("drafters")
    if not isinstance(drafters, dict):
        return []
    return [name for name, use in drafters.items() if isinstance(use, dict) and isinstance(use.get("drafted"), int)
            and use["drafted"] > 0]  # fmt: skip


def auto_steps(stats: dict) -> str:
    """What Auto did, most steps first: ``draft head 33 steps at K up to 2; plain 1 step``, each drafter's share of
    accepted drafts where several drafted (``draft head 30 steps at K up to 2, 32% accepted; prompt lookup 4 steps
    at K up to 4, 50% accepted; plain 1 step``: one drafter's share is the reply's acceptance, which
    :func:`metrics_text` says; a newcomer read "40% accepted; plain 1 step) · … acceptance 40%"); "" when the
    statistics do not say (a reply stored before Auto, or by a remote server)."""
    drafters = stats.get("drafters")
    if not isinstance(drafters, dict):
        return ""
    shares = len(_drafting(stats)) > 1
    parts = []
    uses = [(name, use) for name, use in drafters.items() if isinstance(use, dict) and isinstance(use.get("steps"), int)]
    for name, use in sorted(uses, key=lambda item: -item[1]["steps"]):
        part = f"{DRAFTER_NAMES.get(name, name)} {use['steps']} step{'s' if use['steps'] != 1 else ''}"
        drafted, accepted = use.get("drafted"), use.get("accepted")
        if isinstance(drafted, int) and drafted > 0:
            part += f" at K up to {use.get('k_max')}"
            if shares and isinstance(accepted, int):
                part += f", {accepted / drafted:.0%} accepted"
        parts.append(part)
    return "; ".join(parts)


def times_text(count: int) -> str:
    """``once``, ``twice``, ``3 times``."""
    return {1: "once", 2: "twice"}.get(count, f"{count:,} times")


def system_prompt_dropped_text(tokens: int | None, n_ctx: int | None = None) -> str:
    """A reply whose rolls or cut dropped part of the system prompt (``GenerationStats.system_prompt_dropped``), with
    what keeps it whole: "Always kept" at auto pins a system prompt of up to half the context length, so ``part of the
    system prompt (331 tokens) dropped: a context length of 662 or more keeps it whole``; where the context length
    (``n_ctx``, stored with such a reply) is that already, only an Always kept below its length drops it (a trial read
    "a context length of 38 or more keeps it whole" at 256, Always kept 4): ``… dropped: Always kept of 19 or more (or
    auto) in the settings keeps it whole``; without its length (a reply stored before it was), ``… dropped: a larger
    context length keeps it``."""
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx >= 2 * tokens:
            return (f"part of the system prompt ({tokens:,} tokens) dropped: Always kept of {tokens:,} or more (or auto) "
                    "in the settings keeps it whole")
        return f"part of the system prompt ({tokens:,} tokens) dropped: a context length of {2 * tokens:,} or more keeps it whole"
    return "part of the system prompt dropped: a larger context length keeps it"


def dropped_text(discarded: int, rolls: int) -> str:
    """What the rolling context did, in words (newcomer trial: "(1 roll)" was jargon): ``context full: 512 earlier
    tokens dropped once``, ``context full 3 times: 1,536 earlier tokens dropped``; without a count of rolls (a prompt
    cut before it was read), ``context full: 6,138 earlier tokens dropped``."""
    if rolls > 1:
        return f"context full {times_text(rolls)}: {discarded:,} earlier tokens dropped"
    return f"context full: {discarded:,} earlier tokens dropped" + (" once" if rolls == 1 else "")


def accepted_text(rate: float, several: bool = False, part: bool = False) -> str:
    """The share of drafted tokens accepted, in the footer's words, which the live graph's summary says too (a
    newcomer read its "acceptance rate 48%" and the footer's "drafts: 48% accepted" as two facts): ``drafts: 48%
    accepted``, ``all drafts: …`` where ``several`` drafters drafted, ``drafts of this part: …`` where ``part``."""
    return f"{'all drafts' if several else 'drafts'}{' of this part' if part else ''}: {rate:.0%} accepted"


def has_speed(stats: dict) -> bool:
    """Whether a reply's (or a run's) stored statistics measured a decode speed, their ``tokens_per_s``: it needs
    two tokens or more (a one-token reply has no interval between tokens to measure it over, and stores 0 tokens/s;
    the command line prints "1 token" and no speed); a reply whose token count is not stored keeps its speed."""
    count = stats.get("new_tokens")
    return "tokens_per_s" in stats and not (isinstance(count, int) and count < 2)


def metrics_text(stats: dict, part: bool = False) -> str:
    """``TTFT 42 ms · 63.1 tokens/s · drafts: 52% accepted · 32 tokens`` (``all drafts: 44% accepted`` where several
    drafters drafted, each one's share in Auto's heading, :func:`auto_steps`; ``drafts of this part: …`` where
    ``part``: the statistics are a continued reply's last part, :func:`last_part`, whose "acceptance 34% overall" a
    newcomer could not tell from the whole reply's), and where the context was full, ``· context full 5 times: 120
    earlier tokens dropped`` (:func:`dropped_text`) before the token count, and :func:`system_prompt_dropped_text`
    where that took some of the system prompt. A prompt cut to fit the context length
    (``prompt_kept_first``, ``ReplyRecorder``) is said as such (:func:`cut_text`; newcomer trial: at n_ctx 64 a long
    prompt read only "context full 16 times: 640 earlier tokens dropped"), the context full then only for what the
    reply's own rolls dropped. A reply of one token has no speed (:func:`has_speed`)."""
    parts = []
    if "ttft_ms" in stats:
        parts.append(f"TTFT {duration_text(stats['ttft_ms'] / 1000)}")
    if has_speed(stats):
        parts.append(f"{stats['tokens_per_s']:.1f} tokens/s")
    if stats.get("acceptance_rate") is not None:  # (one wording, local or remote: a trial read "acceptance 17%"
        # under a remote reply and "all drafts: 31% accepted" under a local one)
        # ("all drafts" where several drafted: the heading gives each drafter's share, a later trial read two figures)
        parts.append(accepted_text(stats["acceptance_rate"], len(_drafting(stats)) > 1, part))
    elif stats.get("mode") == "spec":
        parts.append("nothing drafted")  # (it read "acceptance n/a": a newcomer could not tell what was missing)
    parts += context_notes(stats)
    if "new_tokens" in stats:
        parts.append(tokens_text(stats["new_tokens"]))
    return " · ".join(parts)


def context_notes(stats: dict) -> list[str]:
    """What the context length did to a reply, said by its footer (:func:`metrics_text`) and its export
    (:func:`export_footer_text`: a trial's export said none of it): the prompt cut to fit (:func:`cut_text`), earlier
    tokens dropped (:func:`dropped_text`: where the prompt was cut, only those the reply's own rolls dropped), part of
    the system prompt dropped (:func:`system_prompt_dropped_text`: by the reply's rolls or cut, or by earlier rolls
    where what it read starts with less than the system prompt)."""
    notes = []
    dropped, rolls = stats.get("discarded_tokens"), stats.get("rolls") or 0
    first, last = stats.get("prompt_kept_first"), stats.get("prompt_kept_last")
    system_cut = False
    if first is not None and last is not None:
        head = [stats.get(key) for key in ("system_prompt_tokens", "prompt_kept_message")]
        head = [value if isinstance(value, int) and not isinstance(value, bool) else 0 for value in head]
        notes.append(cut_text(first, last, stats.get("prompt_tokens") or first + last, str(stats.get("prompt_cut", "")),
                              *head))
        dropped, rolls = stats.get("reply_discarded_tokens"), stats.get("reply_rolls") or 0
        # its kept start shorter than the system prompt: a memory that earlier rolls left without all of it (a
        # regenerated reply said nothing of it, where the reply it replaced had; the engine flags only its own)
        system_cut = isinstance(first, int) and 0 < first - head[1] < head[0]
    if dropped:  # (none dropped: nothing to say)
        notes.append(dropped_text(dropped, rolls))
    if stats.get("system_prompt_dropped") or system_cut:
        notes.append(system_prompt_dropped_text(stats.get("system_prompt_tokens"), stats.get("n_ctx")))
    return notes


#: What a Compare column's line starts with for a run cut at the length limit (a single reply's footer says it so).
LENGTH_LIMIT_REACHED = "Length limit reached"


def run_metrics_text(run: dict) -> str:
    """The line under a Compare column: :func:`metrics_text` of its run, after ``Length limit reached · `` where
    the run stopped there (a comparison cannot be continued, so no hint follows; a newcomer trial saw it only in
    the JSON export)."""
    ended = f"{LENGTH_LIMIT_REACHED} · " if run.get("stop_reason") == "max_new_tokens" else ""
    return ended + metrics_text(run)


def _recorded(stats: dict | None, key: str) -> str:
    """``stats[key]`` of a reply, or of a comparison's runs (the speculative one first), as text; "" where absent."""
    stats = stats or {}
    compare = stats.get("compare")
    runs = [compare.get("spec") or {}, compare.get("ar") or {}] if isinstance(compare, dict) else [stats]
    return next((str(run[key]) for run in runs if isinstance(run, dict) and run.get(key)), "")


def answered_with(stats: dict | None) -> str:
    """The store name of the target model that wrote a reply (``stats["target_model"]``, or that of a comparison's
    runs), or "" for replies recorded before SpecChat stored it."""
    return _recorded(stats, "target_model")


def answered_with_label(stats: dict | None) -> str:
    """The name the model picker gave the target model that wrote a reply (``stats["target_label"]``, e.g.
    ``SmolLM2-135M-Instruct · 4-bit``, or that of a comparison's runs), else its store name (:func:`answered_with`:
    replies recorded before SpecChat stored the label), or ""."""
    return _recorded(stats, "target_label") or answered_with(stats)


def stopped_at_limit(stats: dict | None, state: str = "complete") -> bool:
    """True for a reply that ended because it reached the longest reply allowed (max new tokens), which Continue
    can write more of where this computer wrote it (:func:`can_continue`; a comparison cannot be continued)."""
    stats = stats or {}
    return state == "complete" and stats.get("stop_reason") == "max_new_tokens" and "compare" not in stats


def interrupted(stats: dict | None, state: str) -> bool:
    """True for a reply a crash or a kill interrupted (its row still ``streaming`` once no reply streams), which
    Continue can write more of (a comparison cannot be continued)."""
    return state == "streaming" and "compare" not in (stats or {})


def stopped_by_user(stats: dict | None, state: str) -> bool:
    """True for a reply the user stopped (Esc, Stop) after it wrote tokens, which Continue can write more of from
    the text kept, as LM Studio and Jan offer (newcomer trial: a stopped reply offered only Regenerate); not one
    stopped before its first token (nothing to continue) nor a comparison (it cannot be continued)."""
    stats = stats or {}
    written = stats.get("new_tokens")
    wrote = isinstance(written, int) and not isinstance(written, bool) and written > 0
    return state == "stopped" and wrote and "compare" not in stats


def remote_reply(stats: dict | None) -> bool:
    """True for a reply a remote server wrote: its ``model`` (``RemoteTarget.describe``) ends in `` (remote)``, a
    local reply's in its device (``… on CPU``)."""
    return _recorded(stats, "model").endswith(" (remote)")


def can_continue(stats: dict | None, state: str) -> bool:
    """True for a reply Continue can write more of: one stopped at the length limit, interrupted by a crash
    (newcomer trial: an interrupted reply had no Continue) or stopped by the user (:func:`stopped_by_user`), written
    by a model on this computer. A remote server's is not: OpenAI's chat API has no way to ask for more of a reply,
    and servers take a conversation ending with the partial reply each their own way (vLLM without its
    ``continue_final_message`` field, and SpecChat's own server, answer it with a new reply), so the window could
    not tell a continuation from a second reply run into the first (its footer says to raise the longest reply and
    Regenerate instead)."""
    resumable = stopped_at_limit(stats, state) or interrupted(stats, state) or stopped_by_user(stats, state)
    return resumable and not remote_reply(stats)


def stopped_before_first_token(stats: dict | None, state: str) -> bool:
    """True for a reply stopped before it had any token (during its prompt's prefill): it has no speed to show."""
    stats = stats or {}
    return state == "stopped" and stats.get("new_tokens") == 0 and "compare" not in stats


def nothing_generated(stats: dict | None, state: str) -> bool:
    """True for a finished reply the model ended at once, with no token (``app.counts.ended_at_once``); not a
    comparison, whose footer says what each run wrote."""
    stats = stats or {}
    return state == "complete" and "compare" not in stats and ended_at_once(stats.get("new_tokens"), stats.get("stop_reason"))


def footer_text(stats: dict | None, state: str = "complete", last: bool = True) -> str:
    """The footer line of an assistant message: mode, TTFT, tokens/s, acceptance rate, discarded tokens, and the
    model that wrote it (only "Stopped before the first token" for a reply stopped during its prefill; ``Stream cut``
    instead of the state and mode for a remote reply whose stream was cut, its error after the server's model; no
    mode for a remote server that did not say how it decoded, ``REMOTE_MODE``: the label names the server).

    ``last``: the reply is the conversation's last message, the only one with a Continue button; the footer of an
    earlier reply cut at the length limit (or interrupted) does not point to Continue (a newcomer trial read
    "Continue writes more" above a later message, with no Continue anywhere near), nor does a remote reply's, which
    has none (:func:`can_continue`): one cut at the length limit says to raise Longest reply and Regenerate. A reply
    the model ended at once says so first, with what helps (:func:`nothing_generated`)."""
    stats = stats or {}
    if state == "streaming":
        more = "; Continue writes more" if last and can_continue(stats, state) else ""
        return f"Interrupted: SpecChat closed while this reply was being generated (the text up to then was kept{more})"
    if stopped_before_first_token(stats, state):
        return _with_error(STOPPED_BEFORE_FIRST_TOKEN, stats)
    prefix = {"stopped": "Stopped · ", "error": "Failed · "}.get(state, "")
    if stopped_at_limit(stats, state):
        hint = "raise Longest reply, then Regenerate" if remote_reply(stats) else "Continue writes more"
        prefix = f"{LENGTH_LIMIT_REACHED} ({hint}) · " if last else f"{LENGTH_LIMIT_REACHED} · "
    elif nothing_generated(stats, state):  # (an empty bubble said nothing but "0 tokens": a trial's long paste)
        again = "Regenerate, or rephrase your message" if last else "rephrase your message"
        prefix = nothing_generated_text("prompt_kept_first" in stats, "Context length in the settings", again) + " · "
    part = stats
    if stats.get("continued") and "compare" not in stats:  # (a comparison is never continued)
        prefix += continued_text(stats) + (" · last part: " if stats.get("mode") else " · ")
        part = last_part(stats)
    label = answered_with_label(stats)
    # (the label's own " · ", as in "SmolLM2-135M-Instruct · 4-bit", is no place for the footer's line break: a
    # newcomer read "4-bit" alone on the next line; PartsLabel breaks between parts joined by " · ")
    model = f" · {label.replace(' · ', NBSP + '·' + NBSP)}" if label else ""
    if "compare" in stats:
        compare = stats["compare"]
        if state == "stopped":  # (a comparison stored by an older version may hold a speedup of its cut-off runs)
            compare = {**compare, "stopped": True}
        return prefix + compare_summary(compare) + model
    if not stats.get("mode"):
        return prefix.rstrip(" ·") + (f": {stats['error']}" if stats.get("error") else "")
    metrics = metrics_text(part, part=part is not stats)
    if stats.get("stop_reason") == REMOTE_CUT:  # no local decoding mode: the label names the server and its model
        line = f"Stream cut · {metrics}{model}"
    elif stats.get("mode") == REMOTE_MODE:
        line = f"{prefix}{metrics}{model}"
    else:
        line = f"{prefix}{mode_text(part)} · {metrics}{model}"
    if stats.get("error"):
        line += f" · {stats['error']}"
    return line


def continued_text(stats: dict) -> str:
    """What Continue did to a reply, with its totals: ``Continued once: 1,024 tokens in all`` (newcomer trial: the
    footer of a continued reply spoke of the last continuation only)."""
    words = f"Continued {times_text(int(stats.get('continued') or 0))}"
    total = stats.get("new_tokens")
    return words + (f": {tokens_text(total)} in all" if isinstance(total, int) and not isinstance(total, bool) else "")


def last_part(stats: dict) -> dict:
    """The statistics of a continued reply's last part (its TTFT, speed and acceptance are the last Continue's):
    its own token count where ``earlier_tokens`` (the tokens before that Continue, ``ReplyRecorder``) is stored,
    else none (a reply continued by an earlier version stores only the total)."""
    part = {key: value for key, value in stats.items() if key != "new_tokens"}
    total, earlier = stats.get("new_tokens"), stats.get("earlier_tokens")
    if all(isinstance(value, int) and not isinstance(value, bool) for value in (total, earlier)):
        part["new_tokens"] = total - earlier
    return part


def export_footer_text(stats: dict | None, state: str = "complete") -> str:
    """The line under an assistant message in a Markdown export: how the reply ended, how it was decoded, how fast,
    and the model that wrote it, in plain words and without the window's hints (``Continue writes more``) and
    abbreviations, e.g. ``Cut off at the length limit · Plain decoding · 24 tokens at 63.1 tokens/s, the first
    after 42 ms · model qwen2.5-0.5b``, with the footer's notes of what the context length did
    (:func:`context_notes`). A remote reply with no decoding mode of its own (its stream cut, or a server
    that did not say how it decoded: ``REMOTE_MODE``) reads as its footer in the window, :func:`footer_text` (it said
    ``Stopped · Plain decoding``, a local mode, under a cut stream the window calls ``Stream cut``)."""
    stats = stats or {}
    if state == "streaming":
        return "Interrupted: SpecChat closed while this reply was being generated"
    if stopped_before_first_token(stats, state):
        return _with_error(STOPPED_BEFORE_FIRST_TOKEN, stats)
    if "compare" not in stats and (stats.get("stop_reason") == REMOTE_CUT or stats.get("mode") == REMOTE_MODE):
        return footer_text(stats, state, last=False)  # (last=False: no "Continue writes more", a window's hint)
    parts = []
    if stopped_at_limit(stats, state):
        parts.append("Cut off at the length limit")
    elif nothing_generated(stats, state):
        parts.append(NOTHING_GENERATED)
    elif state in ("stopped", "error"):
        parts.append("Stopped" if state == "stopped" else "Failed")
    if "compare" in stats and (state == "stopped" or stats["compare"].get("stopped")):
        parts.append(stopped_compare_text(stats["compare"]))
    elif "compare" in stats:
        parts.append(_compare_in_words(stats["compare"]))
    elif stats.get("continued"):  # the totals, then the last part's numbers, as the window's footer (a trial's export
        # gave the last Continue's speed and TTFT to the whole reply: "16 tokens at 30.6 tokens/s, the first after 35
        # ms", its first token 119 ms in)
        words = continued_text(stats)
        parts.append(words[0].lower() + words[1:])
        if stats.get("mode"):
            decoding = _decoding_in_words(last_part(stats))
            parts += [f"last part: {decoding[0]}", *decoding[1:]]
    elif stats.get("mode"):
        parts += _decoding_in_words(stats)
    if "compare" not in stats:  # (a comparison's line, as its footer, says what its runs measured)
        parts += context_notes(stats)
    if label := answered_with_label(stats):
        parts.append(f"model {label}")
    return _with_error(" · ".join(parts), stats)


def export_run_text(run: dict) -> str:
    """The line under one run of a comparison in a Markdown export (its heading names the decoding): how it ended
    where it was cut at the length limit, then its acceptance and speed in the words of :func:`export_footer_text`,
    e.g. ``Cut off at the length limit · 56 tokens at 46.6 tokens/s, the first after 274 ms``; "" for a run that did
    not finish (a comparison stopped before it)."""
    parts = ["Cut off at the length limit"] if run.get("stop_reason") == "max_new_tokens" else []
    return " · ".join(parts + _decoding_in_words(run)[1:])


def _decoding_in_words(stats: dict) -> list[str]:
    """How a reply was decoded and how fast: ``Speculative decoding (prompt lookup)``, ``52% of drafted tokens
    accepted``, ``30 tokens at 63.2 tokens/s, the first after 41 ms`` (``1 token, the first after 41 ms``:
    :func:`has_speed`)."""
    if stats.get("mode") == "spec":  # a remote server may name no drafter: "Speculative decoding" alone
        drafter = stats.get("drafter")
        parts = [f"Speculative decoding ({DRAFTER_NAMES.get(drafter, drafter)})" if drafter else "Speculative decoding"]
    elif stats.get("mode") == "auto":
        parts = ["Auto decoding" + (f" ({auto_steps(stats)})" if auto_steps(stats) else "")]
    else:
        parts = [MODE_NAMES.get(stats.get("mode"), str(stats.get("mode")))]
    if stats.get("acceptance_rate") is not None:
        drafted = "all drafted" if len(_drafting(stats)) > 1 else "drafted"  # (each drafter's share: auto_steps)
        parts.append(f"{stats['acceptance_rate']:.0%} of {drafted} tokens accepted")
    if stats.get("new_tokens") or ("new_tokens" not in stats and "tokens_per_s" in stats):  # (the second: a
        # continued reply's last part without a count of its own, :func:`last_part`)
        rate = f"{stats['tokens_per_s']:.1f} tokens/s" if has_speed(stats) else ""
        count = tokens_text(stats["new_tokens"]) if stats.get("new_tokens") else ""
        speed = f"{count} at {rate}" if count and rate else count or rate
        if "ttft_ms" in stats:
            speed += f", the first after {duration_text(stats['ttft_ms'] / 1000)}"
        parts.append(speed)
    return parts


def no_drafts(compare: dict) -> str:
    """Where a comparison's second run drafted at no step, what it did instead, as the words that replace a
    speedup: both runs then decoded plainly, and their speed ratio is timing noise (a newcomer's first Compare,
    sampled at the chat defaults where the head's drafts do not pay, read "Speedup 0.91×" as Auto being slower; a
    prompt lookup Compare on a text with nothing to copy read "Speedup 1.11×" above "acceptance n/a"). ""
    where it drafted, or its statistics do not say (a remote server's, a comparison stored before)."""
    spec = compare.get("spec") or {}
    if spec.get("mode") == "auto":
        if _auto_drafters_of(spec) == "plain":
            return "No speedup: Auto decoded plainly, drafts would not pay at these settings"
    elif spec.get("mode") == "spec" and spec.get("drafted") == 0 and spec.get("drafter") in DRAFTER_NAMES:
        return f"No speedup: {DRAFTER_NAMES[spec['drafter']]} drafted nothing, so both runs decoded plainly"
    return ""


def too_few_tokens(compare: dict) -> str:
    """Where a finished comparison's run wrote under two tokens (Longest reply 1), why it has no speedup, in the
    command line's words (``app.cli.statistics.speedup_text``): ``No speedup to compare: plain decoding wrote 1 token
    and Auto 1 token, and a decode speed needs 2 or more`` (one token has no interval between tokens to measure a
    speed over; a newcomer's one-token Compare read "Comparison incomplete"). "" otherwise, and for a comparison
    stopped or not finished (a run's token count not stored)."""
    counts = [(compare.get(run) or {}).get("new_tokens") for run in ("ar", "spec")]
    if compare.get("stopped") or not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return ""
    if min(counts) >= 2:
        return ""
    second = MODE_NAMES["auto"] if (compare.get("spec") or {}).get("mode") == "auto" else _second_decoding(compare)
    return (f"No speedup to compare: plain decoding wrote {tokens_text(counts[0])} and {second} "
            f"{tokens_text(counts[1])}, and a decode speed needs 2 or more")


def _compare_in_words(compare: dict) -> str:
    """A comparison's result: ``Auto decoding 1.42 times as fast as plain decoding, texts identical``, ``... about
    as fast as plain decoding (1.02 times, within timing noise), ...`` (:data:`TIMING_NOISE`) or ``... slower than
    plain decoding (0.91 times as fast), ...``; where the second run drafted nothing, ``No speedup: Auto decoded
    plainly, ... (the two plain runs' speeds 0.97:1: the machine's load, not the decoding), ...`` (:func:`no_drafts`); where a run wrote
    one token, ``No speedup to compare: ..., texts identical`` (:func:`too_few_tokens`)."""
    second = _second_decoding(compare)
    if words := too_few_tokens(compare):
        return f"{words}, {identity_text(compare)}"
    if compare.get("speedup") is None:
        return f"Comparison of {second} and plain decoding incomplete"
    if words := no_drafts(compare):
        return f"{words} ({_noise_ratio(compare)}), {identity_text(compare)}"
    speed = _speed_words(compare["speedup"], "about as fast as plain decoding ({:.2f} times, within timing noise)",
                         "slower than plain decoding ({:.2f} times as fast)", "{:.2f} times as fast as plain decoding")
    return f"{second[0].upper()}{second[1:]} {speed}, {identity_text(compare)}"


def _within_noise(ratio: float) -> bool:
    """Whether a speed ratio, as shown (two decimals), lies within :data:`TIMING_NOISE`."""
    return TIMING_NOISE[0] <= round(ratio, 2) <= TIMING_NOISE[1]


def _speed_words(ratio: float, within_noise: str, slower: str, faster: str) -> str:
    """The one of three templates (each formatted with ``ratio``) that says a speed ratio: within
    :data:`TIMING_NOISE` (:func:`_within_noise`), below it, or above it."""
    template = within_noise if _within_noise(ratio) else slower if ratio < TIMING_NOISE[0] else faster
    return template.format(ratio)


def _noise_ratio(compare: dict) -> str:
    """The speed ratio of two runs that both decoded plainly, said as what made it: ``the two plain runs' speeds
    0.97:1: the machine's load, not the decoding`` (a trial on a loaded machine read "2.00:1, timing noise" as
    untrue)."""
    return f"the two plain runs' speeds {compare['speedup']:.2f}:1: the machine's load, not the decoding"


def _with_error(line: str, stats: dict) -> str:
    """``line``, then the error that ended the reply, if any."""
    if not stats.get("error"):
        return line
    return f"{line} · {stats['error']}" if line else str(stats["error"])


def compare_summary(compare: dict) -> str:
    """What a comparison {"ar": stats, "spec": stats, "speedup", "identical", "sampled"} measured, e.g.
    ``Speedup 1.42× over plain decoding · speed and identity: texts identical`` (greedy), or ``... · speed only:
    same seed 5, texts differ by design (sampling)`` (no seed named where the user set none and the runs were
    unseeded, as chat replies are): sampled replies differ even with the same seed, because the
    two modes draw their random numbers at different points; ``texts identical this time (sampled texts may
    differ)`` where they came out the same (a seeded Auto run that stayed plain: a newcomer trial read "texts
    differ" under two identical texts). A ratio within :data:`TIMING_NOISE` reads ``About the same speed as plain
    decoding (1.02×, within timing noise)``, one below it ``Slower than plain decoding (0.91×)``
    (:func:`compare_headline`). A second run that drafted at no step claims no speedup, its ratio said as
    timing noise (:func:`no_drafts`); one where a run wrote a single token has none to compare
    (:func:`too_few_tokens`). A comparison Stop cut off (``"stopped"``) claims neither: see
    :func:`stopped_compare_text`."""
    if compare.get("stopped"):
        return stopped_compare_text(compare)
    if not (few := too_few_tokens(compare)) and compare.get("speedup") is None:
        return "Comparison incomplete"
    if few:
        speedup = few
    elif words := no_drafts(compare):
        speedup = f"{words} ({_noise_ratio(compare)})"
    else:
        speedup = compare_headline(compare)
    if compare.get("sampled"):
        seed = (compare.get("ar") or {}).get("seed")
        same_seed = f"same seed {seed}, " if isinstance(seed, int) and not isinstance(seed, bool) else ""
        texts = SAMPLED_IDENTICAL if compare.get("identical") else "texts differ by design (sampling)"
        return f"{speedup} · {'' if few else 'speed only: '}{same_seed}{texts}"
    # (a comparison of one-token runs measured no speed: "speed and identity" read as a claim it just declined)
    return f"{speedup} · {'' if few else 'speed and identity: '}{identity_text(compare)}"


def compare_headline(compare: dict) -> str:
    """A comparison's speedup alone, in fewest words: ``Speedup 1.42× over plain decoding with Auto (mostly draft
    head)`` (what the second run drafted with: :func:`_drafted_with`), ``About the same speed as plain decoding (1.02×, within timing noise)`` (:data:`TIMING_NOISE`),
    ``Slower than plain decoding (0.91×)``, ``No speedup: Auto decoded plainly`` (:func:`no_drafts`' first words),
    ``No speedup to compare: plain decoding wrote 1 token and Auto 1 token`` (:func:`too_few_tokens`' first words),
    ``Comparison stopped, so no speedup`` or ``Comparison incomplete`` (where the graph has no room for
    :func:`compare_summary`)."""
    if compare.get("stopped"):
        return "Comparison stopped, so no speedup"
    if words := too_few_tokens(compare):
        return words.split(",")[0]
    if compare.get("speedup") is None:
        return "Comparison incomplete"
    if words := no_drafts(compare):
        return words.split(",")[0]
    speedup = _speed_words(compare["speedup"], "About the same speed as plain decoding ({:.2f}×, within timing noise)",
                           "Slower than plain decoding ({:.2f}×)", "Speedup {:.2f}× over plain decoding")
    return f"{speedup} {drafted_with}" if (drafted_with := _drafted_with(compare.get("spec") or {})) else speedup


def _drafted_with(spec: dict) -> str:
    """What a comparison's second run drafted with, after its speedup: ``with Auto (mostly draft head)``, ``with
    speculative decoding (prompt lookup)``; for a remote server's run whose statistics name no drafter, ``(drafter
    not reported by the server)`` (a newcomer's remote Compare read "Speedup 1.95× over plain decoding", naming
    none, where a local one named its drafter); "" for a local run stored without one."""
    if spec.get("mode") == "auto" and (words := _auto_drafters_of(spec)):
        return f"with Auto ({words})"
    if spec.get("mode") == "spec" and spec.get("drafter") in DRAFTER_NAMES:
        return f"with speculative decoding ({DRAFTER_NAMES[spec['drafter']]})"
    return "(drafter not reported by the server)" if remote_reply(spec) else ""


def stopped_compare_text(compare: dict) -> str:
    """A comparison that Stop cut off: no speedup and no identity verdict (a cut-off run measures neither), only
    what each run wrote, e.g. ``Comparison stopped, so no speedup: plain decoding wrote 40 tokens, speculative
    decoding (prompt lookup) 12 tokens before the stop``."""

    def tokens(run: dict) -> str:
        count = run.get("new_tokens")
        return tokens_text(count if isinstance(count, int) and not isinstance(count, bool) else 0)

    ar, spec = compare.get("ar") or {}, compare.get("spec") or {}
    if not ar:
        return "Comparison stopped during plain decoding, so no speedup"
    second = _second_decoding(compare)
    if not spec:
        return f"Comparison stopped, so no speedup: plain decoding wrote {tokens(ar)}; {second} did not run"
    return f"Comparison stopped, so no speedup: plain decoding wrote {tokens(ar)}, {second} {tokens(spec)} before the stop"


#: A sampled comparison whose two texts came out the same: true of this one, not a claim of identity.
SAMPLED_IDENTICAL = "texts identical this time (sampled texts may differ)"


def identity_text(compare: dict) -> str:
    """Whether a comparison's texts are identical, and if not, why (see ``inference.exactness``)."""
    if compare.get("identical"):
        return SAMPLED_IDENTICAL if compare.get("sampled") else "texts identical"
    if compare.get("sampled"):
        return "texts differ by design (sampling)"
    difference = compare.get("first_difference")
    if not isinstance(difference, dict):
        return "texts differ"
    try:
        gap, bound = float(difference["top2_gap"]), float(difference["noise_bound"])
        token = int(difference["token"])
    except (KeyError, TypeError, ValueError):
        return "texts differ"
    if difference.get("near_tie"):
        return f"texts differ from token {token}: a near-tie (top-2 logit gap {gap:.3f} ≤ noise {bound:.3f})"
    return f"texts differ from token {token}: NOT a near-tie (gap {gap:.3f} > noise {bound:.3f}), a bug: please report it"
