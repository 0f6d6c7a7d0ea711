"""Python string offsets (code points) as Qt text positions (UTF-16 code units).

Draft spans are stored as offsets of Python strings, which count code points; ``QTextCursor.setPosition`` counts
UTF-16 code units, in which every character outside the Basic Multilingual Plane (most emoji, CJK extension B)
takes two. Without this conversion every highlight after such a character lands one letter further left per
character ("🐱🎉 loyalty is" marked "loyalt**y i**s").
"""

from __future__ import annotations


def qt_positions(text: str, offsets: list[int]) -> list[int]:
    """The Qt positions of ``offsets`` (code-point offsets into ``text``, each clamped to ``[0, len(text)]``), in the
    same order: each offset plus the number of characters above U+FFFF before it."""
    wide_before = [0] * (len(text) + 1)
    count = 0
    for index, character in enumerate(text):
        wide_before[index] = count
        count += ord(character) > 0xFFFF
    wide_before[len(text)] = count
    positions = []
    for offset in offsets:
        clamped = max(0, min(offset, len(text)))
        positions.append(clamped + wide_before[clamped])
    return positions
