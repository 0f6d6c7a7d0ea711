"""The GGUF header reader and the config derived from it (inference/models/gguf.py) against damaged files: the named
failures of issue 24 (an unknown value type, arrays nested without end, a head count of 0, an infinite float), and a
seeded fuzz of a few thousand mutated headers of the tiny test model, of which only a ModelImportError that names the
file may come out (or a model, where the mutation left the file valid)."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import pytest
from gguf import GGUFValueType
from tiny_models import SMALL_TOKENIZER, write_tiny_gguf

from inference.models.errors import ModelImportError
from inference.models.importing import inspect_gguf

VOCAB = 32
U32, F32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
#: Mutated headers per seed file, and the seed of their choices (the same mutations on every run).
MUTATIONS = 1000
SEED = 24


def tiny(path: Path, **changes) -> Path:
    """The tiny test model's GGUF header (no tensor data) with :data:`SMALL_TOKENIZER`, with ``changes`` to its keys
    (``key=(value, GGUFValueType[, element type])``, or None to leave the key out)."""
    return write_tiny_gguf(path, SMALL_TOKENIZER, VOCAB, header_only=True, changes=changes)


def refusal(path: Path) -> str:
    with pytest.raises(ModelImportError) as refused:
        inspect_gguf(path)
    assert path.name in str(refused.value)
    return str(refused.value)


def test_the_tiny_header_reads_as_a_model(tmp_path):
    info = inspect_gguf(tiny(tmp_path / "tiny.gguf"))
    config = info["config"]
    assert (info["architecture"], info["tensor_types"], info["bits"]) == ("llama", {"F16": 8, "F32": 3}, 16)
    assert (config["num_attention_heads"], config["head_dim"], config["vocab_size"], config["rope_theta"]) == (4, 16, 32, 10000.0)
    assert (config["bos_token_id"], config["eos_token_id"], config["tie_word_embeddings"]) == (1, 2, True)


def _with_value_type(path: Path, key: str, new_type: int) -> Path:
    """Patch the value type of ``key`` in place (the 4 bytes after its name)."""
    data = bytearray(path.read_bytes())
    name = key.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    data[at : at + 4] = struct.pack("<I", new_type)
    path.write_bytes(bytes(data))
    return path


def test_an_unknown_value_type_is_named(tmp_path):
    message = refusal(_with_value_type(tiny(tmp_path / "t.gguf"), "llama.block_count", 13))
    assert "key 'llama.block_count' has the unknown value type 13" in message


def test_arrays_nested_without_end_are_refused(tmp_path):
    """An array whose element type says "array" again and again: a recursion in the old reader."""
    path = tiny(tmp_path / "t.gguf")
    data = bytearray(path.read_bytes())
    name = b"tokenizer.ggml.merges"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    data[at + 4 : at + 4] = struct.pack("<IQ", GGUFValueType.ARRAY, 1) * 2000  # 2,000 levels of arrays of one array
    path.write_bytes(bytes(data))
    assert f"key {name.decode()!r} nests arrays more than 4 deep" in refusal(path)
    legit = tiny(tmp_path / "nested.gguf", **{"test.pairs": ([[1, 2], [3]], GGUFValueType.ARRAY, GGUFValueType.ARRAY)})
    assert inspect_gguf(legit)["architecture"] == "llama"  # arrays of arrays a few deep are GGUF


@pytest.mark.parametrize("changes, said", [
    ({"llama.attention.head_count": (0, U32)}, "llama.attention.head_count is 0; it must be a whole number >= 1"),
    ({"llama.embedding_length": None}, "llama.embedding_length is missing"),
    ({"llama.rope.freq_base": (float("inf"), F32)}, "llama.rope.freq_base is inf; it must be a finite number > 0"),
    ({"llama.attention.layer_norm_rms_epsilon": (float("nan"), F32)}, "is nan; it must be a finite number > 0"),
    ({"llama.rope.freq_base": (1e300, GGUFValueType.FLOAT64)}, "llama.rope.freq_base is 1e+300"),
    ({"llama.context_length": (2.5, F32)}, "llama.context_length is 2.5; it must be a whole number"),
    ({"llama.block_count": ("one", GGUFValueType.STRING)}, "llama.block_count is 'one'"),
    ({"llama.vocab_size": (0, U32)}, "llama.vocab_size is 0"),
    ({"tokenizer.ggml.eos_token_id": (-1, GGUFValueType.INT32)}, "tokenizer.ggml.eos_token_id is -1; it must be a whole number >= 0"),
    ({"llama.attention.head_count": (4096, U32), "llama.rope.dimension_count": None},
     "it must be at most llama.embedding_length (64)"),
    ({"general.file_type": ("F16", GGUFValueType.STRING)}, "lacks the general.file_type key (a whole number)"),
])  # fmt: skip
def test_metadata_of_the_wrong_type_or_range_is_named(tmp_path, changes, said):
    """A head count of 0 divided by zero, an infinite float overflowed int(): each is now the file and key named."""
    assert said in refusal(tiny(tmp_path / "t.gguf", **changes))


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """One random damage: bytes overwritten, a count or type set to an extreme, a cut, bytes inserted or removed."""
    data = bytearray(data)
    kind = rng.randrange(6)
    at = rng.randrange(len(data))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # a u32 (value type, dimension count, tensor type) to an extreme
        data[at : at + 4] = struct.pack("<I", rng.choice([0, 1, 8, 9, 12, 13, 255, 2**31, 2**32 - 1]))
    elif kind == 2:  # a u64 (a count, a length) to an extreme
        data[at : at + 8] = struct.pack("<Q", rng.choice([0, 1, 2**31, 2**32, 2**63, 2**64 - 1, len(data)]))
    elif kind == 3:
        del data[at:]
    elif kind == 4:
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:
        del data[at : at + rng.randint(1, 16)]
    return bytes(data)


def test_a_fuzzed_header_gives_a_model_or_a_model_import_error_naming_the_file(tmp_path):
    """Mutations of the tiny model's header, and of variants with nested arrays and float keys: every one must
    give a model or a ModelImportError naming the file, never another exception (nor a hang: a few seconds in all)."""
    seeds = [
        tiny(tmp_path / "seed-plain.gguf").read_bytes(),
        tiny(tmp_path / "seed-more.gguf", **{
            "test.nested": ([[1, 2], [3, 4, 5]], GGUFValueType.ARRAY, GGUFValueType.ARRAY),
            "llama.rope.scaling.type": ("linear", GGUFValueType.STRING),
            "llama.rope.scaling.factor": (2.0, GGUFValueType.FLOAT32),
            "llama.attention.key_length": (16, GGUFValueType.UINT32),
        }).read_bytes(),
    ]  # fmt: skip
    rng = random.Random(SEED)
    path = tmp_path / "mutated.gguf"
    outcomes = {"model": 0, "refused": 0}
    started = time.perf_counter()
    for index in range(MUTATIONS * len(seeds)):
        data = _mutate(seeds[index % len(seeds)], rng)
        if rng.random() < 0.3:
            data = _mutate(data, rng)  # two damages at once
        path.write_bytes(data)
        try:
            inspect_gguf(path)
        except ModelImportError as error:
            assert path.name in str(error), f"mutation {index}: {error}"
            outcomes["refused"] += 1
        except Exception as error:  # noqa: BLE001 - what this test is here to catch
            pytest.fail(f"mutation {index} (seed {SEED}) raised {type(error).__name__}: {error}")
        else:
            outcomes["model"] += 1
    seconds = time.perf_counter() - started
    assert outcomes["refused"] > MUTATIONS  # most damage is found...
    assert outcomes["model"] > 50  # ...and some leaves a valid file (a changed name or token): the fuzz reaches deep
    print(f"{MUTATIONS * len(seeds)} mutated headers in {seconds:.1f} s: {outcomes}")
