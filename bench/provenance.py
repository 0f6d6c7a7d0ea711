"""Which command, at which commit, on which CPU and precision, made a benchmark result: stamped into speed.json /
quality.json and the report header."""

from __future__ import annotations

import os
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


# CPU features that decide OpenVINO's kernels and default precision (bf16 where avx512_bf16 or AMX is present).
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    """The ISA_FLAGS this CPU has (from /proc/cpuinfo; [] elsewhere)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return [flag for flag in ISA_FLAGS if flag in flags]


def cpu_name() -> str:
    """The CPU's model name and core count, e.g. ``AMD EPYC, 2 cores`` (from /proc/cpuinfo; "unknown CPU" elsewhere)."""
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
    except OSError:
        return "unknown CPU"
    return f"{names[0]}, {len(names)} cores" if names else "unknown CPU"


def run_stamp(script: str, argv: list[str] | None, started: float) -> dict:
    """Where a result comes from, for its JSON and report header: ``machine`` (CPU name and ISA flags), ``command``
    (``python bench/SCRIPT`` with ``argv``, or this process's arguments when None), ``commit``, ``finished`` (UTC)
    and ``minutes`` since ``started`` (a ``time.time()`` value). A run with ``ONEDNN_MAX_CPU_ISA`` set (e.g. ``AVX2``:
    OpenVINO's CPU plugin then picks the kernels of an AVX2-only CPU, ``brgemm_avx2_f32``, on a CPU with AVX-512)
    says so in both."""
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    return {
        "machine": f"{cpu_name()}; {', '.join(cpu_flags())}"
        + (f"; OpenVINO's kernels capped at {capped} (ONEDNN_MAX_CPU_ISA)" if capped else ""),
        "command": (f"ONEDNN_MAX_CPU_ISA={capped} " if capped else "") + f"python bench/{script} "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": current_commit(), "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "minutes": round((time.time() - started) / 60, 1),
    }

def write_result(out: Path, stem: str, result: dict, report: str) -> None:
    """Write a benchmark's ``result`` as ``OUT/STEM.json`` and its Markdown ``report`` as ``OUT/STEM.md`` (the stem
    upper-cased, e.g. ``free_chat.json`` and ``FREE_CHAT.md``), creating ``out``."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{stem.upper()}.md").write_text(report)

def precisions() -> dict:
    """What the engine computes in by default, what OpenVINO's CPU plugin would choose by itself, and what the CPU
    computes natively, as read back from OpenVINO (the default model is compiled both ways)."""
    sys.path.insert(0, str(HERE.parent))
    from inference.devices import native_precisions
    from inference.model import load_model
    from inference.models.default_model import ensure_default_model
    from inference.precision import PrecisionSettings

    folder = ensure_default_model(4)
    return {
        "specchat_default": load_model(folder, "CPU", PrecisionSettings()).precision.describe(),
        "openvino_cpu_default": load_model(folder, "CPU").precision.describe(),
        "native": native_precisions("CPU"),
    }


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
