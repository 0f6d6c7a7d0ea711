"""A long paste at each context length: what the cut keeps, the time to first token, the decode speed after it.

    .venv/bin/python bench/long_paste.py 4096 8192     # about 1 minute on 2 cores (Xeon with AMX)

The newcomer trial's message: "Summarize this text in two sentences:" above 36,000 characters of Genesis (KJV),
9,130 tokens on the default model, sent in a new chat (``ChatSession.send``) at the app's default precision, greedy,
512 tokens allowed for the reply; the reply is stopped after 64 tokens. Prints, per n_ctx: the prompt's tokens,
those kept and skipped (``PromptOverflow``), TTFT (seconds), tokens prefilled, decode tokens/s, tokens cached, the f32
KV cache's size (45 KiB a token on the default model) and the reply's start. Each n_ctx from an empty cache, in one
process, after a two-token warm-up reply.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from inference.chat import ChatSession  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.events import Finished, PromptOverflow, TextDelta  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.settings import ContextSettings, GenerationSettings, SamplingSettings  # noqa: E402

INSTRUCTION = "Summarize this text in two sentences:"
PASTE_CHARS = 36_000
REPLY_TOKENS = 64
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 4  # layers x (key, value) x KV heads x head_dim x f32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n_ctx", type=int, nargs="+", help="context lengths to measure, in order")
    args = parser.parse_args()
    genesis = (HERE / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    engine = Engine.load(ensure_default_model(4))
    list(ChatSession(engine).send("Hi", GenerationSettings(sampling=SamplingSettings(max_new_tokens=2))))
    for n_ctx in args.n_ctx:
        engine.reset()
        settings = GenerationSettings(sampling=SamplingSettings(max_new_tokens=512, temperature=0.0),
                                      context=ContextSettings(n_ctx=n_ctx))
        cancel, written, overflow, stats = threading.Event(), 0, None, None
        for event in ChatSession(engine).send(f"{INSTRUCTION}\n\n{genesis[:PASTE_CHARS]}", settings, cancel):
            if isinstance(event, PromptOverflow):
                overflow = event
            elif isinstance(event, TextDelta):
                written += 1
                if written >= REPLY_TOKENS:
                    cancel.set()
            elif isinstance(event, Finished):
                stats = event.stats
        kept = overflow.prompt_tokens - overflow.discarded_tokens if overflow else stats.prompt_tokens
        message = overflow.message_tokens if overflow else 0
        print(f"n_ctx {n_ctx}: prompt {stats.prompt_tokens}, kept {kept} (the message's first {message}), "
              f"TTFT {stats.ttft_ms / 1e3:.1f} s, prefilled {stats.prefilled_tokens}, decode "
              f"{stats.decode_tokens_per_s:.1f} tokens/s over {stats.new_tokens}, cached {engine.cache_length} "
              f"({engine.cache_length * KV_BYTES_PER_TOKEN / 2**20:.0f} MiB of KV)")
        print("  reply:", stats.text[:200].replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
