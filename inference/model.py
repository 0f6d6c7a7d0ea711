"""Loading a model folder (OpenVINO IR + tokenizer IRs + config.json) onto an OpenVINO device."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import openvino_genai

from .advice import REINSTALL, advised, restated
from .devices import available_devices, base_properties, core
from .file_pages import release_mapped_file
from .fusion import fuse_shared_input_products
from .heap import return_large_blocks
from .layer_features import add_layer_features, decoder_layer_count
from .paged_graph import GRAPH_FILES, paged_graph, variant_name
from .precision import (
    FAST_PREFILL_PROPERTIES,
    PAGED_PREFILL_KV_CACHE,
    NumericPrecision,
    PrecisionError,
    PrecisionSettings,
)
from .prefill_attention import attention_in_blocks, blocked_prefill_attention, paged_prefill_attention
from .q4_kernels import Kernels, has_layers, unavailable, use_kernels
from .rope import RopeParameters, RopeUnsupportedError
from .settings import MIN_N_CTX
from .tokenizer_cache import TOKENIZER_FILES, fingerprint_of, shared_tokenizer, tokenizer_digest, tokenizer_fingerprint

#: The model as OpenVINO IR: graph and weights.
MODEL_FILES = ("openvino_model.xml", "openvino_model.bin")
#: The manifest that makes a folder a draft head (``draft_head``), which a chat model's folder does not hold.
HEAD_MANIFEST = "draft_head.json"
#: What :func:`load_model` needs in a folder (the model IR and both tokenizer graphs).
REQUIRED_FILES = (*MODEL_FILES, *(name for name in TOKENIZER_FILES if name.endswith(".xml")))
TOKENIZER_PROBE = "Hello, world! Ünïcödé 你好 🙂 def f(x):\n    return x ** 2  # 123"


class ModelLoadError(RuntimeError):
    """A model folder is missing, incomplete or unreadable; the message says which file and what to do (in words
    that name no front end's commands: where it says what to do, it keeps an advice key that a front end words its
    own way, :func:`inference.advice.advised`)."""


class TokenizerMismatchError(ValueError):
    """The draft model's tokenizer differs from the target's, so its tokens cannot be verified."""


def prepare_tokenizer(folder: str | Path) -> None:
    """Build a model folder's tokenizer and its fingerprint into the process-wide caches (:func:`shared_tokenizer`,
    :func:`tokenizer_fingerprint`): both hold Python's GIL for tens to hundreds of milliseconds, so the window calls
    this before its event loop starts and a later load on the inference thread finds them ready. The vocabulary size
    is read from ``config.json`` (a folder without one gets its tokenizer only).

    Raises:
        OSError, RuntimeError: as :func:`shared_tokenizer`.
    """
    folder = Path(folder)
    shared_tokenizer(folder)
    vocab_size = _read_config(folder).get("vocab_size")
    if isinstance(vocab_size, int) and vocab_size > 0:
        tokenizer_fingerprint(folder, vocab_size)


@dataclass
class LoadedModel:
    """A compiled stateful causal LM with its tokenizer.

    Attributes:
        folder: the model folder.
        device: OpenVINO device it is compiled for.
        compiled: the ``ov.CompiledModel`` (inputs input_ids/attention_mask/position_ids[/beam_idx],
            output logits ``[1, S, vocab]`` float32).
        tokenizer: ``openvino_genai.Tokenizer`` (encode/decode, chat template).
        config: parsed ``config.json`` ({} if absent).
        rope: RoPE parameters for the rolling context, or None if the model has none usable.
        rope_error: why ``rope`` is None (the error, said when a roll is needed: ``check_can_roll``), else None.
        tokenizer_digest: :func:`tokenizer_digest` of ``folder`` at the load, which keys ``tokenizer`` and its
            fingerprint in the process-wide caches (the folder may be removed while the model is loaded).
        precision: the numeric precision OpenVINO reports for ``compiled`` (and ``prefill_compiled``).
        prefill_compiled: a faster copy of the model that prefills long prompts, or None
            (``precision.PrecisionSettings.fast_prefill``): bf16 where the CPU computes it, else, where ``compiled``
            runs SpecChat's kernels, the same f32 graph with OpenVINO's (theirs prefill 1,024 tokens ~1.5x faster;
            ours decode 1.2-1.35x faster: ``bench/kernel_speed.py``). Compiled from the stateful graph, or with
            where it can, with OpenVINO's paged attention (``_paged_attention_copy``, made by a child process and
            kept in the model's folder: ``paged_graph``; ``paged_copy.PagedCopy`` runs it; not for a sliding-window
            model, a folder outside the model store, or with ``SPECCHAT_PREFILL_ATTENTION=stateful`` or ``blocks``:
            ``prefill_attention.paged_prefill_attention``).
        prefill_weights: the weights file a paged ``prefill_compiled`` maps (its graph's ``.bin`` in the model's
            folder; its first pass hands its pages back as it reads them, ``paged_copy.PagedCopy.run``), else None.
        feature_layers: the decoder layers whose outputs it was compiled to give a fused draft head
            (``layer_features.LAYER_FEATURES``), () without that output.
        decoder_layers: the IR's decoder layer count (``layer_features.decoder_layer_count``, read before SpecChat's
            kernels replace a layer's RMSNorms and products with one op), None for a graph that is not Llama-style.
        kernels: which kernels compute ``compiled``'s 4-bit weight products (``q4_kernels``; the prefill copy
            always runs OpenVINO's); it holds the ops' weights, so it lives as long as ``compiled``.
        ir_model: the ``ov.Model`` it was compiled from. Not used after compiling, but kept: destroying its
            ~6,000-node graph takes 30-50 ms of C++ that holds Python's GIL (measured), which would freeze the
            GUI at the end of every load; kept, it goes with the LoadedModel (its memory is shared with
            ``compiled``: keeping it measured +0 MB resident).
    """

    folder: Path
    device: str
    compiled: ov.CompiledModel
    tokenizer: openvino_genai.Tokenizer
    config: dict
    rope: RopeParameters | None
    rope_error: RopeUnsupportedError | None
    tokenizer_digest: str
    precision: NumericPrecision = field(default_factory=lambda: NumericPrecision("", "", -1))
    prefill_compiled: ov.CompiledModel | None = field(default=None, repr=False)
    prefill_weights: Path | None = None
    ir_model: ov.Model | None = field(default=None, repr=False)
    feature_layers: tuple[int, ...] = ()
    decoder_layers: int | None = None
    kernels: Kernels = field(default_factory=lambda: Kernels(False), repr=False)

    @property
    def max_position_embeddings(self) -> int | None:
        """Longest position the model was trained for (upper bound of n_ctx), if config.json says."""
        value = self.config.get("max_position_embeddings")
        return int(value) if value else None

    @property
    def sliding_window(self) -> int | None:
        """Tokens a layer attends to with sliding-window attention, or None (see ``sliding_window_of``)."""
        return sliding_window_of(self.config)

    @property
    def max_context(self) -> int | None:
        """Upper bound of n_ctx: the trained length, or the sliding window if smaller (None if unknown)."""
        return max_context_of_config(self.config)

    @property
    def eos_token_ids(self) -> set[int]:
        """Token ids that end a reply: the tokenizer's EOS plus config.json's eos_token_id(s)."""
        ids = {int(self.tokenizer.get_eos_token_id())}
        extra = self.config.get("eos_token_id")
        ids.update(extra if isinstance(extra, list) else [extra] if extra is not None else [])
        return {int(i) for i in ids if int(i) >= 0}

    @property
    def hidden_size(self) -> int | None:
        """Width of the ``HIDDEN_STATES`` output (what a draft head reads), or None without one."""
        for port in self.compiled.outputs:
            if HIDDEN_STATES in port.get_names():
                return int(port.get_partial_shape()[-1].get_length())
        return None

    @property
    def vocab_size(self) -> int:
        """Width of the logits output (tokens the model can score)."""
        return int(self.compiled.output("logits").get_partial_shape()[-1].get_length())

    @property
    def tokenizer_fingerprint(self) -> str:
        """:func:`tokenizer_fingerprint` of this model's tokenizer over its logits' width, from the tokenizer loaded
        (never read again from ``folder``, which may have been removed since)."""
        return fingerprint_of(self.tokenizer_digest, lambda: self.tokenizer, self.vocab_size)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (a list of int), however long the text.

        openvino-genai's tokenizer IR truncates its output to the model's maximum length (8192 tokens for the
        default model), even with ``truncation=False``; a long chat would silently lose its newest messages. Texts
        longer than ENCODE_CHUNK_CHARS are therefore encoded in pieces cut just before a space that follows a
        non-space character, a boundary where byte-level BPE pre-tokenizers split anyway.
        """
        pieces = _split_for_encoding(text, ENCODE_CHUNK_CHARS)
        ids: list[int] = []
        for index, piece in enumerate(pieces):
            encoded = self.tokenizer.encode(piece, add_special_tokens=add_special_tokens and index == 0)
            ids.extend(int(t) for t in encoded.input_ids.data[0])
        return ids


