"""Events that ``Engine.generate`` yields, in order, for a GUI or CLI to consume."""

from __future__ import annotations

from dataclasses import dataclass, field

from .auto_decoding import PLAIN


@dataclass(frozen=True)
class TokenLogprob:
    """A token and its log-probability (natural log).

    Attributes:
        token_id: the token's id; piece: its bytes (a special token's name, e.g. ``b"<|im_end|>"``), which may be
        part of a multi-byte character; logprob: its log-probability, <= 0 (-inf where a grammar forbids it).
    """

    token_id: int
    piece: bytes
    logprob: float


@dataclass(frozen=True)
class TextDelta:
    """New reply text.

    Attributes:
        text: the characters this token completed (may be "" while a UTF-8 character is incomplete).
        token_id: the generated token id.
        from_draft: True when the token was proposed by the drafter and accepted by the target ("free").
        logprob: the token's log-probability under the target's distribution it was chosen from, after penalties,
            grammar and temperature (temperature 1 when greedy), before top-k/top-p/min-p (``sampling.logprobs``);
            None unless ``OutputSettings.logprobs`` asked for it.
        top_logprobs: the ``OutputSettings.logprobs`` most likely tokens there, most likely first.
    """

    text: str
    token_id: int
    from_draft: bool
    logprob: TokenLogprob | None = None
    top_logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class StepStats:
    """One decode step.

    Attributes:
        drafted: draft tokens proposed (0 for an autoregressive step).
        accepted: of those, accepted by the target.
        emitted: tokens this step produced (accepted + 1, or fewer at the end of the reply).
        draft_ms: wall time of drafting, milliseconds.
        verify_ms: wall time of the target pass (verification, or the decode step), milliseconds.
        step_ms: wall time of the whole step (drafting, verification, acceptance, rollback, detokenization),
            milliseconds; ``step_ms - draft_ms - verify_ms`` is the engine's own overhead.
        k: draft length used this step (the planner's choice, after context-limit clipping).
        cache_len: logical tokens in the target KV cache after the step.
        n_ctx: the rolling-context size (0: unknown, as for a reply a remote server generates).
        elapsed_s: seconds since generation started, at the end of the step.
        generated: tokens generated so far.
        drafter: what drafted this step: ``head``, ``model``, ``lookup``, or ``plain`` (no drafts); "" when unknown
            (a remote server's reply).
    """

    drafted: int
    accepted: int
    emitted: int
    draft_ms: float
    verify_ms: float
    step_ms: float
    k: int
    cache_len: int
    n_ctx: int
    elapsed_s: float
    generated: int
    drafter: str = ""


@dataclass(frozen=True)
class ContextRolled:
    """The KV cache reached n_ctx and was rolled (attention sinks kept, shift-RoPE applied).

    Attributes:
        discarded_tokens: tokens dropped from the cache by this roll.
        n_keep: tokens kept at the start.
        cache_len: logical tokens in the target cache after the roll.
    """

    discarded_tokens: int
    n_keep: int
    cache_len: int


@dataclass(frozen=True)
class PromptOverflow:
    """The prompt does not fit in n_ctx: some of it is discarded before the reply begins (its middle cut before the
    prefill, ``prefill.middle_cut``, or rolled out during it: ``Engine.generate``'s ``roll_long_prompt``). Yielded
    before the prefill starts, so that a front end can say so at once. ``head_tokens + message_tokens + tail_tokens +
    discarded_tokens == prompt_tokens``.

    Attributes:
        prompt_tokens: tokens of the whole prompt.
        n_ctx: the rolling-context size.
        discarded_tokens: prompt tokens the model does not read (those an earlier reply's rolls dropped included).
        head_tokens: tokens kept at the prompt's start (chat template, system prompt; with a cut, the last message's
            role header too): n_keep when rolled through.
        message_tokens: the last message's first tokens kept after them (its text's start), 0 when none.
        tail_tokens: the prompt's last tokens kept.
        max_n_ctx: the largest n_ctx the model allows (``LoadedModel.max_context``), None when unknown: a front
            end advises raising n_ctx only while the prompt would fit under it.
        system_prompt_tokens: the rendered system prompt's tokens (``GenerationStats.system_prompt_tokens``), 0
            without one: where ``head_tokens`` equals it, the start kept is the system prompt, which a front end
            names so while the prompt is read (the footer did, the progress line said "the first 24").
    """

    prompt_tokens: int
    n_ctx: int
    discarded_tokens: int
    head_tokens: int
    message_tokens: int
    tail_tokens: int
    max_n_ctx: int | None = None
    system_prompt_tokens: int = 0


