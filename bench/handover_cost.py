"""What the fast prefill's KV hand-over costs the first decode step after a long prompt, part by part.

    .venv/bin/python bench/handover_cost.py            # about 1 minute on 2 cores; prints a markdown table

On the default 4-bit model as the engine loads it (exact f32 decode, SpecChat's kernels where built, the prefill copy
where the CPU has one), each row one fresh ``KVCache`` of the engine's compiled models, ``--reps`` times:

* **decode steps** after a 32-token prompt, after a 1,024-token prompt prefilled by the exact request itself, and
  after one prefilled by the fast prefill copy (its states then move into the exact request at the first decode
  step, ``KVCache._take_states_back``): the first step's wall time and the median of the next ``STEPS``;
* **the hand-over's parts**, done by hand as ``kv_cache._copy_states`` does them, one variable at a time: reading
  each of the copy's states (OpenVINO's ``get_state``: a new tensor of the variable's declared type, copied row by
  row from the copy's internal layout, converted where that type is not what the copy stores), copying it into the
  reused buffer (numpy; widening bf16 to f32 where the variable is bf16, ``inference/bf16_states.py``), setting the exact request's state
  (``set_state``: a new internal buffer of exactly the cached length, reordered into it), emptying the copy's
  variable; then the first decode step (which grows the exact request's internal buffer, copying the cache once
  more) and the steps after it.

Wall times in ms, ``time.perf_counter``. ``ONEDNN_MAX_CPU_ISA=AVX2`` in the environment measures the AVX2 stand-in
(the prefill copy then computes f32).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference.kv_cache import KVCache  # noqa: E402
from inference.model import HIDDEN_STATES, load_model  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402

LONG, SHORT, STEPS = 1024, 32, 24


def _ms(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1e3, result


def decode(cache: KVCache, steps: int = STEPS) -> tuple[float, float]:
    """The first decode step's ms and the median ms of the ``steps`` after it (greedy from token 2000)."""
    token, times = 2000, []
    for _ in range(steps + 1):
        elapsed, logits = _ms(lambda t=token: cache.forward([t]))
        times.append(elapsed)
        token = int(logits[-1].argmax())
    return times[0], statistics.median(times[1:])


def hand_over_by_parts(cache: KVCache) -> dict[str, float]:
    """Move ``cache``'s states from its prefill copy into its exact request as ``kv_cache._copy_states`` does, each
    part timed (ms, summed over the variables), then decode: the parts, the first step and the steady step."""
    targets = {state.name: state for state in cache._request.query_state()}
    parts = dict.fromkeys(("get_state", "numpy copy", "set_state", "empty the copy"), 0.0)
    buffer = np.empty(0, dtype=np.uint8)
    kept = []
    for state in cache._prefill_request.query_state():
        elapsed, tensor = _ms(lambda s=state: s.state)
        parts["get_state"] += elapsed
        data = tensor.data
        widen = tensor.element_type == ov.Type.bf16  # a bf16 variable (inference/bf16_states.py): widened to f32
        nbytes = data.nbytes * 2 if widen else data.nbytes
        if buffer.nbytes < nbytes:
            buffer = np.empty(nbytes, dtype=np.uint8)
            kept.append(buffer)
        if widen:
            view = buffer[:nbytes].view(np.uint32).reshape(data.shape)
            parts["numpy copy"] += _ms(lambda d=data, v=view: np.left_shift(d.view(np.uint16), 16, out=v, dtype=np.uint32))[0]
            view = view.view(np.float32)
        else:
            view = buffer[:nbytes].view(data.dtype).reshape(data.shape)
            parts["numpy copy"] += _ms(lambda d=data, v=view: np.copyto(v, d))[0]
        parts["set_state"] += _ms(lambda v=view, n=state.name: setattr(targets[n], "state", ov.Tensor(v, shared_memory=True)))[0]
        empty = np.zeros((*data.shape[:2], 0, *data.shape[3:]), dtype=np.float32)
        parts["empty the copy"] += _ms(lambda s=state, e=empty: setattr(s, "state", ov.Tensor(e)))[0]
    cache._held["exact"], cache._states_in_copy = kept, False
    parts["first step"], parts["steady step"] = decode(cache)
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh caches per row (medians)")
    args = parser.parse_args(argv)
    model = load_model(ensure_default_model(4), "CPU", PrecisionSettings())
    if model.prefill_compiled is None:
        parser.error("this machine's engine has no prefill copy: there is no hand-over to measure")
    prompt = [int(t) for t in np.random.default_rng(0).integers(2000, 9000, LONG)]

    def fresh(copy: bool) -> KVCache:
        return KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled if copy else None,
                       kept_outputs=(HIDDEN_STATES,))

    rows: dict[str, list[tuple[float, float]]] = {}
    parts: list[dict[str, float]] = []
    for _ in range(args.reps):
        short = fresh(False)
        short.forward(prompt[:SHORT])
        rows.setdefault(f"{SHORT}-token prompt", []).append(decode(short))
        exact = fresh(False)
        exact.prefill(prompt)
        rows.setdefault(f"{LONG}-token prompt, prefilled by the exact request", []).append(decode(exact))
        copied = fresh(True)
        copied.prefill(prompt, upcoming=LONG)
        rows.setdefault(f"{LONG}-token prompt, prefilled by the copy (hand-over in the first step)", []).append(decode(copied))
        by_parts = fresh(True)
        by_parts.prefill(prompt, upcoming=LONG)
        parts.append(hand_over_by_parts(by_parts))
    print(f"# Hand-over cost ({model.precision.describe()}; medians of {args.reps})\n")
    print("| decode after | first step ms | steady step ms |\n| --- | --- | --- |")
    for label, values in rows.items():
        print(f"| {label} | {statistics.median(v[0] for v in values):.1f} | {statistics.median(v[1] for v in values):.2f} |")
    print(f"\n| hand-over part, {LONG} cached tokens | ms |\n| --- | --- |")
    for name in parts[0]:
        print(f"| {name} | {statistics.median(p[name] for p in parts):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
