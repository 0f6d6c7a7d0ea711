"""Shared fixtures: the default model (fetched once into .cache/ of the repo) and engines on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_DATA = Path(os.environ.get("SPECCHAT_TEST_DATA_DIR", REPO / ".cache" / "test-data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """SPECCHAT_DATA_DIR for the whole test session (models are fetched there once and reused)."""
    TEST_DATA.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("SPECCHAT_DATA_DIR")
    os.environ["SPECCHAT_DATA_DIR"] = str(TEST_DATA)
    yield TEST_DATA
    if previous is None:
        os.environ.pop("SPECCHAT_DATA_DIR", None)
    else:
        os.environ["SPECCHAT_DATA_DIR"] = previous


@pytest.fixture(scope="session")
def int4_dir(data_dir) -> Path:
    """The default model, 4-bit (its own Q4_1 weights)."""
    from inference.models.default_model import ensure_default_model

    return ensure_default_model(4)


@pytest.fixture(scope="session")
def int8_dir(data_dir) -> Path:
    """The default model re-encoded at 8 bits: a draft that differs from the 4-bit target."""
    from inference.models.default_model import ensure_default_model

    return ensure_default_model(8)


@pytest.fixture(scope="session")
def target(int4_dir):
    """The 4-bit default model loaded on CPU at the app's default precision (exact: f32, f32 KV cache)."""
    from inference.model import load_model
    from inference.precision import PrecisionSettings

    return load_model(int4_dir, "CPU", PrecisionSettings())



@pytest.fixture(scope="session")
def draft(int8_dir):
    """The 8-bit default model loaded on CPU (used as a draft)."""
    from inference.model import load_model

    return load_model(int8_dir, "CPU")


@pytest.fixture(scope="session")
def tiny_ir(tmp_path_factory, data_dir) -> dict:
    """Model-manager sources, built once: the default GGUF (``gguf``) and two tiny random IR folders with the
    default tokenizer (``same``) and with two token strings swapped (``other``). Treat them as read-only."""
    from tiny_models import default_gguf, write_tiny_llama

    root = tmp_path_factory.mktemp("tiny-ir")
    gguf = default_gguf(root / "gguf")
    return {
        "gguf": gguf,
        "same": write_tiny_llama(gguf, root / "tiny-same"),
        "other": write_tiny_llama(gguf, root / "tiny-other", swap_tokens=(28, 30)),
    }


@pytest.fixture(scope="module")
def server(data_dir, int4_dir):
    """``specchat serve`` on the default model in its own process, one per test module that asks (a module that
    needs other flags defines its own)."""
    from server_process import ServerProcess

    with ServerProcess() as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    """The ``openai`` client of this module's ``server``."""
    import openai

    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=180)