@dataclass(frozen=True)
class PromptProgress:
    """How much of the prompt the prefill has read: yielded before its first pass and after each pass (about a
    second each, ``engine.prefill_pass_size``), so that a front end can show a long prompt's progress.

    Attributes:
        done: prompt tokens read so far (0 in the first event); total: tokens the prefill reads in all, those the
            KV cache did not hold already, after the middle of a prompt longer than n_ctx was cut (``PromptOverflow``).
        prompt_tokens: tokens of the whole prompt (``GenerationStats.prompt_tokens``, known before the reply ends:
            a server logs them for a reply its client left).
        elapsed_s: seconds since generation started.
        remaining_s: estimated seconds until the prefill ends, from the passes so far, with each token costing more
            the more tokens are cached before it; None before the first pass ends.
    """

    done: int
    total: int
    prompt_tokens: int
    elapsed_s: float
    remaining_s: float | None = None


@dataclass
class DrafterUse:
    """What one drafter did in a reply (Auto may use several; ``plain`` counts the steps without drafts).

    Attributes:
        steps: decode steps it drafted in; drafted / accepted: its draft tokens proposed / accepted;
        k_max: the largest K it was given.
    """

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    k_max: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, or None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None


@dataclass
class GenerationStats:
    """Summary of one reply.

    Attributes:
        mode: ``auto``, ``ar`` or ``spec`` (``remote`` from a remote server that does not say how it decoded:
            ``app.backends.remote_stream.REMOTE_MODE``); drafter: ``model``, ``head`` (a draft head), ``lookup`` or
            None; for Auto the drafter whose accepted drafts gave the most tokens (:meth:`most_accepted_drafter`;
            None when no draft was accepted), not the one of most steps: a head drafting 30 steps for 10 tokens beside
            prompt lookup copying 40 in 5 steps was named, though lookup did most of the speeding up.
        prompt_tokens: tokens of the whole rendered prompt; reused_tokens: those the reply read from the KV cache
            (the cached prefix of earlier turns, as OpenAI's ``cached_tokens``: after earlier rolls only what they
            left in it, of a prompt cut in the middle only the cached tokens the cut keeps); prefilled_tokens: those
            actually computed (neither reused nor cut from the middle of a prompt longer than n_ctx before its
            prefill).
        new_tokens: tokens generated.
        ttft_ms: time to first token (prefill + first sample), milliseconds.
        decode_tokens_per_s: (new_tokens - 1) / time from the first to the last token.
        tpot_ms: mean time per output token after the first, milliseconds.
        drafted / accepted: draft tokens proposed / accepted; acceptance_rate = accepted / drafted (None in AR).
        discarded_tokens / rolls: tokens dropped by the rolling context, and how many rolls.
        system_prompt_tokens: the rendered system prompt's tokens (``ChatSession.system_prompt_tokens``: what
            ``n_keep="auto"`` pins, up to half of n_ctx), 0 without one.
        system_prompt_dropped: this reply's rolls or its prompt's cut dropped some of those tokens: n_keep was below
            their count (a number set so, or ``"auto"`` with a system prompt over half of n_ctx,
            ``ContextSettings.resolve``); the model no longer reads its instructions whole.
        fallback_tokens: tokens of the plain steps of a speculative reply (Auto's or a fixed K's): the steps that
            drafted nothing (``by_drafter["plain"]``), whether Auto chose K 0, prompt lookup found nothing to copy
            or a grammar forbade every draft; 0 in autoregressive decoding.
        final_k: the K of the last step whose K the room left did not cut (``StepPlanner.cut_by_room``): a fixed
            K's K, Auto's last choice (0: a plain step), not the smaller K the reply's last tokens (max_new_tokens)
            or n_ctx left room for; 0 in autoregressive decoding, or where Auto chose nothing uncut.
        by_drafter: per drafter (``head``, ``model``, ``lookup``, ``plain``), what it did (``DrafterUse``).
        k_steps: decode steps per K used (0: plain steps).
        stop_reason: ``eos``, ``stop_string``, ``max_new_tokens`` or ``cancelled`` (``interrupted``: a remote
            server's stream cut, ``app.backends.remote_stream.REMOTE_CUT``).
        text: the reply text; token_ids: the generated ids.
        precision: the target's numeric precision (``NumericPrecision.describe()``), e.g.
            ``f32, KV cache f32, no dynamic quantization (exact)``.
        fast_prefilled_tokens: prompt tokens computed by the fast (bf16) prefill copy and handed over.
    """

    mode: str
    drafter: str | None = None
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefilled_tokens: int = 0
    new_tokens: int = 0
    ttft_ms: float = 0.0
    decode_tokens_per_s: float = 0.0
    tpot_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0
    discarded_tokens: int = 0
    rolls: int = 0
    system_prompt_tokens: int = 0
    system_prompt_dropped: bool = False
    fallback_tokens: int = 0
    final_k: int = 0
    by_drafter: dict[str, DrafterUse] = field(default_factory=dict)
    k_steps: dict[int, int] = field(default_factory=dict)
    stop_reason: str = ""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    precision: str = ""
    fast_prefilled_tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, or None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    def count_step(self, drafter: str, k: int, drafted: int, accepted: int, emitted: int, speculative: bool,
                   cut: bool = False) -> None:
        """Add one decode step: ``drafter`` (a name, or ``plain``) was given K ``k`` and drafted ``drafted`` tokens,
        ``accepted`` of them; ``emitted`` tokens came out. Its drafts count per drafter (a step without drafts counts
        as ``plain``) and per K drafted; ``speculative``: the reply has a drafter, so the tokens of a step without
        drafts (the ``plain`` steps) count in ``fallback_tokens``; ``cut``: the room left cut its K, which then
        leaves ``final_k`` as it was."""
        self.drafted += drafted
        self.accepted += accepted
        use = self.by_drafter.setdefault(drafter if drafted else PLAIN, DrafterUse())
        use.steps += 1
        use.drafted += drafted
        use.accepted += accepted
        use.k_max = max(use.k_max, drafted)
        self.k_steps[drafted] = self.k_steps.get(drafted, 0) + 1
        if not cut:
            self.final_k = k
        if speculative and not drafted:
            self.fallback_tokens += emitted

    def most_accepted_drafter(self) -> str | None:
        """The drafter (of ``by_drafter``, ``plain`` aside) whose drafts were accepted most, more steps first among
        equals; None when no draft was accepted."""
        ranked = [(use.accepted, use.steps, name) for name, use in self.by_drafter.items() if name != PLAIN and use.accepted]
        return max(ranked)[2] if ranked else None

    def usage(self) -> dict:
        """What the drafters did, as JSON: ``{"drafters": {name: {"steps", "drafted", "accepted", "k_max"}},
        "k_steps": {"K": steps}}`` (K as a string, JSON's keys being strings)."""
        return {
            "drafters": {name: vars(use).copy() for name, use in self.by_drafter.items()},
            "k_steps": {str(k): steps for k, steps in sorted(self.k_steps.items())},
        }


