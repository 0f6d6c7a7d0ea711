"""Export a trained draft head (``train.py``'s ``head.pt``) to a stateful OpenVINO IR the engine loads without torch.

    .venv/bin/python -m tools.draft_head.export --checkpoint RUN_DIR/head.pt --out inference/models/data/SmolLM2-135M-Instruct-head

The graph (``build_graph``) computes ``head.DraftHead``'s first step for S positions and keeps the keys and values
of its attention in two state variables, as a stateful causal LM does, so ``inference.kv_cache.KVCache`` drives it
like a target model (rollback by mask, rolls by shift-RoPE):

* inputs ``input_ids`` int64 ``[1, S]`` (target token ids ``x_{j+1}``; mapped to the draft vocabulary inside the
  graph), ``hidden_states`` float32 ``[1, S, hidden]`` (``h_j``, or the head's own output when drafting further),
  ``attention_mask`` int64 ``[1, past + S]``, ``position_ids`` int64 ``[1, S]``, ``beam_idx`` int32 ``[1]``,
  ``logits_to_keep`` int64 ``[1]``; a fused head (``HeadConfig.fused`` > 0) also ``layer_features`` float32
  ``[1, S, fused, hidden]`` (``inference.layer_features.LAYER_FEATURES``: the target's outputs of the layers the
  manifest's ``feature_layers`` names, at ``j``; zeros when drafting further, as ``head.DraftHead`` is trained);
* outputs ``logits`` float32 ``[1, N, vocab]`` over the draft vocabulary and ``draft_hidden`` float32
  ``[1, N, hidden]`` (the predicted next hidden state), for the last N = ``logits_to_keep`` positions.

Matrices are stored as int8 with one float32 scale per output row (symmetric), the pattern OpenVINO's CPU plugin
decompresses inside its MatMul kernels; the norms' weights stay float32.

The attention is exported as plain multi-head attention: a head trained with grouped keys and values
(``HeadConfig.kv_heads`` < ``heads``) has its ``k``/``v`` rows repeated for each query head of the group
(``repeat_kv_heads``), its cache holds ``heads`` heads, and ``ScaledDotProductAttention`` reads the cache's
``Concat`` directly. With a GQA repeat between them (``Unsqueeze`` -> ``Broadcast`` -> ``Reshape``, as the target's
graph has) OpenVINO's CPU plugin (2026.4) decomposes the head's attention into MatMul / Softmax / MatMul and
concatenates its cache each step: a head pass took 3.40 ms against 0.84 ms fused, 0.45 against 0.11 of a target
pass (default model's head, Xeon with AMX, 2 cores, quiet, 200 passes after 300 cached tokens; the same drafts).
Its price: the head's cache takes ``heads / kv_heads`` times the memory (default model's head: 4.6 KB a token
instead of 1.5) and its ``k``/``v`` weights as much (+0.4 M int8). ``import_ir`` folds the repeated rows back.

The rest of the graph is written for few CPU plugin nodes, since a head pass is short enough that each node's
dispatch and shape handling counts: RoPE as the plugin's rotate-half pattern (``-1 *`` the second half, concatenated
on axis -1), which it fuses into one ``RoPE`` node for q and one for k (5 nodes each before); the cos/sin angles from
one product of the positions with the frequencies already doubled; the attention mask from two ``CumSum``s of the
mask and the new tokens (``_attention_bias``) instead of ``Range``s of the two lengths; the logits as a product
with the first ``vocab`` embedding rows (``_first_rows``, folded at compile time: +3.7 MiB resident) instead of a
``Slice`` of all ``vocab + 1`` products. The default model's head went from 69 to 49 nodes that run (constants,
inputs and outputs aside); a one-token pass right after a one-token target pass from 1.41-1.43 to 1.31-1.36 ms, its
nodes' sum from 0.80 to 0.75-0.77 ms (Xeon with AMX, 2 cores, quiet, medians of 295 passes in two runs, the two heads
in turns), ``HeadDrafter._catch_up`` in greedy decoding from 2.01 to 1.93 ms (median of 1,568 calls, 10 free-chat
prompts x 2, the same replies and acceptance), with the same drafts (the same argmax on 425 rows).

The folder gets ``draft_head.json`` (``inference.draft_head``'s manifest: the draft vocabulary, the target it was
trained for, a fused head's ``feature_layers``, the training run, the SHA-256 of every other file) and a
``config.json`` with the RoPE parameters the rolls need. The manifest's ``training.rebuild`` lists the shell commands of every stage (data, each training run it continued, this export)
and ``training.train_shards`` the shards it trained on; paths inside the repository are written relative to its root,
so keep the data and run folders under ``build/`` (ignored by git) for the commands to run from any checkout.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import torch

from inference.draft_head import DRAFT_HIDDEN, FUSED_HEAD_FORMAT, HEAD_FORMAT, HEAD_MANIFEST, HIDDEN_INPUT
from inference.layer_features import LAYER_FEATURES
from tools.draft_head.train import draft_index

REPO = Path(__file__).resolve().parents[2]


def _const(array: np.ndarray) -> ov.Node:
    return ops.constant(np.require(array, requirements="C"))  # (np.ascontiguousarray makes scalars 1-d)


def _weight(weight: np.ndarray, int8: bool) -> ov.Node:
    """A matrix ``[rows, columns]`` as a float32 graph value: int8 rows times float32 row scales (symmetric), or
    float32 as it is."""
    if not int8:
        return _const(weight.astype(np.float32))
    scale = np.abs(weight).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    quantized = np.clip(np.round(weight / scale), -127, 127).astype(np.int8)
    return ops.multiply(ops.convert(_const(quantized), ov.Type.f32), _const(scale.astype(np.float32)))


def _first_rows(weight: ov.Node, count: int) -> ov.Node:
    """The first ``count`` rows of a matrix ``_weight`` made, sliced from its constants (int8 rows and their scales,
    or float32), which the CPU plugin folds into constants at compile time: the product reads them as its compressed
    weights, and no ``Slice`` runs on its output each pass (the draft head's logits without the out-of-vocabulary
    embedding row)."""
    def first(value: ov.Output) -> ov.Node:
        return ops.slice(value, _const(np.array([0])), _const(np.array([count])), _const(np.array([1])),
                         _const(np.array([0])))

    if weight.get_type_name() != "Multiply":
        return first(weight.output(0))
    codes, scale = (weight.input_value(i) for i in (0, 1))
    return ops.multiply(ops.convert(first(codes.get_node().input_value(0)), ov.Type.f32), first(scale))


def _rms(x: ov.Output, weight: np.ndarray, eps: float) -> ov.Node:
    variance = ops.reduce_mean(ops.multiply(x, x), _const(np.array([-1])), keep_dims=True)
    normed = ops.divide(x, ops.sqrt(ops.add(variance, _const(np.array(eps, dtype=np.float32)))))
    return ops.multiply(normed, _const(weight.astype(np.float32)))


def _rope(x: ov.Output, cos: ov.Output, sin: ov.Output, head_dim: int) -> ov.Node:
    """Rotate-half RoPE of ``x`` ``[1, heads, S, d]``; ``cos``/``sin`` ``[1, 1, S, d]``."""
    half = head_dim // 2
    first = ops.slice(x, _const(np.array([0])), _const(np.array([half])), _const(np.array([1])), _const(np.array([3])))
    second = ops.slice(x, _const(np.array([half])), _const(np.array([head_dim])), _const(np.array([1])),
                       _const(np.array([3])))
    rotated = ops.concat([ops.multiply(second, _const(np.array(-1.0, dtype=np.float32))), first], -1)
    return ops.add(ops.multiply(x, cos), ops.multiply(rotated, sin))


def _attention_bias(attention_mask: ov.Output, input_ids: ov.Output) -> ov.Node:
    """float32 ``[1, 1, S, T]``: 0 where new token ``s`` may attend to cache slot ``t``, -inf elsewhere, for
    ``attention_mask`` int64 ``[1, T]`` (1: a live slot, 0: a dead one) and ``input_ids`` ``[1, S]`` (the new
    tokens, in the last S slots, all live: ``inference.kv_cache.KVCache``'s layout).

    Slot ``t`` is visible to token ``s`` when it is live and not after ``s``'s slot. Counted from the end, among live
    slots: ``after[t]``, the live slots after ``t`` (a reverse exclusive ``CumSum`` of the mask), is at least
    ``S - 1 - s`` (the new tokens after ``s``, all live) exactly when ``t`` is at or before ``s``'s slot. Dead slots
    get -1 and are never visible. The CPU plugin runs 8 nodes for it (15 for a mask built from ``Range``s of the two
    lengths, ``ShapeOf``s and ``Gather``s), each of which re-derives its shape in every pass (the cache grows).
    """
    one = _const(np.array(1, dtype=np.int64))
    after = ops.cumsum(attention_mask, _const(np.array(1)), exclusive=True, reverse=True)  # [1, T]
    live_after = ops.subtract(ops.multiply(ops.add(after, one), attention_mask), one)  # dead: -1
    new_after = ops.cumsum(ops.add(ops.multiply(input_ids, _const(np.array(0, dtype=np.int64))), one),
                           _const(np.array(1)), exclusive=True, reverse=True)  # [1, S]: S - 1 - s
    visible = ops.greater_equal(live_after, ops.unsqueeze(new_after, _const(np.array([0, 3]))))  # [1, 1, S, T]
    return ops.select(visible, _const(np.array(0.0, dtype=np.float32)), _const(np.array(-np.inf, dtype=np.float32)))


def repeat_kv_heads(weight: np.ndarray, groups: int, head_dim: int) -> np.ndarray:
    """``weight`` float32 ``[kv_heads * head_dim, hidden]`` (a ``k`` or ``v`` projection) with each head's
    ``head_dim`` rows repeated ``groups`` times in a row: ``[kv_heads * groups * head_dim, hidden]``, KV head ``i``
    becoming heads ``i * groups .. i * groups + groups - 1``, the query heads it serves (``head.DraftHead``'s
    grouping)."""
    heads = weight.reshape(-1, head_dim, weight.shape[1])
    return np.repeat(heads, groups, axis=0).reshape(-1, weight.shape[1])


def build_graph(state: dict, target_vocab: int, int8: bool = True) -> ov.Model:
    """The head's first drafting step as a stateful ``ov.Model`` (see the module docstring).

    Args:
        state: ``train.py``'s checkpoint (``head`` weights, ``config``, ``vocab``).
        target_vocab: the target's vocabulary size (input ids range over it).
        int8: store matrices as int8 (the shipped form); False keeps float32 (tests compare it with torch).
    """

    def matmul(x: ov.Output, weight: np.ndarray) -> ov.Node:
        return ops.matmul(x, _weight(weight, int8), transpose_a=False, transpose_b=True)

    weights = {k: v.float().numpy() for k, v in state["head"].items()}
    c = state["config"]
    hidden, heads, kv_heads, head_dim, eps = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["rms_eps"]
    vocab = np.asarray(state["vocab"], dtype=np.int64)
    to_draft = draft_index(vocab, target_vocab).astype(np.int32)

    input_ids = ops.parameter([1, -1], ov.Type.i64, name="input_ids")
    h = ops.parameter([1, -1, hidden], ov.Type.f32, name=HIDDEN_INPUT)
    attention_mask = ops.parameter([1, -1], ov.Type.i64, name="attention_mask")
    position_ids = ops.parameter([1, -1], ov.Type.i64, name="position_ids")
    beam_idx = ops.parameter([1], ov.Type.i32, name="beam_idx")
    logits_to_keep = ops.parameter([1], ov.Type.i64, name="logits_to_keep")
    parameters = [input_ids, h, attention_mask, position_ids, beam_idx, logits_to_keep]
    fused = c.get("fused", 0)
    if fused:
        layers = ops.parameter([1, -1, fused, hidden], ov.Type.f32, name=LAYER_FEATURES)
        parameters.insert(2, layers)
    for parameter in parameters:
        parameter.output(0).get_tensor().set_names({parameter.get_friendly_name()})

    draft_ids = ops.gather(_const(to_draft), input_ids, _const(np.array(0)))
    table = weights["table"]
    rows = _weight(np.concatenate([table, weights["oov"][None]], axis=0), int8)
    embedded = ops.gather(rows, draft_ids, _const(np.array(0)))
    feature = _rms(h, weights["hidden_norm.weight"], eps)
    if fused:  # DraftHead._input: each layer RMS-normalized, concatenated, projected and added
        normed = [_rms(ops.gather(layers, _const(np.array(i)), _const(np.array(2))),
                       weights[f"layer_norms.{i}.weight"], eps) for i in range(fused)]
        feature = ops.add(feature, matmul(ops.concat(normed, 2), weights["fuse.weight"]))
    joined = ops.concat([feature, _rms(embedded, weights["token_norm.weight"], eps)], 2)
    x = matmul(joined, weights["fc.weight"])

    y = _rms(x, weights["attention_norm.weight"], eps)
    shape_q = _const(np.array([1, -1, heads, head_dim]))
    order = _const(np.array([0, 2, 1, 3]))
    groups = heads // kv_heads  # multi-head attention in the graph (module docstring): every head its own K/V rows
    q = ops.transpose(ops.reshape(matmul(y, weights["q.weight"]), shape_q, False), order)
    k = ops.transpose(ops.reshape(matmul(y, repeat_kv_heads(weights["k.weight"], groups, head_dim)), shape_q, False),
                      order)
    v = ops.transpose(ops.reshape(matmul(y, repeat_kv_heads(weights["v.weight"], groups, head_dim)), shape_q, False),
                      order)

    inv_freq = (1.0 / (c["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))).astype(np.float32)
    inv_freq = np.concatenate([inv_freq, inv_freq])  # each frequency for both halves (rotate-half)
    angles = ops.multiply(ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), _const(np.array([1, 3]))),
                          _const(inv_freq[None, None, None, :]))  # [1, 1, S, d]
    cos, sin = ops.cos(angles), ops.sin(angles)
    q, k = _rope(q, cos, sin, head_dim), _rope(k, cos, sin, head_dim)

    sinks = []
    cached = []
    for name, new in (("key", k), ("value", v)):
        info = ov.op.util.VariableInfo()
        info.data_shape = ov.PartialShape([-1, heads, -1, head_dim])
        info.data_type = ov.Type.f32
        info.variable_id = f"past_key_values.0.{name}present.0.{name}"
        variable = ov.op.util.Variable(info)
        empty = ops.broadcast(_const(np.array(0, dtype=np.float32)),
                              ops.concat([ops.shape_of(beam_idx, ov.Type.i64), _const(np.array([heads, 0, head_dim]))], 0))
        past = ops.gather(ops.read_value(empty, variable), beam_idx, _const(np.array(0)))
        joined_kv = ops.concat([past, new], 2)
        sinks.append(ops.assign(joined_kv, variable))
        cached.append(joined_kv)
    keys, values = cached

    attended = ops.scaled_dot_product_attention(q, keys, values, _attention_bias(attention_mask, input_ids), causal=False)
    attended = ops.reshape(ops.transpose(attended, order), _const(np.array([1, -1, heads * head_dim])), False)
    x = ops.add(x, matmul(attended, weights["o.weight"]))
    y = _rms(x, weights["mlp_norm.weight"], eps)
    gate = matmul(y, weights["gate.weight"])
    mlp = ops.multiply(ops.swish(gate), matmul(y, weights["up.weight"]))
    g = _rms(ops.add(x, matmul(mlp, weights["down.weight"])), weights["final_norm.weight"], eps)

    last = ops.slice(g, ops.negative(logits_to_keep), _const(np.array([np.iinfo(np.int64).max])),
                     _const(np.array([1])), _const(np.array([1])))
    logits = ops.matmul(last, _first_rows(rows, len(vocab)), False, True)  # the embedding rows are the output layer
    logits.output(0).get_tensor().set_names({"logits"})
    last.output(0).get_tensor().set_names({DRAFT_HIDDEN})
    results = [ops.result(logits), ops.result(last)]
    return ov.Model(results, sinks, parameters, "draft_head")


def write_head_folder(out: Path, state: dict, target_dir: Path, training: dict, int8: bool = True) -> dict:
    """Write a head folder: the IR of ``build_graph``, ``config.json`` (its RoPE) and the manifest
    ``draft_head.json`` (``inference.draft_head``); returns the manifest.

    Args:
        out: the folder (created).
        state: ``head`` weights, ``config`` and ``vocab``, as ``train.py`` checkpoints them.
        target_dir: the target model folder it was trained for (its tokenizer is fingerprinted).
        training: what to record of the training run (data command, sizes, held-out acceptance...).
        int8: as for ``build_graph``.

    Raises:
        ValueError: a fused head (``config["fused"]`` > 0) whose ``state["feature_layers"]`` (the target's decoder
            layers it reads, as ``train.py`` checkpoints them) does not name ``fused`` layers.
    """
    from inference.models.inspect import tokenizer_info

    fused = state["config"].get("fused", 0)
    feature_layers = [int(layer) for layer in state.get("feature_layers") or []]
    if len(feature_layers) != fused:
        raise ValueError(f"the head fuses {fused} layer outputs, and its state names the layers {feature_layers}")
    target_config = json.loads((target_dir / "config.json").read_text())
    target_vocab = int(target_config["vocab_size"])
    out.mkdir(parents=True, exist_ok=True)
    ov.save_model(build_graph(state, target_vocab, int8), out / "openvino_model.xml", compress_to_fp16=False)
    c = state["config"]
    rope_config = {
        "model_type": "llama", "hidden_size": c["hidden"], "num_attention_heads": c["heads"],
        "num_key_value_heads": c["heads"], "head_dim": c["head_dim"], "rope_theta": c["rope_theta"],
        "max_position_embeddings": target_config.get("max_position_embeddings"),
    }
    (out / "config.json").write_text(json.dumps(rope_config, indent=2) + "\n")
    store_manifest = target_dir / "specchat_manifest.json"
    name = json.loads(store_manifest.read_text()).get("name") if store_manifest.is_file() else None
    manifest = {
        "format": FUSED_HEAD_FORMAT if fused else HEAD_FORMAT,
        "kind": "eagle-head",
        "target": {
            "name": name or target_dir.name, "hidden_size": c["hidden"], "vocab_size": target_vocab,
            "tokenizer_fingerprint": tokenizer_info(target_dir).fingerprint,
        },
        "draft_vocab": [int(t) for t in state["vocab"]],
        **({"feature_layers": feature_layers} if fused else {}),
        "config": c,
        "training": training,
        "sha256": {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                   for name in ("openvino_model.xml", "openvino_model.bin", "config.json")},
    }
    vocabulary = json.dumps(manifest["draft_vocab"])  # one line, not one per token
    text = json.dumps({**manifest, "draft_vocab": "@"}, indent=1).replace('"@"', vocabulary)
    (out / HEAD_MANIFEST).write_text(text + "\n")
    return manifest


def repo_relative(word: str) -> str:
    """``word`` relative to the repository root when it is an absolute path inside it, else unchanged."""
    path = Path(word)
    if path.is_absolute() and path.resolve().is_relative_to(REPO):
        return str(path.resolve().relative_to(REPO))
    return word


def train_command(args: dict[str, str]) -> str:
    """A runnable ``python -m tools.draft_head.train ...`` line from a checkpoint's ``args`` (``train.py`` stores
    each argument as ``str``): a list gives several values, None and False leave the option out, True gives the
    flag alone, and paths inside the repository are relative to its root (:func:`repo_relative`)."""
    words = ["python", "-m", "tools.draft_head.train"]
    for key, text in args.items():
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):  # a path or a name such as cpu
            value = text
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *(str(item) for item in value)]
        elif value is not None and value is not False:
            words += [flag, repo_relative(text)]
    return shlex.join(words)


def rebuild_commands(state: dict, checkpoint: Path, out: Path) -> list[str]:
    """The shell commands that rebuild a head from the committed corpus, in order: where the earliest run started
    from an exported head (``--init-head``), that head's own stages (:func:`initial_head_stages`); the data folder
    (the data manifest's command); every training run it continued (``started_from``, earliest first), then this
    one; then the export of ``checkpoint`` to ``out``.

    Raises:
        ValueError: the exported head a run started from records no rebuild commands.
    """
    runs = [state["args"]]
    earlier = state.get("started_from")
    while earlier and "train_command_args" in earlier:
        runs.insert(0, earlier["train_command_args"])
        earlier = earlier.get("started_from")
    data = shlex.join(repo_relative(word) for word in shlex.split(state["data_manifest"]["command"]))
    export = shlex.join(["python", "-m", "tools.draft_head.export", "--checkpoint", repo_relative(str(checkpoint)),
                         "--out", repo_relative(str(out))])
    return [*initial_head_stages(earlier), data, *(train_command(run) for run in runs), export]


def initial_head_stages(started_from: dict | None) -> list[str]:
    """The stages that rebuild the exported head a training run started from (``started_from["head"]``, the
    folder ``--init-head`` read): that head's manifest's ``training.rebuild.commands``, its export writing to that
    folder (relative to the repository root where inside it); none when the run did not start from a head.

    Raises:
        ValueError: that head's manifest records no rebuild commands.
    """
    if not started_from or "head" not in started_from:
        return []
    folder = Path(started_from["head"])
    manifest = json.loads((folder / HEAD_MANIFEST).read_text(encoding="utf-8"))
    commands = manifest.get("training", {}).get("rebuild", {}).get("commands")
    if not commands:
        raise ValueError(f"the head {folder} the run started from records no rebuild commands")
    *stages, export = commands
    words = shlex.split(export)
    words[words.index("--out") + 1] = repo_relative(str(folder))
    return [*stages, shlex.join(words)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", type=Path, help="target model folder (default: the training data's)")
    args = parser.parse_args(argv)
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    data = Path(state["args"]["data"])
    target_dir = args.target or Path(json.loads((data / "manifest.json").read_text())["model"])
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    last = state["history"][-1]
    # --stream-shards evaluates at the position after each group (the last at epoch == the run's epochs, group 0)
    # and keeps the reply tokens of its training shards in the run's manifest beside the checkpoint
    streamed = "reply_tokens_seen" in last
    if streamed:
        run = json.loads((args.checkpoint.parent / "manifest.json").read_text(encoding="utf-8"))
        train_reply_tokens, epochs = run["train_reply_tokens"], last["epoch"]
    else:
        train_reply_tokens, epochs = last["train_reply_tokens"], last["epoch"] + 1
    training = {
        "data_command": state["data_manifest"]["command"], "data_seed": state["data_manifest"]["seed"],
        "target_model_sha256": state["data_manifest"]["model_sha256"],
        "rebuild": {"from": "the repository root, with the conversion extra (pip install -e '.[convert]')",
                    "commands": rebuild_commands(state, args.checkpoint.resolve(), args.out.resolve())},
        "train_shards": [int(index) for index in state["train_shards"]],
        "train_reply_tokens": train_reply_tokens, "epochs": epochs,
        "held_out": {k: v for k, v in last.items() if k.startswith(("greedy", "sampled", "positions"))},
        "vocab_coverage": state["coverage"], "versions": state["data_manifest"]["versions"],
        "torch": torch.__version__, "commit": commit, "started_from": state.get("started_from"),
    }
    write_head_folder(args.out, state, target_dir, training)
    size = sum((args.out / n).stat().st_size for n in ("openvino_model.xml", "openvino_model.bin"))
    print(f"wrote {args.out}: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
