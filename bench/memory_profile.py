"""Where a decode worker's memory goes: resident memory at each stage of a reply, SpecChat against openvino-genai.

    .venv/bin/python bench/memory_profile.py --out bench/results/MACHINE      # about 2 minutes on 2 cores

Resident memory never shrinks back to what it was, so every configuration and workload runs in a fresh process
(this script again, with ``--child``), greedy with EOS ignored, on the default 4-bit model and the speed
benchmark's prompts (``speed.build_prompts``: a 32-token and a 1,024-token ChatML prompt, 32 new tokens). A child
reads its VmRSS after the imports, after the model is loaded, at the first token (the prefill done), after the
first decode step and at the end of the reply, and VmHWM (the peak) at the end.

Configurations, each SpecChat one differing from the row above it in one thing:

* **SpecChat**: its default (``PrecisionSettings()``: exact f32 decode with an f32 KV cache; a bf16 copy of the
  model prefills long prompts where the CPU computes bf16 natively, ``kv_cache.py``);
* **no fast prefill**: the same, without the bf16 copy (``fast_prefill="off"``);
* **OpenVINO's precision**: also OpenVINO's own CPU numerics (bf16 compute where native, u8 KV cache, dynamic
  quantization): not exact, the precision openvino-genai runs at, so the rows above it show what exactness costs;
* **openvino-genai**: ``LLMPipeline`` on the same IR, its defaults (the issue's bar).

The report ends with an account: the gap to openvino-genai's peak split into the fast-prefill copy, the exact
numerics, and the rest (the engine and its process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CONFIGS = {
    "specchat": {"label": "SpecChat (default: exact, bf16 fast-prefill copy where native)", "precision": {}},
    "no-fast-prefill": {"label": "SpecChat without the fast-prefill copy", "precision": {"fast_prefill": "off"}},
    "openvino-precision": {
        "label": "SpecChat at OpenVINO's precision (not exact)",
        "precision": {"fast_prefill": "off", "inference": "native", "kv_cache": "u8", "dynamic_quantization": "on"},
    },
    "genai": {"label": "openvino-genai LLMPipeline", "precision": None},
}
WORKLOADS = ("in32_out32", "in1024_out32")
STAGES = ("imports", "loaded", "first_token", "first_decode_step", "reply_done")


def resident_mb() -> dict[str, float]:
    """This process's ``VmRSS`` and ``VmHWM`` (peak) from /proc/self/status, in MiB.

    Raises:
        OSError: not Linux (no /proc).
    """
    values = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def child(config: str, model: Path, ids: list[int], new_tokens: int) -> dict:
    """One reply of ``new_tokens`` tokens to ``ids`` in this process; MiB of resident memory per stage."""
    stages = {}
    if CONFIGS[config]["precision"] is None:
        import numpy as np
        import openvino as ov
        import openvino_genai as og

        stages["imports"] = resident_mb()["VmRSS"]
        pipe = og.LLMPipeline(str(model), "CPU")
        stages["loaded"] = resident_mb()["VmRSS"]
        generation = og.GenerationConfig()
        generation.max_new_tokens = new_tokens
        generation.ignore_eos = True
        tokens = []

        def on_token(token) -> bool:
            tokens.append(token)
            if len(tokens) <= 2:
                stages[STAGES[1 + len(tokens)]] = resident_mb()["VmRSS"]
            return False  # go on

        array = np.asarray([ids], dtype=np.int64)
        pipe.generate(og.TokenizedInputs(ov.Tensor(array), ov.Tensor(np.ones_like(array))), generation, on_token)
    else:
        from inference.devices import device_computes
        from inference.engine import Engine
        from inference.events import TextDelta
        from inference.model import load_model
        from inference.precision import PrecisionSettings
        from inference.settings import ContextSettings, GenerationSettings, SamplingSettings

        stages["imports"] = resident_mb()["VmRSS"]
        precision = dict(CONFIGS[config]["precision"])
        if precision.get("inference") == "native":  # OpenVINO's CPU default: bf16 where the CPU computes it
            precision["inference"] = "bf16" if device_computes("CPU", "bf16") else "f32"
        loaded = load_model(model, "CPU", PrecisionSettings(**precision))
        engine = Engine(loaded)
        stages["loaded"] = resident_mb()["VmRSS"]
        settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0, max_new_tokens=new_tokens,
                                                                ignore_eos=True), context=ContextSettings(n_ctx=4096))
        count = 0
        for event in engine.generate(ids, settings):
            if isinstance(event, TextDelta):
                count += 1
                if count <= 2:
                    stages[STAGES[1 + count]] = resident_mb()["VmRSS"]
    memory = resident_mb()
    stages["reply_done"] = memory["VmRSS"]
    return {"stages": stages, "peak": memory["VmHWM"]}


def account(results: dict) -> dict[str, dict[str, float]]:
    """Per workload, the gap between SpecChat's peak and openvino-genai's, split by configuration step: what the
    fast-prefill copy, the exact numerics and the rest (engine and process) each add, in MiB (negative: less)."""
    split = {}
    for workload in WORKLOADS:
        peak = {config: results[config][workload]["peak"] for config in CONFIGS}
        split[workload] = {
            "gap": peak["specchat"] - peak["genai"],
            "fast-prefill copy": peak["specchat"] - peak["no-fast-prefill"],
            "exact numerics": peak["no-fast-prefill"] - peak["openvino-precision"],
            "engine and process": peak["openvino-precision"] - peak["genai"],
        }
    return split


def markdown(report: dict) -> str:
    results = report["results"]
    lines = [
        "# Where the memory goes (resident memory of one decode worker)", "",
        f"- Machine: {report['machine']}",
        f"- Command: `{report['command']}` at commit {report['commit']}, finished {report['finished']} after "
        f"{report['minutes']} min.",
        "- Each cell: one fresh process, greedy, EOS ignored, MiB of VmRSS at each stage; peak = VmHWM.", "",
        "| configuration | workload | imports | loaded | first token | first decode step | reply done | peak |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for config, spec in CONFIGS.items():
        for workload in WORKLOADS:
            cell = results[config][workload]
            stages = " | ".join(f"{cell['stages'].get(stage, float('nan')):.0f}" for stage in STAGES)
            lines.append(f"| {spec['label']} | {workload} | {stages} | **{cell['peak']:.0f}** |")
    lines += ["", "Account of SpecChat's peak against openvino-genai's, MiB (each step: the row's configuration "
              "against the next one's):", "",
              "| workload | gap | fast-prefill copy | exact numerics | engine and process |",
              "| --- | --- | --- | --- | --- |"]
    for workload, split in report["account"].items():
        lines.append(f"| {workload} | {split['gap']:+.0f} | {split['fast-prefill copy']:+.0f} | "
                     f"{split['exact numerics']:+.0f} | {split['engine and process']:+.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--model", type=Path, help="model folder (default: the installed 4-bit default model)")
    parser.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model is None:
        from inference.models.default_model import ensure_default_model

        args.model = ensure_default_model(4)
    from speed import build_prompts

    workloads = {w["name"]: w for w in build_prompts(str(args.model))}
    if args.child:
        workload = workloads[args.workload]
        print(json.dumps(child(args.child, args.model, workload["ids"], workload["output"])))
        return 0
    from provenance import run_stamp, write_result

    started = time.time()
    results: dict = {config: {} for config in CONFIGS}
    for workload in WORKLOADS:
        for config in CONFIGS:
            command = [sys.executable, __file__, "--child", config, "--workload", workload, "--model", str(args.model)]
            run = subprocess.run(command, capture_output=True, text=True, check=True)
            results[config][workload] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{config} {workload}: peak {results[config][workload]['peak']:.0f} MiB", file=sys.stderr)
    report = {**run_stamp("memory_profile.py", argv, started), "results": results}
    report["account"] = account(results)
    write_result(args.out, "memory_profile", report, markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