@dataclass(frozen=True)
class PromptScored:
    """The prompt's tokens with their log-probabilities (an OpenAI completion's ``echo`` with ``logprobs``), yielded
    before the reply's events by a front end that asked for them (``scoring.prompt_logprobs``).

    Attributes:
        first: the first prompt token's bytes (nothing before it scores it).
        tokens: for every later prompt token, ``(its TokenLogprob, the most likely tokens there)``.
    """

    first: bytes
    tokens: tuple[tuple[TokenLogprob, tuple[TokenLogprob, ...]], ...]


@dataclass(frozen=True)
class ToolCall:
    """A call of a tool read from a reply: the function's ``name`` and its ``arguments`` (parsed JSON, an object);
    ``arguments_json``: the arguments' JSON text as the reply wrote it (what ``ToolCallDelta`` streamed), None when
    it was not read apart (the arguments written as a JSON string)."""

    name: str
    arguments: dict
    arguments_json: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ToolCallDelta:
    """A tool call as the reply writes it, yielded by a chat given tools while the call's tokens arrive: its first
    delta has the call's ``index`` (0, 1, ... in the reply), its ``name`` and the opening of its ``arguments`` JSON
    text; the next ones (``name`` None) the rest of that text, piece by piece. ``ToolCalls`` still comes at the end,
    whole (a reply cut short may have streamed calls that do not read as calls: then its text comes as
    ``TextDelta``)."""

    index: int
    name: str | None
    arguments: str


@dataclass(frozen=True)
class ToolCalls:
    """The tool calls a reply made (``inference.tools``), yielded just before ``Finished`` by a chat given tools
    whose reply wrote calls; the text of the calls was not yielded as ``TextDelta``. ``calls`` is empty when the
    reply was cut in its first call (its text was a call's start, not text)."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Finished:
    """The last event of a reply."""

    stats: GenerationStats


Event = (
    PromptOverflow | PromptProgress | PromptScored | TextDelta | StepStats | ContextRolled | ToolCallDelta | ToolCalls
    | Finished
)
