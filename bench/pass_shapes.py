"""What a target pass costs after a pass of another width, and a draft-head pass after a target pass.

    .venv/bin/python bench/pass_shapes.py --out bench/results/MACHINE      # about 2 minutes on 2 cores

Speculative decoding changes the number of tokens a target pass reads (1 for a plain step, K + 1 to verify K
drafts). OpenVINO's CPU plugin compiles the model with dynamic shapes, and a pass whose token count differs from the
previous pass's re-derives every node's shapes and memory before it runs; the nodes' own times do not change
(``PERF_COUNT``), the pass's wall time does. This measures, on the default 4-bit model as the engine loads it
(exact f32 decode, hidden states exposed, q/k/v and gate/up fused), after a 64-token prompt, medians over
``--passes`` passes (the first 5 dropped), every pass rolled back so the context stays the same:

* **target, same width**: passes over n tokens, one after another (n = 1..4), the cost a fixed-K decoding pays;
* **target, alternating**: passes over 1 and n tokens in turns, each one's wall time: what a decoding that
  switches between plain steps and K + 1-token verification pays;
* **draft head**: a one-token pass of the shipped head alone, one after another, and right after a one-token
  target pass (as in decoding: the target's 100 MB of weights have just gone through the caches);
* **where a wider pass spends its time** (``--profile``): the same graph compiled again with ``PERF_COUNT``, passes
  of each width one after another, each node's time per pass grouped by what computes it: each of SpecChat's ops
  (``Q4F32Layer``: a layer's o projection to its MLP; ``Q4F32MatMul``: q/k/v; ``Q8F32MatMul``: the LM head; when
  the kernels are on, ``inference.q4_kernels``), OpenVINO's attention (SDPA), everything else; and the wall time
  beyond the nodes' sum (the inference call and the engine's Python).

``--widths`` sets the widths (default 1-4; 5 is a prompt-lookup verification at K = 4). Which kernels and precision
ran is in the header. Writes ``OUT/pass_shapes.json`` and ``OUT/PASS_SHAPES.md``.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fc_profile import _node_totals, counted_cache  # noqa: E402
from provenance import run_stamp, write_result  # noqa: E402

from inference.devices import base_properties, core  # noqa: E402
from inference.draft_head import load_head  # noqa: E402
from inference.fusion import fuse_shared_input_products  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import HIDDEN_STATES, _compute_only_last_logits, _expose_hidden_states, load_model  # noqa: E402
from inference.models.default_head import default_head_dir  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.q4_kernels import use_kernels  # noqa: E402
from inference.rope import RopeParameters  # noqa: E402

PROMPT = list(range(1000, 1064))
DROPPED = 5


class Passes:
    """Timed passes of one KV cache over random tokens, each rolled back to the prompt."""

    def __init__(self, cache: KVCache, inputs=None):
        self.cache, self.inputs = cache, inputs
        self.base = len(cache)
        self.rng = np.random.default_rng(0)

    def run(self, width: int) -> float:
        """One pass over ``width`` tokens; its wall time in ms."""
        ids = [int(t) for t in self.rng.integers(2000, 9000, width)]
        inputs = {name: np.repeat(value, width, axis=1) for name, value in (self.inputs or {}).items()}
        start = time.perf_counter()
        self.cache.forward(ids, inputs=inputs or None)
        elapsed = (time.perf_counter() - start) * 1e3
        self.cache.truncate(self.base)
        if self.cache.physical_length > self.base + 32:
            self.cache.compact()
        return elapsed


def medians(pattern: list[tuple[Passes, int]], passes: int) -> list[float]:
    """Run ``pattern`` (cache, width) in turns ``passes`` times; the median ms of each of its positions."""
    times = [[] for _ in pattern]
    for index in range(passes):
        for slot, (runner, width) in enumerate(pattern):
            elapsed = runner.run(width)
            if index >= DROPPED:
                times[slot].append(elapsed)
    return [round(statistics.median(values), 2) for values in times]


def measure(passes: int, widths: list[int], head: bool = True) -> dict:
    """The target's same-width and alternating passes at each width and, where ``head``, the draft head's pass."""
    loaded = load_head(default_head_dir()) if head else None
    layers = loaded.feature_layers if loaded else ()  # a fused head reads these layers' outputs: the target keeps them
    target_model = load_model(ensure_default_model(4), "CPU", PrecisionSettings(), feature_layers=layers)
    target_cache = KVCache(target_model.compiled, target_model.rope,
                           kept_outputs=loaded.target_outputs if loaded else (HIDDEN_STATES,))
    target_cache.forward(PROMPT)
    target = Passes(target_cache)
    rows = []
    for width in widths:
        same = medians([(target, width)], passes)[0]
        one_after, width_after = medians([(target, 1), (target, width)], passes) if width > 1 else (same, same)
        rows.append({"width": width, "same_ms": same, "alternating_ms": width_after, "one_token_alternating_ms": one_after})
    result = {"target": rows, "kernels": target_model.kernels.describe(), "precision": target_model.precision.describe()}
    if loaded:
        head_cache = KVCache(loaded.compiled, loaded.rope)
        head_cache.forward(PROMPT[1:], inputs=loaded.inputs_from_target(target_cache, 0, len(PROMPT) - 1))
        draft = Passes(head_cache, loaded.inputs_from_target(target_cache, len(PROMPT) - 2, len(PROMPT) - 1))
        target_then_head = medians([(target, 1), (draft, 1)], passes)
        result.update(head_alone_ms=medians([(draft, 1)], passes)[0], head_after_target_ms=target_then_head[1],
                      target_before_head_ms=target_then_head[0])
    return result


def node_group(name: str, kind: str) -> str:
    """What computes a node, for the profile: the op's type for SpecChat's ops (extension ops run as the CPU
    plugin's ``Reference`` nodes, named after their type), "SDPA" for attention, else "other"."""
    if kind.startswith("Reference"):
        return name.split("_")[0]
    return "SDPA" if kind.startswith("ScaledDotProductAttention") else "other"


def profiled_target():
    """The default 4-bit model's target graph as ``load_model`` builds it (kernels where it would put them), compiled
    with the same properties and PERF_COUNT: ``(cache, runs, kernels)``, ``fc_profile.counted_cache``'s cache and
    its run counter, and ``q4_kernels.use_kernels``' answer."""
    folder = ensure_default_model(4)
    model = core().read_model(folder / "openvino_model.xml")
    fuse_shared_input_products(model)
    _expose_hidden_states(model)
    _compute_only_last_logits(model)
    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU")}
    kernels = use_kernels(model, core(), "CPU", properties)
    cache, runs = counted_cache(core().compile_model(model, "CPU", {**properties, "PERF_COUNT": True}),
                                RopeParameters.from_model_dir(folder))
    return cache, runs, kernels


def profile(passes: int, widths: list[int]) -> dict:
    """Per width: the median wall ms of same-width passes and each :func:`node_group`'s mean us per pass
    (``PERF_COUNT``), on :func:`profiled_target`. Passes over random tokens after ``PROMPT``, each rolled back."""
    cache, runs, kernels = profiled_target()
    cache.forward(PROMPT)
    runner, result = Passes(cache), {}
    for width in widths:
        walls = []
        for index in range(passes):
            if index == DROPPED:
                before = _node_totals(cache, runs[0])
            walls.append(runner.run(width))
        groups: dict[str, float] = collections.defaultdict(float)
        for name, (kind, total) in _node_totals(cache, runs[0]).items():
            groups[node_group(name, kind)] += (total - before.get(name, (kind, 0.0))[1]) / (passes - DROPPED)
        result[width] = {"wall_ms": round(statistics.median(walls[DROPPED:]), 3),
                         "groups_us": {name: round(us, 1) for name, us in sorted(groups.items())}}
    return {"kernels": kernels.describe(), "widths": result}


def markdown(result: dict) -> str:
    stamp = result["stamp"]
    base = result["target"][0]["same_ms"]
    lines = [
        "# A pass's cost after a pass of another width (target) and after a target pass (draft head)", "",
        f"- Machine: {stamp['machine']}",
        f"- Target as the engine loads it (every core a thread): {result['precision']}.",
        f"- Command: `{stamp['command']}` at commit {stamp['commit']}, finished {stamp['finished']}; medians of "
        f"{result['passes'] - DROPPED} passes each, 64-token prompt, every pass rolled back.", "",
        "| tokens n | n after n, ms | n after 1 (alternating), ms | 1 after n, ms | n after n / one-token pass | "
        "switch cost, ms (n after 1 + 1 after n - both same) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["target"]:
        switch = row["alternating_ms"] + row["one_token_alternating_ms"] - row["same_ms"] - base
        lines.append(f"| {row['width']} | {row['same_ms']:.2f} | {row['alternating_ms']:.2f} | "
                     f"{row['one_token_alternating_ms']:.2f} | {row['same_ms'] / base:.2f} | "
                     f"{switch / 2 if row['width'] > 1 else 0:.2f} a switch |")
    lines.append("")
    if "head_alone_ms" in result:
        lines += [f"Draft head, one-token pass: {result['head_alone_ms']:.2f} ms alone, "
                  f"{result['head_after_target_ms']:.2f} ms right after a one-token target pass "
                  f"({result['target_before_head_ms']:.2f} ms).", ""]
    if "profile" in result:
        lines += profile_markdown(result["profile"])
    return "\n".join(lines)


def profile_markdown(found: dict) -> list[str]:
    """The profile's table: per group, us per pass at each width and its ratio to the one-token pass."""
    widths = found["widths"]
    first = widths[min(widths, key=int)]
    names = sorted(first["groups_us"], key=lambda name: -first["groups_us"][name])
    header = " | ".join(f"{w} tokens" for w in widths)
    lines = [f"Where a pass spends its time (`PERF_COUNT`, passes of one width one after another; kernels: "
             f"{found['kernels']}): us per pass, and x the one-token pass", "", f"| part | {header} |",
             "| --- |" + " --- |" * len(widths)]

    def row(label: str, values: list[float]) -> str:
        return f"| {label} | " + " | ".join(f"{v:.0f} ({v / values[0]:.2f})" if values[0] else f"{v:.0f}"
                                            for v in values) + " |"

    for name in names:
        lines.append(row(name, [w["groups_us"].get(name, 0.0) for w in widths.values()]))
    sums = [sum(w["groups_us"].values()) for w in widths.values()]
    lines.append(row("all nodes", sums))
    lines.append(row("the call beyond its nodes", [w["wall_ms"] * 1e3 - total for w, total in zip(widths.values(), sums)]))
    lines.append(row("wall", [w["wall_ms"] * 1e3 for w in widths.values()]))
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=60, help="passes per measurement (the first 5 dropped)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 2, 3, 4], help="pass widths (tokens); 1 first")
    parser.add_argument("--profile", action="store_true", help="also the per-part profile (PERF_COUNT) of each width")
    parser.add_argument("--no-head", action="store_true",
                        help="skip the draft head (it does not compile under ONEDNN_MAX_CPU_ISA=AVX2 on a bf16 CPU)")
    args = parser.parse_args(argv)
    if args.widths[0] != 1:
        parser.error("--widths must start with 1: every width is compared with the one-token pass")
    started = time.time()
    result = {**measure(args.passes, args.widths, not args.no_head), "passes": args.passes}
    if args.profile:
        result["profile"] = profile(args.passes, args.widths)
    result["stamp"] = run_stamp("pass_shapes.py", argv, started)
    write_result(args.out, "pass_shapes", result, markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
