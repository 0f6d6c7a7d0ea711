"""JSON that others wrote (a remote server's answers, a client's request, an imported file), parsed with its
nesting bounded: Python's parser recurses once per level, so a body of a few kilobytes of ``[`` raises
RecursionError, and a value nested a few hundred levels deep makes every recursive walk over it (``json.dumps``,
pydantic, our own checks) a hazard. :func:`loads` turns both into the ``ValueError`` a parse error is.
"""

from __future__ import annotations

import json
from typing import Any


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when lists/dicts in ``value`` nest deeper than ``limit`` levels (checked without recursion, so any
    depth ``json.loads`` returned is measured safely)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class TooDeep(ValueError):
    """Valid JSON whose lists and objects nest deeper than the limit its message names."""


def loads(data: str | bytes, max_depth: int) -> Any:
    """``json.loads(data)``, refused when its lists and objects nest more than ``max_depth`` levels.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``), bytes that are not UTF-8 (``UnicodeDecodeError``), or nested
            too deeply (``TooDeep``, a ``ValueError`` whose message says "nested more than N levels deep").
    """
    try:
        value = json.loads(data)
    except RecursionError:
        value = None
        too_deep = True
    else:
        too_deep = depth_exceeds(value, max_depth)
    if too_deep:
        raise TooDeep(f"nested more than {max_depth} levels deep")
    return value
