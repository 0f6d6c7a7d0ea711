"""The model store's exceptions, in one module that imports nothing of the store.

Every module of :mod:`inference.models` raises these; keeping them apart lets any two modules share them
without importing each other. The hierarchy: :class:`ModelFetchError` (the default model cannot be fetched or
built) > :class:`ModelImportError` (a model cannot be imported, downloaded or converted) >
:class:`OperationCancelled` (the user stopped it), so a caller that catches the first catches all three.
Messages say what went wrong and what to do; callers show them as they are. Where what to do names a command-line
option or command, the error is made by :func:`advised`: it keeps the reason and a key of the advice, so that the
window says the same reason and the advice in its own words (its fields and tabs).
"""

from __future__ import annotations

from typing import TypeVar

from .. import advice as advice_words

E = TypeVar("E", bound=BaseException)

#: What to do after a refusal, in the command line's words, by advice key: the store's (:func:`advised`) and the
#: engine's (:func:`inference.advice.advised`: "chat-model", "reinstall", "list-models"), which the command line
#: says with :func:`inference.advice.in_words`.
CLI_ADVICE = {
    "name-taken": "choose another name (--name) or replace it (--replace), or remove it first with `specchat models remove`",
    "name-reserved": "choose another name (--name)",
    "other-family": "Choose a draft from the same model family (see `specchat models catalogue`), or use prompt lookup.",
    "see-list": "(see `specchat models list`)",
    "list-models": "see `specchat models list`",
    "disk-space": "Free some space (e.g. `specchat models remove NAME`) or set SPECCHAT_DATA_DIR to a folder on a larger "
    "disk, then try again.",
    "disk-full": "Free some space under {folder} (e.g. `specchat models remove NAME`) or set SPECCHAT_DATA_DIR to a folder "
    "on a larger disk, then run the same download again (what was downloaded and verified is kept).",
    "ir-incomplete": "Export the model again (e.g. `optimum-cli export openvino`), or use `specchat models convert` on the "
    "original checkpoint.",
    "extra-not-bundled": "Do it with SpecChat installed from Python (`{install}`, then `specchat models convert ...`) and "
    "import the resulting folder here; or choose a pre-converted OpenVINO model or a GGUF file, which need no extra.",
    "fetch-default": "run `specchat models fetch-default`",
    "chat-model": "Choose a chat model (`specchat models list`).",
    "reinstall": "Re-import or re-download the model (`specchat models fetch-default` repairs the default one).",
    "reinstall-head": "Reinstall SpecChat to restore its draft head, or delete it (`specchat models remove {name}`) to "
    "chat without it.",
    "import-first": "import it first (`specchat models import {path}`), then give the name it is installed under",
    "convert-checkpoint": "convert it with `specchat models convert {path}` (4-bit; --bits 8 or 16 for more), which "
    "installs the result",
    "convert-first": "convert it first (`specchat models convert {path}`), then give the name it is installed under",
}


class ModelFetchError(RuntimeError):
    """The default model could not be fetched or built; the message says why and what to do."""


class ModelImportError(ModelFetchError):
    """A model cannot be imported, downloaded or converted; the message says why and what to do."""


class OperationCancelled(ModelImportError):
    """The user cancelled a download, import or conversion; nothing was left in the store."""


def advised(kind: type[E], reason: str, advice: str, between: str = "; ", after: str = "", **details: str) -> E:
    """An error of class ``kind`` whose message is ``reason``, ``between``, then what to do as the command line says
    it (``CLI_ADVICE[advice]``, its ``{fields}`` filled from ``details``, e.g. ``folder=...``), then ``after`` (the
    end of the sentence, what pip said). The error keeps ``reason``, ``advice``, ``between``, ``after`` and
    ``details`` as attributes, so that another front end says the same reason and words the advice its own way (the
    window: :func:`app.gui.store_words.window_words`; :func:`inference.advice.advised`)."""
    return advice_words.advised(kind, reason, advice, CLI_ADVICE[advice], between, after, **details)