def max_context_of_config(config: dict) -> int | None:
    """Upper bound of n_ctx that a ``config.json`` gives: the trained length (``max_position_embeddings``), or the
    sliding window if smaller; None if it says neither."""
    trained = config.get("max_position_embeddings")
    bounds = [b for b in (int(trained) if trained else None, sliding_window_of(config)) if b]
    return min(bounds) if bounds else None


def sliding_window_of(config: dict) -> int | None:
    """The sliding attention window in tokens that a ``config.json`` declares (Mistral, Phi-3, Gemma 2/3), or None.

    The window of an exported IR counts physical KV slots, dead (masked) ones included, so the engine keeps the
    physical cache inside it (``LoadedModel.max_context``)."""
    if config.get("use_sliding_window") is False:  # Qwen2 writes a window it does not use
        return None
    value = config.get("sliding_window")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def load_model(
    folder: str | Path,
    device: str = "CPU",
    precision: PrecisionSettings | None = None,
    num_threads: int | None = None,
    hidden_states: bool = True,
    feature_layers: Sequence[int] = (),
) -> LoadedModel:
    """Read and compile a model folder. Weight products that read the same input (a layer's q/k/v, gate/up) are fused
    into one before compiling (``inference.fusion``: the same arithmetic, 6% faster decode steps on 2 AVX2 cores,
    ``bench/results/epyc-zen3-avx2/FC_PROFILE.md``); on the exact f32 path SpecChat's CPU kernels then replace
    OpenVINO's 4-bit products where they are built and fit (``inference.q4_kernels``; ``SPECCHAT_KERNELS=openvino``
    turns them off), which ``LoadedModel.kernels`` and ``precision.kernels`` say.

    Args:
        folder: folder with ``openvino_model.xml/.bin``, ``openvino_tokenizer.xml``, ``openvino_detokenizer.xml``
            and (for the rolling context) ``config.json``.
        device: an entry of ``available_devices()``.
        precision: compute / KV-cache precision, dynamic quantization and fast prefill
            (``precision.PrecisionSettings``); None = the device's own defaults (what a draft model uses).
        num_threads: CPU inference threads (INFERENCE_NUM_THREADS); None = all cores.
        hidden_states: add the output ``HIDDEN_STATES`` that a draft head reads (``_expose_hidden_states``); False
            compiles the graph as exported (``bench/free_chat.py`` measures what the output costs a decode step).
        feature_layers: also add the output ``layer_features.LAYER_FEATURES`` of these decoder layers, which a fused
            draft head reads (``draft_head.LoadedHead.feature_layers``; ``layer_features.add_layer_features``);
            () adds nothing.

    Raises:
        ModelLoadError: the folder or a required file is missing, OpenVINO cannot read it (the message suggests
            re-importing), or cannot compile it with these properties (e.g. a thread count it refuses), or the graph
            lacks a decoder layer of ``feature_layers`` (the message names it and the layers the graph has).
        ValueError: unknown device; ``PrecisionError`` (a ValueError): a precision the device cannot compute, or
            one it lists as native but fails to compile with (seen: f16 on a Xeon with AVX512_FP16).
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise advised(ModelLoadError, f"model folder {folder} does not exist", "list-models", "choose an installed model")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing and (folder / HEAD_MANIFEST).is_file():
        raise advised(
            ModelLoadError, f"{folder} is a draft head, not a chat model: a head only drafts for the model it was "
            "trained on (the default model drafts with its own by itself)", "chat-model", "Choose a chat model.", ". ",
        )
    if missing:
        raise advised(ModelLoadError, f"model folder {folder} is incomplete: missing {', '.join(missing)}", "reinstall",
                      REINSTALL, ". ")
    devices = available_devices()
    if device not in devices and not device.startswith(("AUTO", "HETERO", "MULTI", "GPU.")):
        raise ValueError(f"device must be one of {', '.join(devices)}, got {device!r}")
    properties = base_properties(device)
    if precision is not None:
        properties.update(precision.compile_properties(device))
    if num_threads:
        properties["INFERENCE_NUM_THREADS"] = int(num_threads)
    fast_prefill = precision is not None and precision.wants_fast_prefill(device)
    prefill_compiled, prefill_weights = None, None
    return_large_blocks()  # freed buffers of megabytes go back to the system (heap.py)
    config = _read_config(folder)
    try:
        model = core().read_model(folder / "openvino_model.xml")
        fuse_shared_input_products(model)
        if hidden_states:
            _expose_hidden_states(model)
        _compute_only_last_logits(model)
        digest = tokenizer_digest(folder)
        tokenizer = shared_tokenizer(folder, digest)
    except (RuntimeError, OSError) as error:
        raise advised(
            ModelLoadError, f"cannot load the model in {folder} on {device}: {openvino_message(error)}. The files may "
            "be truncated or corrupt", "reinstall", REINSTALL, ". ",
        ) from error
    if feature_layers:
        try:
            add_layer_features(model, feature_layers)
        except ValueError as error:
            raise ModelLoadError(
                f"{folder.name} cannot give the outputs of decoder layers {list(feature_layers)} that its draft head "
                f"reads ({error}): choose another draft"
            ) from error
    try:
        # both prefill copies are compiled before use_kernels rewrites the graph: they keep OpenVINO's kernels
        copy = {**properties, **FAST_PREFILL_PROPERTIES} if fast_prefill else properties
        if fast_prefill or (precision is not None and precision.fast_prefill == precision.inference == "auto"
                            and not unavailable(device, properties) and has_layers(model)):
            paged = paged_graph(folder, hidden_states, feature_layers) \
                if paged_prefill_attention() and not sliding_window_of(config) else None  # prefill_attention.py
            if paged is not None:
                kv_cache = PAGED_PREFILL_KV_CACHE[copy["INFERENCE_PRECISION_HINT"]]
                prefill_compiled = core().compile_model(paged, device, {**copy, **kv_cache})
                del paged
                # the pages of its weights file read to compile, before the exact compile
                prefill_weights = folder / variant_name(hidden_states, feature_layers) / GRAPH_FILES[1]
                release_mapped_file(prefill_weights)
            else:  # the stateful copy; prefill_attention.py's blocks (off by default) are for the f32 one only
                with attention_in_blocks(model, 0 if fast_prefill else blocked_prefill_attention()):
                    prefill_compiled = core().compile_model(model, device, copy)  # the f32 one kept if the kernels go in
        decoder_layers = decoder_layer_count(model)
        kernels = use_kernels(model, core(), device, properties)
        if not kernels.ours and not fast_prefill:
            prefill_compiled = prefill_weights = None
        compiled = core().compile_model(model, device, properties)
    except (RuntimeError, OSError) as error:
        hint = properties.get("INFERENCE_PRECISION_HINT")
        if hint not in (None, "f32"):
            raise PrecisionError(
                f"inference precision {hint} is listed as native on {device}, but OpenVINO cannot compile "
                f"{folder.name} with it ({openvino_message(error)}): choose auto or f32"
            ) from error
        raise ModelLoadError(
            f"OpenVINO cannot compile {folder.name} for {device} with {properties}: {openvino_message(error)}. "
            "Check the thread count and the precision settings, or use their defaults."
        ) from error
    release_mapped_file(folder / "openvino_model.bin")  # read to compile: what a compiled model reads maps again
    if "logits" not in {name for port in compiled.outputs for name in port.get_names()}:
        raise ModelLoadError(f"{folder}/openvino_model.xml has no 'logits' output: it is not a causal LM export")
    try:
        rope, rope_error = RopeParameters.from_model_dir(folder), None
    except RopeUnsupportedError as error:
        rope, rope_error = None, error.with_traceback(None)  # kept without the frames of the load
    return LoadedModel(
        folder, device, compiled, tokenizer, config, rope, rope_error, digest,
        precision=NumericPrecision.read(compiled, prefill_compiled, kernels.describe()), prefill_compiled=prefill_compiled,
        prefill_weights=prefill_weights, ir_model=model, feature_layers=tuple(feature_layers),
        decoder_layers=decoder_layers, kernels=kernels,
    )


ENCODE_CHUNK_CHARS = 2048  # <= 8192 tokens even at 4 tokens per character


def _split_for_encoding(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ~``limit`` characters, each cut right before a space preceded by a
    non-space character (or at ``limit`` if there is none)."""
    pieces = []
    while len(text) > limit:
        cut = text.rfind(" ", 1, limit)
        while cut > 0 and text[cut - 1].isspace():
            cut = text.rfind(" ", 1, cut)
        cut = cut if cut > 0 else limit
        pieces.append(text[:cut])
        text = text[cut:]
    return pieces + [text]


