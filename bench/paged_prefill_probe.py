"""Probe: the prefill copy with OpenVINO's paged attention instead of its stateful SDPA (issue 33, items 4 and 5).

    PYTHONPATH=. .venv/bin/python bench/paged_prefill_probe.py            # one child per path, native
    ONEDNN_MAX_CPU_ISA=AVX2 PYTHONPATH=. .venv/bin/python bench/paged_prefill_probe.py

Each path in a fresh process: load, warm up (the memory bar's 48-token prompt and 8 tokens), then ``--reps`` times a
1,024-token prompt (the quick bench's) and one decode step. Paths: ``sdpa`` (today's engine: ``load_model`` and
``KVCache.prefill`` with its stateful copy), ``paged`` (``load_model`` without a copy, plus a copy compiled through
``paged_attention_transformation`` whose block-layout cache is handed over to the exact request's f32 states),
``genai`` (openvino-genai's ``LLMPipeline`` as the memory bar builds it, its TTFT from its own metrics). Reported:
prefill ms (median; genai: TTFT), hand-over ms, peak VmHWM MiB, and for ``paged`` the largest difference of its first
logits and handed-over cache from today's path's (both computed in the ``paged`` child).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def vm(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def paged_copy(folder: Path, properties: dict):
    """Compile the prefill copy as load_model would, through paged_attention_transformation."""
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    from inference import model as M
    from inference.devices import core
    from inference.fusion import fuse_shared_input_products

    model = core().read_model(folder / "openvino_model.xml")
    fuse_shared_input_products(model)
    M._expose_hidden_states(model)
    M._compute_only_last_logits(model)
    paged_attention_transformation(model)
    # tokens are the batch axis now ([T, 1, hidden]): keep the last logits_to_keep of axis 0
    last = M.lm_head(model).input_value(0).get_node()
    assert last.get_type_name() == "Slice", last
    last.input(4).replace_source_output(ov.op.Constant(np.array([0], dtype=np.int64)).output(0))
    model.validate_nodes_and_infer_types()
    return core().compile_model(model, "CPU", properties)


class PagedPrefill:
    def __init__(self, compiled):
        self.request = compiled.create_infer_request()
        self.caches = {}
        for port in compiled.inputs:
            name = port.get_any_name()
            if name.startswith(("key_cache.", "value_cache.")):
                self.caches[name] = (port.get_partial_shape(), port.get_element_type())
        shape, dtype = next(iter(self.caches.values()))
        self.block = shape[2].get_length()
        self.dtype = dtype

    def run(self, ids: list[int]) -> np.ndarray:
        import openvino as ov

        n = len(ids)
        blocks = -(-n // self.block)
        self.arrays = {}
        for name, (shape, _) in self.caches.items():
            dims = [blocks] + [d.get_length() for d in list(shape)[1:]]
            if self.dtype == ov.Type.bf16:
                array = np.zeros(dims, dtype=np.uint16)
                tensor = ov.Tensor(array, dims, ov.Type.bf16)
            else:
                array = np.zeros(dims, dtype=np.float32)
                tensor = ov.Tensor(array, shared_memory=True)
            self.arrays[name] = array
            self.request.set_tensor(name, tensor)
        r = self.request
        r.set_tensor("input_ids", ov.Tensor(np.asarray(ids, dtype=np.int64)))
        r.set_tensor("position_ids", ov.Tensor(np.arange(n, dtype=np.int64)))
        r.set_tensor("past_lens", ov.Tensor(np.array([0], dtype=np.int32)))
        r.set_tensor("subsequence_begins", ov.Tensor(np.array([0, n], dtype=np.int32)))
        r.set_tensor("block_indices", ov.Tensor(np.arange(blocks, dtype=np.int32)))
        r.set_tensor("block_indices_begins", ov.Tensor(np.array([0, blocks], dtype=np.int32)))
        r.set_tensor("max_context_len", ov.Tensor(np.array(n, dtype=np.int32)))
        r.set_tensor("logits_to_keep", ov.Tensor(np.array([1], dtype=np.int64)))
        r.infer()
        self.n = n
        return r.get_tensor("logits").data.reshape(-1, r.get_tensor("logits").shape[-1])[-1:].copy()

    def hand_over(self, exact_request) -> list:
        """Move every layer's blocks into the exact request's states ([1, kv_heads, n, head_dim] f32)."""
        import openvino as ov

        from inference.kv_cache import _is_key_state, _layer_index, _set_state

        buffers: list = []
        for state in exact_request.query_state():
            name = ("key_cache." if _is_key_state(state.name) else "value_cache.") + str(_layer_index(state.name))
            array = self.arrays.pop(name)
            heads = array.shape[1]
            data = array.transpose(1, 0, 2, 3).reshape(1, heads, -1, array.shape[3])[:, :, : self.n]
            if data.dtype == np.uint16:  # bf16: the upper half of an f32
                data = (data.astype(np.uint32) << 16).view(np.float32)
            _set_state(state, data, buffers)
            self.request.set_tensor(name, ov.Tensor(self.dtype, [1, *array.shape[1:]]))
            del array, data
        return buffers


def child(path: str, reps: int) -> dict:
    import speed

    from inference.heap import return_large_blocks
    from inference.kv_cache import KVCache
    from inference.model import load_model
    from inference.models.default_model import ensure_default_model
    from inference.precision import FAST_PREFILL_PROPERTIES, PrecisionSettings

    folder = ensure_default_model(4)
    long_ids = next(w for w in speed.build_prompts(str(folder)) if w["name"] == "in1024_out32")["ids"]
    warmup = speed.exact_prompt_encoder(str(folder))(speed.WARMUP_TEXT * 4, 48)
    out: dict = {"path": path, "capped": os.environ.get("ONEDNN_MAX_CPU_ISA", "")}
    if path == "genai":
        runner_class = type("Runner", (speed.GenaiRunner,), {"properties": (
            {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0} if out["capped"] else {})})
        runner = runner_class({"target": str(folder)}, "ar")
        out["loaded_mb"] = vm("VmRSS")
        runner.run(warmup, 8)
        runs = [runner.run(long_ids, 2) for _ in range(reps)]
        out["prefill_ms"] = statistics.median(r["ttft_ms"] for r in runs)
        out["all_ms"] = [round(r["ttft_ms"]) for r in runs]
        out["peak_mb"] = vm("VmHWM")
        return out
    if path == "sdpa":
        lm = load_model(folder, precision=PrecisionSettings())
        cache = KVCache(lm.compiled, lm.rope, prefill_model=lm.prefill_compiled, kept_outputs=["HIDDEN_STATES"])
        out["loaded_mb"] = vm("VmRSS")
        cache.prefill(warmup)
        for _ in range(8):
            cache.forward([0])
        times, hand = [], []
        for _ in range(reps):
            cache.reset()
            t0 = time.perf_counter()
            logits = cache.prefill(long_ids, upcoming=len(long_ids))
            t1 = time.perf_counter()
            cache._take_states_back()
            t2 = time.perf_counter()
            cache.forward([int(logits.argmax())])
            times.append((t1 - t0) * 1e3)
            hand.append((t2 - t1) * 1e3)
        out["peak_mb"] = vm("VmHWM")
        out["prefill_ms"], out["handover_ms"] = statistics.median(times), statistics.median(hand)
        out["all_ms"] = [round(t) for t in times]
        return out
    # paged
    native = PrecisionSettings().wants_fast_prefill("CPU")
    lm = load_model(folder, precision=PrecisionSettings(fast_prefill="off"))
    from inference.devices import base_properties
    from inference.file_pages import release_mapped_file

    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU")}
    if native:
        properties.update({**FAST_PREFILL_PROPERTIES, "KV_CACHE_PRECISION": os.environ.get("PROBE_KV", "bf16")})
    copy = paged_copy(folder, properties)
    release_mapped_file(folder / "openvino_model.bin")
    return_large_blocks()
    paged = PagedPrefill(copy)
    out["cache"] = f"{paged.dtype} block {paged.block} {list(paged.caches.values())[0][0]}"
    cache = KVCache(lm.compiled, lm.rope, kept_outputs=["HIDDEN_STATES"])
    out["loaded_mb"] = vm("VmRSS")
    cache.prefill(warmup)
    for _ in range(8):
        cache.forward([0])
    times, hand = [], []
    for _ in range(reps):
        cache.reset()
        t0 = time.perf_counter()
        logits = paged.run(long_ids)
        t1 = time.perf_counter()
        held = paged.hand_over(cache._request)
        t2 = time.perf_counter()
        cache._alive = np.ones(len(long_ids), dtype=np.int64)
        cache.tokens, cache._slots = list(long_ids), list(range(len(long_ids)))
        cache.forward([int(logits.argmax())])
        times.append((t1 - t0) * 1e3)
        hand.append((t2 - t1) * 1e3)
    out["peak_mb"] = vm("VmHWM")
    out["prefill_ms"], out["handover_ms"] = statistics.median(times), statistics.median(hand)
    out["all_ms"] = [round(t) for t in times]
    if os.environ.get("PROBE_COMPARE"):  # today's copy in the same process: logits and states (not for the peak)
        keys = [s.state.data.copy() for s in cache._request.query_state()]
        names = [s.name for s in cache._request.query_state()]
        del held
        lm2 = load_model(folder, precision=PrecisionSettings())
        other = KVCache(lm2.compiled, lm2.rope, prefill_model=lm2.prefill_compiled)
        ref = other.prefill(long_ids, upcoming=len(long_ids))
        out["logits_max_diff"] = float(np.abs(ref - logits).max())
        out["argmax_equal"] = bool(ref.argmax() == logits.argmax())
        refs = {s.name: s.state.data for s in other._prefill_request.query_state()}
        out["cache_max_diff"] = max(float(np.abs(refs[n][:, :, : len(long_ids)] - k[:, :, : len(long_ids)]).max())
                                    for n, k in zip(names, keys))
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
        return 0
    paths = sys.argv[1:] or ["sdpa", "paged", "genai"]
    for path in paths:
        run = subprocess.run([sys.executable, __file__, "--child", path, "3"], capture_output=True, text=True)
        print(run.stdout.strip().splitlines()[-1] if run.returncode == 0 else f"{path}: exit {run.returncode} "
              + run.stderr[-2000:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
