"""A setting's error in words a person reads, as the settings pane shows it.

The engine's ``SettingError`` messages are written for the command line and the server: ranges in interval notation
and settings by their field terms ("n_ctx must be in [16, 8192], got 99999"). The window says the same with the
fields' on-screen labels and ranges in words, their whole numbers with thousands separators as the window writes
numbers elsewhere ("Context length must be between 16 and 8,192; you typed 99999"): :func:`in_words`. The value
checked is said as typed, without separators.
"""

from __future__ import annotations

import re

#: A number as the engine's messages write one (``-2``, ``0.5``, ``2^63``, ``1e-05``).
_NUMBER = r"-?[\d.]+(?:e-?\d+)?(?:\^\d+)?"

#: Interval notation -> words: ``[a, b]``, ``(a, b]``, ``[a, b)``, ``(a, b)`` (with an optional "in " before them),
#: "{}" standing for each bound in turn.
_INTERVALS = (
    (re.compile(rf"(?:in )?\[({_NUMBER}), ({_NUMBER})\]"), "between {} and {}"),
    (re.compile(rf"(?:in )?\(({_NUMBER}), ({_NUMBER})\]"), "above {} and at most {}"),
    (re.compile(rf"(?:in )?\[({_NUMBER}), ({_NUMBER})\)"), "at least {} and below {}"),
    (re.compile(rf"(?:in )?\(({_NUMBER}), ({_NUMBER})\)"), "between {} and {}, neither included"),
    (re.compile(rf">= ({_NUMBER})"), "at least {}"),
    (re.compile(rf"<= ({_NUMBER})"), "at most {}"),
)

#: The value the engine checked, at the message's end or before a note: "..., got 99" / "...; got 99".
_GOT = re.compile(rf"[,;] got ({_NUMBER}|'[^']*'|\S+)")

#: A bound between fields, once they are named by their labels: "(Always kept + Forgotten at once < Context length)".
_SUM_BELOW = re.compile(r"\(([^()+<]+) \+ ([^()+<]+) < ([^()+<]+)\)")

#: A label's trailing field term in parentheses ("Context length (n_ctx)" -> "Context length"); a term is one word
#: with an underscore (the terms of the command line and settings file).
_LABEL_TERM = re.compile(r"\s*\(\w*_\w*\)$")


def _grouped(number: str) -> str:
    """A whole number of a range with thousands separators, as the window writes numbers ("8192" -> "8,192"); any
    other number ("0.5", "2^63") as it is."""
    return f"{int(number):,}" if number.lstrip("-").isdigit() else number


def short_label(label: str) -> str:
    """``label`` without a trailing field term in parentheses ("Always kept (n_keep)" -> "Always kept"); a label
    whose parentheses hold words keeps them ("Draft tokens per step (K)", "Candidates (top-k)")."""
    return _LABEL_TERM.sub("", label)


def in_words(message: str, labels: dict[str, str], said: str = "you typed {}", typed: str | None = None) -> str:
    """``message`` (an engine ``SettingError`` message) in words a person reads.

    Args:
        message: e.g. "n_discard must be -1 or in [1, 507] (n_keep + n_discard < n_ctx), got 600".
        labels: field term -> its on-screen label ("n_ctx" -> "Context length (n_ctx)"); each term standing as a
            word in the message is replaced by its label without the term (:func:`short_label`), longest terms
            first; a term without an underscore ("seed", "k") only where it starts the message. A message about K
            names it "K (draft tokens per step)" in the engine: the label replaces it too. The engine's "-1" and
            "'auto'" choices are said as the fields show them: auto.
        said: how the value checked is said, "{}" standing for it: "you typed {}" (600 was typed into the field),
            "the settings file holds {}" (the user typed nothing), "you typed more digits than the field holds (it
            holds {})"...
        typed: the value to say in place of the engine's, as the user typed it ("0" typed into top-p, where the
            engine writes 0.0); None: the engine's.

    Returns:
        e.g. "Forgotten at once must be auto or between 1 and 507 (Always kept plus Forgotten at once must stay
        below Context length); you typed 600".
    """
    text = message.replace("K (draft tokens per step)", "k", 1) if message.startswith("K (draft tokens per step)") else message
    text = text.replace(" must be 'auto' or ", " must be auto or ").replace(" must be -1 or ", " must be auto or ")
    for pattern, words in _INTERVALS:
        text = pattern.sub(lambda match, words=words: words.format(*map(_grouped, match.groups())), text)
    text = _GOT.sub(lambda match: "; " + said.replace("{}", match.group(1) if typed is None else typed), text)
    for term in sorted(labels, key=len, reverse=True):
        label = short_label(labels[term])
        if text.startswith(f"{term} "):
            text = label + text[len(term):]
        if "_" in term:  # a field term anywhere else in the message ("n_ctx=512", "below n_ctx")
            text = re.sub(
                rf"(?<![\w-]){re.escape(term)}(?:=('[^']*'|{_NUMBER}))?(?![\w-])",
                lambda match, label=label: label + (f" {match.group(1)}" if match.group(1) else ""),
                text,
            )
    text = _SUM_BELOW.sub(r"(\1 plus \2 must stay below \3)", text)
    return text[:1].upper() + text[1:]
