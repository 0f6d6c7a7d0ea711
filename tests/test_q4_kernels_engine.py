"""SpecChat's CPU kernels in the engine (``inference.q4_kernels``, put in by ``load_model``): on the exact f32 path
they replace OpenVINO's 4-bit products, each op computes every row of a many-token pass bit for bit as a one-token
pass, greedy speculative decoding still equals plain decoding, the fused draft head's layer features are still found,
and without the library OpenVINO's kernels run and the precision text says why.

The library is the one set-up built (``tools/build_kernels.py``) where it is newer than the sources, or built here into
a temporary folder (the ``kernel_library`` fixture).
"""

import shutil
import sys

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from helpers import PROMPTS, assert_same_or_near_tie, chat_ids, settings

from inference import q4_kernels
from inference.devices import core
from inference.draft_head import load_head
from inference.engine import Engine
from inference.kv_cache import KVCache
from inference.layer_features import LAYER_FEATURES
from inference.model import load_model
from inference.models.default_head import shipped_head
from inference.precision import PrecisionSettings

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or not q4_kernels.cpu_has_flags(),
    reason="needs g++ and an x86 CPU with AVX2, FMA and F16C",
)

FEATURE_LAYERS = (2, 15)  # a low and a mid layer of the default model's 30, as a fused head reads them
OPS = ("Q4F32Layer", "Q4F32MatMul", "Q8F32MatMul")


@pytest.fixture(scope="module")
def library(kernel_library):
    """``q4_kernels.LIBRARY`` as set-up built it where it is newer than the sources, else one built now into a
    temporary folder (and used from there): the ``kernel_library`` fixture."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(q4_kernels, "LIBRARY", kernel_library)
        yield kernel_library


@pytest.fixture(scope="module")
def ours(library, int4_dir):
    """The default 4-bit model at the default (exact) precision with SpecChat's kernels, and the fused head's layer
    features."""
    return load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=FEATURE_LAYERS)


@pytest.fixture(scope="module")
def theirs(library, int4_dir):
    """The same with OpenVINO's kernels (``SPECCHAT_KERNELS=openvino``), loaded as on a CPU without bf16 (no bf16
    prefill copy), where it keeps no f32 copy either: it prefills with OpenVINO's kernels itself."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(q4_kernels.SWITCH, "openvino")
        patch.setattr(PrecisionSettings, "wants_fast_prefill", lambda self, device: False)
        return load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=FEATURE_LAYERS)


def op_types(model) -> dict[str, int]:
    found: dict[str, int] = {}
    for node in model.ir_model.get_ordered_ops():
        if node.get_type_name() in OPS:
            found[node.get_type_name()] = found.get(node.get_type_name(), 0) + 1
    return found


def run(model, ids: list[int], past: int = 0, request=None, outputs=("logits",)):
    """One pass of ``ids`` after ``past`` tokens on ``request`` (a new one if None); every position's values of
    ``outputs``, and the request."""
    request = request or model.compiled.create_infer_request()
    if past == 0:
        request.reset_state()
    n = len(ids)
    request.infer({"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, past + n), np.int64),
                   "position_ids": np.arange(past, past + n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32),
                   "logits_to_keep": np.array([n], np.int64)})
    return [request.get_tensor(name).data[0].copy() for name in outputs], request


def test_the_exact_path_runs_specchats_kernels_in_every_layer(ours, theirs):
    assert ours.kernels.ours and ours.kernels.reason == ""
    # the default model's 30 layers: one layer op each, q/k/v one product each, the Q8_0 LM head
    assert op_types(ours) == {"Q4F32Layer": 30, "Q4F32MatMul": 30, "Q8F32MatMul": 1} and ours.kernels.ops == 61
    assert ours.precision.kernels == "SpecChat's"
    assert ours.precision.describe().endswith("; 4-bit kernels: SpecChat's")
    assert not theirs.kernels.ours and op_types(theirs) == {}
    assert theirs.precision.describe().endswith(f"4-bit kernels: OpenVINO's ({q4_kernels.SWITCH}=openvino)")


def test_without_the_library_openvino_kernels_run_and_the_text_says_so(int4_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(q4_kernels, "LIBRARY", tmp_path / "libspecchat_kernels.so")
    model = load_model(int4_dir, "CPU", PrecisionSettings())
    assert not model.kernels.ours and model.kernels.reason == "not built" and op_types(model) == {}
    assert model.precision.describe().endswith("4-bit kernels: OpenVINO's (not built)")
    ids = list(range(1000, 1008))
    assert np.isfinite(run(model, ids)[0][0]).all()


def test_the_load_sorts_the_graph_in_a_gil_holding_call_once_on_the_graph_as_read(library, int4_dir, monkeypatch):
    """``get_ordered_ops`` holds Python's GIL through one C++ call that sorts the graph again after each rewrite
    (4-7 ms on this Xeon after fusion: the model load's longest holds, ``tests/gui/test_gil_holds.py``), so the load
    calls it once, in fusion, where the graph as read is sorted already, and walks the rewritten graph with
    ``fusion.ordered_ops``. Loaded as on a CPU without bf16 (``has_layers`` chooses the f32 prefill copy) with a fused
    head's layer features: every walk of the load runs."""
    callers = []
    original = ov.Model.get_ordered_ops

    def counted(model):
        callers.append(sys._getframe(1).f_code.co_name)
        return original(model)

    monkeypatch.setattr(ov.Model, "get_ordered_ops", counted)
    monkeypatch.setattr(PrecisionSettings, "wants_fast_prefill", lambda self, device: False)
    model = load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=FEATURE_LAYERS)
    assert model.kernels.ours and model.prefill_compiled is not None and model.decoder_layers == 30
    assert callers == ["fuse_shared_input_products"]


