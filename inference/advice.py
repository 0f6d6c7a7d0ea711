"""Errors that keep why apart from what to do, so that each front end says what to do in its own words.

The engine and the model store (:func:`inference.models.errors.advised`) make such errors with :func:`advised`: the
message says the reason and what to do in the raiser's words (the engine's name no command or window: it serves
both), and the error keeps the reason and a key of the advice. A front end says the reason and its own words for
the key with :func:`in_words`: the command line its commands and options
(:data:`inference.models.errors.CLI_ADVICE`), the window its fields and menus (:mod:`app.gui.store_words`).
This module imports nothing, so that the engine and the store both use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

E = TypeVar("E", bound=BaseException)

#: What to do with a model whose files are missing or unreadable, in the engine's words (advice key "reinstall").
REINSTALL = "Re-import or re-download the model."
#: What to do with a draft head whose files are missing (advice key "reinstall-head"): a head is neither imported
#: nor downloaded; SpecChat installs its own, and a head is optional.
REINSTALL_HEAD = "Reinstall SpecChat to restore its draft head, or delete the folder {folder} to chat without it."


def advised(kind: type[E], reason: str, advice: str, words: str, between: str = "; ", after: str = "",
            **details: str) -> E:
    """An error of class ``kind`` whose message is ``reason``, ``between``, what to do (``words``, its ``{fields}``
    filled from ``details``, e.g. ``folder=...``), then ``after`` (the end of the sentence). The error keeps
    ``reason``, ``advice`` (the key of what to do), ``between``, ``after`` and ``details`` as attributes, which
    :func:`in_words` reads."""
    error = kind(f"{reason}{between}{words.format(**details)}{after}")
    error.reason, error.advice, error.between, error.after, error.details = reason, advice, between, after, details
    return error


def restated(kind: type[E], before: str, cause: BaseException) -> E:
    """An error of class ``kind`` that says ``before`` then what ``cause`` says, keeping ``cause``'s advice key
    (:func:`advised`) where it has one, e.g. why a model cannot roll, said when a chat needs a roll."""
    error = kind(f"{before}{cause}")
    if getattr(cause, "advice", None) is not None:
        error.reason, error.advice = f"{before}{cause.reason}", cause.advice
        error.between, error.after, error.details = cause.between, cause.after, cause.details
    return error


def in_words(error: BaseException, advice: Mapping[str, str]) -> str:
    """What ``error`` says with what to do in ``advice``'s words (advice key -> words, ``{fields}`` filled from the
    error's details) where it was made by :func:`advised` with a key ``advice`` has, else its message (its class
    name where it has none)."""
    words = advice.get(getattr(error, "advice", None))
    if words is not None:
        return f"{error.reason}{error.between}{words.format(**error.details)}{error.after}"
    return str(error) or type(error).__name__
