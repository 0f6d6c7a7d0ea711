"""Validated generation settings: the decoding choice, sampling, speculative decoding and the rolling context.

Design rules:

* **One source of truth.** Every generation setting's default and allowed range is defined here, once; the
  command line (argparse defaults), the window (field ranges, ``AppSettings``) and the engine read them from here.
* **Errors name their field.** Every check raises ``SettingError`` (a ``ValueError``) whose ``field`` is the
  setting's flat name (``"temperature"``, ``"n_ctx"``, ``"k"``...) and whose message states the allowed range, so a
  GUI can flag the field without parsing the text and a CLI can print the message as is.
* **One rule for n_keep="auto"**: ``ContextSettings.resolve`` turns it (and n_discard = -1) into numbers, for
  validation, generation and scoring alike.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field, replace

MAX_K = 16
MIN_N_CTX = 16
#: Highest temperature, everywhere (the window, the command line, the engine, server requests): OpenAI's API range.
#: Past 2 a model's distribution is so flat that it writes noise.
MAX_TEMPERATURE = 2.0
MAX_LOOKUP_NGRAM = 8
#: Largest repetition penalty accepted (1 = off; llama.cpp and transformers accept any positive value).
MAX_REPETITION_PENALTY = 10.0
#: Presence and frequency penalties range over [-2, 2], as in the OpenAI API.
MAX_PRESENCE_FREQUENCY_PENALTY = 2.0
#: The fewest tokens ``n_keep="auto"`` pins (the attention sinks of StreamingLLM, arXiv 2309.17453, section 3.2).
AUTO_N_KEEP_MIN = 4
#: ``n_keep="auto"`` pins at most this share of n_ctx, so that at least as much is left to the rolling chat: a longer
#: system prompt keeps its start (its first instructions) through every roll, the rest rolls out like the chat, and
#: the reply's statistics say so.
AUTO_N_KEEP_MAX_SHARE = 0.5
#: Largest context accepted when the model states no trained length.
MAX_N_CTX = 1 << 31


class SettingError(ValueError):
    """A generation setting outside its allowed range.

    Attributes:
        field: the setting's flat name (``"temperature"``, ``"top_p"``, ``"n_ctx"``, ``"n_keep"``, ``"k"``, ...).
    """

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def renamed(self, name: str) -> str:
        """The message with the setting called ``name``, as a front end names it (a request field ``max_tokens``,
        a flag ``--n-ctx``): the field's name leading the message is replaced, else ``name`` is put first."""
        message = str(self)
        if message.startswith(self.field + " "):
            return name + message[len(self.field):]
        return f"{name}: {message}"


class Decoding(str, enum.Enum):
    """How a reply is decoded. The values are the keys settings files store."""

    AUTO = "auto"  # speculative decoding, each step's drafter and K (0: plain) chosen by measured speed
    AUTOREGRESSIVE = "ar"
    DRAFT_MODEL = "spec_model"  # speculative decoding, a draft model proposes
    PROMPT_LOOKUP = "spec_lookup"  # speculative decoding, n-gram matches in the conversation propose

    @property
    def speculative(self) -> bool:
        """True for both speculative choices."""
        return self is not Decoding.AUTOREGRESSIVE

    @property
    def mode(self) -> str:
        """``"auto"``, ``"ar"`` or ``"spec"``, as statistics and the command line's ``--mode`` name it."""
        return "auto" if self is Decoding.AUTO else "spec" if self.speculative else "ar"

    @property
    def drafter(self) -> str | None:
        """``"model"``, ``"lookup"`` or None (plain decoding, or Auto: its statistics name the drafters it used), as
        statistics name what proposed the drafts."""
        return {Decoding.DRAFT_MODEL: "model", Decoding.PROMPT_LOOKUP: "lookup"}.get(self)

    @property
    def label(self) -> str:
        """A human name ("Speculative, prompt lookup")."""
        return _DECODING_LABELS[self]


#: The values a settings file may store for the decoding choice.
DECODING_VALUES = frozenset(d.value for d in Decoding)

#: Auto's label with the drafters it chooses between besides prompt lookup and a plain step ("draft head, ", "draft
#: model, " or "" without one): the window's Decoding list names the ones its draft choice makes available.
AUTO_LABEL = "Auto (fastest measured: {}prompt lookup or plain, per step)"