def test_a_draft_model_at_device_defaults_keeps_openvinos_kernels(library, draft):
    assert not draft.kernels.ours and draft.kernels.reason == "not the exact f32 path"


def test_logits_and_features_are_openvinos_within_f32_rounding(ours, theirs, target):
    ids = chat_ids(target, PROMPTS[2])
    (mine, my_features), _ = run(ours, ids, outputs=("logits", LAYER_FEATURES))
    (reference, features), _ = run(theirs, ids, outputs=("logits", LAYER_FEATURES))
    # the fused head's inputs are found after the rewrite, and are the same layers' outputs: EAGLE-3 features of
    # layers 2 and 15 for every position, RMS-normalized (|x| ~ 1), equal up to f32 rounding through those layers
    assert my_features.shape == features.shape == (len(ids), 2, 576)
    assert np.abs(my_features - features).max() < 1e-3
    # another decoder layer's output would differ by O(1): the comparison can fail
    assert np.abs(my_features[:, ::-1] - features).max() > 0.5
    # logits: the two graphs sum in different orders; measured 1e-5 - 4e-5 here, 4.8e-5 between a 4-token pass and 4
    # one-token passes of either graph (bench/results/epyc-zen5/Q4_KERNEL_FINDINGS.md, section 7), so within 1e-3
    # (the logits span ~30) and the same argmax at every position
    assert mine.shape == reference.shape == (len(ids), ours.vocab_size)
    assert np.abs(mine - reference).max() < 1e-3
    assert np.abs(mine - reference).max() > 0  # not OpenVINO's graph run twice
    assert mine.argmax(-1).tolist() == reference.argmax(-1).tolist()


def test_every_op_computes_each_row_of_a_4_token_pass_bitwise_as_a_1_token_pass(ours):
    """Each op of the loaded model, given the inputs it saw in a 4-token pass through the model, row by row: every
    row bitwise the 4-row result's (what keeps verification passes exact), and the whole model's logits of the
    4-token pass within the exactness noise of 4 one-token passes (OpenVINO's attention rows part at ~4e-9)."""
    model = ours.ir_model.clone()
    nodes = [node for node in model.get_ordered_ops() if node.get_type_name() in OPS]
    assert len(nodes) == 61
    model.add_outputs([value for node in nodes for value in node.input_values()])
    position = {(r.input_value(0).get_node().get_instance_id(), r.input_value(0).get_index()): i
                for i, r in enumerate(model.get_results())}
    compiled = core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32",
                                                  "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0})
    request = compiled.create_infer_request()
    prompt, step = list(range(1000, 1032)), [5, 77, 1234, 40000]
    feed = {"attention_mask": np.ones((1, 36), np.int64), "position_ids": np.arange(32, 36, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32), "logits_to_keep": np.array([4], np.int64)}
    request.reset_state()
    request.infer({"input_ids": np.array([prompt], np.int64), "attention_mask": np.ones((1, 32), np.int64),
                   "position_ids": np.arange(32, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32),
                   "logits_to_keep": np.array([1], np.int64)})
    request.infer({"input_ids": np.array([step], np.int64), **feed})
    factory = q4_kernels.load_library(core())
    for node in nodes:
        values = [request.get_output_tensor(position[(v.get_node().get_instance_id(), v.get_index())]).data.copy()
                  for v in node.input_values()]  # [1, 4, K] each
        parameters = [ops.parameter([1, -1, v.shape[-1]], np.float32) for v in values]
        alone = factory.create(node.get_type_name(), [p.output(0) for p in parameters], node.get_attributes())
        op = core().compile_model(ov.Model([alone.output(0)], parameters), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        together = op(values)[0][0]
        for row in range(4):
            single = op([v[:, row : row + 1] for v in values])[0][0, 0]
            assert together[row].view(np.uint32).tolist() == single.view(np.uint32).tolist(), (node.get_type_name(), row)
    # the model itself: 4 one-token passes against the 4-token pass
    (four,), _ = run(ours, step, 32, run(ours, prompt)[1])
    _, request = run(ours, prompt)
    singles = np.stack([run(ours, [token], 32 + i, request)[0][0][0] for i, token in enumerate(step)])
    assert np.abs(four - singles).max() < 2e-4


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["draft model", "draft head"])
def test_greedy_speculative_equals_autoregressive_with_the_kernels(library, ours, draft, int4_dir, drafter):
    """A short reply per speculative decoding (the draft model or the shipped draft head, which reads the target's
    last hidden state, K=3; prompt lookup K=4) against plain decoding, the target running SpecChat's kernels."""
    if drafter == "draft model":
        engine = Engine(ours, draft)
    else:
        head = load_head(shipped_head())
        engine = Engine(load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=head.feature_layers), head)
    assert engine.target.kernels.ours
    ids = chat_ids(ours, PROMPTS[0])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=48))
    for decoding, k in (("spec_model", 3), ("spec_lookup", 4)):
        engine.reset()
        candidate = engine.generate_text(ids, settings(decoding, max_new_tokens=48, k=k))
        assert candidate.drafted > 0 and (candidate.accepted > 0 or decoding == "spec_lookup"), (drafter, decoding)
        assert_same_or_near_tie(engine, ids, reference, candidate, {}, f"SpecChat's kernels, {drafter}, {decoding} K={k}", k)


