"""The model store's exceptions, in one module that imports nothing of the store.

Every module of :mod:`inference.models` raises these; keeping them apart lets any two modules share them
without importing each other. The hierarchy: :class:`ModelFetchError` (the default model cannot be fetched or
built) > :class:`ModelImportError` (a model cannot be imported, downloaded or converted) >
:class:`OperationCancelled` (the user stopped it), so a caller that catches the first catches all three.
Messages say what went wrong and what to do; callers show them as they are.
"""

from __future__ import annotations


class ModelFetchError(RuntimeError):
    """The default model could not be fetched or built; the message says why and what to do."""


class ModelImportError(ModelFetchError):
    """A model cannot be imported, downloaded or converted; the message says why and what to do."""


class OperationCancelled(ModelImportError):
    """The user cancelled a download, import or conversion; nothing was left in the store."""
