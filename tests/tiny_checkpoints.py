"""Tiny randomly initialised transformers Llama checkpoints, written without torch (numpy + safetensors).

The tokenizer is a byte-level BPE trained on a few sentences (about 330 tokens) with ChatML-style special
tokens, so the checkpoint converts with optimum-intel and openvino-tokenizers like a real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am fine, thank you.",
    "def square(x):\n    return x ** 2  # numbers 0123456789",
    "Speculative decoding drafts tokens and verifies them in one pass.",
]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_checkpoint(
    folder: Path, hidden: int = 192, intermediate: int = 384, layers: int = 2, heads: int = 3, kv_heads: int = 1, seed: int = 0
) -> Path:
    """Write ``config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` and
    ``generation_config.json`` of a random LlamaForCausalLM into ``folder`` (created).

    The defaults give 4-bit layers with input channels 192 and 384, which the usual group size 128 does not
    divide (like SmolLM2's 576).
    """
    import pytest

    pytest.importorskip("safetensors", reason="comes with the conversion extra: pip install 'specchat[convert]'")
    pytest.importorskip("tokenizers", reason="comes with the conversion extra: pip install 'specchat[convert]'")
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 10, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    bos, eos, pad = (tokenizer.token_to_id(t) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|im_start|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "add_bos_token": False,
                "chat_template": CHAT_TEMPLATE,
                "model_max_length": 1024,
            }
        )
    )
    head_dim = hidden // heads
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}))
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return rng.normal(0.0, 0.05, size=(rows, cols)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": matrix(vocab, hidden), "model.norm.weight": np.ones(hidden, np.float32)}
    for i in range(layers):
        prefix = f"model.layers.{i}"
        tensors.update(
            {
                f"{prefix}.self_attn.q_proj.weight": matrix(heads * head_dim, hidden),
                f"{prefix}.self_attn.k_proj.weight": matrix(kv_heads * head_dim, hidden),
                f"{prefix}.self_attn.v_proj.weight": matrix(kv_heads * head_dim, hidden),
                f"{prefix}.self_attn.o_proj.weight": matrix(hidden, heads * head_dim),
                f"{prefix}.mlp.gate_proj.weight": matrix(intermediate, hidden),
                f"{prefix}.mlp.up_proj.weight": matrix(intermediate, hidden),
                f"{prefix}.mlp.down_proj.weight": matrix(hidden, intermediate),
                f"{prefix}.input_layernorm.weight": np.ones(hidden, np.float32),
                f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, np.float32),
            }
        )
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