def test_without_bf16_long_prompts_are_prefilled_with_openvinos_kernels(library, int4_dir, theirs, monkeypatch):
    """Where no bf16 copy prefills (a CPU without bf16), an f32 copy with OpenVINO's kernels does, theirs being
    ~1.5x faster at 1,024 tokens and ours faster at decoding; ``fast_prefill`` "off" or an explicit f32 keeps none,
    nor does a model with OpenVINO's kernels (``theirs``, loaded as here: the same graph, its layer features included,
    against which the copy is compared: it runs OpenVINO's paged attention, so only the summation order differs)."""
    monkeypatch.setattr(PrecisionSettings, "wants_fast_prefill", lambda self, device: False)
    model = load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=FEATURE_LAYERS)
    assert model.kernels.ours and model.precision.prefill == "f32"
    assert model.precision.describe().endswith("(exact); prefill f32; 4-bit kernels: SpecChat's")
    assert theirs.prefill_compiled is None and theirs.precision.prefill == ""
    ids = list(range(2000, 2100))
    cache = KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled)
    copy = cache.prefill(ids, upcoming=len(ids))
    assert cache.fast_prefilled == len(ids)
    (reference,), _ = run(theirs, ids)
    (mine,), _ = run(model, ids)
    np.testing.assert_allclose(copy[0], reference[-1], atol=1e-3)  # OpenVINO's kernels, paged attention
    assert not np.array_equal(mine, reference)
    for settings_ in (PrecisionSettings(fast_prefill="off"), PrecisionSettings(inference="f32")):
        kept = load_model(int4_dir, "CPU", settings_)
        assert kept.kernels.ours and kept.prefill_compiled is None


def test_a_model_without_4_bit_weights_keeps_openvinos_kernels_and_no_copy_and_says_no_4_bit_kernels(
        library, int8_dir, monkeypatch):
    """The 8-bit re-encoding (u8 weights) has no 4-bit product: its precision says nothing of 4-bit kernels (it
    said "4-bit kernels: OpenVINO's (no Q4_1 layers)"), with the library or without."""
    monkeypatch.setattr(PrecisionSettings, "wants_fast_prefill", lambda self, device: False)
    model = load_model(int8_dir, "CPU", PrecisionSettings())
    assert not model.kernels.ours and not model.kernels.four_bit and op_types(model) == {}
    assert model.prefill_compiled is None and model.precision.kernels == ""
    assert model.precision.describe() == "f32, KV cache f32, no dynamic quantization (exact)"
    monkeypatch.setenv(q4_kernels.SWITCH, "openvino")
    assert load_model(int8_dir, "CPU", PrecisionSettings()).precision.describe() == model.precision.describe()


def test_only_4_bit_constants_make_4_bit_weights():
    """``has_four_bit_weights`` on one product whose weights are u4, i4, u8 or f16 constants."""
    for element_type, four_bit in ((ov.Type.u4, True), (ov.Type.i4, True), (ov.Type.u8, False), (ov.Type.f16, False)):
        x = ops.parameter([1, 32], ov.Type.f32)
        weights = ops.convert(ops.constant(np.ones((8, 32)), element_type), ov.Type.f32)
        model = ov.Model([ops.matmul(x, weights, False, True)], [x])
        assert q4_kernels.has_four_bit_weights(model) is four_bit, element_type
        assert q4_kernels._openvinos("not built", model).describe() == ("OpenVINO's (not built)" if four_bit else "")


def test_a_cpu_without_f16c_keeps_openvinos_kernels(library, tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert not q4_kernels.cpu_has_flags(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n")
    assert q4_kernels.cpu_has_flags(cpuinfo)
    assert not q4_kernels.cpu_has_flags(tmp_path / "absent")
    exact = dict(q4_kernels.EXACT_PROPERTIES)
    assert q4_kernels.unavailable("CPU", exact) == ""
    assert q4_kernels.unavailable("CPU", {**exact, "KV_CACHE_PRECISION": "u8"}) == "not the exact f32 path"
    assert q4_kernels.unavailable("GPU", exact) == "not the exact f32 path"
    monkeypatch.setattr(q4_kernels, "cpu_has_flags", lambda: False)
    assert q4_kernels.unavailable("CPU", exact) == "CPU without AVX2, FMA and F16C"
