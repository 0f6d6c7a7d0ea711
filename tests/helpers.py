"""Helpers shared by the tests: the engine's prompts and settings, coroutines off the GUI loop, a child process held
to file permissions as root too."""

from __future__ import annotations

import os

import pytest

from inference.devices import device_computes, native_precisions
from inference.exactness import first_difference
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SettingError,
    SpeculativeSettings,
)

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


def engine_refuses_long_system_prompts(monkeypatch) -> None:
    """Make the engine refuse a reply whose system prompt leaves no room in n_ctx, before its first token, as it did
    until 2026-12-07 with ``n_keep="auto"`` (now it pins only the sinks there: ``ContextSettings.resolve``): a refusal
    only the engine can make (it counts the prompt's tokens: ``resolve(system_prompt_tokens)``), which the window's own
    check (``resolve()`` without them) passes. No setting the window accepts is refused so any more (a grammar found
    unfollowable mid-reply still is): the front ends' handling of such a refusal is tested with this one."""
    resolve = ContextSettings.resolve

    def refusing(self, system_prompt_tokens: int = 0):
        if system_prompt_tokens >= self.n_ctx - 1:
            raise SettingError(
                "n_keep",
                f"n_keep='auto' pins the {system_prompt_tokens}-token system prompt, which leaves no room in "
                f"n_ctx={self.n_ctx}: raise n_ctx, shorten the system prompt, or set n_keep to a number",
            )
        return resolve(self, system_prompt_tokens)

    monkeypatch.setattr(ContextSettings, "resolve", refusing)


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


#: Linux capabilities by which root ignores file permissions (linux/capability.h), and the one that drops them.
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER, _CAP_SETPCAP = 1, 2, 3, 8
_PR_CAPBSET_DROP = 24


def bound_by_permissions():
    """``subprocess`` keyword arguments that hold the child to file permissions, as root too: for root (CI runs as
    root), a ``preexec_fn`` that drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER from the child's
    capability bounding set before it execs, so the program it runs reads and writes a file only as its mode bits
    allow (a root-owned file: its owner bits). No mount namespace, FUSE or other user needed; it needs only
    CAP_SETPCAP, which root has in containers too. For anyone else: nothing to add.

    Skips the test where root lacks CAP_SETPCAP.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return {}
    effective = next(line for line in open("/proc/self/status") if line.startswith("CapEff:"))
    if not int(effective.split()[1], 16) >> _CAP_SETPCAP & 1:
        pytest.skip("root without CAP_SETPCAP cannot give up its right to ignore file permissions here")

    def drop() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")

    return {"preexec_fn": drop}


#: A chat-completions function tool the tool tests share (a city from three, 1-7 days).
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city over the next days.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


def attention_kinds(compiled) -> set[str]:
    """The kinds of a compiled graph's nodes that compute attention, as the CPU plugin runs them (fused:
    ``ScaledDotProductAttention``; decomposed: ``MatMul`` and ``Softmax``)."""
    kinds = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
    return kinds & {"ScaledDotProductAttention", "Softmax", "MatMul"}
