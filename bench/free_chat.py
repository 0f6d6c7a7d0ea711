"""Free-chat benchmark: how much faster speculative decoding makes ordinary chat on the default model.

    .venv/bin/python bench/free_chat.py                # 55 prompts x 3 repetitions, greedy and chat defaults
    .venv/bin/python bench/free_chat.py --prompts 12 --reps 1   # a quick look (a few minutes)
    .venv/bin/python bench/free_chat.py --samplings greedy --modes autoregressive auto   # one sampling, two modes

Prompts: ``bench/data/free_chat_prompts.txt`` (advice, explanation, story, how-to, opinion, lists; written for the
benchmark, never trained on: ``tools/draft_head`` refuses training prompts that overlap them). Each is sent as a
one-message chat with the template's default system prompt, as the window sends it; replies run to EOS or
``--max-tokens`` (default 256). Samplings: greedy, and the chat defaults (the Model default preset: temperature 0.7, top-p 0.9, repetition
penalty 1.1; seed = prompt index, the same for every mode but Auto, whose sampled replies are unseeded as in the
window: a seed would fix its drafter and K). Modes: autoregressive, prompt lookup, the draft head at
K = 1 and 2, and Auto (head, lookup or plain, K chosen per step); each repetition runs every mode on a prompt back to back (rotating
which goes first) from an empty cache, so all modes share the machine's state. ``plain again`` is plain decoding
measured as a mode against itself: its slowest prompt and count below ``NEVER_SLOWER`` are what the benchmark's noise
alone gives (quiet Xeon with AMX, 54 x 3, two runs: 1-2 prompts below 0.97x greedy, 2-3 at the chat defaults,
the slowest at 0.955-0.97x; ``results/xeon-amx/noise``).

Per sampling x mode (medians over repetitions): decode tokens/s over all prompts (sum of tokens after the first
over the sum of decode times), speedup over autoregressive decoding of the same repetition, acceptance rate, mean
tokens emitted per target pass, the share of steps that drafted nothing (plain steps: Auto's choice, or no draft
offered), and the speedup predicted from the measured acceptance and the cost ratios of the
passes (``pass_costs``: a target pass over n tokens, a head pass and the price of a change of pass width, in units
of a one-token target pass, measured at the start of every repetition, medians): predicted = tokens per pass / mean
cost of a step; measured / predicted is the speculative
efficiency (below 1: time lost outside the passes). Greedy runs also count replies identical to the
autoregressive one.

The report ends with what would reach the issue's bars (``BARS``): for each head mode, the acceptance rate that would
give the bar at this run's pass costs and efficiency (``acceptance_needed``: drafts accepted independently with that
rate), the held-out acceptance that corresponds (scaled by this run's ratio of benchmark to held-out acceptance of the
shipped head), and the training data that the head's learning curve (``bench/results/head_learning_curve.json``)
reaches it with, extrapolating the segment between its last two runs from scratch (acceptance linear in log2
of the training tokens).

Writes ``bench/results/free_chat.json`` and ``bench/results/FREE_CHAT.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

from inference.chat import ChatSession  # noqa: E402
from inference.draft_head import load_head  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.events import Finished, StepStats  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import LoadedModel, load_model  # noqa: E402
from inference.models.default_head import default_head_dir  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings  # noqa: E402

PROMPTS = HERE / "data" / "free_chat_prompts.txt"
LEARNING_CURVE = HERE / "results" / "head_learning_curve.json"
#: Issue 22's bars: speedup over autoregressive decoding (greedy: 1.3x, goal 1.5x; chat defaults: 1.2x).
BARS = {"greedy": (1.3, 1.5), "chat defaults": (1.2,)}
#: The held-out figure of the learning curve that each sampling's benchmark acceptance follows.
HELD_OUT_FIGURE = {"greedy": "greedy_accept_1", "chat defaults": "sampled_accept_1"}
DEFAULT_MAX_NEW_TOKENS = 256
#: Auto's per-prompt bar (issue 34): no prompt's speedup, its median over repetitions, below this.
NEVER_SLOWER = 0.97
SAMPLINGS = {
    "greedy": {"temperature": 0.0},
    "chat defaults": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1},
}
#: mode name -> (decoding, K, K chosen per step as Auto chooses it: ``SpeculativeSettings.adaptive``)
MODES = {
    "autoregressive": (Decoding.AUTOREGRESSIVE, 1, False),
    "prompt lookup K=3": (Decoding.PROMPT_LOOKUP, 3, False),
    "head K=1": (Decoding.DRAFT_MODEL, 1, False),
    "head K=2": (Decoding.DRAFT_MODEL, 2, False),
    "auto": (Decoding.AUTO, 2, False),
    "plain again": (Decoding.AUTOREGRESSIVE, 1, False),  # the noise control: plain decoding against itself
}


def read_prompts(path: Path = PROMPTS) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, prompt = line.split("\t", 1)
            pairs.append((kind, prompt))
    return pairs


def settings_for(mode: str, sampling: str, seed: int, max_new_tokens: int) -> GenerationSettings:
    """The settings of one reply. Auto's sampled replies get no seed: a seeded sampled reply drafts with a fixed
    drafter and K (``auto_decoding.seeded_sampling``), so a seed would measure that, not Auto's choices; the window's chats
    are unseeded. The speed comparison stands (the texts differ by design when sampling)."""
    decoding, k, adaptive = MODES[mode]
    if decoding is Decoding.AUTO and sampling != "greedy":
        seed = None
    return GenerationSettings(
        decoding=decoding,
        sampling=SamplingSettings(max_new_tokens=max_new_tokens, seed=seed, **SAMPLINGS[sampling]),
        context=ContextSettings(n_ctx=4096),
        speculative=SpeculativeSettings(k=k, adaptive=adaptive),
    )


def _median_ms(function, repeats: int = 40, setup=None) -> float:
    """Median milliseconds of ``function`` over ``repeats`` calls, the first quarter dropped; ``setup``, when given,
    runs untimed before each call."""
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[repeats // 4 :])


def pass_costs(engine: Engine, plain: LoadedModel, prompt_ids: list[int], max_tokens: int = 4) -> dict:
    """Milliseconds of a target pass over 1..max_tokens tokens and of one-token head passes (``head_1``,
    ``head_next``), after the prompt is cached (medians of 40, the first quarter dropped), and each as a share of the
    one-token target pass.

    ``head_1`` is a head pass right after a two-token target pass, as a step's first draft runs (the target's
    weights have just gone through the caches: 1.9 ms a pass in a K = 1 reply's profile against 0.7 ms for head
    passes back to back, Xeon with AMX, 2026-12-06); ``head_next`` one right after another head pass, as a step's
    further drafts run.

    ``plain`` is the target compiled without the hidden-state output a head reads: ``target_1_plain`` is its
    one-token pass, measured in turns with ``target_1`` (medians of 5 rounds of 20 each: what exposing the hidden
    states costs a decode step). ``switch`` is what a pass costs beyond its own width's when the pass before it had
    another width (OpenVINO re-derives the graph's shapes: ``bench/pass_shapes.py``): half of a one-token and a
    two-token pass taken in turns, less both taken at their own width."""
    target, head = engine.target, engine.draft
    cache = KVCache(target.compiled, target.rope, kept_outputs=head.target_outputs)
    cache.forward(prompt_ids)
    length = len(cache)
    plain_cache = KVCache(plain.compiled, plain.rope)
    plain_cache.forward(prompt_ids)

    def pass_over(cached: KVCache, n: int):
        def step():
            cached.forward(prompt_ids[-n:])
            cached.truncate(length)
        return step

    with_hidden, without = [], []
    for _ in range(5):
        with_hidden.append(_median_ms(pass_over(cache, 1), repeats=20))
        without.append(_median_ms(pass_over(plain_cache, 1), repeats=20))
    costs = {"target_1": statistics.median(with_hidden), "target_1_plain": statistics.median(without)}
    for n in range(2, max_tokens + 1):
        costs[f"target_{n}"] = _median_ms(pass_over(cache, n))
    one, two = pass_over(cache, 1), pass_over(cache, 2)
    alternating = _median_ms(lambda: (one(), two()))
    costs["switch"] = max(0.0, (alternating - costs["target_1"] - costs["target_2"]) / 2)
    head_cache = KVCache(head.compiled, head.rope)
    head_cache.forward(prompt_ids[1:], inputs=head.inputs_from_target(cache, 0, length - 1), last_only=True)
    head_length = len(head_cache)
    row = {name: value.copy() for name, value in head.inputs_from_target(cache, length - 1, length).items()}

    def head_step():
        head_cache.forward(prompt_ids[-1:], inputs=row, last_only=True)
        head_cache.output("draft_hidden")
        head_cache.truncate(head_length)

    costs["head_1"] = _median_ms(head_step, setup=two)
    costs["head_next"] = _median_ms(head_step)
    base = costs["target_1"]
    return {"ms": costs, "ratio": {name: value / base for name, value in costs.items()}}


@dataclass
class Run:
    """One reply: its tokens and the numbers the report aggregates."""

    tokens: list[int]
    decode_tokens: int  # tokens after the first
    decode_s: float
    drafted: int
    accepted: int
    steps: list[tuple[int, int]] = field(default_factory=list)  # (drafted, emitted) per target pass


def run_one(engine: Engine, ids: list[int], settings: GenerationSettings) -> Run:
    engine.reset()
    steps = []
    stats = None
    for event in engine.generate(ids, settings):
        if isinstance(event, StepStats):
            steps.append((event.drafted, event.emitted))
        elif isinstance(event, Finished):
            stats = event.stats
    decode_s = (stats.new_tokens - 1) / stats.decode_tokens_per_s if stats.decode_tokens_per_s else 0.0
    return Run(stats.token_ids, max(stats.new_tokens - 1, 0), decode_s, stats.drafted, stats.accepted, steps)


def median_costs(measured: list[dict]) -> dict:
    """Medians over repetitions of ``pass_costs`` (milliseconds), with the ratios recomputed from them."""
    ms = {name: statistics.median(m["ms"][name] for m in measured) for name in measured[0]["ms"]}
    return {"ms": ms, "ratio": {name: value / ms["target_1"] for name, value in ms.items()}, "repetitions": len(measured)}


def tokens_per_pass(acceptance: float, k: int) -> float:
    """Expected tokens per target pass with K drafts each accepted with probability ``acceptance`` until the first
    rejection, plus the target's own token (Leviathan et al., arXiv 2211.17192, equation 1)."""
    return sum(acceptance**i for i in range(k + 1))


def head_cost(k: int, ratios: dict) -> float:
    """What drafting ``k`` tokens with the head costs a step, in one-token target passes: its first pass right after
    the target's (``head_1``), the others right after its own (``head_next``; ``head_1`` in results measured before
    the two were told apart)."""
    return ratios["head_1"] + (k - 1) * ratios.get("head_next", ratios["head_1"]) if k > 0 else 0.0


def acceptance_needed(speedup: float, k: int, ratios: dict, efficiency: float) -> float | None:
    """The per-draft acceptance rate at which a head drafting K tokens per step reaches ``speedup``: tokens per pass
    over the cost of a step (a target pass over K + 1 tokens and K head passes, ``head_cost``; ``ratios`` in one-token
    target passes) times ``efficiency`` (measured / predicted speedup). None when even acceptance 1 falls short."""
    cost = ratios[f"target_{k + 1}"] + head_cost(k, ratios)
    wanted = speedup * cost / efficiency
    if tokens_per_pass(1.0, k) < wanted:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if tokens_per_pass(middle, k) < wanted else (low, middle)
    return high


def training_tokens_for(curve: list[dict], figure: str, acceptance: float) -> float | None:
    """Training reply tokens at which the segment between the learning curve's last two runs from scratch
    (acceptance linear in log2 of the tokens) reaches ``acceptance`` of held-out ``figure``; None if it does not
    rise. Points marked ``"fine_tune": true`` are skipped: their gain is partly the earlier run's training time."""
    first, last = [point for point in curve if not point.get("fine_tune")][-2:]
    slope = (last[figure] - first[figure]) / math.log2(last["train_reply_tokens"] / first["train_reply_tokens"])
    if slope <= 0:
        return None
    return last["train_reply_tokens"] * 2 ** ((acceptance - last[figure]) / slope)


def what_reaches_the_bars(table: dict, ratios: dict, curve: list[dict], shipped: dict) -> list[dict]:
    """For each sampling x head mode x bar: the acceptance that reaches it (see ``acceptance_needed``), the held-out
    acceptance that maps to (this run's ratio of benchmark to the shipped head's held-out acceptance) and the
    training tokens the learning curve reaches that with."""
    rows = []
    for key, row in table.items():
        sampling, mode = key.split(" | ")
        decoding, k, adaptive = MODES[mode]
        if decoding is not Decoding.DRAFT_MODEL or adaptive or not row.get("acceptance") or not row.get("efficiency"):
            continue
        figure = HELD_OUT_FIGURE[sampling]
        scale = row["acceptance"] / shipped[figure]
        for bar in BARS[sampling]:
            needed = acceptance_needed(bar, k, ratios, row["efficiency"])
            held_out = needed / scale if needed is not None else None
            tokens = training_tokens_for(curve, figure, held_out) if held_out is not None and held_out < 1 else None
            rows.append({"sampling": sampling, "mode": mode, "bar": bar, "speedup": row["speedup"],
                         "acceptance": row["acceptance"], "efficiency": row["efficiency"], "needed": needed,
                         "held_out_needed": held_out, "held_out_now": shipped[figure], "training_tokens": tokens})
    return rows


def predicted_speedup(runs: list[Run], ratios: dict, head: bool) -> float | None:
    """Tokens per target pass over the mean cost of a step (a target pass over 1 + drafted tokens, plus one head
    pass per draft when the head drafts (``head_cost``), plus ``ratios["switch"]`` where the pass's width differs from the reply's
    previous pass), in one-token target passes."""
    emitted = cost = 0.0
    for run in runs:
        previous_width = 1  # the prompt's last pass is followed by one-token steps in plain decoding too
        for drafted, produced in run.steps:
            emitted += produced
            verify = ratios.get(f"target_{1 + drafted}")
            if verify is None:
                return None
            cost += verify + (head_cost(drafted, ratios) if head else 0.0)
            cost += ratios["switch"] if 1 + drafted != previous_width else 0.0
            previous_width = 1 + drafted
    return emitted / cost if cost else None


def summarize(runs: dict, ratios: dict, modes: list[str], reps: int, samplings: list[str]) -> dict:
    """Per sampling x mode: medians over repetitions of tokens/s and speedup, and pooled acceptance figures."""
    table = {}
    for sampling in samplings:
        for mode in modes:
            per_rep = []
            for rep in range(reps):
                own = runs[(sampling, mode, rep)]
                base = runs[(sampling, "autoregressive", rep)]
                rate = sum(r.decode_tokens for r in own) / sum(r.decode_s for r in own)
                base_rate = sum(r.decode_tokens for r in base) / sum(r.decode_s for r in base)
                per_rep.append((rate, rate / base_rate))
            pooled = [r for rep in range(reps) for r in runs[(sampling, mode, rep)]]
            drafted = sum(r.drafted for r in pooled)
            accepted = sum(r.accepted for r in pooled)
            passes = sum(len(r.steps) for r in pooled)
            emitted = sum(produced for r in pooled for _, produced in r.steps)
            row = {
                "tokens_per_s": statistics.median(p[0] for p in per_rep),
                "speedup": statistics.median(p[1] for p in per_rep),
                "acceptance": accepted / drafted if drafted else None,
                "tokens_per_pass": emitted / passes if passes else None,
                "plain_steps": sum(drafts == 0 for r in pooled for drafts, _ in r.steps) / passes if passes else None,
                "mean_reply_tokens": statistics.mean(len(r.tokens) for r in pooled),
            }
            if mode != "autoregressive":
                row.update(per_prompt_speedups(runs, sampling, mode, reps))
                predicted = predicted_speedup(pooled, ratios, head=MODES[mode][0] is Decoding.DRAFT_MODEL)
                row["predicted"] = predicted
                row["efficiency"] = row["speedup"] / predicted if predicted else None
            if sampling == "greedy":
                same = sum(
                    runs[(sampling, mode, rep)][i].tokens == runs[(sampling, "autoregressive", rep)][i].tokens
                    for rep in range(reps) for i in range(len(runs[(sampling, mode, rep)]))
                )
                row["identical"] = f"{same}/{len(pooled)}"
            table[f"{sampling} | {mode}"] = row
    return table


def per_prompt_speedups(runs: dict, sampling: str, mode: str, reps: int) -> dict:
    """Each prompt's speedup (its reply's decode tokens/s over the autoregressive reply's to the same prompt in the
    same repetition), median over repetitions: the slowest prompt's, how many fall below ``NEVER_SLOWER``, and each
    prompt's in the order of the prompts measured (replies of one token, which measure no decode rate, are left
    out)."""
    medians = []
    for index in range(len(runs[(sampling, mode, 0)])):
        ratios = []
        for rep in range(reps):
            own, base = runs[(sampling, mode, rep)][index], runs[(sampling, "autoregressive", rep)][index]
            if own.decode_s > 0 and base.decode_s > 0:
                ratios.append((own.decode_tokens / own.decode_s) / (base.decode_tokens / base.decode_s))
        if ratios:
            medians.append(statistics.median(ratios))
    return {
        "slowest_prompt": min(medians, default=None),
        "prompts_below": sum(m < NEVER_SLOWER for m in medians),
        "prompts_measured": len(medians),
        "per_prompt": [round(m, 3) for m in medians],
    }


def markdown(results: dict) -> str:
    lines = [
        "# Free-chat benchmark",
        "",
        f"- Machine: {results['machine']}",
        f"- Command: `{results['command']}` at commit {results['commit']}, {results['finished']} "
        f"({results['minutes']} min)",
        f"- {results['prompts']} prompts (bench/data/free_chat_prompts.txt), replies to EOS or {results['max_new_tokens']} tokens, "
        f"{results['reps']} repetitions; numbers are medians over repetitions, acceptance pooled.",
        "- Pass costs (one-token target pass = 1): "
        + ", ".join(f"{k} {v:.2f}" for k, v in results["pass_costs"]["ratio"].items())
        + f" (one-token target pass {results['pass_costs']['ms']['target_1']:.2f} ms)",
        "- The hidden-state output a head reads: a one-token target pass takes "
        f"{results['pass_costs']['ms']['target_1']:.2f} ms with it, "
        f"{results['pass_costs']['ms']['target_1_plain']:.2f} ms without (medians of 5 alternating rounds of 20)",
        "",
        f"- Slowest prompt: the lowest per-prompt speedup (median over repetitions); below {NEVER_SLOWER}x: how many "
        "prompts fall under the bar Auto must meet.",
        "",
        "| sampling | mode | tokens/s | speedup | slowest prompt | below " f"{NEVER_SLOWER}x"
        " | acceptance | tokens per pass | plain steps | predicted | efficiency | identical |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    for key, row in results["table"].items():
        sampling, mode = key.split(" | ")
        lines.append(
            f"| {sampling} | {mode} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f}x | "
            f"{fmt(row.get('slowest_prompt'), '{:.2f}x')} | "
            f"{fmt(row.get('prompts_below'), '{}')}{'/' + str(row['prompts_measured']) if 'prompts_measured' in row else ''} | "
            f"{fmt(row['acceptance'], '{:.2f}')} | {fmt(row['tokens_per_pass'], '{:.2f}')} | "
            f"{fmt(row.get('plain_steps'), '{:.0%}')} | {fmt(row.get('predicted'), '{:.2f}x')} | {fmt(row.get('efficiency'), '{:.2f}')} | {row.get('identical', '—')} |"
        )
    if results.get("bars"):
        lines += [
            "", "## What would reach the bars", "",
            "Acceptance needed: the per-draft acceptance at which the mode reaches the bar at this run's pass costs and "
            "efficiency (drafts accepted independently). Held out: the same scaled by this run's ratio of benchmark to "
            "held-out acceptance of the shipped head. Training tokens: where the head's learning curve "
            "(`bench/results/head_learning_curve.json`, the segment between its last two runs from scratch extended, "
            "linear in log2 of the tokens) "
            "reaches that held-out acceptance; more data is one way, a cheaper verification pass or head another.", "",
            "| sampling | mode | bar | measured | acceptance now / needed | held out now / needed | training reply tokens |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in results["bars"]:
            lines.append(
                f"| {row['sampling']} | {row['mode']} | {row['bar']:.1f}x | {row['speedup']:.2f}x | "
                f"{row['acceptance']:.2f} / {fmt(row['needed'], '{:.2f}')} | {row['held_out_now']:.2f} / "
                f"{fmt(row['held_out_needed'], '{:.2f}')} | {fmt(row['training_tokens'], '{:,.0f}')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, help="use the first N prompts (default: all)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES), metavar="MODE",
                        help="modes to run, autoregressive first (default: all of " + ", ".join(MODES) + ")")
    parser.add_argument("--samplings", nargs="+", choices=list(SAMPLINGS), default=list(SAMPLINGS), metavar="SAMPLING",
                        help="samplings to run (default: " + ", ".join(map(repr, SAMPLINGS)) + ")")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="longest reply (default 256)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if "autoregressive" not in args.modes:
        parser.error("--modes must include autoregressive: the speedups are measured against it")
    started = time.time()
    target_dir = ensure_default_model(4)
    head = load_head(default_head_dir())
    engine = Engine(load_model(target_dir, "CPU", PrecisionSettings(), feature_layers=head.feature_layers), head)
    plain = load_model(target_dir, "CPU", PrecisionSettings(), hidden_states=False)
    prompts = read_prompts()[: args.prompts]
    ids = [ChatSession(engine, messages=[{"role": "user", "content": p}]).prompt_ids() for _, p in prompts]
    modes = args.modes
    runs: dict = {}
    measured_costs = []
    for rep in range(args.reps):
        measured_costs.append(pass_costs(engine, plain, ids[rep % len(ids)]))
        costs = median_costs(measured_costs)
        for sampling in args.samplings:
            for mode in modes:
                runs[(sampling, mode, rep)] = []
            for index, prompt_ids in enumerate(ids):
                rotation = (index + rep) % len(modes)
                for mode in modes[rotation:] + modes[:rotation]:
                    runs[(sampling, mode, rep)].append(run_one(engine, prompt_ids, settings_for(mode, sampling, index, args.max_tokens)))
                print(f"rep {rep + 1}/{args.reps} {sampling}: prompt {index + 1}/{len(ids)}", file=sys.stderr, flush=True)
        # written after every repetition, so that an interrupted run leaves the repetitions it finished
        results = {
            **run_stamp("free_chat.py", argv, started), "prompts": len(ids), "reps": rep + 1,
            "max_new_tokens": args.max_tokens, "head": json.loads((default_head_dir() / "draft_head.json").read_text())["training"],
            "pass_costs": costs, "table": summarize(runs, costs["ratio"], modes, rep + 1, args.samplings),
        }
        curve = json.loads(LEARNING_CURVE.read_text())["points"]
        results["bars"] = what_reaches_the_bars(results["table"], costs["ratio"], curve, results["head"]["held_out"])
        write_result(args.out, "free_chat", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
