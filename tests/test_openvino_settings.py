"""bench/openvino_settings.py's exactness measure on the default model: it tells the exact default (one-token and
four-token passes agree to float32 rounding) from a setting that rounds the KV cache to u8 (measured on the AMD
EPYC: 6.5e-5 against 8.6e-2; a tiny f32 target rounds too little to tell them apart)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from openvino_settings import EXACTNESS_PLACES, measure_exactness, settings_to_try  # noqa: E402

from inference.devices import core
from inference.kv_cache import KVCache


def test_exactness_separates_the_exact_default_from_a_u8_kv_cache(target):
    loaded = target
    ids = [int(t) for t in np.random.default_rng(0).integers(3, loaded.vocab_size, 64 + 4 * EXACTNESS_PLACES)]
    tried = settings_to_try()
    measured = {}
    for name in ("exact (SpecChat's default)", "KV cache u8"):
        compiled = core().compile_model(loaded.ir_model, "CPU", tried[name])
        measured[name] = measure_exactness(KVCache(compiled, loaded.rope), ids)
    exact, rounded = measured["exact (SpecChat's default)"], measured["KV cache u8"]
    assert exact["compared"] == 4 * EXACTNESS_PLACES
    assert exact["max_logit_difference"] < 1e-3 and exact["argmax_flips"] == 0
    assert rounded["max_logit_difference"] > 10 * exact["max_logit_difference"]
