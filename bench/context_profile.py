"""Where a decode step's time goes at a short and a long cached context (``PERF_COUNT``), exact f32 graph.

    .venv/bin/python bench/context_profile.py            # about 1 minute on 2 cores; prints JSON

The target graph as ``load_model`` builds it (q/k/v and gate/up fused, hidden states exposed, SpecChat's kernels
where built) compiled with the engine's properties and ``PERF_COUNT``; one ``KVCache`` prefilled by the exact request
itself (no prefill copy, no hand-over) with 40 random tokens, then 40 one-token decode steps (the first 8 dropped);
then 1,000 more prompt tokens and 40 more steps. Per context: the median wall ms of a step and the mean us per step
of each part (``pass_shapes.node_group``: SpecChat's ops by type, OpenVINO's attention ``SDPA``, everything else
``other``) and of the 8 costliest node kinds (type and the kernel OpenVINO chose).
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fc_profile import _node_totals  # noqa: E402
from pass_shapes import node_group, profiled_target  # noqa: E402

SHORT, LONG, STEPS, DROPPED = 40, 1040, 40, 8


def steps(cache, runs: list[int], rng: np.random.Generator) -> dict:
    """``STEPS`` one-token passes over random tokens (kept: the context grows by ``STEPS``); the median wall ms of
    those after ``DROPPED`` and each part's and node kind's mean us per step over them."""
    walls, before = [], {}
    for index in range(STEPS):
        if index == DROPPED:
            before = _node_totals(cache, runs[0])
        start = time.perf_counter()
        cache.forward([int(rng.integers(2000, 9000))])
        walls.append((time.perf_counter() - start) * 1e3)
    groups: dict[str, float] = collections.defaultdict(float)
    kinds: dict[str, float] = collections.defaultdict(float)
    for name, (kind, total) in _node_totals(cache, runs[0]).items():
        us = (total - before.get(name, (kind, 0.0))[1]) / (STEPS - DROPPED)
        groups[node_group(name, kind)] += us
        kinds[kind] += us
    return {"wall_ms": round(statistics.median(walls[DROPPED:]), 2),
            "groups_us": {name: round(us) for name, us in sorted(groups.items())},
            "top_kinds_us": dict(sorted(((k, round(v)) for k, v in kinds.items()), key=lambda kv: -kv[1])[:8])}


def main() -> int:
    cache, runs, kernels = profiled_target()
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(2000, 9000, LONG)]
    result: dict = {"kernels": kernels.describe()}
    cache.forward(prompt[:SHORT])
    result["short"] = {"cached_before": len(cache), **steps(cache, runs, rng)}
    cache.forward(prompt[SHORT:])
    result["long"] = {"cached_before": len(cache), **steps(cache, runs, rng)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
