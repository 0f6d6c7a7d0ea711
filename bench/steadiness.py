"""Decode speed beside other programs: SpecChat and openvino-genai under the same background load, side by side.

    .venv/bin/python bench/steadiness.py --out bench/results/MACHINE        # about 3 minutes on 2 cores

A desktop app always runs beside other programs, and the quick bench's ratio to openvino-genai moved more between
runs than the gap it measured. This measures both engines in one process, on the default 4-bit model, taking
turns round by round (greedy, EOS ignored, ``--tokens`` new tokens after the speed benchmark's 32-token prompt),
under each background load in turn:

* **quiet**: nothing else running (as far as this script knows: run it on an otherwise idle machine);
* **one busy core**: one process spinning in a loop at normal priority (a browser tab, a build);
* **two busy cores, niced**: two such processes at nice 10 (background jobs that yield to anything else).

A third row runs SpecChat's model compiled with its threads pinned to cores (``ENABLE_CPU_PINNING``, OpenVINO's
default; SpecChat turns it off, ``devices.base_properties``): a pinned thread cannot leave a core another program
keeps busy.

Per engine and load: the median time per output token over all decode steps (the first token excluded), its 90th
and 99th percentiles, the spread of the rounds' medians ((max - min) / median), and the slowdown against the same
engine when quiet. If SpecChat's ratio to genai moved for reasons of its own (Python work between steps, its
threads), its slowdown and spread under load would exceed genai's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

#: Background loads: name -> (busy processes, their nice value).
LOADS = {"quiet": (0, 0), "one busy core": (1, 0), "two busy cores, niced": (2, 10)}


def summarize(rounds: list[np.ndarray]) -> dict:
    """Milliseconds per output token of one engine under one load, from each round's intervals between streamed
    tokens (float ms ``[tokens - 1]``): ``median``, ``p90``, ``p99`` over every interval, and ``spread``, (max - min)
    / median of the rounds' medians."""
    every = np.concatenate(rounds)
    medians = np.asarray([np.median(r) for r in rounds])
    return {"median": float(np.median(every)), "p90": float(np.percentile(every, 90)),
            "p99": float(np.percentile(every, 99)),
            "spread": float((medians.max() - medians.min()) / np.median(medians))}


class Busy:
    """``count`` processes spinning at nice ``nice`` while in the ``with`` block."""

    def __init__(self, count: int, nice: int):
        self.count, self.nice, self.processes = count, nice, []

    def __enter__(self):
        for _ in range(self.count):
            self.processes.append(subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(self.nice)))
        time.sleep(0.5)  # let them reach the scheduler's steady state
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()


def engines(model: Path, prompt: list[int], tokens: int) -> dict:
    """Engine name -> a function that generates ``tokens`` tokens after ``prompt`` and returns the intervals
    between streamed tokens (float ms ``[tokens - 1]``)."""
    import openvino as ov
    import openvino_genai as og

    from inference.devices import base_properties, core
    from inference.engine import Engine
    from inference.events import TextDelta
    from inference.precision import PrecisionSettings
    from inference.settings import ContextSettings, GenerationSettings, SamplingSettings

    engine = Engine.load(model, "CPU")
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0, max_new_tokens=tokens, ignore_eos=True),
                                  context=ContextSettings(n_ctx=4096))

    def run(on: Engine) -> np.ndarray:
        on.reset()
        times = [time.perf_counter() for event in on.generate(prompt, settings) if isinstance(event, TextDelta)]
        return np.diff(times) * 1e3

    # the same model compiled with OpenVINO's threads pinned to cores (its default, which SpecChat turns off)
    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU"), "ENABLE_CPU_PINNING": True}
    pinned = Engine(dataclasses.replace(engine.target, compiled=core().compile_model(engine.target.ir_model, "CPU",
                                                                                     properties)))

    pipe = og.LLMPipeline(str(model), "CPU")
    config = og.GenerationConfig()
    config.max_new_tokens = tokens
    config.ignore_eos = True
    ids = np.asarray([prompt], dtype=np.int64)
    inputs = og.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))

    def genai() -> np.ndarray:
        times = []
        pipe.generate(inputs, config, lambda token: times.append(time.perf_counter()) or False)
        return np.diff(times) * 1e3

    return {"SpecChat": lambda: run(engine), "openvino-genai": genai,
            "SpecChat, threads pinned": lambda: run(pinned)}


def markdown(report: dict) -> str:
    lines = [
        "# Decode speed beside other programs", "",
        f"- Machine: {report['machine']}",
        f"- Command: `{report['command']}` at commit {report['commit']}, finished {report['finished']} after "
        f"{report['minutes']} min; {report['rounds']} rounds of {report['tokens']} tokens per engine and load, the "
        "engines taking turns.", "",
        "| load | engine | ms per token (median) | p90 | p99 | spread of round medians | slowdown vs quiet |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for load, per_engine in report["results"].items():
        for engine, cell in per_engine.items():
            slowdown = cell["median"] / report["results"]["quiet"][engine]["median"]
            lines.append(f"| {load} | {engine} | {cell['median']:.1f} | {cell['p90']:.1f} | {cell['p99']:.1f} | "
                         f"{cell['spread']:.2f} | {slowdown:.2f}x |")
    lines += ["", "SpecChat / openvino-genai, median ms per token: " + ", ".join(
        f"{load} {cells['SpecChat']['median'] / cells['openvino-genai']['median']:.2f}"
        for load, cells in report["results"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--model", type=Path, help="model folder (default: the installed 4-bit default model)")
    args = parser.parse_args(argv)
    from provenance import run_stamp, write_result
    from speed import build_prompts

    if args.model is None:
        from inference.models.default_model import ensure_default_model

        args.model = ensure_default_model(4)
    started = time.time()
    prompt = next(w for w in build_prompts(str(args.model)) if w["input"] == 32)["ids"]
    runners = engines(args.model, prompt, args.tokens)
    for run in runners.values():  # warm-up: first passes of a compiled model run slower
        run()
    results = {}
    for load, (count, nice) in LOADS.items():
        rounds: dict[str, list[np.ndarray]] = {engine: [] for engine in runners}
        with Busy(count, nice):
            for index in range(args.rounds):
                order = list(runners) if index % 2 == 0 else list(reversed(runners))
                for engine in order:
                    rounds[engine].append(runners[engine]())
        results[load] = {engine: summarize(values) for engine, values in rounds.items()}
        print(f"{load}: " + ", ".join(f"{e} {c['median']:.1f} ms" for e, c in results[load].items()), file=sys.stderr)
    report = {**run_stamp("steadiness.py", argv, started), "rounds": args.rounds, "tokens": args.tokens,
              "results": results}
    write_result(args.out, "steadiness", report, markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
