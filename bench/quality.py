"""Quality half of the benchmark: perplexity by bit-width, the StreamingLLM experiment, greedy losslessness.

Run alone: ``bench/.venv/bin/python bench/quality.py [--full] [--out bench/results]``; ``bench/run.py`` calls it too.

* Perplexity of the default model at 4, 8 and 16 bits on ``bench/data/kjv_genesis.txt`` (King James Version,
  Genesis: public domain), scored with ``scoring.score`` under the attention-sink policy.
* Perplexity in the windows of llama.cpp's own ``llama-perplexity`` tool: the text cut into windows of 1,024 tokens,
  each scored from an empty cache, only each window's second half counted (every scored token sees 512 to 1,023
  tokens before it). llama.cpp (llama-cpp-python, ``logits_all=True``) on the Q4_1 GGUF is the reference row, beside
  the 4-, 8- and 16-bit IRs on the same token ids.
* StreamingLLM (Xiao et al., arXiv 2309.17453, section 4.1, Figure 3): perplexity with n_ctx 256 and 512 for
  (a) attention sinks (n_keep=4) with shift-RoPE rolls, (b) the same rolling window without sinks (n_keep=0),
  (c) a sliding window with re-computation (each block of n_ctx/2 tokens is scored after re-prefilling the
  n_ctx/2 tokens before it, so every token sees n_ctx/2 .. n_ctx-1 previous tokens, like (a) and (b)).
* Greedy speculative vs autoregressive, one row per precision combination the CPU offers (exact f32, the u8 KV
  cache, bf16 compute, OpenVINO's own defaults): the fraction of identical outputs over 50+ prompts, and for the
  others the target's top-2 logit gap at the first difference against the numerical noise measured there between
  a one-token and a multi-token pass (``inference.exactness``: a gap within the noise is a near-tie).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import command_line, stamp  # noqa: E402

from inference.chat import ChatSession  # noqa: E402
from inference.devices import device_computes  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.exactness import first_difference  # noqa: E402
from inference.model import load_model  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.scoring import score  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings  # noqa: E402

TEXT = Path(__file__).resolve().parent / "data" / "kjv_genesis.txt"
TOPICS = [
    "photosynthesis", "the French Revolution", "black holes", "compound interest", "the water cycle",
    "vaccines", "the Roman Empire", "machine learning", "volcanoes", "the stock market", "DNA",
    "climate change", "the printing press", "electric cars", "honeybees", "the internet", "earthquakes",
    "the moon landing", "recycling", "the human heart", "chess", "coffee", "the Great Wall of China",
    "solar panels", "jazz music",
]
TEMPLATES = ["Explain {} in three sentences.", "Write a short paragraph about {} for a child."]
# Precision combinations of the greedy-identity table: label -> target settings (None = OpenVINO's own defaults).
# bf16 rows run only where the CPU computes bf16 natively.
PRECISIONS = {
    "f32, KV f32 (SpecChat's default, exact)": PrecisionSettings(fast_prefill="off"),
    "f32, KV u8": PrecisionSettings(kv_cache="u8", fast_prefill="off"),
    "bf16, KV f32": PrecisionSettings(inference="bf16", kv_cache="f32", fast_prefill="off"),
    "bf16, KV u8, dynamic quantization": PrecisionSettings(inference="bf16", kv_cache="u8", dynamic_quantization="on", fast_prefill="off"),
    "OpenVINO's CPU defaults": None,
}


def _chat_ids(engine: Engine, text: str) -> list[int]:
    return ChatSession(engine, messages=[{"role": "user", "content": text}]).prompt_ids()


def perplexity_by_bits(tokens: list[int], n_ctx: int, engine_4bit: Engine) -> dict:
    """Perplexity (exp of mean negative log-likelihood) at 4, 8, 16 bits with sinks (n_keep=4)."""
    out = {}
    for bits in (4, 8, 16):
        engine = engine_4bit if bits == 4 else Engine.load(ensure_default_model(bits), "CPU")
        start = time.perf_counter()
        scores = score(engine, tokens, ContextSettings(n_ctx=n_ctx, n_keep=4))
        out[str(bits)] = {"perplexity": float(np.exp(-scores.mean())), "seconds": time.perf_counter() - start}
    return out


WINDOW = 1024


def windows(tokens: list[int], window: int = WINDOW) -> list[list[int]]:
    """The text's whole windows of ``window`` tokens (a shorter tail is dropped, as ``llama-perplexity`` does)."""
    return [tokens[start : start + window] for start in range(0, len(tokens) - window + 1, window)]


