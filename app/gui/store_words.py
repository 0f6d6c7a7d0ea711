"""What the window says of the model store's and the engine's errors: the reason, then what to do in the words of the
place that shows it, where the command line names its options and commands (:data:`inference.models.errors.CLI_ADVICE`).

The Models dialog says :data:`WINDOW_ADVICE` (its own fields and tabs); the main window (status bar, the settings'
notes, the retry question, a reply that could not start) says :data:`MAIN_WINDOW_ADVICE` (its model picker and
the Models menu). A trial removed the chosen model with ``specchat models remove`` while the window was open: the
main window said "(see `specchat models list`)", advice for a terminal the user of the window may never open.
"""

from __future__ import annotations

from collections.abc import Mapping

from inference.advice import in_words

#: What to do after a refusal, in the Models dialog's words, by the advice key of the store's error
#: (:func:`inference.models.errors.advised`; the command line says ``CLI_ADVICE``'s, which name its options).
WINDOW_ADVICE = {
    "name-taken": 'type another name in the Name field, or choose "Replace a model of the same name" under If installed, '
    "or remove that model first on the Installed tab",
    "name-reserved": "type another name in the Name field",
    "other-family": "Choose a draft from the same model family (see the Recommended pairs tab), or use prompt lookup.",
    "see-list": "(see the Installed tab)",
    "list-models": "see the Installed tab",
    "disk-space": "Free some space (e.g. remove a model with the Installed tab's Remove button) or set SPECCHAT_DATA_DIR to "
    "a folder on a larger disk, then try again.",
    "disk-full": "Free some space under {folder} (e.g. remove a model with the Installed tab's Remove button) or set "
    "SPECCHAT_DATA_DIR to a folder on a larger disk, then add it again (what was downloaded and verified is kept).",
    "ir-incomplete": "Export the model again (e.g. with optimum-intel), or enter the original checkpoint's folder as the "
    "Source to convert it.",
    "extra-not-bundled": "Do it with SpecChat installed from Python ({install}, then convert it in that SpecChat's Models "
    "window) and add the resulting folder here; or choose a pre-converted OpenVINO model or a GGUF file, which need no "
    "extra.",
    "fetch-default": "try again",
    "chat-model": "Choose a chat model (see the Installed tab).",
    "reinstall": "Re-import or re-download the model on the Add a model tab.",
    "reinstall-head": "Reinstall SpecChat to restore its draft head, or remove {name} on the Installed tab to chat "
    "without it.",
    "import-first": "add it first on the Add a model tab (the file as the Source), then choose it",
    "convert-checkpoint": "convert it: with the folder as the Source, the Add button reads Convert",
    "convert-first": "convert it first on the Add a model tab (the folder as the Source), then choose it",
}

#: The same advice in the main window's words: its model picker, and the Models dialog by its menu.
MAIN_WINDOW_ADVICE = {
    "name-taken": "choose another name, or replace or remove that model, in Models > Manage models…",
    "name-reserved": "choose another name in Models > Manage models…",
    "other-family": "Choose a draft from the same model family (see Recommended pairs in Models > Manage models…), or "
    "use prompt lookup.",
    "see-list": "(choose an installed model in the model picker)",
    "list-models": "choose another model in the model picker",
    "disk-space": "Free some space (e.g. remove a model in Models > Manage models…) or set SPECCHAT_DATA_DIR to a folder "
    "on a larger disk, then try again.",
    "disk-full": "Free some space under {folder} (e.g. remove a model in Models > Manage models…) or set "
    "SPECCHAT_DATA_DIR to a folder on a larger disk, then try again (what was downloaded and verified is kept).",
    "ir-incomplete": "Export the model again (e.g. with optimum-intel), or convert the original checkpoint in Models > "
    "Manage models… (its folder as the Source).",
    "extra-not-bundled": "Do it with SpecChat installed from Python ({install}, then convert it in that SpecChat's Models "
    "window) and add the resulting folder in Models > Manage models…; or choose a pre-converted OpenVINO model or a "
    "GGUF file, which need no extra.",
    "fetch-default": "try again",
    "chat-model": "Choose a chat model in the model picker.",
    "reinstall": "Re-import or re-download the model (Models > Manage models…).",
    "reinstall-head": "Reinstall SpecChat to restore its draft head, or remove {name} in Models > Manage models… to "
    "chat without it.",
    "import-first": "add it first in Models > Manage models… (the file as the Source), then choose it in the model "
    "picker",
    "convert-checkpoint": "convert it in Models > Manage models… (the folder as the Source)",
    "convert-first": "convert it first in Models > Manage models… (the folder as the Source), then choose it in the "
    "model picker",
}


def window_words(error: BaseException, advice: Mapping[str, str] = WINDOW_ADVICE) -> str:
    """What the window says of ``error``: the store's or the engine's reason then ``advice``'s words (the Models
    dialog's by default, :data:`MAIN_WINDOW_ADVICE` for the main window) where the error was made with an advice key
    (:func:`inference.advice.advised`), else its message (its class name where it has none)."""
    return in_words(error, advice)
