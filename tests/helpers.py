"""Helpers shared by the engine tests."""

from __future__ import annotations

import pytest

from inference.devices import device_computes, native_precisions
from inference.exactness import first_difference
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings

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


def settings(decoding: str = "ar", max_new_tokens: int = 128, k: int = 4, n_ctx: int = 4096, n_keep=4, n_discard: int = -1, adaptive: bool = False, **sampling) -> GenerationSettings:
    """GenerationSettings with the given overrides; ``decoding`` is a ``Decoding`` value ("ar", "spec_model",
    "spec_lookup")."""
    return GenerationSettings(
        decoding=Decoding(decoding),
        sampling=SamplingSettings(max_new_tokens=max_new_tokens, **sampling),
        context=ContextSettings(n_ctx=n_ctx, n_keep=n_keep, n_discard=n_discard),
        speculative=SpeculativeSettings(k=k, adaptive=adaptive),
    )


def assert_same_or_near_tie(engine, ids, reference, candidate, context: dict, label: str, k: int = 4) -> None:
    """Assert two greedy outputs are equal, or first differ where the target's top-2 logit gap is within the
    numerical noise measured there between autoregressive and speculative (K = ``k``) decoding of the same tokens
    (``exactness.first_difference``). With exact precision that noise is ~1e-4 logits, so any real difference fails."""
    difference = first_difference(engine, ids, reference.token_ids, candidate.token_ids, settings("ar", **context).context, k)
    assert difference is None or difference.near_tie, f"{label}: {difference.describe()}"


def require_native(precision: str) -> None:
    """Skip the test unless this CPU computes ``precision`` natively (bf16 needs AVX512_BF16 or AMX)."""
    if not device_computes("CPU", precision):
        pytest.skip(f"this CPU computes {', '.join(native_precisions('CPU'))} natively, not {precision} (needs AVX512_BF16/AMX)")


def run_coroutine(coroutine):
    """``asyncio.run(coroutine)`` in a thread of its own, returning its result or raising its exception.

    The GUI tests leave their qasync loop marked as running on the main thread for the whole session, where
    ``asyncio.run`` then refuses to start ("cannot be called from a running event loop").
    """
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-asyncio") as executor:
        return executor.submit(asyncio.run, coroutine).result()
