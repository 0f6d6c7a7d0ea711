"""Validated generation settings: sampling, speculative decoding and the rolling context.

Every check raises ``ValueError`` whose message names the setting and its allowed range, so a GUI can show
it next to the field and a CLI can print it as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

MAX_K = 16
MIN_N_CTX = 16


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen from the logits.

    Attributes:
        temperature: 0 means greedy (argmax); otherwise logits are divided by it. Range [0, 100].
        top_k: keep the k most likely tokens; 0 disables. Range >= 0.
        top_p: nucleus sampling, keep the smallest set of tokens whose probability mass >= top_p. Range (0, 1].
        seed: seed of the random generator; the same seed and settings give the same reply. None = random.
        max_new_tokens: stop after this many generated tokens. Range >= 1.
        stop_strings: generation stops before the first occurrence of any of these strings.
        ignore_eos: keep generating past end-of-sequence tokens (benchmarks that need exact lengths).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 512
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax of the logits."""
        return self.temperature == 0.0

    def validate(self) -> None:
        """Raise ValueError naming the first setting outside its range."""
        if not 0.0 <= self.temperature <= 100.0:
            raise ValueError(f"temperature must be in [0, 100] (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = disabled), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2^63), got {self.seed}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop_strings must not contain an empty string")


@dataclass(frozen=True)
class ContextSettings:
    """The attention-sink rolling context (StreamingLLM, arXiv 2309.17453, section 3.2).

    Attributes:
        n_ctx: maximum number of tokens kept in the KV cache. Range [16, model's max_position_embeddings].
        n_keep: tokens at the start kept forever (the attention sinks), or ``"auto"`` to keep the whole
            system prompt (at least 4 tokens). Range [0, n_ctx).
        n_discard: tokens dropped after the first n_keep when the cache is full; -1 = half of
            ``n_ctx - n_keep``. Range -1 or [1, n_ctx - n_keep).
    """

    n_ctx: int = 4096
    n_keep: int | str = 4
    n_discard: int = -1

    def validate(self, max_position_embeddings: int | None = None) -> None:
        """Raise ValueError naming the first setting outside its range."""
        upper = max_position_embeddings or 1 << 31
        if not MIN_N_CTX <= self.n_ctx <= upper:
            raise ValueError(f"n_ctx must be in [{MIN_N_CTX}, {upper}], got {self.n_ctx}")
        if self.n_keep != "auto":
            if not isinstance(self.n_keep, int) or not 0 <= self.n_keep < self.n_ctx:
                raise ValueError(f"n_keep must be 'auto' or in [0, {self.n_ctx - 1}] (below n_ctx), got {self.n_keep}")
            self.resolve_n_discard(self.n_keep)
        elif self.n_discard != -1 and not 1 <= self.n_discard < self.n_ctx - 4:
            raise ValueError(f"n_discard must be -1 or in [1, {self.n_ctx - 5}], got {self.n_discard}")

    def resolve_n_discard(self, n_keep: int) -> int:
        """Number of tokens one roll drops, given the resolved n_keep; raises ValueError if out of range."""
        room = self.n_ctx - n_keep
        if self.n_discard == -1:
            return max(1, room // 2)
        if not 1 <= self.n_discard < room:
            raise ValueError(
                f"n_discard must be -1 or in [1, {room - 1}] (n_keep + n_discard < n_ctx), got {self.n_discard}"
            )
        return self.n_discard


@dataclass(frozen=True)
class SpeculativeSettings:
    """Speculative decoding (Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318).

    Attributes:
        k: draft tokens proposed per step. Range [1, 16].
        adaptive: adjust k from the running acceptance rate, and fall back to plain decoding while
            speculation measures slower than autoregressive decoding.
        lookup_max_ngram: for prompt-lookup drafting, the longest n-gram matched against the context.
            Range [1, 8].
    """

    k: int = 4
    adaptive: bool = False
    lookup_max_ngram: int = 3

    def validate(self) -> None:
        """Raise ValueError naming the first setting outside its range."""
        if not 1 <= self.k <= MAX_K:
            raise ValueError(f"K (draft tokens per step) must be in [1, {MAX_K}], got {self.k}")
        if not 1 <= self.lookup_max_ngram <= 8:
            raise ValueError(f"lookup_max_ngram must be in [1, 8], got {self.lookup_max_ngram}")


@dataclass(frozen=True)
class GenerationSettings:
    """Everything one reply is generated with. ``mode`` is ``"ar"`` (autoregressive) or ``"spec"``."""

    mode: str = "ar"
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    speculative: SpeculativeSettings = field(default_factory=SpeculativeSettings)

    def validate(self, max_position_embeddings: int | None = None) -> None:
        """Validate all parts; raise ValueError naming the first bad setting."""
        if self.mode not in ("ar", "spec"):
            raise ValueError(f"mode must be 'ar' or 'spec', got {self.mode!r}")
        self.sampling.validate()
        self.context.validate(max_position_embeddings)
        self.speculative.validate()

    def with_mode(self, mode: str) -> "GenerationSettings":
        """A copy with another decoding mode."""
        return replace(self, mode=mode)
