"""The decoding engine: prefill, autoregressive and speculative decode, rolling context, streaming events.

Why one module of ~700 lines: it is one class, :class:`Engine` (about 610 of them), the decode loop: a reply's
prefix reuse, prefill, steps (``_speculative_step``), rolls and events all read and write the same caches, drafters
and per-reply state (``_Decode``), in an order that keeps both modes' caches alike. What has a job of its own is
already beside it (``prefill``, ``reply_stream``, ``scoring``, ``exactness``, ``auto_decoding``, ``drafting``);
splitting the loop further would scatter one cache's bookkeeping over modules.

One ``Engine`` owns the target model's KV cache (and the draft model's). ``generate`` takes the token ids of
the whole conversation, reuses the longest cached prefix (a follow-up turn only prefills its new tokens),
and yields ``events`` while it decodes.

Speculative decoding follows Leviathan et al. (arXiv 2211.17192) and Chen et al. (arXiv 2302.01318): each
step (``Engine._speculative_step``, shaped like gpt-fast's ``speculative_decode``) the drafter proposes K tokens,
one target pass scores the pending token and the K drafts, and ``sampling.accept_drafts`` keeps the longest
acceptable prefix plus one target token. Autoregressive decoding is the same step without a drafter (K = 0),
so both modes run one code path. Greedy output is token-for-token that of autoregressive decoding, up to
floating-point near-ties between a one-token and a multi-token pass.

The drafters of a reply (``drafting.Drafter``: the draft model or head, a prompt-lookup drafter; none for plain
decoding) follow from ``GenerationSettings.decoding``; each step a ``StepPlanner`` (``auto_decoding``) says which
of them drafts and how many tokens: Auto (the default) chooses both, K = 0 included, from the pass costs and the
acceptance this process measured; a fixed decoding drafts K with its one drafter. The engine tells the drafters
every change of the target's cache, and the draft model or head also when a reply without it changed the cache.

The rolling context follows StreamingLLM (Xiao et al., arXiv 2309.17453): whenever a token is to be cached
while the cache holds n_ctx tokens, the cache is rolled first (``KVCache.roll``). Speculative steps clip K so
that they never cross n_ctx, hence both modes roll at exactly the same cache lengths and see the same tokens. A
prompt longer than n_ctx is not rolled through: its middle is cut before the prefill (``_cut_the_middle``, as
``prefill.middle_cut`` says: its start, the first tokens of its last user message and its end stay, with room for
the reply), the same cut in every mode.

Beside it: ``prefill`` (how a prompt is read in passes), ``reply_stream`` (a reply's text and when it ends),
``scoring`` (log-probabilities of given text), ``exactness`` (why two greedy replies differ).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, Iterator, Sequence

import numpy as np

from .auto_decoding import SHADOW_ROWS, Measurements, PresetCosts, StepPlanner, seeded_sampling
from .constraints import GrammarError, GrammarMask
from .detokenizer import streaming_vocabulary
from .draft_head import LoadedHead, check_head_fits, is_head_folder, load_head
from .drafting import Drafter, HeadDrafter, ModelDrafter, PromptLookupDrafter, common_prefix
from .events import ContextRolled, Event, Finished, GenerationStats, PromptOverflow, PromptProgress, StepStats
from .kv_cache import KVCache
from .model import LoadedModel, check_can_roll, check_same_tokenizer, check_window, load_model
from .penalties import ReplyPenalties
from .precision import PrecisionSettings
from .prefill import (
    MiddleCut,
    middle_cut,
    prefill_discards,
    prefill_pass_size,
    prefill_work,
    prefill_work_left,
    remaining_seconds,
)
from .reply_stream import ReplyStream
from .sampling import accept_drafts, first_draft_acceptance, next_token, next_token_with_probability
from .settings import MAX_K, Decoding, GenerationSettings, SamplingSettings, SettingError, check_threads

KV_SLACK = 64


def _repeats_pinned_header(prompt_ids: list[int], system_prompt_tokens: int, message: tuple[int, int] | None) -> bool:
    """Whether the last message is a later turn whose role header (``message``: ``(turn_start, text_start)``) is the
    one the pinned head ends with (``ChatSession.system_prompt_tokens`` ends with the first user turn's): the cut of a
    prompt longer than n_ctx then keeps one header before the message's text, not two (``prefill.middle_cut``)."""
    if message is None or message[0] < system_prompt_tokens or not 0 < message[1] - message[0] <= system_prompt_tokens:
        return False
    header = prompt_ids[message[0] : message[1]]
    return prompt_ids[system_prompt_tokens - len(header) : system_prompt_tokens] == header


class Engine:
    """Generates replies from a target model, optionally speculating with a draft model or prompt lookup.

    Args:
        target: the loaded target model.
        draft: an optional draft: a loaded draft model (same tokenizer as the target), or a draft head trained for
            the target (``draft_head``); ``Decoding.DRAFT_MODEL`` drafts with either.

    Raises:
        TokenizerMismatchError: the draft's tokenizer differs from the target's, or the head does not fit it.
    """

    def __init__(self, target: LoadedModel, draft: LoadedModel | LoadedHead | None = None):
        head = isinstance(draft, LoadedHead)
        if head:
            check_head_fits(target, draft)
        elif draft is not None:
            check_same_tokenizer(target, draft)
        self.target = target
        self.draft = draft
        self._text_vocabulary = streaming_vocabulary(target)  # replies are detokenized by bytes where it matches
        kept = draft.target_outputs if head else ()
        self._cache = KVCache(
            target.compiled, target.rope, KV_SLACK, target.sliding_window, target.prefill_compiled, kept_outputs=kept,
            prefill_weights=target.prefill_weights,
        )
        self._model_drafter: Drafter | None = None
        if head:
            self._model_drafter = HeadDrafter(draft, self._cache, target.vocab_size, KV_SLACK)
        elif draft is not None:
            self._model_drafter = ModelDrafter(draft, KV_SLACK)
        self._model_drafter_name = "head" if head else "model"
        self._measurements = Measurements()  # Auto's pass costs and drafting costs (this process), acceptance (chat)
        self._seen: list[int] = []  # every token fed to the target cache since the last reset, unrolled
        self._lookup: PromptLookupDrafter | None = None  # kept across replies: its n-gram index of _seen grows
        self._rolled = False
        self._cut = False  # a middle cut made the cache: a piece of a message lies between its start and its end
        self._lock = threading.Lock()
        self.last_logits: np.ndarray | None = None  # float32 [vocab]: logits the last token was chosen from (penalized)

    @classmethod
    def load(
        cls,
        target_dir: str | Path,
        device: str = "CPU",
        draft_dir: str | Path | None = None,
        draft_device: str | None = None,
        precision: PrecisionSettings = PrecisionSettings(),
        num_threads: int | None = None,
    ) -> "Engine":
        """Load a target (and optional draft) model folder and build an engine; see ``model.load_model``.

        The target is compiled with ``precision`` (exact by default); the draft with its device's defaults, since
        its rounding changes only which tokens are proposed, never the output. A ``draft_dir`` holding a draft
        head (``draft_head.is_head_folder``) is loaded as one, before the target: a fused head's
        ``feature_layers`` are compiled into the target.

        Raises:
            SettingError: ``num_threads`` outside [1, logical CPUs] (``settings.check_threads``); and as
                ``model.load_model`` raises.
        """
        check_threads(num_threads)
        draft = None
        if draft_dir is not None and is_head_folder(draft_dir):
            draft = load_head(draft_dir, draft_device or device, num_threads)
        elif draft_dir is not None:
            draft = load_model(draft_dir, draft_device or device, None, num_threads)
        layers = draft.feature_layers if isinstance(draft, LoadedHead) else ()
        target = load_model(target_dir, device, precision, num_threads, feature_layers=layers)
        return cls(target, draft)

    @property
    def cache_length(self) -> int:
        """Logical tokens in the target KV cache."""
        return len(self._cache)

    @property
    def cache_physical_length(self) -> int:
        """Slots held by the target KV cache state tensors, masked ones included."""
        return self._cache.physical_length

    def reset(self) -> None:
        """Drop both KV caches (the next prompt is prefilled from scratch)."""
        self._cache.reset()
        if self._model_drafter is not None:
            self._model_drafter.reset()
        self._seen = []
        self._lookup = None
        self._rolled = self._cut = False
        self._measurements.new_conversation()

    def layer_keys(self, layer: int = 0) -> np.ndarray:
        """Cached keys of one target layer, float32 ``[1, kv_heads, cache_length, head_dim]``."""
        return self._cache.layer_keys(layer)

    def generate(
        self,
        prompt_ids: Sequence[int],
        settings: GenerationSettings,
        system_prompt_tokens: int = 0,
        cancel: threading.Event | None = None,
        roll_long_prompt: bool = False,
        message: tuple[int, int] | None = None,
    ) -> Iterator[Event]:
        """Generate a reply to ``prompt_ids``, yielding events as it goes.

        Args:
            prompt_ids: token ids of the whole conversation (chat template applied), ending where the reply
                starts. Its longest prefix already in the KV cache is not recomputed.
            settings: validated here; ``settings.decoding`` chooses autoregressive decoding or speculative
                decoding with the draft model or with prompt lookup.
            system_prompt_tokens: tokens of the rendered system message (``ChatSession.system_prompt_tokens``),
                which ``n_keep="auto"`` pins (``ContextSettings.resolve``); ``Finished``'s stats say whether a roll
                or cut dropped some of them (``system_prompt_dropped``).
            roll_long_prompt: feed a prompt longer than n_ctx whole, rolling through it (each roll recomputes
                nothing but costs the prefill of the tokens it drops: the behaviour ``score`` keeps for perplexity);
                by default the middle of such a prompt is dropped before the prefill (``_cut_the_middle``): its
                first n_keep tokens (or the system prompt), the first tokens of its last message and its end stay,
                leaving room for the reply (``prefill.middle_cut``).
            message: ``(turn_start, text_start)``: indices in ``prompt_ids`` where the last user message's turn and
                its text start (``ChatSession.last_message``), whose first tokens a cut keeps; None: the prompt's own
                first tokens are kept (a completion prompt).
            cancel: set it from any thread to stop; the partial reply is returned in ``Finished``. It is checked
                before each prefill pass (about a second each, see ``prefill_pass_size``) and each decode step; a
                prefill stopped so keeps the passes done in the cache, and ``Finished`` comes without any text.

        Yields:
            ``PromptOverflow`` first when the prompt does not fit in n_ctx, ``PromptProgress`` before the prefill and
            after each of its passes, ``ContextRolled`` (during prefill or decode), ``TextDelta`` per token,
            ``StepStats`` per decode step, and ``Finished`` last.

        Raises:
            ValueError: empty prompt. SettingError (a ValueError): a setting out of range (its ``field`` names
                it), or draft-model decoding without a draft model.
            SettingError with field ``grammar``: no reply can follow ``settings.output.grammar`` (it does not compile
                for this model's tokenizer, or admits no value, as a JSON schema whose ``$ref`` requires itself:
                llguidance then fails at the first token), raised before the first token or, for what llguidance
                finds only later, mid-reply.
            RopeUnsupportedError: a roll is needed but the model's RoPE cannot be shifted.
            RuntimeError: another generation is running on this engine.
        """
        if len(prompt_ids) == 0:
            raise ValueError("the prompt is empty: type a message before sending")
        settings.validate(self.target.max_position_embeddings)
        if settings.decoding is Decoding.DRAFT_MODEL and self._model_drafter is None:
            raise SettingError(
                "decoding", "speculative decoding with a draft model needs a draft model: load one, or use prompt lookup"
            )
        models = self._models(settings.decoding)
        check_window(settings.context.n_ctx, models)
        n_keep, n_discard = settings.context.resolve(system_prompt_tokens)
        try:
            grammar = GrammarMask(self.target, settings.output.grammar) if settings.output.grammar is not None else None
            if grammar is not None:
                grammar.allowed([])  # the first token's mask: a grammar that admits nothing fails here
        except GrammarError as error:
            raise _unfollowable(error) from None
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("a generation is already running on this engine; stop it first")
        finished = False
        try:
            events = self._generate(
                list(map(int, prompt_ids)), settings, models, n_keep, n_discard, grammar, cancel, roll_long_prompt,
                system_prompt_tokens, message,
            )
            for event in events:
                finished = isinstance(event, Finished)  # a consumer may stop reading once it has the last event
                yield event
        except GrammarError as error:
            raise _unfollowable(error) from None
        finally:
            if not finished:  # an exception, or the consumer dropped the generator mid-step: caches may disagree
                self.reset()
            self._lock.release()

    def _models(self, decoding: Decoding) -> list[LoadedModel]:
        """The models a decoding runs: the target, and the draft model when it may draft."""
        drafts = decoding is Decoding.DRAFT_MODEL or (decoding is Decoding.AUTO and self.draft is not None)
        return [self.target, self.draft] if drafts else [self.target]

    def _drafters(self, settings: GenerationSettings) -> dict[str, Drafter]:
        """The drafters of one reply by name (``head`` or ``model``, ``lookup``; none for autoregressive
        decoding), picked from ``settings.decoding``: Auto takes the draft model or head when one is loaded, and
        prompt lookup.

        The prompt-lookup drafter starts from every token cached since the last reset (``_seen``), so it also
        matches what rolled out of the cache; it is kept across replies (a new one when ``lookup_max_ngram``
        changes), so a follow-up turn indexes only the tokens its history lacks.
        """
        drafters: dict[str, Drafter] = {}
        decoding = settings.decoding
        if decoding in (Decoding.DRAFT_MODEL, Decoding.AUTO) and self._model_drafter is not None:
            drafters[self._model_drafter_name] = self._model_drafter
        if decoding in (Decoding.PROMPT_LOOKUP, Decoding.AUTO):
            max_ngram = settings.speculative.lookup_max_ngram
            if self._lookup is None or self._lookup.max_ngram != max_ngram:
                self._lookup = PromptLookupDrafter(max_ngram)
            self._lookup.follow(self._seen, len(self._cache))
            drafters["lookup"] = self._lookup
        return drafters

    def _reuse_prefix(self, prompt_ids: list[int], n_ctx: int) -> int:
        """Keep the longest cached prefix of ``prompt_ids``; return how many prompt tokens need no prefill (counted
        in ``_seen``: after rolls, more than the cache holds).

        After rolls the cache holds only the start and the end of what it has seen; a prompt longer than n_ctx that
        leaves the seen tokens within that end (a regenerated reply, an edited last message) keeps the cache up to
        there (``_rolled_length``) instead of prefilling the whole conversation again; one that leaves them earlier,
        or a cache a middle cut made (not a start and an end), starts from an empty cache, as does any prompt that
        fits in n_ctx: read again whole, it loses nothing (a reply regenerated after its own decoding rolled read
        110 of its 228 prompt tokens from the rolled cache at n_ctx 256; a context length raised after a roll kept
        reading what the rolls had left)."""
        seen = self._seen
        # the last prompt token is fed again to get its logits
        common = min(common_prefix(seen, prompt_ids), len(prompt_ids) - 1)
        if len(self._cache) > n_ctx or (self._rolled and len(prompt_ids) <= n_ctx):
            self.reset()
            return 0
        length = self._rolled_length(common) if self._rolled and common < len(seen) else common
        if length is None:
            self.reset()
            return 0
        if common < len(seen) // 2:  # not a follow-up turn: another chat, whose acceptance differs
            self._measurements.new_conversation()
        self._cache.truncate(length)
        if self._model_drafter is not None:
            self._model_drafter.truncate(length)
        del seen[common:]
        return common

    def _rolled_length(self, common: int) -> int | None:
        """The cache length that holds the first ``common`` tokens of ``_seen`` as rolls left them, or None.

        A rolled cache holds a start of ``_seen`` (the tokens the rolls pinned) then its end; ``_seen``'s token
        ``i`` of that end lies at ``i - (len(_seen) - len(cache))`` in the cache. That holds for the longest start
        the two share, or else the cache is no start and end of ``_seen``: None, as where ``common`` ends between the
        start and the end the cache holds, and for a cache a middle cut made (``_cut``): it keeps a piece of a message
        between them, which may read as part of the start, and the turn's ``PromptOverflow`` would count it as
        dropped (a paste asked again was said to be read as 232 tokens where 252 were)."""
        cached, seen = self._cache.tokens, self._seen
        head = common_prefix(cached, seen)
        if common <= head:  # within the start, which no roll or cut moves
            return common
        if self._cut:
            return None
        offset = len(seen) - len(cached)
        if offset < 0 or cached[head:] != seen[head + offset :] or common < head + offset:
            return None
        return common - offset

    def _roll(
        self, n_keep: int, n_discard: int, drafters: dict[str, Drafter], models: list[LoadedModel],
        stats: GenerationStats,
    ) -> ContextRolled:
        """Roll the target cache (and the reply's drafters), count it in ``stats``, return the event. The draft
        model or head, when not among ``drafters``, keeps only the n_keep tokens a roll never changes: it did not
        follow this reply, and would otherwise draft from keys at pre-roll positions in a later reply. A roll keeping
        fewer than ``stats.system_prompt_tokens`` drops some of them (``stats.system_prompt_dropped``).

        Raises:
            RopeUnsupportedError: one of ``models`` cannot shift its keys.
        """
        check_can_roll(models)
        before = list(self._cache.tokens) if drafters else []
        dropped = self._cache.roll(n_keep, n_discard)
        for drafter in drafters.values():
            drafter.roll(n_keep, dropped, before)
        if self._model_drafter is not None and self._model_drafter_name not in drafters:
            self._model_drafter.truncate(n_keep)
        self._rolled = True
        stats.rolls += 1
        stats.discarded_tokens += dropped
        stats.system_prompt_dropped |= n_keep < stats.system_prompt_tokens
        return ContextRolled(discarded_tokens=dropped, n_keep=n_keep, cache_len=len(self._cache))

    def _rolling_keeps(self, message: tuple[int, int] | None, reused: int, discarded: int, n_keep: int) -> bool:
        """Whether rolling a prompt through (its first ``reused`` tokens cached, ``discarded`` to go in its prefill's
        rolls, ``prefill.prefill_discards``) keeps its last message's turn whole: rolling keeps the first n_keep
        tokens and the prompt's end, so a long message after a long cached turn lost its start, the instruction
        (newcomer trial: two 20 KB pastes in one chat at n_ctx 4,096, the second summarized as if never asked). A
        prompt without turns (``message`` None or ``(0, 0)``) keeps rolling through, as before."""
        if not message or message[1] == 0:
            return True
        skipped = discarded + reused - len(self._cache)  # (with the tokens earlier rolls dropped)
        return n_keep + skipped <= message[0]  # (kept: the first n_keep, then all from n_keep + skipped on)

    def _cut_the_middle(
        self,
        prompt_ids: list[int],
        reused: int,
        cut: MiddleCut,
        n_keep: int,
        drafters: dict[str, Drafter],
        models: list[LoadedModel],
        stats: GenerationStats,
    ) -> Generator[ContextRolled, None, list[int]]:
        """Keep only ``cut``'s tokens of a prompt longer than n_ctx (``prefill.middle_cut``), before prefilling it
        (as LM Studio's truncate-middle does), so that its TTFT is that of an n_ctx prompt at most.

        The cache holds the prompt's first ``reused`` tokens (after ``_reuse_prefix``), in order unless it has rolled
        (then only its first n_keep are in order). It keeps the longest of them that starts the cut's tokens; the
        cached tokens after those are rolled away (one roll, yielded); returns the cut's other tokens, to prefill.
        ``stats.discarded_tokens`` grows by the tokens this reply drops, the roll's included;
        ``stats.reused_tokens`` becomes the cached tokens kept; ``stats.system_prompt_dropped`` is set where the cut
        keeps fewer than ``stats.system_prompt_tokens``.
        """
        stats.system_prompt_dropped |= cut.spans[0][1] < stats.system_prompt_tokens
        in_order = reused if len(self._cache) == reused else min(n_keep, len(self._cache))
        kept = min(in_order, cut.spans[0][1])
        dropped_before, discarded = reused - len(self._cache), stats.discarded_tokens  # (rolled out by earlier replies)
        if len(self._cache) > kept:
            yield self._roll(kept, len(self._cache) - kept, drafters, models, stats)
        self._rolled = self._cut = True
        stats.reused_tokens = kept
        stats.discarded_tokens = discarded + cut.skipped - dropped_before  # the roll's tokens the cut keeps count back
        return [token for start, end in cut.spans for token in prompt_ids[max(start, kept) : end]]

    def _prefill(
        self,
        tokens: list[int],
        n_ctx: int,
        n_keep: int,
        n_discard: int,
        drafters: dict[str, Drafter],
        models: list[LoadedModel],
        stats: GenerationStats,
        cancel: threading.Event | None = None,
        start: float | None = None,
    ) -> Generator[ContextRolled | PromptProgress, None, np.ndarray | None]:
        """Feed prompt tokens (at least one) in passes of ``prefill_pass_size`` tokens, rolling when full, the
        drafters told after each pass; yields ContextRolled, and PromptProgress before the first pass and after each
        (``start``: the ``time.perf_counter()`` its ``elapsed_s`` counts from; now when None); returns the float32
        ``[vocab]`` logits after the last token, or None when ``cancel`` was set (checked before each pass; the cache
        then holds the passes done)."""
        start = time.perf_counter() if start is None else start
        logits = None
        done, passes = 0, []  # (seconds, prefill_work) of each pass: the time estimate's rate
        yield PromptProgress(done=0, total=len(tokens), prompt_tokens=stats.prompt_tokens,
                             elapsed_s=time.perf_counter() - start)
        while done < len(tokens):
            if cancel is not None and cancel.is_set():
                return None
            pass_start = time.perf_counter()  # (a roll before the pass counts in its time, as the drafters' feed after)
            if len(self._cache) >= n_ctx:
                yield self._roll(n_keep, n_discard, drafters, models, stats)
            upcoming = len(tokens) - done
            size = prefill_pass_size(self._cache.physical_length, self._cache.prefills_in_copy(upcoming))
            chunk = tokens[done : done + min(size, n_ctx - len(self._cache))]
            logits = self._cache.prefill(chunk, n_ctx, upcoming)[-1]
            for drafter in drafters.values():
                drafter.feed(self._cache.tokens, n_ctx)
            self._seen.extend(chunk)
            done += len(chunk)
            cached, now = len(self._cache), time.perf_counter()
            passes.append((now - pass_start, prefill_work(cached - len(chunk), cached)))
            remaining = remaining_seconds(passes, prefill_work_left(cached, len(tokens) - done, n_ctx, n_keep, n_discard))
            yield PromptProgress(done=done, total=len(tokens), prompt_tokens=stats.prompt_tokens, elapsed_s=now - start,
                                 remaining_s=remaining)
        return logits

    def _generate(
        self,
        prompt_ids: list[int],
        settings: GenerationSettings,
        models: list[LoadedModel],
        n_keep: int,
        n_discard: int,
        grammar: GrammarMask | None,
        cancel: threading.Event | None,
        roll_long_prompt: bool = False,
        system_prompt_tokens: int = 0,
        message: tuple[int, int] | None = None,
    ) -> Iterator[Event]:
        """Prefill (cutting the middle of a prompt longer than n_ctx unless ``roll_long_prompt``, as ``generate``
        says), choose the first token, then one ``_speculative_step`` per step until the reply ends."""
        sampling, n_ctx = settings.sampling, settings.context.n_ctx
        start = time.perf_counter()
        reused = self._reuse_prefix(prompt_ids, n_ctx)
        drafters = self._drafters(settings)
        stats = GenerationStats(
            mode=settings.decoding.mode,
            drafter="head" if "head" in drafters and settings.decoding is Decoding.DRAFT_MODEL else settings.decoding.drafter,
            prompt_tokens=len(prompt_ids),
            reused_tokens=min(reused, len(self._cache)),  # (after earlier rolls: what they left, not all seen before)
            prefilled_tokens=len(prompt_ids) - reused,
            system_prompt_tokens=system_prompt_tokens,
            precision=self.target.precision.describe(),
        )
        discarded = prefill_discards(len(self._cache), len(prompt_ids) - reused, n_ctx, n_keep, n_discard)
        cut = None
        if discarded and not roll_long_prompt:
            cut = middle_cut(len(prompt_ids), n_ctx, n_keep, system_prompt_tokens, message or (0, 0),
                             sampling.max_new_tokens, _repeats_pinned_header(prompt_ids, system_prompt_tokens, message))
            if cut is not None and cut.spans[-1][0] < reused and self._rolling_keeps(message, reused, discarded, n_keep):
                cut = None  # its end reaches into the cache, and rolling through keeps the last message: no re-prefill
        if cut is not None:
            yield PromptOverflow(prompt_tokens=len(prompt_ids), n_ctx=n_ctx, discarded_tokens=cut.skipped,
                                 head_tokens=cut.head_tokens, message_tokens=cut.message_tokens,
                                 tail_tokens=cut.tail_tokens, max_n_ctx=self.target.max_context,
                                 system_prompt_tokens=system_prompt_tokens)
        elif discarded or reused > len(self._cache):  # rolled through, now or by an earlier reply: the first n_keep
            # and the last tokens stay (a turn that fits the rolled cache still no longer reads what earlier rolls dropped)
            skipped = discarded + reused - len(self._cache)
            yield PromptOverflow(prompt_tokens=len(prompt_ids), n_ctx=n_ctx, discarded_tokens=skipped,
                                 head_tokens=n_keep, message_tokens=0, tail_tokens=len(prompt_ids) - n_keep - skipped,
                                 max_n_ctx=self.target.max_context, system_prompt_tokens=system_prompt_tokens)
        fast_before = self._cache.fast_prefilled
        to_prefill = prompt_ids[reused:]
        if cut is not None:
            to_prefill = yield from self._cut_the_middle(prompt_ids, reused, cut, n_keep, drafters, models, stats)
            stats.prefilled_tokens = len(to_prefill)
        seen_before = len(self._seen)
        logits = yield from self._prefill(to_prefill, n_ctx, n_keep, n_discard, drafters, models, stats, cancel, start)
        if cut is not None and logits is not None:
            self._seen[seen_before:] = prompt_ids[reused:]  # all of it, as if rolled through: the next turn reuses it
        stats.fast_prefilled_tokens = self._cache.fast_prefilled - fast_before
        if logits is None:  # cancelled during the prefill: no reply
            stats.prefilled_tokens = len(self._seen) - reused
            stats.stop_reason = "cancelled"
            yield Finished(stats)
            return
        rng = np.random.default_rng(sampling.seed)
        chooses = settings.decoding is Decoding.AUTO or settings.speculative.adaptive
        fixed_k = None if chooses or not drafters else settings.speculative.k
        planned = tuple(drafters) if chooses or len(drafters) < 2 else tuple(drafters)[:1]  # the model or head first
        if chooses and seeded_sampling(settings):  # reproducible: preset costs, this reply's own acceptance
            planner = StepPlanner(Measurements(), planned, preset=PresetCosts(), greedy=sampling.greedy)
        else:
            planner = StepPlanner(self._measurements, planned, fixed_k, greedy=sampling.greedy)
        stats.final_k = fixed_k or 0  # a fixed K's, even where every step was cut short
        reply = ReplyStream(self.target, sampling, settings.output.logprobs, cancel, self._text_vocabulary)
        penalties = ReplyPenalties(sampling, prompt_ids, reply.tokens, grammar)
        logits = penalties.apply(logits)
        decode = _Decode(
            drafters=drafters,
            planner=planner,
            reply=reply,
            sampling=sampling,
            penalties=penalties,
            n_ctx=n_ctx,
            rng=rng,
            stats=stats,
            start=start,
            pending=next_token(logits, sampling, rng),
        )
        self.last_logits = logits
        first_token_at = time.perf_counter()
        stats.ttft_ms = (first_token_at - start) * 1e3
        yield from reply.emit([decode.pending], from_draft=False, logits=logits[None])
        while reply.stop_reason is None:
            if cancel is not None and cancel.is_set():
                reply.stop_reason = "cancelled"
                break
            if len(self._cache) + 1 > n_ctx:
                yield self._roll(n_keep, n_discard, drafters, models, stats)
                decode.shadow.clear()  # the positions moved
            yield from self._speculative_step(decode)
        last_token_at = time.perf_counter()
        yield from reply.flush()
        stats.new_tokens = len(reply.tokens)
        if stats.new_tokens > 1 and last_token_at > first_token_at:
            stats.decode_tokens_per_s = (stats.new_tokens - 1) / (last_token_at - first_token_at)
            stats.tpot_ms = 1e3 / stats.decode_tokens_per_s
        if settings.decoding is Decoding.AUTO:
            stats.drafter = stats.most_accepted_drafter()
        stats.stop_reason = reply.stop_reason
        stats.text = reply.text
        stats.token_ids = list(reply.tokens)
        yield Finished(stats)

    def _speculative_step(self, decode: _Decode) -> Iterator[Event]:
        """One decode step: choose the drafter and K, draft, verify in one target pass, accept, emit, keep what was
        accepted.

        K is at most what fits in n_ctx (the caller rolled first, so the pending token fits) and what the reply may
        still emit; within that, ``decode.planner`` chooses the drafter and K (``auto_decoding.StepPlanner``: Auto's
        expected tokens per second, or the fixed K of the one drafter). Prompt lookup, when among the drafters, is
        asked first (its n-gram index answers in about 2 µs whatever the history's length), so the planner knows how many drafts it offers and
        how long its match is; not when the planner will take a plain step whatever it offers (no room, or the plain
        cost being measured), which then costs what a plain decode step costs. K = 0 (no drafter, the planner's choice, or no room) makes it a plain autoregressive step: one pass
        over the pending token. The target cache then keeps the old pending token and the accepted drafts that
        precede the new pending one (the rest is masked, ``KVCache.truncate``); the planner records the step's
        costs and acceptance, and the counts in ``decode.stats`` follow. Yields a TextDelta per emitted token, then
        one StepStats. The step's times exclude the time the consumer takes over the TextDeltas.

        Penalties (``ReplyPenalties``) see the reply as emitted so far, which ends with the pending token: target
        row i and draft i are penalized with it and the drafts before i, as autoregressive decoding would be there.
        A grammar masks the same rows the same way, and the drafts it forbids are dropped before the pass (from the
        first forbidden one on: the target would reject it).
        """
        step_start = time.perf_counter()
        if len(decode.shadow) >= decode.planner.shadow_every:
            self._judge_head(decode)
        reply, sampling, n_ctx, pending = decode.reply, decode.sampling, decode.n_ctx, decode.pending
        limit = min(n_ctx - len(self._cache) - 1, sampling.max_new_tokens - len(reply.tokens) - 1)
        lookup, offered, match = decode.drafters.get("lookup"), [], 0
        if lookup is not None and decode.planner.may_draft(len(self._cache), limit):
            offered = lookup.offer(self._cache.tokens, pending, min(limit, MAX_K))
            match = lookup.match_length
        lookup_end = time.perf_counter()
        choice = decode.planner.choose(len(self._cache), limit, len(offered), match)
        drafts, draft_probs = [], None
        if choice.drafter == "lookup":
            drafts = offered[: choice.k]
        elif choice.k > 0:
            drafter = decode.drafters[choice.drafter]
            context = self._cache.tokens + [pending]
            drafts, draft_probs = drafter.propose(context, choice.k, n_ctx, sampling, decode.rng, decode.penalties)
        allowed = decode.penalties.allowed_drafts(drafts)
        if allowed < len(drafts):
            drafts, draft_probs = drafts[:allowed], None if draft_probs is None else draft_probs[:allowed]
        draft_end = time.perf_counter()
        cached_before = len(self._cache)
        logits = decode.penalties.rows(self._cache.forward([pending] + drafts, n_ctx), drafts)
        verify_end = time.perf_counter()
        if drafts or not decode.planner.judges_head_in_plain_steps:
            accepted, correction = accept_drafts(logits, drafts, draft_probs, sampling, decode.rng)
            if choice.drafter == "head":
                decode.shadow.clear()  # its catch-up passed those positions
        else:  # a plain step: the head's first draft here would have been judged against this token
            accepted, (correction, probability) = 0, next_token_with_probability(logits[0], sampling, decode.rng)
            decode.shadow[cached_before - 1] = (correction, probability)
        self.last_logits = logits[accepted]
        emitted_before = len(reply.tokens)
        deltas = [
            *reply.emit(drafts[:accepted], from_draft=True, logits=logits[:accepted]),
            *reply.emit([correction], from_draft=False, logits=logits[accepted : accepted + 1]),
        ]
        emitted = len(reply.tokens) - emitted_before
        fed = 1 + min(accepted, emitted)
        self._cache.truncate(cached_before + fed)
        self._seen.extend(([pending] + drafts)[:fed])
        decode.pending = correction
        step_end = time.perf_counter()
        draft_s = draft_end - (step_start if choice.drafter == "lookup" else lookup_end)
        decode.planner.record(choice, len(drafts), accepted, draft_s, step_end - draft_end, cached_before, match)
        decode.stats.count_step(choice.drafter, choice.k, len(drafts), accepted, emitted,
                                bool(decode.planner.drafters), decode.planner.cut_by_room(choice, limit))
        yield from deltas
        yield StepStats(
            drafted=len(drafts),
            accepted=accepted,
            emitted=emitted,
            draft_ms=(draft_end - step_start) * 1e3,
            verify_ms=(verify_end - draft_end) * 1e3,
            step_ms=(step_end - step_start) * 1e3,
            k=choice.k,
            cache_len=len(self._cache),
            n_ctx=n_ctx,
            elapsed_s=time.perf_counter() - decode.start,
            generated=len(reply.tokens),
            drafter=choice.drafter,
        )

    def _judge_head(self, decode: _Decode) -> None:
        """Estimate the draft head's first-draft acceptance at the positions plain steps emitted since it last
        caught up (``decode.shadow``), from the catch-up it would run before drafting again
        (``HeadDrafter.first_draft_logits``, ``sampling.first_draft_acceptance``), for the planner
        (``StepPlanner.record_shadow``; see ``auto_decoding``'s design rules)."""
        head = decode.drafters["head"]
        found = head.first_draft_logits(self._cache.tokens + [decode.pending], decode.n_ctx)
        if found is not None:
            start, logits = found
            rows = [i for i in range(len(logits)) if start + i in decode.shadow]
            rows = rows[:: max(1, len(rows) // SHADOW_ROWS)]  # evenly spread: a sampled row's estimate costs ~0.1 ms
            chosen = [decode.shadow[start + i] for i in rows]
            estimates = first_draft_acceptance(logits[rows], head.vocab, [token for token, _ in chosen],
                                               [probability for _, probability in chosen], decode.sampling)
            decode.planner.record_shadow([float(e) for e in estimates], len(self._cache))
        decode.shadow.clear()

    @contextmanager
    def emptied_cache(self) -> Iterator[KVCache]:
        """The target's KV cache, emptied, for work outside a reply (``scoring``, ``exactness.pass_shape_noise``);
        both caches are emptied again afterwards, whatever happens."""
        self.reset()
        try:
            yield self._cache
        finally:
            self.reset()

    def prefill_prompt(self, prompt_ids: list[int], n_ctx: int, n_keep: int, n_discard: int) -> np.ndarray:
        """Feed ``prompt_ids`` into the target's cache in the passes and with the rolls a reply's prefill takes
        (a prompt longer than n_ctx is rolled through, no drafter follows), for work that replays a reply
        (``exactness.pass_shape_noise``); returns the float32 ``[vocab]`` logits after its last token.

        Raises:
            RopeUnsupportedError: the prompt needs a roll the target cannot take.
        """
        stats = GenerationStats(mode=Decoding.AUTOREGRESSIVE.mode, prompt_tokens=len(prompt_ids))
        prefill = self._prefill(prompt_ids, n_ctx, n_keep, n_discard, {}, [self.target], stats)
        try:
            while True:
                next(prefill)
        except StopIteration as done:
            return done.value

    def generate_text(self, prompt_ids: Sequence[int], settings: GenerationSettings, **kwargs) -> GenerationStats:
        """Run ``generate`` to the end and return its final statistics (text and token ids included)."""
        for event in self.generate(prompt_ids, settings, **kwargs):
            if isinstance(event, Finished):
                return event.stats
        raise AssertionError("generate ended without a Finished event")


def _unfollowable(error: GrammarError) -> SettingError:
    """A grammar no reply can follow, as the ``grammar`` setting's error: the request's fault, not the engine's."""
    return SettingError("grammar", f"grammar cannot be followed by any reply ({error}): check the JSON schema or "
                        "grammar (a $ref that requires itself admits no finite value)")


@dataclass
class _Decode:
    """The decode state of one reply, shared by its steps."""

    drafters: dict[str, Drafter]  # by name; none: autoregressive decoding
    planner: StepPlanner  # chooses each step's drafter and K
    reply: ReplyStream
    sampling: SamplingSettings
    penalties: ReplyPenalties  # follows reply.tokens; applied to target and draft logits alike
    n_ctx: int
    rng: np.random.Generator  # shared by sampling, drafting and acceptance
    stats: GenerationStats  # drafted / accepted accumulate here
    start: float  # time.perf_counter() when generate started (StepStats.elapsed_s counts from it)
    pending: int  # the last chosen token, emitted but not yet in the target cache
    # plain steps' tokens for judging the head (``Engine._judge_head``): head position -> (token, target's p(token))
    shadow: dict[int, tuple[int, float]] = field(default_factory=dict)
