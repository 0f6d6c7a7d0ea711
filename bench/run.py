"""One entry point for the benchmark report: speed against peers, and quality.

    bench/setup.sh                      # once: peers (llama-cpp-python compiles ~8 min), matplotlib, psutil
    bench/.venv/bin/python bench/run.py          # quick: 8 minutes on a quiet 2-core AMD EPYC (AVX2)
    bench/.venv/bin/python bench/run.py --full   # the report's sizes: every workload in every mode, 20,000 tokens

Writes ``bench/results/REPORT.md`` with the PNG plots and raw JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def machine_description() -> str:
    """CPU model, cores, memory, OS and library versions: absolute numbers mean nothing without it."""
    import openvino
    import openvino_genai
    from provenance import cpu_flags

    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = f"{names[0] if names else cpu}, {len(names)} cores ({', '.join(cpu_flags()) or 'no AVX2'})"
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total_kb = int(meminfo.read_text().split()[1])
        memory = f", {total_kb / 2**20:.0f} GiB RAM"
    return (
        f"{cpu}{memory}; {platform.system()} {platform.release()}; Python {platform.python_version()}; "
        f"openvino {openvino.__version__}; openvino-genai {openvino_genai.__version__}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the report's sizes: every engine x mode x workload, optimum-intel included, fresh workers per repetition, 20,000-token long run and text, 50 greedy prompts (default: the quick run)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each speed measurement (medians reported)")
    parser.add_argument("--skip-speed", action="store_true", help="do not measure speed (reuse speed.json if present)")
    parser.add_argument("--skip-quality", action="store_true", help="do not measure quality (reuse quality.json if present)")
    parser.add_argument("--long-tokens", type=int, help="speed long-run length (default: 20,000 with --full, else 1,000)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from provenance import command_line, current_commit, describe, precisions, stamp
    from quality import quality_markdown, run_quality
    from speed import run_speed, speed_markdown

    command = command_line("run.py", argv)
    sections, provenance = [], []
    for name, skip in (("speed", args.skip_speed), ("quality", args.skip_quality)):
        path = args.out / f"{name}.json"
        if not skip:
            section_started = time.time()
            if name == "speed":
                results = run_speed(quick=not args.full, reps=args.reps, out_dir=args.out, long_tokens=args.long_tokens)
            else:
                results = run_quality(full=args.full, out_dir=args.out)
            path.write_text(json.dumps(stamp(results, command, section_started), indent=2))
        elif not path.exists():
            continue
        results = json.loads(path.read_text())
        sections.append((speed_markdown if name == "speed" else quality_markdown)(results))
        provenance.append(f"- {name.capitalize()}: {describe(results, path)}")
    machine = machine_description()
    precision = precisions()
    header = [
        "# SpecChat benchmark report",
        "",
        f"- Machine: {machine}",
        f"- Precision: SpecChat computes {precision['specchat_default']}; OpenVINO's CPU plugin by itself would "
        f"choose {precision['openvino_cpu_default']}; this CPU computes {', '.join(precision['native'])} natively.",
        *provenance,
        "- Ratios compare runs made within the same benchmark run (see each section); absolute numbers hold only for this machine.",
        "- Reproduce: `bench/setup.sh` then `bench/.venv/bin/python bench/run.py [--full]`.",
        "",
    ]
    report = "\n".join(header) + "\n" + "\n".join(sections)
    (args.out / "REPORT.md").write_text(report, encoding="utf-8")
    (args.out / "run.json").write_text(
        json.dumps({"machine": machine, "precision": precision, "commit": current_commit(), "command": command}, indent=2)
    )
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
