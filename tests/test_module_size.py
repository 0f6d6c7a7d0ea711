"""No module of ``app/`` or ``inference/`` is over 600 lines without a reason at its top: its module docstring has a
sentence starting "Why one module of ~N lines:", N within 10% of its line count (the team's rule: a large module
with several jobs is split along its seams; one kept whole says why)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "inference")
LIMIT = 600
REASON = re.compile(r"Why one module of ~(\d+) lines:")


def test_large_modules_say_why_they_are_one_module():
    problems = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines = len(text.splitlines())
            if lines <= LIMIT:
                continue
            name = path.relative_to(REPO).as_posix()
            docstring = ast.get_docstring(ast.parse(text)) or ""
            match = REASON.search(" ".join(docstring.split()))
            if match is None:
                problems.append(
                    f"{name} has {lines} lines (over {LIMIT}): split it along its seams, or start a sentence of its "
                    f'module docstring with "Why one module of ~{lines} lines:" and say what single job it has'
                )
            elif abs(int(match.group(1)) - lines) > lines * 0.1:
                problems.append(
                    f"{name} has {lines} lines but its docstring says ~{match.group(1)}: update the count in "
                    f'"Why one module of ~N lines:" (and check the reason still holds)'
                )
    assert not problems, "\n".join(problems)
