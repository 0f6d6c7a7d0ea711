"""Models with sliding-window attention (Mistral, Phi-3, Gemma 2/3): the KV cache stays inside the window.

An exported IR's window counts physical KV slots, dead (masked) ones included, so the dead slots of rejected
drafts would push live tokens out of it. A tiny random Mistral with a 16-token window, converted by SpecChat's
own converter (about 45 s; needs the conversion extra), shows the fault and the fix.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import settings
from tiny_checkpoints import write_tiny_checkpoint

from inference.engine import Engine
from inference.events import Finished, StepStats
from inference.exactness import first_difference
from inference.kv_cache import KVCache
from inference.model import load_model
from inference.models import convert
from inference.precision import PrecisionSettings

WINDOW = 16
EXACT_NOISE = 1e-3  # one-token vs multi-token passes with exact settings: f32 summation order only

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not convert.conversion_available(), reason="needs the conversion extra: pip install 'specchat[convert]'"),
]


@pytest.fixture(scope="module")
def mistrals(tmp_path_factory):
    """Two tiny Mistrals with the same tokenizer and other random weights (16-bit, so only the attention pattern
    matters): the target at exact precision, and a draft that disagrees with it at almost every token."""
    root = tmp_path_factory.mktemp("mistral")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(root / "data"))
    folders = []
    try:
        for seed in (0, 1):
            checkpoint = write_tiny_checkpoint(root / f"checkpoint-{seed}", layers=2, seed=seed)
            config = json.loads((checkpoint / "config.json").read_text())
            config.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=WINDOW)
            (checkpoint / "config.json").write_text(json.dumps(config))
            folders.append(convert.convert_checkpoint(checkpoint, 16, name=f"tiny-mistral-{seed}"))
    finally:
        monkeypatch.undo()
    return load_model(folders[0], "CPU", PrecisionSettings()), load_model(folders[1], "CPU")


@pytest.fixture(scope="module")
def mistral(mistrals):
    return mistrals[0]


def _dead_slots_then_more(model, window):
    """Feed 10 tokens, roll back 5 (5 dead slots), feed 8 more: 13 live tokens in 18 physical slots."""
    tokens = [int(t) for t in np.random.default_rng(0).integers(3, model.vocab_size, 18)]
    cache = KVCache(model.compiled, model.rope, slack=64, window=window)
    cache.forward(tokens[:10])
    cache.truncate(5)
    logits = cache.forward(tokens[10:])
    live = tokens[:5] + tokens[10:]
    fresh = KVCache(model.compiled, model.rope).forward(live)[-len(tokens[10:]) :]  # rows of the last 8 tokens
    return logits, fresh, cache.physical_length


def test_the_window_is_read_from_the_config_and_listed(mistral):
    from inference.models import store as model_store

    assert mistral.sliding_window == WINDOW and mistral.max_context == WINDOW
    assert model_store.read_manifest(mistral.folder).sliding_window == WINDOW


def test_dead_slots_inside_the_window_change_the_logits_and_compaction_restores_them(mistral):
    broken, fresh, physical = _dead_slots_then_more(mistral, window=None)
    assert physical == 18 and np.abs(broken - fresh).max() > 0.05  # live tokens pushed out of the window
    kept, fresh, physical = _dead_slots_then_more(mistral, window=WINDOW)
    assert physical <= WINDOW
    np.testing.assert_allclose(kept, fresh, atol=EXACT_NOISE)


def test_n_ctx_beyond_the_window_is_refused_with_a_message(mistral):
    prompt = mistral.encode("Hello, world! How are you today?")
    with pytest.raises(ValueError, match=f"n_ctx must be in \\[16, {WINDOW}\\].*sliding window of {WINDOW} tokens"):
        Engine(mistral).generate_text(prompt, settings("ar", n_ctx=64))


def test_speculative_output_equals_autoregressive_with_rolls_inside_the_window(mistrals):
    mistral, draft = mistrals
    prompt = mistral.encode("The quick brown fox jumps over the lazy dog. The quick brown fox")
    engine = Engine(mistral, draft)
    context = dict(n_ctx=WINDOW, n_keep=4, ignore_eos=True)
    reference = engine.generate_text(prompt, settings("ar", max_new_tokens=60, **context))
    assert reference.rolls >= 3
    for k in (2, 4):
        engine.reset()
        physical, stats = [], None
        for event in engine.generate(prompt, settings("spec_model", max_new_tokens=60, k=k, **context)):
            if isinstance(event, StepStats):
                physical.append(engine.cache_physical_length)
            elif isinstance(event, Finished):
                stats = event.stats
        assert stats.accepted < stats.drafted / 2  # rejected drafts left dead slots
        assert max(physical) <= WINDOW
        difference = first_difference(engine, prompt, reference.token_ids, stats.token_ids, settings("ar", **context).context, k)
        assert difference is None or difference.near_tie, difference.describe()
