"""Issue 33's memory and TTFT bars in one run: peak RSS, TTFT and decode tokens/s of SpecChat against openvino-genai on
the default 4-bit model, each engine x workload in a fresh process.

    .venv/bin/python bench/memory_bar.py --out bench/results/MACHINE                   # ~1.5 minutes on 2 cores
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python bench/memory_bar.py --out DIR             # as on an AVX2-only CPU

The quick bench's method without its extras (``bench/speed.py``'s runners, prompts and warm-up; no llama.cpp): a
child process loads one engine (SpecChat at its defaults, or with ``--specchat KEY=VALUE`` precision fields; genai's
``LLMPipeline`` as the quick bench builds it), generates 8 tokens of the warm-up prompt, then ``--reps`` greedy
replies (EOS ignored) to one workload's prompt (32 or 1,024 tokens, 32 new tokens). Reported per child: the peak
resident memory of the whole process, loading included (``VmHWM``, MiB; the quick bench's worker peak), the resident
memory after the last reply (``VmRSS``), and medians of TTFT (ms) and decode tokens/s over the replies.
``ONEDNN_MAX_CPU_ISA`` in the environment goes to every child and into the report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from memory_profile import resident_mb  # noqa: E402

WORKLOADS = ("in32_out32", "in1024_out32")
#: openvino-genai's properties under ONEDNN_MAX_CPU_ISA: f32 compute, as on a CPU without bf16, and no dynamic
#: quantization, which finds no int8 kernel on an AVX2 CPU (issue 33). Its defaults on this CPU (bf16, dynamic
#: quantization 32) fail to compile under the cap ("could not create a primitive descriptor"); f32 alone too.
GENAI_CAPPED = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
ENGINES = ("specchat", "genai")


def capped() -> str:
    """``ONEDNN_MAX_CPU_ISA`` from the environment ("" when OpenVINO's kernels are not capped)."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "")


def child(engine: str, precision: dict, workload: dict, warmup: list[int], reps: int, paths: dict) -> dict:
    """Load ``engine``, warm it up, run ``workload`` ``reps`` times; the peak and final MiB, TTFT and tokens/s."""
    import speed

    if engine == "specchat":
        runner_class = type("Runner", (speed.SpecChatRunner,), {"precision_fields": precision})
    else:  # capped: GENAI_CAPPED
        runner_class = type("Runner", (speed.GenaiRunner,), {"properties": GENAI_CAPPED if capped() else {}})
    started = time.perf_counter()
    runner = runner_class(paths, "ar")
    load_s = time.perf_counter() - started
    loaded = resident_mb()["VmRSS"]
    runner.run(warmup, 8)
    runs = [runner.run(workload["ids"], workload["output"]) for _ in range(reps)]
    memory = resident_mb()
    described = runner.engine.target.precision.describe() if engine == "specchat" else "openvino-genai defaults"
    return {"peak_mb": memory["VmHWM"], "loaded_mb": loaded, "final_mb": memory["VmRSS"], "load_s": load_s,
            "ttft_ms": statistics.median(r["ttft_ms"] for r in runs),
            "decode_tokens_per_s": statistics.median(r["decode_tokens_per_s"] for r in runs),
            "first_step_ms": statistics.median(first_step_ms(r) for r in runs),
            "steady_tokens_per_s": statistics.median(1e3 / r["steady_tpot_ms"] for r in runs),
            "ttft_all_ms": [r["ttft_ms"] for r in runs], "precision": described,
            "token_ids": runs[0]["token_ids"]}


def first_step_ms(run: dict) -> float:
    """The first decode step's ms of one reply (``speed.TokenClock.metrics``: all ``new_tokens - 1`` decode steps at
    ``tpot_ms``, the last ``new_tokens - 2`` at ``steady_tpot_ms``)."""
    steps = run["new_tokens"] - 1
    return run["tpot_ms"] * steps - run["steady_tpot_ms"] * (steps - 1)


def markdown(report: dict) -> str:
    lines = [f"# Peak memory and TTFT against openvino-genai ({report['label']})", "",
             f"- Machine: {report['machine']}",
             f"- Command: `{report['command']}` at commit {report['commit']}, finished {report['finished']} after "
             f"{report['minutes']} min.",
             f"- Each row: one fresh process per engine and workload, warm-up, then {report['reps']} greedy replies "
             "of 32 tokens; peak = VmHWM of the process (loading included), MiB; TTFT and decode tokens/s medians.",
             f"- SpecChat: {report['precision']}", "",
             "| workload | SpecChat peak MiB | genai peak MiB | ratio | SpecChat TTFT ms | genai TTFT ms | ratio | "
             "SpecChat tok/s | genai tok/s | ratio | first decode step ms, SpecChat / genai | steady tok/s after it, "
             "SpecChat / genai | SpecChat RSS after, MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload in WORKLOADS:
        ours, theirs = report["results"]["specchat"][workload], report["results"]["genai"][workload]
        if "error" in theirs or "error" in ours:
            lines.append(f"| {workload} | {ours.get('error', '')} | {theirs.get('error', '')} |")
            continue
        lines.append(
            f"| {workload} | {ours['peak_mb']:.0f} | {theirs['peak_mb']:.0f} | {ours['peak_mb'] / theirs['peak_mb']:.2f} "
            f"| {ours['ttft_ms']:.0f} | {theirs['ttft_ms']:.0f} | {ours['ttft_ms'] / theirs['ttft_ms']:.2f} "
            f"| {ours['decode_tokens_per_s']:.1f} | {theirs['decode_tokens_per_s']:.1f} "
            f"| {ours['decode_tokens_per_s'] / theirs['decode_tokens_per_s']:.2f} "
            f"| {ours['first_step_ms']:.1f} / {theirs['first_step_ms']:.1f} "
            f"| {ours['steady_tokens_per_s']:.1f} / {theirs['steady_tokens_per_s']:.1f} | {ours['final_mb']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for memory_bar[-LABEL].json/.md (default: print only)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--specchat", nargs="*", default=[], metavar="KEY=VALUE",
                        help="PrecisionSettings fields for SpecChat (default: none, its defaults)")
    parser.add_argument("--label", default="", help="suffix of the result files, e.g. capped-avx2")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import speed

    precision = dict(item.split("=", 1) for item in args.specchat)
    paths = {"target": str(__import__("inference.models.default_model", fromlist=["x"]).ensure_default_model(4))}
    workloads = {w["name"]: w for w in speed.build_prompts(paths["target"])}
    warmup = speed.exact_prompt_encoder(paths["target"])(speed.WARMUP_TEXT * 4, 48)
    if args.child:
        engine, workload = args.child
        print(json.dumps(child(engine, precision, workloads[workload], warmup, args.reps, paths)))
        return 0
    from provenance import run_stamp, write_result

    started = time.time()
    results: dict = {engine: {} for engine in ENGINES}
    for workload in WORKLOADS:
        for engine in ENGINES:
            command = [sys.executable, __file__, "--child", engine, workload, "--reps", str(args.reps),
                       "--specchat", *args.specchat]
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode:
                results[engine][workload] = {"error": f"exit {run.returncode}: " + run.stderr.strip()[-300:]}
            else:
                results[engine][workload] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{engine} {workload}: {json.dumps({k: v for k, v in results[engine][workload].items() if k != 'token_ids'})}",
                  file=sys.stderr)
    report = {**run_stamp("memory_bar.py", argv, started), "reps": args.reps, "results": results,
              "label": (f"OpenVINO capped at {capped()}, genai {GENAI_CAPPED}" if capped() else "native") + (f", SpecChat {precision}" if precision else ""),
              "precision": results["specchat"][WORKLOADS[0]].get("precision", "")}
    text = markdown(report)
    if args.out:
        write_result(args.out, "memory_bar" + (f"-{args.label}" if args.label else ""), report, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