_DECODING_LABELS = {
    Decoding.AUTO: AUTO_LABEL.format("draft head, "),
    Decoding.AUTOREGRESSIVE: "Plain (one token per step)",
    Decoding.DRAFT_MODEL: "Speculative, draft model",
    Decoding.PROMPT_LOOKUP: "Speculative, prompt lookup",
}


#: The ``SamplingSettings`` fields greedy decoding does not use, which the command line and the server name where they
#: are given with temperature 0 (the penalties change the logits greedy decoding takes the likeliest of: they are used).
GREEDY_UNUSED = ("top_p", "top_k", "min_p", "seed")
#: Why greedy decoding does not use them.
GREEDY_WHY = "temperature 0 takes the likeliest token at each step"


def top_k_given(top_k: int) -> int:
    """A top-k as the server and the command line take it: -1 is off too (0), as llama-server and vLLM write it.

    Raises:
        SettingError: below -1, in words that name both ("top_k must be >= 0 (0 or -1 = disabled), got -5").
    """
    if top_k < -1:
        raise SettingError("top_k", f"top_k must be >= 0 (0 or -1 = disabled), got {top_k}")
    return 0 if top_k == -1 else top_k


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen from the logits.

    Attributes:
        temperature: 0 means greedy (argmax); otherwise logits are divided by it. Range [0, MAX_TEMPERATURE] (2).
        top_k: keep the k most likely tokens; 0 disables. Range >= 0.
        top_p: nucleus sampling, keep the smallest set of tokens whose probability mass >= top_p. Range (0, 1].
        seed: seed of the random generator; the same seed and settings give the same reply. None = random.
            Range [0, 2^63). Every front end reads -1 as None (as llama.cpp does), so the range's message offers it.
        max_new_tokens: stop after this many generated tokens. Range >= 1.
        stop_strings: generation stops before the first occurrence of any of these strings (none empty).
        ignore_eos: keep generating past end-of-sequence tokens (benchmarks that need exact lengths).
        repetition_penalty: CTRL's repetition penalty over the latest ``repeat_last_n`` tokens of the conversation,
            prompt included (``inference.penalties``); 1 = off. Range (0, 10].
        repeat_last_n: how many of the latest tokens the repetition penalty looks at (llama.cpp's default 64).
            Range >= 1.
        presence_penalty: subtracted from the logit of every token the reply has used (OpenAI API). Range [-2, 2].
        frequency_penalty: subtracted once per use of a token in the reply (OpenAI API). Range [-2, 2].
        min_p: after temperature, top-k and top-p, drop the tokens less likely than min_p times the most likely one
            (Nguyen et al., arXiv 2407.01082; as llama.cpp, vLLM and transformers offer it); 0 disables. Range [0, 1].

    The defaults are plain greedy decoding without penalties: what the engine and the command line do unless told
    otherwise (the window starts from chat defaults instead, ``app.gui.sampling_presets``).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 512
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax of the logits."""
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        """True when a repetition, presence or frequency penalty changes the logits."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def validate(self) -> None:
        """Raise SettingError naming the first setting outside its range."""
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise SettingError(
                "temperature",
                f"temperature must be in [0, {MAX_TEMPERATURE:g}] (0 = greedy; OpenAI's range), got {self.temperature:g}",
            )
        if self.top_k < 0:
            raise SettingError("top_k", f"top_k must be >= 0 (0 = disabled), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingError("top_p", f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise SettingError("min_p", f"min_p must be in [0, 1] (0 = disabled), got {self.min_p}")
        if self.max_new_tokens < 1:
            raise SettingError("max_new_tokens", f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise SettingError("seed", f"seed must be -1 (random) or in [0, 2^63), got {self.seed}")
        if any(not s for s in self.stop_strings):
            raise SettingError("stop_strings", "stop_strings must not contain an empty string")
        if not 0.0 < self.repetition_penalty <= MAX_REPETITION_PENALTY:
            raise SettingError(
                "repetition_penalty",
                f"repetition_penalty must be in (0, {MAX_REPETITION_PENALTY:g}] (1 = off), got {self.repetition_penalty}",
            )
        if self.repeat_last_n < 1:
            raise SettingError("repeat_last_n", f"repeat_last_n must be >= 1 token, got {self.repeat_last_n}")
        bound = MAX_PRESENCE_FREQUENCY_PENALTY
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -bound <= value <= bound:
                raise SettingError(name, f"{name} must be in [-{bound:g}, {bound:g}] (0 = off), got {value}")


@dataclass(frozen=True)
class ContextSettings:
    """The attention-sink rolling context (StreamingLLM, arXiv 2309.17453, section 3.2).

    Attributes:
        n_ctx: maximum number of tokens kept in the KV cache. Range [16, model's max_position_embeddings].
        n_keep: tokens at the start kept forever (the attention sinks), or ``"auto"`` (the default) to keep the
            rendered system prompt, at least 4 tokens and at most half of n_ctx (``resolve``). Range [0, n_ctx).
        n_discard: tokens dropped after the first n_keep when the cache is full; -1 = half of
            ``n_ctx - n_keep``. Range -1 or [1, n_ctx - n_keep).
    """

    n_ctx: int = 4096
    n_keep: int | str = "auto"
    n_discard: int = -1

    def validate(self, max_position_embeddings: int | None = None) -> None:
        """Raise SettingError naming the first setting outside its range (``"auto"`` counts as its minimum, 4)."""
        upper = max_position_embeddings or MAX_N_CTX
        if not MIN_N_CTX <= self.n_ctx <= upper:
            bounds = f"in [{MIN_N_CTX}, {upper}]" if max_position_embeddings else f">= {MIN_N_CTX} (and at most the model's length)"
            raise SettingError("n_ctx", f"n_ctx must be {bounds}, got {self.n_ctx}")
        self.resolve()

    def resolve(self, system_prompt_tokens: int = 0) -> tuple[int, int]:
        """The numbers a roll uses: ``(n_keep, n_discard)``.

        ``n_keep="auto"`` pins the rendered system prompt (``ChatSession.system_prompt_tokens``: the template's own
        default system message included), at least ``AUTO_N_KEEP_MIN`` tokens and at most ``AUTO_N_KEEP_MAX_SHARE``
        of n_ctx: a longer system prompt (a document to discuss) keeps its start through every roll, the same part
        a prompt's middle cut keeps (``prefill.middle_cut``), and never makes a reply fail; its rolls drop the rest
        (``GenerationStats.system_prompt_dropped``). llama.cpp pins nothing by default (``--keep 0``) and LM Studio's
        "truncate middle" keeps the system prompt. ``n_discard=-1`` drops half of what follows the kept tokens.

        Args:
            system_prompt_tokens: tokens of the rendered system message (0 without one).

        Raises:
            SettingError: a numeric n_keep not below n_ctx, or n_discard outside [1, n_ctx - n_keep).
        """
        if self.n_keep == "auto":
            n_keep = max(AUTO_N_KEEP_MIN, min(system_prompt_tokens, int(self.n_ctx * AUTO_N_KEEP_MAX_SHARE)))
        elif isinstance(self.n_keep, int) and not isinstance(self.n_keep, bool) and 0 <= self.n_keep < self.n_ctx:
            n_keep = self.n_keep
        else:
            raise SettingError(
                "n_keep", f"n_keep must be 'auto' or in [0, {self.n_ctx - 1}] (below n_ctx), got {self.n_keep}"
            )
        return n_keep, self._n_discard(n_keep)

    def _n_discard(self, n_keep: int) -> int:
        room = self.n_ctx - n_keep
        if self.n_discard == -1:
            return max(1, room // 2)
        if not 1 <= self.n_discard < room:
            raise SettingError(
                "n_discard",
                f"n_discard must be -1 or in [1, {room - 1}] (n_keep + n_discard < n_ctx), got {self.n_discard}",
            )
        return self.n_discard


@dataclass(frozen=True)
class SpeculativeSettings:
    """Speculative decoding (Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318).

    Attributes:
        k: draft tokens proposed per step (K) by a speculative decoding that does not choose it. Range [1, 16].
        adaptive: choose K per step as Auto does (``inference.auto_decoding``: expected tokens per second from the
            measured pass costs and acceptance, K = 0 a plain step) with the one drafter chosen. Auto always chooses.
        lookup_max_ngram: for prompt-lookup drafting, the longest n-gram matched against the context.
            Range [1, 8].
    """

    k: int = 4
    adaptive: bool = False
    lookup_max_ngram: int = 3

    def validate(self, k: bool = True) -> None:
        """Raise SettingError naming the first setting outside its range; ``k``: check K too (False where the
        decoding chooses K per step and leaves it unused)."""
        if k and not 1 <= self.k <= MAX_K:
            raise SettingError("k", f"K (draft tokens per step) must be in [1, {MAX_K}], got {self.k}")
        if not 1 <= self.lookup_max_ngram <= MAX_LOOKUP_NGRAM:
            raise SettingError(
                "lookup_max_ngram", f"lookup_max_ngram must be in [1, {MAX_LOOKUP_NGRAM}], got {self.lookup_max_ngram}"
            )


#: Most alternatives ``OutputSettings.logprobs`` asks for at each token (OpenAI's top_logprobs bound).
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class OutputSettings:
    """What a reply must look like and what it reports besides its text.

    Attributes:
        grammar: the grammar every token must follow (structured output: JSON, a JSON schema, tool calls), as
            ``inference.constraints`` builds it (llguidance grammar text); None = free text. Checked when the
            reply starts (``constraints.GrammarError``).
        logprobs: report each token's log-probability and this many most likely alternatives (``TextDelta.logprob``,
            ``TextDelta.top_logprobs``); None = none. Range [0, 20].
    """

    grammar: str | None = None
    logprobs: int | None = None

    def validate(self) -> None:
        """Raise SettingError when ``logprobs`` is out of range."""
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise SettingError("logprobs", f"logprobs must be in [0, {MAX_TOP_LOGPROBS}] alternatives, got {self.logprobs}")


@dataclass(frozen=True)
class GenerationSettings:
    """Everything one reply is generated with.

    Attributes:
        decoding: Auto (the default), autoregressive, or speculative with a draft model or with prompt lookup (a
            ``Decoding`` or its value; ``validate`` refuses anything else).
        sampling / context / speculative / output: see their classes (``speculative`` is validated only when the
            decoding is speculative, its K only when the decoding drafts a fixed K: :attr:`uses_fixed_k`).
    """

    decoding: Decoding = Decoding.AUTO
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    speculative: SpeculativeSettings = field(default_factory=SpeculativeSettings)
    output: OutputSettings = field(default_factory=OutputSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.decoding, Decoding) and self.decoding in DECODING_VALUES:
            object.__setattr__(self, "decoding", Decoding(self.decoding))

    def validate(self, max_position_embeddings: int | None = None) -> None:
        """Validate the parts the decoding uses; raise SettingError naming the first bad setting."""
        if not isinstance(self.decoding, Decoding):
            choices = ", ".join(repr(d.value) for d in Decoding)
            raise SettingError("decoding", f"decoding must be one of {choices}, got {self.decoding!r}")
        self.sampling.validate()
        self.output.validate()
        self.context.validate(max_position_embeddings)
        if self.decoding.speculative:
            self.speculative.validate(k=self.uses_fixed_k)

    @property
    def uses_fixed_k(self) -> bool:
        """True when the decoding drafts ``speculative.k`` tokens a step: prompt lookup or a draft model without
        ``adaptive``. Auto and Adaptive choose K per step (0 to ``MAX_K``), even in a seeded reply, and leave it
        unused, as autoregressive decoding does."""
        return self.decoding in (Decoding.DRAFT_MODEL, Decoding.PROMPT_LOOKUP) and not self.speculative.adaptive

    def with_decoding(self, decoding: Decoding) -> "GenerationSettings":
        """A copy with another decoding choice."""
        return replace(self, decoding=decoding)


def check_threads(threads: int | None) -> None:
    """Refuse a CPU inference thread count (OpenVINO's INFERENCE_NUM_THREADS) outside [1, logical CPUs].

    Args:
        threads: the count, or None for all cores.

    Raises:
        SettingError: ``field`` ``"threads"``; the message names the range.
    """
    cpus = os.cpu_count() or 1
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cpus):
        raise SettingError(
            "threads", f"threads must be in [1, {cpus}] (this machine's logical CPUs), or left out for all of them; got {threads}"
        )