def second_half_perplexity(log_probs: list[np.ndarray]) -> float:
    """exp of the mean negative log-likelihood of each window's second half; ``log_probs[i]`` float64
    ``[window - 1]`` holds ``log p(token[j + 1] | tokens[..j])`` of window i."""
    counted = np.concatenate([scores[len(scores) // 2 :] for scores in log_probs])
    return float(np.exp(-counted.mean()))


def llama_cpp_log_probs(gguf: Path, window: list[int]) -> np.ndarray:
    """``log p(token[j + 1] | tokens[..j])`` of one window by llama.cpp (llama-cpp-python with every position's
    logits kept), float64 ``[len(window) - 1]``; the model is loaded once per process."""
    llm = _llama(str(gguf), len(window))
    llm.reset()
    llm.eval(window)
    logits = np.asarray(llm.scores[: len(window) - 1], dtype=np.float64)
    peak = logits.max(axis=-1, keepdims=True)
    log_norm = peak[:, 0] + np.log(np.exp(logits - peak).sum(axis=-1))
    return logits[np.arange(len(window) - 1), window[1:]] - log_norm


@functools.cache
def _llama(path: str, n_ctx: int):
    import os

    from llama_cpp import Llama

    threads = os.cpu_count() or 2
    return Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
                 logits_all=True, verbose=False)


def perplexity_in_windows(tokens: list[int], engine_4bit: Engine) -> dict:
    """Second-half perplexity over ``windows(tokens)`` for llama.cpp on the Q4_1 GGUF and the 4, 8 and 16-bit IRs
    (see the module docstring); a row whose engine fails holds its ``error``."""
    from speed import gguf_path

    chunks = windows(tokens)
    rows: dict = {}
    try:
        gguf = gguf_path()
        started = time.perf_counter()
        rows["llama.cpp, Q4_1 GGUF"] = {
            "perplexity": second_half_perplexity([llama_cpp_log_probs(gguf, chunk) for chunk in chunks]),
            "seconds": time.perf_counter() - started}
    except Exception as error:  # noqa: BLE001 - the reference row is optional (bench/.venv has llama-cpp-python)
        rows["llama.cpp, Q4_1 GGUF"] = {"error": f"{type(error).__name__}: {error}"}
    for bits in (4, 8, 16):
        engine = engine_4bit if bits == 4 else Engine.load(ensure_default_model(bits), "CPU")
        started = time.perf_counter()
        scores = [score(engine, chunk, ContextSettings(n_ctx=2 * WINDOW, n_keep=4)) for chunk in chunks]
        rows[f"SpecChat, {bits}-bit IR"] = {"perplexity": second_half_perplexity(scores),
                                             "seconds": time.perf_counter() - started}
    return {"windows": len(chunks), "window": WINDOW, "rows": rows}


def sliding_window_recompute(engine: Engine, tokens: list[int], n_ctx: int) -> np.ndarray:
    """Log-probabilities with a re-computed sliding window of n_ctx tokens, stride n_ctx // 2 (policy (c))."""
    stride = n_ctx // 2
    scores = np.empty(len(tokens) - 1)
    for start in range(0, len(tokens) - 1, stride):
        first = max(0, start - (n_ctx - stride))
        window = tokens[first : min(len(tokens), start + stride + 1)]
        window_scores = score(engine, window, ContextSettings(n_ctx=max(n_ctx, len(window))))
        # window_scores[i] predicts window[i + 1] = tokens[first + i + 1]; keep predictions of tokens start+1 ..
        take = window_scores[start - first :]
        scores[start : start + len(take)] = take
    return scores


def streaming_llm(engine: Engine, tokens: list[int], windows: tuple[int, ...]) -> dict:
    """Perplexity per window size for sinks, no sinks and re-computation, plus per-position curves."""
    out = {}
    for n_ctx in windows:
        policies = {
            "sinks (n_keep=4, shift-RoPE)": score(engine, tokens, ContextSettings(n_ctx=n_ctx, n_keep=4)),
            "no sinks (n_keep=0, shift-RoPE)": score(engine, tokens, ContextSettings(n_ctx=n_ctx, n_keep=0)),
            "sliding window, re-computed": sliding_window_recompute(engine, tokens, n_ctx),
        }
        out[str(n_ctx)] = {
            name: {"perplexity": float(np.exp(-s.mean())), "nll_curve": _curve(s)} for name, s in policies.items()
        }
    return out


def _curve(scores: np.ndarray, bucket: int = 256) -> list[float]:
    """Mean negative log-likelihood per bucket of tokens (for the plot)."""
    return [float(-scores[i : i + bucket].mean()) for i in range(0, len(scores), bucket)]


def greedy_identity(prompts: int, new_tokens: int, k: int, precision: PrecisionSettings | None,
                    drafters: tuple[str, ...] = ("lookup", "model")) -> dict:
    """Fraction of prompts whose greedy speculative output equals the autoregressive one, per drafter.

    The autoregressive reference is generated once per prompt and compared with every drafter's output; each
    difference is explained by ``exactness.first_difference`` (top-2 gap against the measured noise bound).
    ``precision`` None leaves the target at OpenVINO's CPU defaults (a u8 KV cache; bf16 on CPUs with bf16).
    """
    target = load_model(ensure_default_model(4), "CPU", precision)
    engine = Engine(target, load_model(ensure_default_model(8), "CPU"))
    texts = [template.format(topic) for template in TEMPLATES for topic in TOPICS][:prompts]

    def settings(decoding: Decoding) -> GenerationSettings:
        return GenerationSettings(decoding, sampling=SamplingSettings(max_new_tokens=new_tokens), speculative=SpeculativeSettings(k=k))

    identical = dict.fromkeys(drafters, 0)
    flips: dict[str, list] = {drafter: [] for drafter in drafters}
    for text in texts:
        ids = _chat_ids(engine, text)
        engine.reset()
        ar = engine.generate_text(ids, settings(Decoding.AUTOREGRESSIVE)).token_ids
        for drafter in drafters:
            engine.reset()
            decoding = Decoding.DRAFT_MODEL if drafter == "model" else Decoding.PROMPT_LOOKUP
            spec = engine.generate_text(ids, settings(decoding)).token_ids
            difference = first_difference(engine, ids, ar, spec, k=k)
            if difference is None:
                identical[drafter] += 1
            else:
                flips[drafter].append({"prompt": text, **difference.as_dict()})
    return {
        "precision": target.precision.describe(),
        "drafters": {
            drafter: {
                "prompts": len(texts),
                "identical": identical[drafter],
                "fraction_identical": identical[drafter] / len(texts),
                "divergences": flips[drafter],
                "all_divergences_at_near_ties": all(f["near_tie"] for f in flips[drafter]),
            }
            for drafter in drafters
        },
    }


def greedy_identity_by_precision(prompts: int, new_tokens: int, k: int) -> dict:
    """``greedy_identity`` for each PRECISIONS row this CPU can compute (bf16 rows need native bf16)."""
    rows = {}
    for label, precision in PRECISIONS.items():
        if precision is not None and precision.inference == "bf16" and not device_computes("CPU", "bf16"):
            continue
        rows[label] = greedy_identity(prompts, new_tokens, k, precision)
    return rows


PARTS = ("perplexity", "windows", "streaming", "greedy")
# quick (the default): about a third of the full run's time; full: the report's sizes (issue 6 asks for 20,000+
# tokens of text and 50+ greedy prompts). Both check greedy identity at every precision combination the CPU offers.
QUICK = {"tokens": 1_500, "prompts": 20, "new_tokens": 32}
FULL = {"tokens": 20_000, "prompts": 50, "new_tokens": 64}


def run_quality(full: bool, out_dir: Path, parts: tuple[str, ...] = PARTS) -> dict:
    """Run the quality measurements named in ``parts``; write ``quality.json`` and plots into ``out_dir``.

    With fewer than all parts, the other parts' results are kept from an existing ``quality.json`` made on the
    same text length (``ValueError`` if it was made on another); without one, only those parts are reported.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    engine = Engine.load(ensure_default_model(4), "CPU")
    all_tokens = engine.target.encode(TEXT.read_text(encoding="utf-8"))
    size = FULL if full else QUICK
    tokens = all_tokens[: size["tokens"]]
    text = {"file": str(TEXT.relative_to(TEXT.parent.parent.parent)), "tokens": len(tokens)}
    results: dict = {"text": text}
    if set(parts) != set(PARTS) and (out_dir / "quality.json").exists():
        previous = json.loads((out_dir / "quality.json").read_text())
        if previous.get("text") != text:
            raise ValueError(f"re-running only {', '.join(parts)} over {out_dir / 'quality.json'} needs it made on the "
                             f"same text ({text}); choose another --out")
        results = previous
    seconds = results.setdefault("seconds", {})
    for part in parts:
        started = time.perf_counter()
        if part == "perplexity":
            results["perplexity_by_bits"] = perplexity_by_bits(tokens, 1024, engine)
        elif part == "windows":
            results["perplexity_in_windows"] = perplexity_in_windows(tokens, engine)
        elif part == "streaming":
            results["streaming_llm"] = streaming_llm(engine, tokens, (256, 512))
        else:
            results.pop("greedy_identity_f32_kv_cache", None)  # an older report's layout
            results["greedy_identity"] = greedy_identity_by_precision(size["prompts"], size["new_tokens"], 4)
        seconds[part] = time.perf_counter() - started
    (out_dir / "quality.json").write_text(json.dumps(results, indent=2))
    if "streaming_llm" in results:
        _plot_streaming(results["streaming_llm"], out_dir / "streaming_llm.png")
    return results


def _plot_streaming(streaming: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(streaming), figsize=(6 * len(streaming), 4), squeeze=False)
    for ax, (n_ctx, policies) in zip(axes[0], streaming.items()):
        for name, data in policies.items():
            curve = data["nll_curve"]
            ax.plot(np.arange(len(curve)) * 256, np.exp(curve), label=f"{name}: {data['perplexity']:.2f}")
        ax.set_title(f"n_ctx = {n_ctx}")
        ax.set_xlabel("token position")
        ax.set_ylabel("perplexity per 256 tokens")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def quality_markdown(results: dict) -> str:
    """The quality section of REPORT.md."""
    lines = [
        "## Quality",
        "",
        f"Text: `{results['text']['file']}` (King James Version, Genesis; public domain), first {results['text']['tokens']:,} tokens.",
        "",
    ]
    if "perplexity_by_bits" in results:
        lines += ["### Perplexity by bit-width (attention sinks, n_ctx 1024, n_keep 4)", "", "| bits | perplexity |",
                  "| --- | --- |"]
        for bits, row in results["perplexity_by_bits"].items():
            lines.append(f"| {bits} | {row['perplexity']:.3f} |")
        lines += [
            "",
            "The 8- and 16-bit models are re-encodings of the Q4_1 GGUF's weights (F16 holds them exactly), so they "
            "cannot restore what Q4_1 lost. The 4-bit IR is openvino-genai's own reading of the Q4_1 GGUF, which keeps "
            "the 4-bit codes and scales but stores each block's offset as a 4-bit integer zero point, rounded from "
            "Q4_1's float offset: the gap between the 4-bit and the 16-bit rows is that rounding.",
            "",
        ]
    in_windows = results.get("perplexity_in_windows")
    if in_windows:
        lines += [
            f"### Perplexity in llama.cpp's windows ({in_windows['windows']} windows of {in_windows['window']:,} "
            "tokens, second halves scored)", "",
            "Each window is scored from an empty cache and only its second half counts, as llama.cpp's "
            "`llama-perplexity` does; the same token ids go to every engine. llama.cpp on the Q4_1 GGUF is the "
            "reference the IRs are read against.", "",
            "| engine, weights | perplexity | vs llama.cpp |", "| --- | --- | --- |"]
        reference = in_windows["rows"].get("llama.cpp, Q4_1 GGUF", {}).get("perplexity")
        for name, row in in_windows["rows"].items():
            if "error" in row:
                lines.append(f"| {name} | failed: `{row['error'][:200]}` | — |")
                continue
            ratio = f"{row['perplexity'] / reference - 1:+.2%}" if reference else "—"
            lines.append(f"| {name} | {row['perplexity']:.3f} | {ratio} |")
        lines.append("")
    if "streaming_llm" in results:
        lines += _streaming_lines(results["streaming_llm"])
    if "greedy_identity" in results:
        lines += _greedy_lines(results["greedy_identity"])
    return "\n".join(lines) + "\n"


def _streaming_lines(streaming: dict) -> list[str]:
    policies_of_first = next(iter(streaming.values()))
    lines = ["### StreamingLLM experiment", "", "| n_ctx | " + " | ".join(policies_of_first) + " |",
             "| --- |" + " --- |" * len(policies_of_first)]
    for n_ctx, policies in streaming.items():
        lines.append(f"| {n_ctx} | " + " | ".join(f"{p['perplexity']:.3f}" for p in policies.values()) + " |")
    for n_ctx, policies in streaming.items():
        sinks, no_sinks, recomputed = (p["perplexity"] for p in policies.values())
        lines.append(
            f"\nn_ctx {n_ctx}: attention sinks are {sinks / recomputed - 1:+.1%} from the re-computed window; "
            f"without sinks, {no_sinks / recomputed:.2f}x its perplexity."
        )
    return lines + ["", "![StreamingLLM](streaming_llm.png)", ""]


def _greedy_lines(greedy: dict) -> list[str]:
    lines = [
        "### Greedy speculative vs autoregressive, by precision", "",
        "A difference is a near-tie when the target's top-2 logit gap at the first differing token is within the "
        "noise bound measured there: 4x the largest logit change between decoding the reply up to there one token "
        "per pass and in verification passes of up to K+1 tokens with rolled-back rejects "
        "(`inference/exactness.py`). A difference that is not a near-tie would be a bug.", "",
        "| precision (as OpenVINO reports it) | drafter | prompts | identical | all differences near-ties | first difference: top-2 gap / noise bound |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, block in greedy.items():
        if "drafters" not in block:  # a report from before the precision rows: not rendered
            continue
        for drafter, row in block["drafters"].items():
            gaps = ", ".join(f"{f['top2_gap']:.3f} / {f['noise_bound']:.3f}" for f in row["divergences"]) or "—"
            lines.append(
                f"| {label}: {block['precision']} | {drafter} | {row['prompts']} | {row['identical']} "
                f"({row['fraction_identical']:.0%}) | {row['all_divergences_at_near_ties']} | {gaps} |"
            )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="20,000 tokens of text, 50 greedy prompts x 64 tokens (default: 1,500, 20 x 32)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="measure only these (the others are kept from quality.json)")
    args = parser.parse_args(argv)
    started = time.time()
    results = run_quality(args.full, args.out, tuple(args.parts))
    (args.out / "quality.json").write_text(json.dumps(stamp(results, command_line("quality.py", argv), started), indent=2))
    print(quality_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
