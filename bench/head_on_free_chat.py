"""How often a draft head's first draft is the target's next token in the free-chat benchmark's own replies: the
held-out acceptance of the replies whose speed ``bench/free_chat.py`` measures.

    .venv/bin/python bench/head_on_free_chat.py                          # the shipped head, 54 prompts (~2 minutes)
    .venv/bin/python bench/head_on_free_chat.py --heads OLD_HEAD NEW_HEAD --prompts 12

The held-out figures of training (``tools/draft_head/train.py``'s evaluation, ``tools/draft_head/acceptance_check``)
score held-out shards of the training corpus: replies of up to 256 tokens, half of them sampled, whose greedy ones
often loop in their second half, where a head guesses the next token easily. The benchmark's replies are the target's
greedy replies of up to ``--max-tokens`` (128, as the benchmark runs) to prompts never trained on
(``bench/data/free_chat_prompts.txt``). This measures a head there.

For each prompt the target decodes its greedy reply once (plain decoding, as the benchmark's autoregressive greedy
mode does, with the template's default system prompt). Each head then reads the whole conversation's features as
the target computes them in one pass (its catch-up, ``HeadDrafter.first_draft_logits``), and its first draft at every
reply position after the first is compared with the reply's token there (teacher forcing: every position is scored,
not only those a decoding drafts at; the first reply token comes from the prompt's pass, which drafts nothing).
Reported per head: the pooled acceptance, by kind of prompt and by position in the reply.

Writes ``OUT/head_on_free_chat.json`` and ``OUT/HEAD_ON_FREE_CHAT.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from free_chat import read_prompts, run_one, settings_for  # noqa: E402
from provenance import run_stamp, write_result  # noqa: E402

from inference.chat import ChatSession  # noqa: E402
from inference.draft_head import LoadedHead, load_head  # noqa: E402
from inference.drafting import HeadDrafter  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import LoadedModel, load_model  # noqa: E402
from inference.models.default_head import default_head_dir  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402

N_CTX = 4096
#: Reply positions reported apart: [start, end) in reply tokens (the first is never drafted).
POSITION_BUCKETS = ((1, 32), (32, 128), (128, 1 << 30))


def greedy_reply(engine: Engine, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """The target's greedy reply to ``prompt_ids`` (token ids, EOS included where it ended), decoded plainly from an
    empty cache, as ``free_chat.py``'s autoregressive greedy mode decodes it."""
    return list(run_one(engine, prompt_ids, settings_for("autoregressive", "greedy", 0, max_tokens)).tokens)


def first_draft_hits(head: LoadedHead, target: LoadedModel, prompt_ids: list[int], reply: list[int]) -> np.ndarray:
    """Whether the head's greedy first draft is the reply's token, at each reply position 1..len(reply) - 1: bool
    ``[max(len(reply) - 1, 0)]``, entry i for reply token i + 1, the draft a step with reply token i pending makes.

    ``target`` must be compiled with the outputs the head reads (``load_model(feature_layers=...)``)."""
    context = list(prompt_ids) + list(reply)
    if len(reply) < 2:
        return np.zeros(0, dtype=bool)
    cache = KVCache(target.compiled, target.rope, kept_outputs=head.target_outputs)
    cache.forward(context, N_CTX, last_only=True)
    start, logits = HeadDrafter(head, cache, target.vocab_size).first_draft_logits(context, N_CTX)
    drafted = head.vocab[np.argmax(logits, axis=-1)]  # row j: the draft for context[start + j + 2]
    first = len(prompt_ids) - 1 - start  # the row whose draft is reply token 1
    return drafted[first:] == np.asarray(context[len(prompt_ids) + 1 :])


