"""Number fields: a whole-number field that says when it refused a keystroke for holding too many digits, and fields
that say when they are empty.

A ``QSpinBox`` ignores a digit that would take its value past its maximum, without a word: a newcomer typed
99999999999 into Context length and read "you typed 999999999" (the last two digits dropped). :class:`NumberBox`
remembers that it refused one (:attr:`NumberBox.refused`) until its value next changes, so that the field's error can
say it ("you typed more digits than the field holds (it holds 999999999)"); so does a decimal field, :class:`DecimalBox`
(99999999 typed into Randomness read "you typed 999"). It keeps no refused number: each refusal
is one keystroke on the digits kept, so the last one ("12345678902" for 123456789012 typed) is a number the user never
typed (a later trial read it).

A field whose minimum stands for a word (its special value text: "auto (system prompt)", "off") takes that word typed:
its first word in any case, or its whole text. A ``QSpinBox`` refused every letter, so that an error saying "must be
auto or between 0 and 4,095" asked for what could not be typed (a newcomer's trial); the arrows alone reached it.

A field emptied holds no number: :attr:`EmptyAware.empty` says so (its error then says the field is empty: a trial's
cleared Context length still read "you typed 5"), and leaving it (Tab, Return) puts back :attr:`EmptyAware.fallback`,
the last valid value its form gave it, not the last value it held (which put the trial's invalid 5 back); so do the
decimal fields, :class:`DecimalBox`.

A field may name a number that stands for its minimum too (:attr:`NumberBox.minimum_alias`: top-k's -1, off as the
command line and the server take it, which the box turned into a top-k of 1 with its "-" refused).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox


class EmptyAware:
    """What the number fields share, mixed into a ``QSpinBox`` or ``QDoubleSpinBox`` subclass that defines an
    ``empty_changed`` signal and calls :meth:`_watch_empty` once built: an empty text told (:attr:`empty`), and put
    back to :attr:`fallback` when the field is left.

    Attributes:
        fallback: the value an emptied field takes back when left (the form sets its last valid value); None: the
            value it holds.
    """

    fallback: float | None = None
    _empty = False

    def _watch_empty(self) -> None:
        # the box sets its text with the line edit's signals blocked (a value put back): checked on its own signals
        # too, before any other slot of valueChanged (the form's) reads it
        self.valueChanged.connect(self._check_empty)
        self.editingFinished.connect(self._check_empty)
        self.lineEdit().textChanged.connect(self._check_empty)  # (the box's own textChanged skips an empty text)

    @property
    def empty(self) -> bool:
        """True while the field holds no text of a number (it was cleared)."""
        return self._empty

    def restored_text(self) -> str:
        """What leaving the field shows while it is empty: :attr:`fallback` (else the value held) as the field shows
        it, its special value's word for the minimum ("auto (system prompt)")."""
        value = self.value() if self.fallback is None else self.fallback
        if value == self.minimum() and self.specialValueText():
            return self.specialValueText()
        return self.prefix() + self.textFromValue(value) + self.suffix()

    def fixup(self, text: str) -> str:
        """An empty text becomes :meth:`restored_text` (Tab, Return and a click elsewhere interpret it); any other
        as the spin box's own ``fixup``."""
        return self.restored_text() if not self._typed(text) else super().fixup(text)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """As the spin box's ``showEvent``, which shows the value again (an emptied field folded away holds it then)."""
        super().showEvent(event)
        self._check_empty()

    def _typed(self, text: str) -> str:
        return text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip()

    def _check_empty(self, *_args) -> None:
        empty = not self._typed(self.lineEdit().text())
        if empty != self._empty:
            self._empty = empty
            self.empty_changed.emit()


class RefusalAware:
    """What the number fields share, mixed into a spin box subclass that defines a ``refused_changed`` signal and
    calls :meth:`_watch_refusals` once built: a keystroke of a number refused (too large or too small) recorded in
    :attr:`refused` until the value next changes.

    Attributes:
        refused: True when a keystroke of a number was refused since the value last changed (or none was refused).
    """

    refused = False

    def _watch_refusals(self) -> None:
        self.valueChanged.connect(self._forget)

    def _note_refusal(self, result, text: str) -> None:
        """Record that ``validate`` answered ``result`` for ``text``: a refusal when it is invalid and a number."""
        state = result[0] if isinstance(result, tuple) else result
        number = self._typed(text).replace(self.locale().groupSeparator(), "").lstrip("-")
        if isinstance(self, QDoubleSpinBox):  # (its decimal point, once)
            number = number.replace(self.locale().decimalPoint(), "", 1)
        if state == QValidator.State.Invalid and number.isdigit() and not self.refused:
            self.refused = True
            self.refused_changed.emit()

    def _forget(self, _value) -> None:
        if self.refused:
            self.refused = False
            self.refused_changed.emit()


class DecimalBox(RefusalAware, EmptyAware, QDoubleSpinBox):
    """A ``QDoubleSpinBox`` that records that it refused a keystroke for a number past its range (:class:`RefusalAware`:
    99999999 typed into Randomness kept "999" without a word), says when it is empty and puts back its last valid
    value when left so (:class:`EmptyAware`).

    Signals:
        refused_changed(): :attr:`refused` changed (a refusal, or the value changed after one).
        empty_changed(): :attr:`empty` changed.
    """

    refused_changed = Signal()
    empty_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self._watch_empty()
        self._watch_refusals()

    def validate(self, text: str, pos: int) -> object:
        """As ``QDoubleSpinBox.validate``; a number it finds invalid (too large or too small) is recorded."""
        result = super().validate(text, pos)
        self._note_refusal(result, text)
        return result


class NumberBox(RefusalAware, EmptyAware, QSpinBox):
    """A ``QSpinBox`` that records that it refused a keystroke for a number past its range (:class:`RefusalAware`),
    takes its special value's word typed ("auto", "off"), and says when it is empty (:class:`EmptyAware`).

    Signals:
        refused_changed(): :attr:`refused` changed (a refusal, or the value changed after one).
        empty_changed(): :attr:`empty` changed.

    Attributes:
        minimum_alias: a text typed that stands for the minimum as its special value's word does ("-1"), or "".
    """

    refused_changed = Signal()
    empty_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.minimum_alias = ""
        self._watch_empty()
        self._watch_refusals()

    def validate(self, text: str, pos: int) -> object:
        """As ``QSpinBox.validate``, and the special value's names (:meth:`_special_names`) taken as typed, letter
        by letter; a text of digits it finds invalid (too large or too small) is recorded."""
        typed = self._typed(text).lower()
        if typed and any(name.startswith(typed) for name in self._special_names()):
            complete = typed in self._special_names()
            return QValidator.State.Acceptable if complete else QValidator.State.Intermediate, text, pos
        result = super().validate(text, pos)
        self._note_refusal(result, text)
        return result

    def valueFromText(self, text: str) -> int:  # noqa: N802 - Qt override
        """As ``QSpinBox.valueFromText``; a name of the special value (or the minimum's alias) typed stands for the
        minimum."""
        if self._typed(text).lower() in self._special_names():
            return self.minimum()
        return super().valueFromText(text)

    def _special_names(self) -> tuple[str, ...]:
        """The special value text and its first word, lower case ("auto (system prompt)", "auto"), and the
        :attr:`minimum_alias`; none without either."""
        special = self.specialValueText().strip().lower()
        alias = (self.minimum_alias,) if self.minimum_alias else ()
        return ((special, special.split()[0]) if special else ()) + alias
