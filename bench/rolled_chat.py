"""Speculative decoding late in a long chat: acceptance and speedup in the fifth turn of a conversation whose
context has rolled, against its first turn, on the default model with its draft head.

    .venv/bin/python bench/rolled_chat.py                 # 6 conversations, n_ctx 384, 96 tokens a reply
    .venv/bin/python bench/rolled_chat.py --chats 2       # a quick look

Each conversation takes five consecutive prompts of ``bench/data/free_chat_prompts.txt`` as its user turns. Turns 1-4
are answered plainly (greedy) with a small n_ctx, so the context rolls during plain replies: the case in which the
draft head once kept a stale cache (``tests/test_stale_drafter.py``). Turn 5 is then answered by each mode from that
same history, and turn 1 by each mode from an empty cache; every run starts from the plain history replayed (the
cache reset and turns 1-4 regenerated), so all modes see the same tokens. Per turn and mode: decode tokens/s,
speedup over autoregressive decoding of the same turn, acceptance, and whether the context rolled before the turn.
Medians over conversations. Prints a Markdown table; ``--json`` writes the numbers too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.free_chat import read_prompts  # noqa: E402
from inference.chat import ChatSession  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.events import Finished, GenerationStats  # noqa: E402
from inference.models.default_head import default_head_dir  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings  # noqa: E402

#: mode name -> (decoding, K)
MODES = {
    "autoregressive": (Decoding.AUTOREGRESSIVE, 1),
    "head K=1": (Decoding.DRAFT_MODEL, 1),
    "auto": (Decoding.AUTO, 1),
}
TURNS = 5


def settings_for(decoding: Decoding, k: int, n_ctx: int, max_tokens: int) -> GenerationSettings:
    return GenerationSettings(
        decoding=decoding,
        sampling=SamplingSettings(max_new_tokens=max_tokens),
        context=ContextSettings(n_ctx=n_ctx),
        speculative=SpeculativeSettings(k=k),
    )


def _reply(session: ChatSession, text: str, settings: GenerationSettings) -> GenerationStats:
    return next(e.stats for e in session.send(text, settings) if isinstance(e, Finished))


def turn(engine: Engine, prompts: list[str], last: int, settings: GenerationSettings, plain: GenerationSettings) -> tuple[GenerationStats, int]:
    """Reset, answer ``prompts[:last]`` plainly, then ``prompts[last]`` with ``settings``; the last reply's stats and
    the rolls before it."""
    engine.reset()
    session = ChatSession(engine)
    rolls = sum(_reply(session, text, plain).rolls for text in prompts[:last])
    return _reply(session, prompts[last], settings), rolls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=6, help="conversations (five prompts each)")
    parser.add_argument("--n-ctx", type=int, default=384)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    engine = Engine.load(ensure_default_model(4), draft_dir=default_head_dir())
    prompts = [prompt for _, prompt in read_prompts()]
    plain = settings_for(Decoding.AUTOREGRESSIVE, 1, args.n_ctx, args.max_tokens)
    rows: dict[tuple[int, str], list[dict]] = {}
    for chat in range(args.chats):
        turns = prompts[chat * TURNS : (chat + 1) * TURNS]
        for index in (0, TURNS - 1):
            runs = {}
            for mode, (decoding, k) in MODES.items():
                runs[mode] = turn(engine, turns, index, settings_for(decoding, k, args.n_ctx, args.max_tokens), plain)
            base = runs["autoregressive"][0].decode_tokens_per_s
            for mode, (stats, rolls) in runs.items():
                rows.setdefault((index + 1, mode), []).append({
                    "tokens_per_s": stats.decode_tokens_per_s,
                    "speedup": stats.decode_tokens_per_s / base if base else 0.0,
                    "acceptance": stats.acceptance_rate,
                    "rolled_before": rolls > 0,
                })
    print("| turn | mode | tokens/s | speedup | acceptance | chats rolled before the turn |\n| --- | --- | --- | --- | --- | --- |")
    summary = []
    for (number, mode), runs in sorted(rows.items()):
        accepted = [r["acceptance"] for r in runs if r["acceptance"] is not None]
        row = {
            "turn": number, "mode": mode,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
            "speedup": statistics.median(r["speedup"] for r in runs),
            "acceptance": statistics.median(accepted) if accepted else None,
            "rolled": sum(r["rolled_before"] for r in runs), "chats": len(runs),
        }
        summary.append(row)
        acceptance = "" if row["acceptance"] is None else f"{row['acceptance']:.2f}"
        print(f"| {number} | {mode} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f}x | {acceptance} | "
              f"{row['rolled']}/{row['chats']} |")
    if args.json:
        args.json.write_text(json.dumps({"n_ctx": args.n_ctx, "max_tokens": args.max_tokens, "rows": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