def openvino_message(error: BaseException) -> str:
    """The line of an OpenVINO exception that says what went wrong: the first that names no source location
    (``Exception from src/...cpp:117:``, ``Check 'x' failed at src/...cpp:58:`` come before it); the exception's type
    name if it says nothing."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    telling = [line for line in lines if not line.endswith(":") or " src/" not in line]
    return (telling or lines or [type(error).__name__])[0].rstrip(".")


LOGITS_TO_KEEP = "logits_to_keep"
#: The output of the final hidden states (the LM head's input) added at load for draft heads.
HIDDEN_STATES = "last_hidden_state"


def lm_head(model: ov.Model) -> ov.Node | None:
    """The LM head of a causal LM graph: the MatMul that turns the final hidden states (input 0, ``[B, S, hidden]``
    float32, after the final norm) into ``logits``, found behind at most a Convert or a logit scaling; None when the
    graph has no ``logits`` output or no such MatMul."""
    results = [r for r in model.get_results() if "logits" in r.input_value(0).get_names()]
    if not results:
        return None
    node = results[0].input_value(0).get_node()
    for _ in range(4):
        if node.get_type_name() == "MatMul":
            return node
        node = node.input_value(0).get_node()
    return None


def _paged_attention_copy(folder: Path, hidden_states: bool, feature_layers: Sequence[int]) -> ov.Model | None:
    """The graph of ``folder`` with the outputs and inputs ``load_model`` gives the exact one (``HIDDEN_STATES`` when
    ``hidden_states``, ``feature_layers``' outputs, ``logits_to_keep``) and OpenVINO's paged attention instead of its
    stateful attention (``paged_attention_transformation``, what openvino-genai runs; ``paged_copy.PagedCopy`` feeds
    it and hands its cache over), or None when the transformation finds no attention to page. It holds Python's GIL
    for the whole transformation (179 ms, default model, 2 Xeon cores), so a load does not call it: the model store's
    child process does (``inference.models.paged_graphs``), and the load reads the IR it wrote (``paged_graph``).

    It is read again rather than cloned (a ``model.clone()`` copies every weight constant: ~90 MiB more resident on
    the default model, ``prefill_attention.attention_in_blocks``; the load maps the written IR's weights file), and
    its products are not fused (``fusion``: 6% off a decode step, nothing off a 1,024-token pass, and the fused
    weights are new arrays): fused, the load peaked at 435 MiB and left 401 resident, unfused 415 / 373; with the
    file's pages released after its compile 395 / 373, against 401 / 381 with the stateful copy (default model, Xeon
    with AMX, quiet, 2026-12-05). Its tokens are the batch axis (every output ``[tokens, 1, ...]``), so the
    ``logits_to_keep`` slice cuts axis 0.
    """
    from openvino._offline_transformations import paged_attention_transformation

    model = core().read_model(folder / "openvino_model.xml")
    if hidden_states:
        _expose_hidden_states(model)
    _compute_only_last_logits(model)
    if feature_layers:
        add_layer_features(model, feature_layers)
    paged_attention_transformation(model)
    if not any(name.startswith("key_cache.") for port in model.inputs for name in port.get_names()):
        return None
    head = lm_head(model)
    last = head.input_value(0).get_node() if head is not None else None
    if last is not None and last.get_type_name() == "Slice" \
            and LOGITS_TO_KEEP in last.input_value(1).get_node().input_value(0).get_names():  # -logits_to_keep
        last.input(4).replace_source_output(ops.constant(np.array([0], dtype=np.int64)).output(0))
        model.validate_nodes_and_infer_types()
    return model


def _expose_hidden_states(model: ov.Model) -> None:
    """Add an output ``HIDDEN_STATES``: the LM head's input, float32 ``[1, S, hidden]``, for every position fed.

    A draft head (``draft_head``) drafts from these. They are computed anyway (the final norm runs on every
    position before ``_compute_only_last_logits`` slices them), so the output costs a copy of S x hidden floats
    per pass. Models without an LM head MatMul are left unchanged (``LoadedModel.hidden_size`` is then None).
    """
    node = lm_head(model)
    if node is None or any(HIDDEN_STATES in result.input_value(0).get_names() for result in model.get_results()):
        return
    hidden = node.input_value(0)
    hidden.get_tensor().add_names({HIDDEN_STATES})
    model.add_outputs([hidden])


def _compute_only_last_logits(model: ov.Model) -> None:
    """Add an input ``logits_to_keep`` (int64 ``[1]``) so the LM head runs on the last N positions only.

    A prefill needs the logits of its last token, a verification pass those of its last K+1 tokens; the LM head
    (vocabulary x hidden, e.g. 49152 x 576) on every prompt position would be ~20% of a prefill's work and a
    ``[S, vocab]`` float32 output. The hidden states entering the LM head's MatMul are sliced to ``[:, -N:, :]``
    (openvino-genai applies the same idea to its own pipelines). Models without a MatMul before ``logits``
    are left unchanged.
    """
    if any(LOGITS_TO_KEEP in p.get_output_tensor(0).get_names() for p in model.get_parameters()):
        return
    node = lm_head(model)
    if node is None:
        return
    count = ops.parameter([1], ov.Type.i64, name=LOGITS_TO_KEEP)
    count.output(0).get_tensor().set_names({LOGITS_TO_KEEP})
    hidden = node.input_value(0)
    last = ops.slice(
        hidden,
        ops.negative(count),
        ops.constant(np.array([np.iinfo(np.int64).max], dtype=np.int64)),
        ops.constant(np.array([1], dtype=np.int64)),
        ops.constant(np.array([1], dtype=np.int64)),
    )
    node.input(0).replace_source_output(last.output(0))
    model.add_parameters([count])


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{path} is unreadable ({error}); re-import the model") from error


def check_same_tokenizer(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft whose tokens would not mean the same thing to the target.

    Compares vocabulary size (logits width), BOS/EOS ids, the ids of a probe text with ASCII, accents, CJK,
    emoji and code, and the decoded text of every token id.

    Raises:
        TokenizerMismatchError: with the first difference found.
    """
    checks = [
        ("the vocabulary size differs", target.vocab_size, draft.vocab_size),
        ("the BOS token id differs", target.tokenizer.get_bos_token_id(), draft.tokenizer.get_bos_token_id()),
        ("the EOS token id differs", target.tokenizer.get_eos_token_id(), draft.tokenizer.get_eos_token_id()),
        ("the token ids of a probe text differ", target.encode(TOKENIZER_PROBE), draft.encode(TOKENIZER_PROBE)),
        ("the text of the vocabulary differs", target.tokenizer_fingerprint, draft.tokenizer_fingerprint),
    ]
    for what, ours, theirs in checks:
        if ours != theirs:
            raise TokenizerMismatchError(
                f"the draft model {draft.folder.name} has another tokenizer than the target {target.folder.name} "
                f"({what}): choose a draft from the same model family, or use prompt lookup"
            )


def check_window(n_ctx: int, models: list[LoadedModel]) -> None:
    """Refuse an n_ctx larger than a sliding attention window of one of ``models`` (the cache must stay inside it).

    Raises:
        ValueError: n_ctx is larger than a model's sliding window.
    """
    for model in models:
        window = model.sliding_window
        if window is not None and n_ctx > window:
            raise ValueError(
                f"n_ctx must be in [{MIN_N_CTX}, {window}] for {model.folder.name}: it attends to a sliding window of "
                f"{window} tokens, and the KV cache must stay inside it; lower n_ctx"
            )


def check_can_roll(models: list[LoadedModel]) -> None:
    """Refuse a roll of the context that one of ``models`` cannot take.

    Raises:
        RopeUnsupportedError: a model's RoPE cannot be shifted (``rope.py``), so its keys cannot be rolled.
    """
    for model in models:
        if model.rope is None:
            raise restated(RopeUnsupportedError, f"the conversation needs more than n_ctx tokens, but "
                           f"{model.folder.name} cannot be rolled: ", model.rope_error)
