"""Which command, at which commit, made a benchmark result: stamped into speed.json / quality.json."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def current_commit() -> str:
    """Short hash of HEAD, with ``+changes`` when the working tree differs from it ('' outside git)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "inference", "bench/*.py"], capture_output=True, text=True, cwd=HERE.parent).stdout.strip()
    return f"{commit}+changes" if commit and dirty else commit


def command_line(script: str, argv: list[str] | None) -> str:
    """How a benchmark script was invoked, e.g. ``bench/.venv/bin/python bench/run.py --full``."""
    return " ".join(["bench/.venv/bin/python", f"bench/{script}", *(argv if argv is not None else sys.argv[1:])])


def stamp(results: dict, command: str, started: float) -> dict:
    """Add ``results["provenance"]``: command, commit, finish time (UTC) and minutes since ``started`` (time.time())."""
    results["provenance"] = {
        "commit": current_commit(), "command": command, "minutes": round((time.time() - started) / 60, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    return results


def describe(results: dict, path: Path) -> str:
    """One line saying how a result file was made (or only when, for files made before stamping existed)."""
    record = results.get("provenance")
    if record:
        return f"`{record['command']}` at commit {record['commit']}, finished {record['finished']} after {record['minutes']} min"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
    return f"`{path.name}` written {when} (by a run that did not record its command)"
