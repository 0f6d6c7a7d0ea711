"""Helpers shared by the engine tests."""

from __future__ import annotations

import numpy as np

from inference.settings import ContextSettings, GenerationSettings, SamplingSettings, SpeculativeSettings

NEAR_TIE = 0.1  # logit units: a one-token and a multi-token pass may order two such logits differently
# With rolls every few tokens (n_ctx 32), each roll rewrites the u8 KV cache (dequantize, rotate, requantize), so
# keys/values computed by a multi-token verify pass and a one-token decode pass drift further apart. Flips
# measured in the rolling matrix: top-2 gaps 0.004 and 0.112.
NEAR_TIE_ROLLING = 0.25

PROMPTS = [
    "Rewrite this paragraph in simpler words: The committee convened to deliberate on the proposal, "
    "and after extensive discussion, it was resolved that the matter would be postponed until further notice.",
    "Write a short story about a robot who learns to paint.",
    "Write a Python function that checks whether a number is prime, and explain it.",
    "List five tips for staying productive when working from home.",
    "Why is the sky blue? Explain it to a ten-year-old.",
]


def chat_ids(model, text: str, system: str = "") -> list[int]:
    """Token ids of a one-message chat rendered with the model's template."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return model.encode(model.tokenizer.apply_chat_template(messages, add_generation_prompt=True))


def settings(mode: str = "ar", max_new_tokens: int = 128, k: int = 4, n_ctx: int = 4096, n_keep=4, n_discard: int = -1, adaptive: bool = False, **sampling) -> GenerationSettings:
    """GenerationSettings with the given overrides."""
    return GenerationSettings(
        mode=mode,
        sampling=SamplingSettings(max_new_tokens=max_new_tokens, **sampling),
        context=ContextSettings(n_ctx=n_ctx, n_keep=n_keep, n_discard=n_discard),
        speculative=SpeculativeSettings(k=k, adaptive=adaptive),
    )


def _top_two_gap(engine, ids, first_difference: int, context: dict) -> float:
    engine.reset()
    engine.generate_text(ids, settings("ar", max_new_tokens=first_difference + 1, **context))
    top = np.sort(engine.last_logits)[-2:]
    return float(top[1] - top[0])


def assert_same_or_near_tie(engine, ids, reference, candidate, context: dict, label: str) -> None:
    """Assert two greedy outputs are equal, or first differ where the target's top-2 logits are a near-tie."""
    ar, spec = reference.token_ids, candidate.token_ids
    if ar == spec:
        return
    # where one output is a prefix of the other, that one chose EOS at the next position: a divergence too
    first = next((i for i, (a, b) in enumerate(zip(ar, spec)) if a != b), min(len(ar), len(spec)))
    gap = _top_two_gap(engine, ids, first, context)
    limit = NEAR_TIE_ROLLING if context.get("n_ctx", 4096) < 4096 else NEAR_TIE
    assert gap < limit, f"{label}: diverged at token {first} where the target's top-2 logit gap is {gap:.4f} (limit {limit})"