def summarize(hits: list[np.ndarray], kinds: list[str]) -> dict:
    """Pooled, per-kind and per-position-bucket acceptance of one head's ``hits`` (one array per prompt)."""
    pooled = np.concatenate(hits) if hits else np.zeros(0, dtype=bool)
    by_kind = {}
    for kind in dict.fromkeys(kinds):
        mine = np.concatenate([h for h, k in zip(hits, kinds) if k == kind])
        by_kind[kind] = {"acceptance": float(mine.mean()) if len(mine) else None, "positions": int(len(mine))}
    by_position = {}
    for lo, hi in POSITION_BUCKETS:
        inside = np.concatenate([h[lo - 1 : hi - 1] for h in hits]) if hits else np.zeros(0, dtype=bool)
        if len(inside):
            by_position[f"{lo}-{hi - 1}" if hi < 1 << 30 else f"{lo}+"] = {
                "acceptance": float(inside.mean()), "positions": int(len(inside))}
    return {"acceptance": float(pooled.mean()) if len(pooled) else None, "positions": int(len(pooled)),
            "per_prompt": [round(float(h.mean()), 3) if len(h) else None for h in hits],
            "by_kind": by_kind, "by_position": by_position}


def markdown(results: dict) -> str:
    heads = results["heads"]
    lines = ["# A draft head on the free-chat benchmark's replies", "",
             f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
             f"{results['finished']} ({results['minutes']:.1f} min)",
             f"- {results['prompts']} prompts (bench/data/free_chat_prompts.txt), the target's greedy replies to EOS or "
             f"{results['max_new_tokens']} tokens; every reply position after the first scored (teacher forcing).", ""]
    kinds = list(next(iter(heads.values()))["by_kind"]) if heads else []
    buckets = list(next(iter(heads.values()))["by_position"]) if heads else []
    lines += ["| head | positions | first draft | " + " | ".join(kinds) + " | "
              + " | ".join(f"reply tokens {b}" for b in buckets) + " |",
              "| --- | --- | --- | " + " | ".join("---" for _ in kinds + buckets) + " |"]
    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    for name, head in heads.items():
        lines.append(f"| {name} | {head['positions']:,} | **{figure(head['acceptance'])}** | "
                     + " | ".join(figure(head["by_kind"][k]["acceptance"]) for k in kinds) + " | "
                     + " | ".join(figure(head["by_position"].get(b, {}).get("acceptance")) for b in buckets) + " |")
    if len(heads) == 2:
        first, second = (np.asarray(h["per_prompt"], dtype=float) for h in heads.values())
        scored = ~(np.isnan(first) | np.isnan(second))  # a reply of one token has no position to score
        first, second = first[scored], second[scored]
        lines += ["", f"The second head against the first, prompt by prompt: better on {(second > first).sum()}, "
                  f"worse on {(second < first).sum()}, equal on {(second == first).sum()}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", nargs="+", type=Path, help="head folders (default: the shipped head)")
    parser.add_argument("--prompts", type=int, help="use the first N prompts (default: all)")
    parser.add_argument("--max-tokens", type=int, default=128, help="longest reply (default 128, as the benchmark)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    target_dir = ensure_default_model(4)
    heads = {str(folder): load_head(folder) for folder in (args.heads or [default_head_dir()])}
    targets: dict[tuple[int, ...], LoadedModel] = {}
    for head in heads.values():
        if head.feature_layers not in targets:
            targets[head.feature_layers] = load_model(target_dir, "CPU", PrecisionSettings(),
                                                      feature_layers=head.feature_layers)
    engine = Engine(next(iter(targets.values())))
    prompts = read_prompts()[: args.prompts]
    replies = []
    for index, (_, prompt) in enumerate(prompts):
        ids = ChatSession(engine, messages=[{"role": "user", "content": prompt}]).prompt_ids()
        replies.append((ids, greedy_reply(engine, ids, args.max_tokens)))
        print(f"reply {index + 1}/{len(prompts)}", file=sys.stderr, flush=True)
    kinds = [kind for kind, _ in prompts]
    results = {**run_stamp("head_on_free_chat.py", argv, started), "prompts": len(prompts),
               "max_new_tokens": args.max_tokens, "heads": {}}
    for name, head in heads.items():
        target = targets[head.feature_layers]
        hits = [first_draft_hits(head, target, ids, reply) for ids, reply in replies]
        results["heads"][name] = summarize(hits, kinds)
    results["minutes"] = (time.time() - started) / 60
    write_result(args.out, "head_on_free_chat", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
