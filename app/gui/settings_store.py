"""The application's settings: what the settings pane edits, how they are checked, and where they persist.

Why one module of ~770 lines: :class:`AppSettings` (the fields, their checks and flat names, ~215 lines) and
:class:`SettingsStore` (reading, repairing and writing the file, ~215) are the two halves of one file format: a
setting added touches both, and the functions between them translate one into the other.

Rules:
- One source of truth: the generation settings are an embedded ``inference.settings.GenerationSettings``, whose
  defaults and ranges are defined there once; this module adds what only the window has (devices, bit-width,
  precision, the draft model, highlighting).
- One flat naming: the settings file, the settings pane and ``SettingError.field`` name a generation setting by
  one flat name ("temperature", "n_ctx", "k", "adaptive_k"...); :data:`GENERATION_KEYS` maps each name to where it
  lives in ``GenerationSettings``, and every translation goes through it (:meth:`AppSettings.flat`,
  :meth:`AppSettings.with_values`).
- Checks are the engine's own validation; each error is reported at the field its ``SettingError`` names, with
  its allowed range, several at once; settings with errors never reach the engine.
- Settings live in ``settings.json`` in the platformdirs user config folder (``$SPECCHAT_CONFIG_DIR`` overrides
  it), as one flat object. Settings added later, such as ``target_model``, take their defaults when a file lacks
  them, and earlier versions ignore them: no new format version. A version is added where a stored value's meaning
  changes; :data:`MIGRATIONS` then brings an older file's values up to date as it is loaded, and the next save
  writes them with the new version (loading writes nothing). Version 2: n_keep's default became "auto", and a
  version 1 file's ``"n_keep": 4`` (the old default, written by every save) loads as "auto".
- The window's local server keeps its own section of the file (``"server"``,
  :class:`app.gui.server_settings.ServerSettings`): it is no setting of the replies, and a file without it loads
  with the server off on port 8000.
- The file is the user's: a file that cannot be read (not JSON, not an object, an I/O error) is moved aside to
  ``settings.json.unreadable-<time>`` (``app.user_files``) and said in :attr:`SettingsStore.notice`, never
  overwritten with defaults; one written by a newer SpecChat (format version above ours) is left untouched and this
  session's changes are not saved. Every write is atomic and flushed to the disk.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import platformdirs

from inference.draft_head import is_head_folder
from inference.models.store import SUPPORTED_BITS, user_dir
from inference.precision import PrecisionSettings
from inference.settings import DECODING_VALUES, Decoding, GenerationSettings, SettingError

from ..bounded_json import loads as bounded_loads
from ..user_files import move_aside, write_atomically
from .sampling_presets import CHAT_DEFAULTS, MODEL_DEFAULT, PRESET_KEYS, preset_values
from .server_settings import ServerSettings

logger = logging.getLogger(__name__)

SETTINGS_NAME = "settings.json"
SETTINGS_VERSION = 2
#: The longest reply the window asks (its "Longest reply"): 131,072 tokens, the longest context of common models,
#: about 40 minutes at 60 tokens/s (a newcomer's 999,999,999 was accepted: months of decoding).
MAX_REPLY_TOKENS = 131_072
#: The largest top-k the window takes: 262,144, the largest vocabulary of common models (Gemma 3's); a top-k of the
#: vocabulary's size or more keeps every token, as 0 does (``inference.sampling``).
MAX_TOP_K = 262_144
#: The seed typed or written for a random one (besides an empty seed box or null), as llama.cpp, LM Studio,
#: ``specchat generate --seed`` and the server read it (a newcomer typed -1 and was told "Seed must be at least 0";
#: a settings file with it was refused): the seed box and :meth:`SettingsStore.load` take it as None.
RANDOM_SEED = -1
#: Deepest nesting a settings file may have (it nests 4 deep: the UI state's per-conversation presets).
MAX_SETTINGS_DEPTH = 32
#: Flat name of each generation setting -> where it lives in GenerationSettings: (part, attribute); part "" is
#: GenerationSettings itself. The names are those of settings files, of the settings pane and of SettingError.field.
GENERATION_KEYS: dict[str, tuple[str, str]] = {
    "decoding": ("", "decoding"),
    "k": ("speculative", "k"),
    "adaptive_k": ("speculative", "adaptive"),
    "n_ctx": ("context", "n_ctx"),
    "n_keep": ("context", "n_keep"),
    "n_discard": ("context", "n_discard"),
    "temperature": ("sampling", "temperature"),
    "top_p": ("sampling", "top_p"),
    "top_k": ("sampling", "top_k"),
    "seed": ("sampling", "seed"),
    "max_new_tokens": ("sampling", "max_new_tokens"),
    "repetition_penalty": ("sampling", "repetition_penalty"),
    "presence_penalty": ("sampling", "presence_penalty"),
    "frequency_penalty": ("sampling", "frequency_penalty"),
    "stop_strings": ("sampling", "stop_strings"),
}
#: UI-state key of the preset chosen per conversation: ``{str(conversation_id): preset name, or the values edited by
#: hand (Custom) over PRESET_KEYS}``.
CONVERSATION_PRESETS = "conversation_presets"
#: UI-state key of the folder the last export was written to or the last import read from (named when only Export
#: kept one: the settings files written since hold it so).
TRANSFER_FOLDER = "export_folder"
#: UI-state key of the conversation shown last (its id; null: a new chat), opened again at the next start.
OPEN_CONVERSATION = "open_conversation"
#: UI-state key of the text typed in the message box and not sent, per chat: ``{str(conversation_id), or
#: NEW_CHAT_KEY for a new chat not saved yet: the text}``, in the box again when its chat is shown, after a restart too.
UNSENT_MESSAGES = "unsent_messages"
#: The key in ``UNSENT_MESSAGES`` of the new chat not saved yet.
NEW_CHAT_KEY = "new"
#: UI-state key of the one unsent message an older SpecChat kept for the whole window: read once, into the chat
#: shown at the next start (:meth:`SettingsStore.take_unsent_message`).
UNSENT_MESSAGE = "unsent_message"
#: UI-state keys the store keeps itself: the window's own state (:meth:`SettingsStore.save_ui_state`) leaves them.
_STORE_UI_KEYS = (CONVERSATION_PRESETS, TRANSFER_FOLDER, OPEN_CONVERSATION, UNSENT_MESSAGES, UNSENT_MESSAGE)


def _chat_number(key: str) -> int | None:
    """The chat a UI-state entry's key names (its id in ASCII digits), or None: not a number, or longer than a
    history's ids are (``int`` refuses a string of over 4,300 digits)."""
    return int(key) if key.isdigit() and key.isascii() and len(key) <= 19 else None


def config_dir() -> Path:
    """SpecChat's config folder: ``$SPECCHAT_CONFIG_DIR`` if set, else ``platformdirs.user_config_dir("specchat")``."""
    return user_dir("SPECCHAT_CONFIG_DIR", platformdirs.user_config_dir)


@dataclass(frozen=True)
class AppSettings:
    """Everything the settings pane controls.

    Model settings (``target_model``, ``target_device``, ``bits``, ``precision``, ``kv_cache_precision``, the decoding when it
    involves a draft model, ``draft_model``, ``draft_device``) need a model reload; the others apply to the next
    reply.

    Attributes:
        target_device / draft_device: OpenVINO devices (``available_devices()``).
        target_model: the target model, an installed model's name or a folder ("" = the embedded default model
            at ``bits``; :meth:`target_name`).
        bits: weight bit-width of the default target model, 4, 8 or 16 (used when ``target_model`` is "").
        precision: compute precision of the target, ``auto`` (f32, exact; bf16 prefill where the CPU has bf16),
            ``f32``, ``bf16`` or ``f16`` where the device computes it (``inference.precision``).
        kv_cache_precision: ``auto`` (f32 with f32 compute, else the device's u8), ``u8``, ``f16`` or ``f32``.
        draft_model: folder of the draft model ("" = none chosen).
        generation: decoding, sampling, rolling context and K of the next reply (``inference.settings``; its
            seed None = random).
        highlight_draft: colour the text that came from accepted draft tokens.
        sampling_preset: the sampling preset the sampling values come from (``app.gui.sampling_presets``;
            ``MODEL_DEFAULT`` follows the loaded model), "" once they were edited by hand.
        remote_url / remote_model: the remote OpenAI-compatible server last chosen (base URL taken as given, e.g.
            ``http://host:8000/v1``) and its model id; its API key is kept by ``app.backends.remote_keys``, never here.
        theme: the window's colours, ``system`` (the desktop's light or dark scheme), ``light`` or ``dark``
            (``app.gui.theme``; View > Theme).
        use_remote: replies come from that server (``app.backends.remote``) instead of the local target; the local
            model settings stay as they were, for switching back.

    New settings sample like a chat (``CHAT_DEFAULTS``, under ``MODEL_DEFAULT``), unlike the engine's greedy default.
    """

    target_device: str = "CPU"
    draft_device: str = "CPU"
    target_model: str = ""
    bits: int = 4
    precision: str = "auto"
    kv_cache_precision: str = "auto"
    draft_model: str = ""
    generation: GenerationSettings = field(default_factory=lambda: GenerationSettings(sampling=CHAT_DEFAULTS))
    highlight_draft: bool = True
    sampling_preset: str = MODEL_DEFAULT
    remote_url: str = ""
    remote_model: str = ""
    use_remote: bool = False
    theme: str = "system"

    @property
    def compare_decoding(self) -> Decoding:
        """The decoding a Compare runs against plain decoding: Auto, unless another speculative decoding is chosen;
        a remote server is asked for the chosen speculative decoding, else prompt lookup (its draft models are its
        own, and another server may not offer Auto)."""
        decoding = self.generation.decoding
        if self.use_remote and decoding in (Decoding.AUTOREGRESSIVE, Decoding.AUTO):
            return Decoding.PROMPT_LOOKUP
        return Decoding.AUTO if decoding == Decoding.AUTOREGRESSIVE else decoding

    @property
    def drafts_with_head(self) -> bool:
        """True when the K box's K drafts with a draft head: draft-model decoding (its Compare's too) with a head
        chosen. Auto, also a Compare's on plain decoding, chooses its K each step, even a seeded reply's
        (``inference.auto_decoding.seeded_sampling``), so it does not use the box (newcomer trial: under Auto the
        head's K overwrote the box and its "Auto picks K" line)."""
        return self.compare_decoding == Decoding.DRAFT_MODEL and self.draft_is_a_head

    @property
    def draft_is_a_head(self) -> bool:
        """True when the draft model chosen is a draft head (``inference.draft_head.is_head_folder``)."""
        return bool(self.draft_model) and is_head_folder(self.draft_model)

    @property
    def uses_draft_model(self) -> bool:
        """True when the draft model is loaded with the target: draft-model decoding, Auto with a draft model chosen
        (without one Auto drafts with prompt lookup), or a draft head (chosen for this target; small), which stays
        loaded whatever the decoding so that switching it or a Compare never waits for a reload."""
        decoding = self.generation.decoding
        chosen = decoding == Decoding.AUTO and bool(self.draft_model)
        return decoding == Decoding.DRAFT_MODEL or chosen or self.draft_is_a_head

    @property
    def target_name(self) -> str:
        """The target's name in the model store: ``target_model``, or the default model's folder at ``bits``
        (e.g. ``SmolLM2-135M-Instruct-int4``); what replies record and ``find_model`` resolves. With
        ``use_remote``, the remote model's label (``model on host:port (remote)``)."""
        if self.use_remote:
            return self.remote_target().describe()
        if self.target_model:
            return self.target_model
        from inference.models.default_model import default_model_dir  # deferred: it imports openvino

        return default_model_dir(self.bits).name

    def remote_target(self, api_key: str = ""):
        """The chosen remote server as an ``app.backends.remote.RemoteTarget`` (with ``api_key``)."""
        from app.backends.remote import RemoteTarget  # deferred: it imports httpx

        return RemoteTarget(self.remote_url, self.remote_model, api_key)

    def value(self, name: str) -> Any:
        """The value of a field or of a generation setting by its flat name (``GENERATION_KEYS``).

        Raises:
            KeyError: no setting has that name.
        """
        if name in GENERATION_KEYS:
            part, attribute = GENERATION_KEYS[name]
            return getattr(getattr(self.generation, part) if part else self.generation, attribute)
        if name == "generation" or name not in _FIELD_NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, as a settings file stores it (``decoding`` as its string value)."""
        values = {name: self.value(name) for name in _FLAT_NAMES}
        if isinstance(values["decoding"], Decoding):
            values["decoding"] = values["decoding"].value
        return values

    def with_values(self, **values: Any) -> AppSettings:
        """A copy with these values: fields of AppSettings or generation settings by their flat names.

        Raises:
            KeyError: a name is neither (``generation`` itself included: set its parts by name).
        """
        unknown = [name for name in values if name not in _FLAT_NAMES]
        if unknown:
            raise KeyError(", ".join(unknown))
        generation = self.generation
        for name, value in values.items():
            if name in GENERATION_KEYS:
                part, attribute = GENERATION_KEYS[name]
                if part:
                    value = replace(getattr(generation, part), **{attribute: value})
                generation = replace(generation, **{part or attribute: value})
        own = {name: value for name, value in values.items() if name not in GENERATION_KEYS}
        return replace(self, generation=generation, **own)

    def generation_settings(self, decoding: Decoding | None = None, seed: int | None = None) -> GenerationSettings:
        """The engine settings for the next reply: ``generation``, with ``decoding`` and ``seed`` overriding its own.
        A ``decoding`` that drafts a fixed K where the chosen one does not (a remote Compare's prompt lookup under
        Plain or Auto) picks its K each step (Adaptive), as the local Compare's Auto does: the box's K, unchecked
        under the chosen decoding, is never sent (a K of 99 made a SpecChat server refuse the Compare's run)."""
        generation = self.generation if decoding is None else replace(self.generation, decoding=decoding)
        if generation.uses_fixed_k and not self.generation.uses_fixed_k:
            generation = replace(generation, speculative=replace(generation.speculative, adaptive=True))
        if seed is not None:
            generation = replace(generation, sampling=replace(generation.sampling, seed=seed))
        return generation

    def precision_settings(self) -> PrecisionSettings:
        """The target's numeric precision (dynamic quantization and fast prefill follow ``auto``)."""
        return PrecisionSettings(inference=self.precision, kv_cache=self.kv_cache_precision)

    def model_key(self) -> tuple:
        """What the loaded models depend on: a change of it needs a reload."""
        draft = (self.draft_model, self.draft_device) if self.uses_draft_model else (None, None)
        bits = None if self.target_model else self.bits  # the bit-width only chooses among the default model's copies
        return (self.target_model, bits, self.target_device, self.precision, self.kv_cache_precision, *draft)

    def field_errors(
        self,
        max_position_embeddings: int | None = None,
        devices: list[str] | None = None,
        speculative: bool | None = None,
    ) -> dict[str, str]:
        """Errors per flat field name (empty when everything is valid).

        Each part of the generation settings is validated by ``inference.settings`` and every ``SettingError``
        reported at its ``field``, with its allowed range. Independent settings (sampling, K) are checked until
        each has shown its error, so several show at once; in the rolling context only the first error shows
        (n_keep is checked against n_ctx, n_discard against both).

        Args:
            speculative: also check what only the speculative decodings that draft a fixed K use (K); None: when
                the chosen decoding does (``GenerationSettings.uses_fixed_k``: not Auto, Adaptive or plain).
        """
        generation = self.generation
        if speculative is None:
            speculative = generation.uses_fixed_k
        errors: dict[str, str] = {}
        errors.update(_setting_errors(generation.sampling, lambda sampling: sampling.validate()))
        sampling = generation.sampling  # the window's bounds, beyond the engine's lower ones (newcomer trial)
        if "max_new_tokens" not in errors and sampling.max_new_tokens > MAX_REPLY_TOKENS:
            errors["max_new_tokens"] = f"max_new_tokens must be in [1, {MAX_REPLY_TOKENS}], got {sampling.max_new_tokens}"
        if "top_k" not in errors and sampling.top_k > MAX_TOP_K:
            errors["top_k"] = (
                f"top_k must be in [0, {MAX_TOP_K}] (0 or -1 = off; so is a k of the vocabulary's size or more), "
                f"got {sampling.top_k}"
            )
        errors.update(_setting_errors(generation.context, lambda c: c.validate(max_position_embeddings), every=False))
        if speculative:
            errors.update(_setting_errors(generation.speculative, lambda speculative: speculative.validate()))

        def check(name: str, validate: Callable[[], Any]) -> None:
            try:
                validate()
            except ValueError as error:
                errors[name] = str(error)

        if self.bits not in SUPPORTED_BITS:
            errors["bits"] = f"bit-width must be one of {', '.join(map(str, SUPPORTED_BITS))}, got {self.bits}"
        check("precision", lambda: PrecisionSettings(inference=self.precision).validate())
        check("kv_cache_precision", lambda: PrecisionSettings(kv_cache=self.kv_cache_precision).validate())
        if devices and self.target_device in devices and "precision" not in errors:
            check("precision", lambda: self.precision_settings().compile_properties(self.target_device))
        if devices:
            if self.target_device not in devices:
                errors["target_device"] = f"device must be one of {', '.join(devices)}, got {self.target_device!r}"
            if self.uses_draft_model and self.draft_device not in devices:
                errors["draft_device"] = f"device must be one of {', '.join(devices)}, got {self.draft_device!r}"
        if self.uses_draft_model:
            if not self.draft_model:
                errors["draft_model"] = (
                    "speculative decoding with a draft model needs a draft model: choose one with the same tokenizer "
                    "as the target, or use prompt lookup"
                )
            elif not Path(self.draft_model).is_dir():
                errors["draft_model"] = f"draft model folder {self.draft_model} does not exist"
        if not errors:  # the decoding, and whatever involves several parts
            errors.update(_setting_errors(generation, lambda g: g.validate(max_position_embeddings), every=False))
        return errors


def _default_text(name: str) -> str:
    """The default of flat setting ``name`` as the settings file writes it (``0.7``, ``"auto"``, ``true``), ``none``
    for a seed's (a random seed)."""
    value = AppSettings().value(name)
    value = getattr(value, "value", value)  # (an enum: its value, as the file writes it)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else json.dumps(value)


_FIELD_NAMES = tuple(f.name for f in fields(AppSettings))
#: Every setting by its flat name, in the order of the settings file.
_FLAT_NAMES = tuple(
    name for f in _FIELD_NAMES for name in ((*GENERATION_KEYS,) if f == "generation" else (f,))
)


def _setting_errors(part: Any, validate: Callable[[Any], None], every: bool = True) -> dict[str, str]:
    """The ``SettingError`` messages ``validate(part)`` raises, by field.

    With ``every``, each field found in error is set back to its default and the part validated again, until it
    passes, so every independent error is found; otherwise only the first one.
    """
    errors: dict[str, str] = {}
    defaults = type(part)()
    while True:
        try:
            validate(part)
        except SettingError as error:
            errors[error.field] = str(error)
            default = getattr(defaults, error.field, None)
            if not every or not hasattr(defaults, error.field) or getattr(part, error.field) == default:
                return errors
            part = replace(part, **{error.field: default})
        except TypeError as error:  # a value of the wrong type (the store and the pane never make one)
            errors["general"] = f"a setting has an invalid value ({error})"
            return errors
        else:
            return errors


#: Every setting by its flat name and the JSON types a settings file may give it.
_TYPES: dict[str, tuple[type, ...]] = {
    "target_device": (str,),
    "draft_device": (str,),
    "target_model": (str,),
    "bits": (int,),
    "precision": (str,),
    "kv_cache_precision": (str,),
    "decoding": (str,),
    "draft_model": (str,),
    "k": (int,),
    "adaptive_k": (bool,),
    "n_ctx": (int,),
    "n_keep": (int, str),
    "n_discard": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": (int,),
    "seed": (int, type(None)),
    "max_new_tokens": (int,),
    "highlight_draft": (bool,),
    "repetition_penalty": (int, float),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "stop_strings": (list,),
    "sampling_preset": (str,),
    "remote_url": (str,),
    "remote_model": (str,),
    "use_remote": (bool,),
    "theme": (str,),
}
#: The values of ``AppSettings.theme``.
THEME_CHOICES = ("system", "light", "dark")
_FLOATS = ("temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


_NO_PENALTIES = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def _n_keep_auto(stored: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: ``"n_keep": 4``, the default every save wrote before "auto" (which keeps the system prompt
    through the rolls), becomes "auto"; any other value was the user's choice and stays."""
    n_keep = stored.get("n_keep")
    return {**stored, "n_keep": "auto"} if type(n_keep) is int and n_keep == 4 else stored


#: Format version -> what brings a file's ``settings`` of that version to the next one, applied in turn from the
#: file's version up to ``SETTINGS_VERSION``.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _n_keep_auto}


def _without_credentials(url: str) -> str | None:
    """``url`` without the ``user:password@`` it holds, or None when it holds none (or is no URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else None


def _preset_from_json(values: Any) -> dict[str, Any] | None:
    """A complete preset from a settings file's JSON (``preset_values``: missing keys take neutral values), or None
    where it is not an object of numbers for ``PRESET_KEYS``."""
    valid = isinstance(values, dict) and all(
        isinstance(values.get(key), _TYPES[key]) and not isinstance(values.get(key), bool)
        for key in PRESET_KEYS if key in values
    )
    return preset_values({key: float(v) if key in _FLOATS else v for key, v in values.items()}) if valid else None


def _preset_of_a_file_without_presets(values: dict[str, Any]) -> str:
    """The preset of settings saved before presets existed: ``MODEL_DEFAULT`` where the sampling values are that
    version's untouched defaults (greedy, no top-p or top-k), else "" (custom), so that what a user chose stays."""
    untouched = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
    return MODEL_DEFAULT if all(values.get(name, default) == default for name, default in untouched.items()) else ""


class SettingsStore:
    """Reads and writes ``settings.json`` (atomically and durably: a crash or power cut mid-write keeps the previous
    file; a file it could not read is never overwritten, see the module doc).

    The file holds ``{"version": 2, "settings": {...AppSettings.flat()...}, "ui": {...window state...},
    "presets": {name: {...PRESET_KEYS...}}, "server": {...ServerSettings...}}`` (the user's sampling presets; the
    shipped ones are not stored).

    Args:
        path: the settings file; default ``config_dir() / "settings.json"``.

    Attributes:
        warnings: entries of the file :meth:`load` could not use (each took its default), one line each.
        notice: what :meth:`load` did with a file it could not read at all (moved aside, or left untouched and not
            written), None when it read it.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else config_dir() / SETTINGS_NAME
        self.warnings: list[str] = []
        self.notice: str | None = None
        self._held: str | None = None  # why the file must not be written (it could not be read), None: it may be
        self._ui: dict[str, Any] = {}
        self._presets: dict[str, dict[str, Any]] = {}
        # the chats' sampling of a history kept in memory (:meth:`keep_conversations_in_memory`), never written; None:
        # the chats are the history file's, remembered in the file's ``ui`` section
        self._in_memory: dict[str, Any] | None = None
        self._server = ServerSettings()
        self._settings = AppSettings()  # the last loaded or saved, written again with presets and UI state

    def load(self) -> AppSettings:
        """The stored settings; missing, unknown or mistyped entries fall back to defaults (see ``warnings``). A
        file that cannot be read is moved aside, one of a newer format left untouched and not written this session
        (see the module doc); both give the defaults and a warning saying where the file is."""
        self.warnings = []
        self.notice = None
        self._held = None
        try:
            raw = bounded_loads(self.path.read_bytes(), MAX_SETTINGS_DEPTH)
        except FileNotFoundError:
            return AppSettings()
        except OSError as error:
            return self._unreadable(f"could not be read ({error.strerror or error})")
        except ValueError as error:
            return self._unreadable(f"is not a settings file (not valid JSON: {error})")
        if not isinstance(raw, dict):
            return self._unreadable("is not a settings file (not a JSON object)")
        version = raw.get("version", SETTINGS_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            return self._unreadable(f"is not a settings file (its version is {version!r})")
        if version > SETTINGS_VERSION:
            self._held = f"written by a newer SpecChat (format {version})"
            self.notice = (
                f"{self.path} was written by a newer SpecChat (settings format {version}; this one reads "
                f"{SETTINGS_VERSION}): it is left untouched, default settings are used, and changes made now are not "
                "saved. Update SpecChat to use it."
            )
            return AppSettings()
        self._ui = raw.get("ui") if isinstance(raw.get("ui"), dict) else {}
        self._presets = self._load_presets(raw.get("presets"))
        self._server = ServerSettings.from_json(raw.get("server"), self.warnings)
        stored = raw.get("settings") if isinstance(raw.get("settings"), dict) else {}
        for older in range(version, SETTINGS_VERSION):
            stored = MIGRATIONS[older](stored)
        values = {}
        for name in _FLAT_NAMES:
            if name not in stored:
                continue
            value = stored[name]
            allowed = _TYPES[name]
            if isinstance(value, bool) and bool not in allowed:
                value = object()  # JSON true/false is not a number here
            if (
                not isinstance(value, allowed)
                or (name == "decoding" and value not in DECODING_VALUES)
                or (name == "theme" and value not in THEME_CHOICES)
                or (name == "stop_strings" and not all(isinstance(item, str) for item in value))
            ):
                self.warnings.append(
                    f"setting {name} has an invalid value {stored[name]!r}; using the default, {_default_text(name)}"
                )
                continue
            values[name] = float(value) if name in _FLOATS else tuple(value) if name == "stop_strings" else value
        if isinstance(values.get("n_keep"), str) and values["n_keep"] != "auto":
            self.warnings.append(
                f"setting n_keep has an invalid value {values['n_keep']!r}; using the default, {_default_text('n_keep')}"
            )
            del values["n_keep"]
        if "decoding" in values:
            values["decoding"] = Decoding(values["decoding"])
        if values.get("seed") == RANDOM_SEED:  # as the seed box, the command line and the server read it
            values["seed"] = None
        cleaned = _without_credentials(values.get("remote_url", ""))
        if cleaned is not None:  # written before such URLs were refused
            values["remote_url"] = cleaned
            self.warnings.append(
                "the remote server's base URL held a user name or password; they were removed "
                f"({values['remote_url']}): enter its key in the API key field of Remote server… (Ctrl+L)"
            )
        if "sampling_preset" not in stored and "temperature" in stored:
            values["sampling_preset"] = _preset_of_a_file_without_presets(values)
            if not values["sampling_preset"]:  # what that version sampled with had no penalties
                values = {**_NO_PENALTIES, **values}
        self._settings = AppSettings().with_values(**values)
        return self._settings

    def _unreadable(self, reason: str) -> AppSettings:
        """Move the file aside (or, if that fails, hold it: never write it this session); say so in :attr:`notice`;
        the defaults."""
        try:
            moved = move_aside(self.path)
        except OSError as error:
            self._held = reason
            self.notice = (
                f"{self.path} {reason}, and could not be moved aside ({error.strerror or error}): it is left "
                "untouched, default settings are used, and changes made now are not saved."
            )
        else:
            self.notice = (
                f"{self.path} {reason}. It was kept as {moved.name} (your sampling presets are in it), and default "
                "settings are used."
            )
        logger.warning(self.notice)
        return AppSettings()

    def save(self, settings: AppSettings) -> None:
        """Write the settings (and the last UI state and presets) to the file."""
        self._settings = settings
        self._write({
            "version": SETTINGS_VERSION, "settings": settings.flat(), "ui": self._ui, "presets": self._presets,
            "server": self._server.to_json(),
        })  # fmt: skip

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """The user's sampling presets by name, each complete over ``PRESET_KEYS`` (after :meth:`load`)."""
        return {name: dict(values) for name, values in self._presets.items()}

    def save_preset(self, name: str, values: dict[str, Any]) -> None:
        """Store (or replace) a user preset and write the file with the last settings."""
        self._presets[name] = preset_values(values)
        self.save(self._settings)

    def delete_preset(self, name: str) -> None:
        """Remove a user preset and write the file. The conversations that had chosen it fall back to
        ``MODEL_DEFAULT`` (a conversation remembers a preset by its name; one with nothing remembered would show
        whatever the chat shown before it had)."""
        self._presets.pop(name, None)
        chosen = self._ui.get(CONVERSATION_PRESETS)
        if isinstance(chosen, dict):
            self._ui[CONVERSATION_PRESETS] = {
                cid: MODEL_DEFAULT if preset == name else preset for cid, preset in chosen.items()
            }
        if self._in_memory is not None:
            self._in_memory = {
                cid: MODEL_DEFAULT if preset == name else preset for cid, preset in self._in_memory.items()
            }
        self.save(self._settings)

    def keep_conversations_in_memory(self) -> None:
        """The history is kept in memory this session (its file could not be opened): its chats are numbered 1, 2, …
        as the file's are, so what they remember of their sampling is kept apart, for this session only, and never
        written; the entries of the file's chats stay as they are (and are not shown for these chats)."""
        self._in_memory = {}

    def _chosen(self) -> dict[str, Any]:
        """The chats' remembered sampling by id: the in-memory history's, else the file's (``{}`` if none)."""
        chosen = self._ui.get(CONVERSATION_PRESETS) if self._in_memory is None else self._in_memory
        return chosen if isinstance(chosen, dict) else {}

    def conversation_preset(self, conversation_id: int) -> str | dict[str, Any] | None:
        """What a conversation remembers of its sampling: the name of the preset last chosen in it, or the values
        last edited by hand in it (Custom, complete over ``PRESET_KEYS``), or None (nothing, or an entry that is
        neither)."""
        entry = self._chosen().get(str(conversation_id))
        return entry if isinstance(entry, str) else _preset_from_json(entry)

    def set_conversation_preset(self, conversation_id: int, preset: str | dict[str, Any], write: bool = True) -> None:
        """Remember the sampling of a conversation (UI state): a preset's name, or the values edited by hand
        (``PRESET_KEYS``); then write the file, or with ``write`` False leave it to the next save (a hand edit: an
        arrow held on a spin box edits many times a second, and the window saves the settings shortly after each
        edit, and at quit). A chat of a history kept in memory keeps it for the session: nothing is written."""
        entry = preset if isinstance(preset, str) else preset_values(preset)
        if self._in_memory is not None:
            self._in_memory[str(conversation_id)] = entry
            return
        self._ui[CONVERSATION_PRESETS] = {**self._chosen(), str(conversation_id): entry}
        if write:
            self.save(self._settings)

    def forget_conversation(self, conversation_id: int) -> None:
        """Drop what the settings remember of a deleted conversation (its sampling; it as the one shown last) and
        write the file: a history started afresh numbers its chats from 1 again, and a new chat must not take a
        deleted one's entries. A chat of a history kept in memory has its session's entry dropped: the file's
        entries are not its."""
        if self._in_memory is not None:
            self._in_memory.pop(str(conversation_id), None)
            return
        self.keep_conversations_only(lambda kept: kept != conversation_id)
        self.save(self._settings)

    def keep_conversations_only(self, exists: Callable[[int], bool]) -> None:
        """Drop the entries of conversations for which ``exists`` is False (and those not named by a number), written
        with the next save: at start, the chats the history no longer has (deleted by an older SpecChat, or a history
        started afresh)."""
        chosen = self._ui.get(CONVERSATION_PRESETS)
        if isinstance(chosen, dict):
            self._ui[CONVERSATION_PRESETS] = {
                key: entry
                for key, entry in chosen.items()
                if (number := _chat_number(key)) is not None and exists(number)
            }
        if self.open_conversation is not None and not exists(self.open_conversation):
            self._ui[OPEN_CONVERSATION] = None

    def _load_presets(self, raw: Any) -> dict[str, dict[str, Any]]:
        """Presets from the file: entries that are not a name with numbers for ``PRESET_KEYS`` are dropped (warned)."""
        presets: dict[str, dict[str, Any]] = {}
        for name, values in (raw if isinstance(raw, dict) else {}).items():
            preset = _preset_from_json(values)
            if preset is None or not name.strip():
                self.warnings.append(f"sampling preset {name!r} is invalid; it was dropped")
                continue
            presets[name] = preset
        return presets

    @property
    def server(self) -> ServerSettings:
        """The local server's settings (after :meth:`load`)."""
        return self._server

    def save_server(self, server: ServerSettings) -> None:
        """Store the local server's settings and write the file with the last settings."""
        self._server = server
        self.save(self._settings)

    @property
    def ui_state(self) -> dict[str, Any]:
        """Window geometry and splitter positions saved by the main window (after :meth:`load`)."""
        return dict(self._ui)

    def save_ui_state(self, settings: AppSettings, ui: dict[str, Any]) -> None:
        """Store the window state together with the settings (the conversations' presets and the export and import
        folder are kept)."""
        kept = {key: self._ui[key] for key in _STORE_UI_KEYS if key in self._ui}
        self._ui = {**kept, **ui}
        self.save(settings)

    @property
    def transfer_folder(self) -> str:
        """The folder the last export was written to or the last import read from ("" before the first)."""
        folder = self._ui.get(TRANSFER_FOLDER)
        return folder if isinstance(folder, str) else ""

    def set_transfer_folder(self, folder: str) -> None:
        """Remember the folder an export was written to or an import read from (UI state) and write the file."""
        self._ui[TRANSFER_FOLDER] = folder
        self.save(self._settings)

    @property
    def open_conversation(self) -> int | None:
        """The conversation shown when the window last closed (None: a new chat, or none remembered)."""
        shown = self._ui.get(OPEN_CONVERSATION)
        return shown if isinstance(shown, int) and not isinstance(shown, bool) else None

    def set_open_conversation(self, conversation_id: int | None) -> None:
        """Remember the conversation shown (UI state), written with the next save (the settings' after an edit, the
        window's state at quit): not a write of the file per chat opened."""
        self._ui[OPEN_CONVERSATION] = conversation_id

    @property
    def unsent_messages(self) -> dict[int | None, str]:
        """The text typed in the message box and not sent, per chat (None: a new chat not saved yet), as last given
        to :meth:`set_unsent_messages`; entries that are not a chat's number (or ``NEW_CHAT_KEY``) with a text are
        left out."""
        entries = self._ui.get(UNSENT_MESSAGES)
        unsent: dict[int | None, str] = {}
        for key, text in entries.items() if isinstance(entries, dict) else ():
            if not isinstance(text, str) or not text:
                continue
            if key == NEW_CHAT_KEY:
                unsent[None] = text
            elif (number := _chat_number(key)) is not None:
                unsent[number] = text
        return unsent

    def set_unsent_messages(self, unsent: dict[int | None, str]) -> None:
        """Remember the text typed and not sent in each chat (UI state; None: a new chat not saved yet; empty texts
        are left out), written with the next save (the settings' after an edit, the window's state at quit)."""
        entries = {NEW_CHAT_KEY if key is None else str(key): text for key, text in unsent.items() if text}
        if entries:
            self._ui[UNSENT_MESSAGES] = entries
        else:
            self._ui.pop(UNSENT_MESSAGES, None)

    def save_unsent_messages(self, unsent: dict[int | None, str]) -> None:
        """:meth:`set_unsent_messages`, then write the file (with the last settings) at once."""
        self.set_unsent_messages(unsent)
        self.save(self._settings)

    def take_unsent_message(self) -> str:
        """The one unsent message an older SpecChat kept for the whole window ("" if none), forgotten (with the next
        save): from then on it is the unsent message of the chat it is shown in."""
        text = self._ui.pop(UNSENT_MESSAGE, None)
        return text if isinstance(text, str) else ""

    @property
    def held(self) -> str | None:
        """Why the file is not written this session (it could not be read and stays as it is), or None."""
        return self._held

    def _write(self, data: dict) -> None:
        if self._held is None:
            write_atomically(self.path, json.dumps(data, indent=2) + "\n")

