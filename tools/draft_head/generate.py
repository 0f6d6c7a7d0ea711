"""Training data for the draft head, from the target model alone: prompts, replies, hidden states.

    .venv/bin/python -m tools.draft_head.generate --out DATA_DIR --shards 64

Each shard is built by a seeded plan, in four stages, and written atomically as ``shard-NNNNN.npz``
(+ ``shard-NNNNN.jsonl`` with the texts); a run that is interrupted resumes at the first missing shard
(``--shards`` can be raised later to add more). ``manifest.json`` records the command, seed, sizes, library
versions and the model's SHA-256.

The conversations of stages 1-2 (the hours of the job) are also kept in ``--corpus`` (``corpus.py``; by default
``tools/draft_head/conversations``, committed): a shard found there is not generated again, only its hidden states
are recomputed (stage 3, about half a shard's time), so a new machine rebuilds the data folder at twice the speed
and carries on from there.
Shards of a data folder made before the corpus are copied into it.

1. **Prompts** (``prompts.py``): about half self-written by the target (Magpie), the rest seeded templates; a
   seventh of the conversations get a custom system prompt, the rest the template's default (as the app sends).
2. **Replies**: the target's replies, greedy (no penalty: the Precise preset) for odd conversation indices and at
   the chat defaults (temperature 0.7, top-p 0.9, repetition penalty 1.1: the Model default preset) for even ones,
   up to ``--max-new-tokens``; batched with openvino-genai's continuous batching (~700 tokens/s on 2 cores).
   ``FOLLOW_UP_SHARE`` of the conversations get a second user turn and reply.
3. **Hidden states**: one teacher-forced pass per conversation through the target IR compiled exactly as the app
   decodes (f32, f32 KV cache, no dynamic quantization), which returns for every position the final hidden state
   (the LM head's input, float16 ``[576]``), the log of the softmax normalizer over the full vocabulary
   (``lse``, float32: the target's probability of any token is ``exp(E[token] . h - lse)``) and the argmax token;
   with ``--layers``, also the outputs of those decoder layers (EAGLE-3's low- and mid-level features, arXiv
   2503.01840; ``inference.layer_features.layer_outputs``), each divided by its root mean square over the hidden
   axis.
4. **Write**: ``tokens`` int32 ``[N]``, ``offsets`` int64 ``[n + 1]`` (conversation i is
   ``tokens[offsets[i]:offsets[i + 1]]``), ``prompt_lengths`` int32 ``[n]``, ``greedy`` bool ``[n]``, ``hidden``
   float16 ``[N, hidden]``, ``lse`` float32 ``[N]``, ``argmax`` int32 ``[N]``; with ``--layers``, ``layers``
   float16 ``[N, len(layers), hidden]`` (the manifest's ``feature_layers`` names them).

A rebuild that shares 2 cores with other work: ``--threads 1`` (OpenVINO's ``INFERENCE_NUM_THREADS``) under ``nice``;
``--first`` builds the named shards before the rest (e.g. the held-out shards and those never trained on);
``--only`` builds the named shards and no others (a data folder of some shards, as a training run that started
before the rest existed read it).

Shards whose index is a multiple of ``HELD_OUT_EVERY`` are the held-out split; training never reads them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from . import corpus, prompts
from .prompts import (
    FOLLOW_UPS,
    MAGPIE_MAX_TOKENS,
    MAGPIE_OPENERS,
    MAGPIE_TEMPERATURE,
    MAGPIE_TOP_P,
    SYSTEM_PROMPTS,
    BenchmarkFilter,
    looks_like_a_prompt,
    seeded_prompt,
)

#: Every HELD_OUT_EVERY-th shard (index 0, 16, 32...) is held out from training.
HELD_OUT_EVERY = 16
SELF_WRITTEN_SHARE = 0.5
SYSTEM_PROMPT_SHARE = 1 / 7
FOLLOW_UP_SHARE = 0.15
CHAT_DEFAULTS = {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1}
FORMAT_VERSION = 1
DEFAULT_SHARDS = 64


def shard_path(out: Path, index: int, suffix: str = ".npz") -> Path:
    return out / f"shard-{index:05d}{suffix}"


def is_held_out(index: int) -> bool:
    """Whether shard ``index`` belongs to the held-out split."""
    return index % HELD_OUT_EVERY == 0


class Target:
    """The target model, as a continuous-batching generator and a teacher-forced feature extractor.

    Args:
        folder: the model folder (OpenVINO IR + tokenizer IRs), e.g. the installed default model.
        layers: decoder layers (0-based) whose outputs ``features`` also returns (EAGLE-3's fused features).
        threads: OpenVINO's ``INFERENCE_NUM_THREADS`` for both (0: its default, every core).
    """

    def __init__(self, folder: Path, layers: tuple[int, ...] = (), threads: int = 0):
        import openvino as ov
        import openvino.opset13 as ops
        import openvino_genai

        from inference.layer_features import add_layer_features
        from inference.model import lm_head

        self.folder = folder
        self.layers = tuple(layers)
        self.threads = threads
        self.tokenizer = openvino_genai.Tokenizer(str(folder))
        self._pipeline = None  # made on first use: a rebuild from the corpus never generates
        self._genai = openvino_genai
        self._ov = ov
        core = ov.Core()
        model = core.read_model(folder / "openvino_model.xml")
        head = lm_head(model)
        if head is None:
            raise SystemExit(f"{folder}: no LM head MatMul found before 'logits'")
        logits = [r for r in model.get_results() if "logits" in r.input_value(0).get_names()][0].input_value(0)
        peak = ops.reduce_max(logits, ops.constant(np.array([-1])), keep_dims=True)
        lse = ops.add(
            ops.log(ops.reduce_sum(ops.exp(ops.subtract(logits, peak)), ops.constant(np.array([-1])), keep_dims=False)),
            ops.squeeze(peak, ops.constant(np.array([-1]))),
        )
        top = ops.topk(logits, ops.constant(np.array(1)), -1, "max", "none", ov.Type.i32)
        model.add_outputs([head.input_value(0), lse.output(0), top.output(1)])
        if self.layers:
            add_layer_features(model, self.layers)  # the last output: float32 [1, S, len(layers), hidden]
        exact = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
        if threads:
            exact["INFERENCE_NUM_THREADS"] = threads
        self.extractor = core.compile_model(model, "CPU", exact).create_infer_request()
        self.hidden_size = int(head.input_value(0).get_partial_shape()[-1].get_length())

    @property
    def pipeline(self):
        """openvino-genai's continuous-batching pipeline over the model (2 GB of KV cache; made on first use)."""
        if self._pipeline is None:
            scheduler = self._genai.SchedulerConfig()
            scheduler.cache_size = 2
            scheduler.max_num_batched_tokens = 1024
            scheduler.dynamic_split_fuse = True
            properties = {"INFERENCE_NUM_THREADS": self.threads} if self.threads else {}
            self._pipeline = self._genai.ContinuousBatchingPipeline(str(self.folder), scheduler, "CPU", properties)
        return self._pipeline

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]

    def render(self, messages: list[dict], generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt)

    def generate(self, prompts: list[list[int]], configs: list[dict]) -> list[list[int]]:
        """Token ids generated for each prompt (EOS included when the reply ended with it)."""
        genai = self._genai
        settings = []
        for config in configs:
            c = genai.GenerationConfig()
            c.max_new_tokens = config["max_new_tokens"]
            c.do_sample = config.get("temperature", 0) > 0
            if c.do_sample:
                c.temperature = config["temperature"]
                c.top_p = config.get("top_p", 1.0)
                c.rng_seed = config["seed"]
            c.repetition_penalty = config.get("repetition_penalty", 1.0)
            settings.append(c)
        tensors = [self._ov.Tensor(np.asarray([ids], dtype=np.int64)) for ids in prompts]
        results = self.pipeline.generate(tensors, settings)
        eos = int(self.tokenizer.get_eos_token_id())
        replies = []
        for result, config in zip(results, configs):
            ids = [int(t) for t in result.m_generation_ids[0]]
            if len(ids) < config["max_new_tokens"] and (not ids or ids[-1] != eos):
                ids.append(eos)  # the pipeline leaves the EOS that ended the reply out
            replies.append(ids)
        return replies

    def features(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Teacher-forced pass over ``ids``: float16 ``[S, hidden]`` hidden states, float32 ``[S]`` lse, int32
        ``[S]`` argmax token, and float16 ``[S, len(layers), hidden]`` RMS-normalized outputs of ``layers`` (None without)."""
        count = len(ids)
        request = self.extractor
        request.reset_state()
        request.infer(
            {
                "input_ids": np.asarray([ids], dtype=np.int64),
                "attention_mask": np.ones((1, count), dtype=np.int64),
                "position_ids": np.arange(count, dtype=np.int64)[None, :],
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        outputs = request.results
        values = list(outputs.values())
        extra = 1 if self.layers else 0
        hidden, lse, top = values[-3 - extra], values[-2 - extra], values[-1 - extra]
        layers = values[-1][0].astype(np.float16) if extra else None
        return hidden[0].astype(np.float16), lse[0].astype(np.float32), top[0, :, 0].astype(np.int32), layers


def plan_prompts(target: Target, rng: np.random.Generator, count: int, bench: BenchmarkFilter) -> list[dict]:
    """``count`` conversations' first turns: ``{"system", "user", "source", "kind"}`` dicts."""
    n_self = int(round(count * SELF_WRITTEN_SHARE))
    conversations: list[dict] = []
    candidates = []
    for _ in range(int(n_self * 1.8) + 8):
        system = SYSTEM_PROMPTS[int(rng.integers(len(SYSTEM_PROMPTS)))] if rng.random() < SYSTEM_PROMPT_SHARE else None
        opener = MAGPIE_OPENERS[int(rng.integers(len(MAGPIE_OPENERS)))]
        candidates.append((system, opener))
    prefixes = []
    for system, opener in candidates:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "\x00"}]
        rendered = target.render(messages, generation_prompt=False)
        prefixes.append(target.encode(rendered[: rendered.index("\x00")] + opener))
    configs = [
        {"max_new_tokens": MAGPIE_MAX_TOKENS, "temperature": MAGPIE_TEMPERATURE, "top_p": MAGPIE_TOP_P,
         "repetition_penalty": 1.05, "seed": int(rng.integers(2**31))}
        for _ in candidates
    ]
    eos = int(target.tokenizer.get_eos_token_id())
    for (system, opener), written in zip(candidates, target.generate(prefixes, configs)):
        if len(conversations) >= n_self or not written or written[-1] != eos:
            continue
        text = (opener + target.tokenizer.decode(written[:-1])).strip()
        if looks_like_a_prompt(text) and bench.allows(text):
            conversations.append({"system": system, "user": text, "source": "self", "kind": opener or "free"})
    while len(conversations) < count:
        kind, text = seeded_prompt(rng)
        if not bench.allows(text):
            continue
        system = SYSTEM_PROMPTS[int(rng.integers(len(SYSTEM_PROMPTS)))] if rng.random() < SYSTEM_PROMPT_SHARE else None
        conversations.append({"system": system, "user": text, "source": "seeded", "kind": kind})
    order = rng.permutation(len(conversations))
    return [conversations[int(i)] for i in order]


def reply_config(index: int, rng: np.random.Generator, max_new_tokens: int) -> dict:
    """Greedy for odd conversation indices, the chat defaults for even ones."""
    if index % 2:
        return {"max_new_tokens": max_new_tokens, "temperature": 0.0, "seed": 0}
    return {"max_new_tokens": max_new_tokens, **CHAT_DEFAULTS, "seed": int(rng.integers(2**31))}


def generate_shard(target: Target, index: int, args: argparse.Namespace, bench: BenchmarkFilter) -> tuple:
    """Generate shard ``index``'s conversations (stages 1 and 2): its token arrays (``corpus.TOKEN_ARRAYS``), one
    text record per conversation, and its manifest entry."""
    started = time.time()
    rng = np.random.default_rng([args.seed, index])
    conversations = plan_prompts(target, rng, args.shard_size, bench)
    for i, conversation in enumerate(conversations):
        conversation["config"] = reply_config(i, rng, args.max_new_tokens)
        messages = ([{"role": "system", "content": conversation["system"]}] if conversation["system"] else [])
        conversation["messages"] = messages + [{"role": "user", "content": conversation["user"]}]
        conversation["prompt_ids"] = target.encode(target.render(conversation["messages"]))
    replies = target.generate([c["prompt_ids"] for c in conversations], [c["config"] for c in conversations])
    eos = int(target.tokenizer.get_eos_token_id())
    follow_ups = []
    for conversation, reply in zip(conversations, replies):
        conversation["reply_ids"] = reply
        if reply and reply[-1] == eos and rng.random() < FOLLOW_UP_SHARE:
            text = target.tokenizer.decode(reply[:-1])
            messages = conversation["messages"] + [
                {"role": "assistant", "content": text},
                {"role": "user", "content": FOLLOW_UPS[int(rng.integers(len(FOLLOW_UPS)))]},
            ]
            follow = {**conversation, "messages": messages, "source": conversation["source"] + "+follow-up"}
            follow["prompt_ids"] = target.encode(target.render(messages))
            follow_ups.append(follow)
    if follow_ups:
        second = target.generate([f["prompt_ids"] for f in follow_ups], [f["config"] for f in follow_ups])
        for follow, reply in zip(follow_ups, second):
            follow["reply_ids"] = reply
    everything = conversations + follow_ups
    lengths = [len(c["prompt_ids"]) + len(c["reply_ids"]) for c in everything]
    arrays = {
        "tokens": np.asarray([t for c in everything for t in c["prompt_ids"] + c["reply_ids"]], dtype=np.int32),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "prompt_lengths": np.asarray([len(c["prompt_ids"]) for c in everything], dtype=np.int32),
        "greedy": np.asarray([c["config"]["temperature"] == 0 for c in everything]),
    }
    records = []
    for conversation in everything:
        record = {key: conversation[key] for key in ("messages", "source", "kind", "config")}
        record["reply"] = target.tokenizer.decode(conversation["reply_ids"])
        records.append(record)
    total = int(arrays["offsets"][-1])
    entry = {
        "index": index, "held_out": is_held_out(index), "conversations": len(everything), "tokens": total,
        "reply_tokens": total - int(arrays["prompt_lengths"].sum()), "generate_s": round(time.time() - started, 1),
        "prompts_sha256": file_sha256(Path(prompts.__file__)),  # the prompt sources this shard was planned with
    }
    return arrays, records, entry


def write_data_shard(target: Target, out: Path, arrays: dict, records: list[dict], entry: dict) -> dict:
    """Stages 3 and 4: the hidden states of a shard's conversations, written with them (and their texts) to
    ``out``; returns the manifest entry with the file name and the time taken."""
    started = time.time()
    offsets = arrays["offsets"]
    hidden, lse, argmax, layers = [], [], [], []
    for i in range(len(offsets) - 1):
        h, l, a, f = target.features([int(t) for t in arrays["tokens"][offsets[i]:offsets[i + 1]]])
        hidden.append(h)
        lse.append(l)
        argmax.append(a)
        layers.append(f)
    path = shard_path(out, entry["index"])
    temporary = path.with_suffix(".tmp.npz")
    extra = {"layers": np.concatenate(layers)} if target.layers else {}
    np.savez(temporary, **arrays, hidden=np.concatenate(hidden), lse=np.concatenate(lse),
             argmax=np.concatenate(argmax), **extra)
    texts = shard_path(out, entry["index"], ".jsonl")
    with open(texts.with_suffix(".tmp"), "w", encoding="utf-8") as file:
        file.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    os.replace(texts.with_suffix(".tmp"), texts)
    os.replace(temporary, path)  # last: a shard exists only once complete
    return {**entry, "file": path.name, "features_s": round(time.time() - started, 1)}


def keep_data_shard(out: Path, corpus_dir: Path, entry: dict) -> None:
    """Copy an existing data shard's conversations into the corpus (a data folder made before the corpus was)."""
    with np.load(shard_path(out, entry["index"])) as data:
        arrays = {name: data[name] for name in corpus.TOKEN_ARRAYS}
    with open(shard_path(out, entry["index"], ".jsonl"), encoding="utf-8") as file:
        records = [json.loads(line) for line in file]
    corpus.write_shard(corpus_dir, entry["index"], arrays, records,
                       {key: value for key, value in entry.items() if key not in ("file", "features_s")})


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(args: argparse.Namespace, shards: list[dict], target: Target) -> None:
    import openvino
    import openvino_genai

    manifest = {
        "format": FORMAT_VERSION,
        "command": " ".join([Path(sys.executable).name, "-m", "tools.draft_head.generate", *sys.argv[1:]]),
        "seed": args.seed, "shard_size": args.shard_size, "max_new_tokens": args.max_new_tokens,
        "held_out_every": HELD_OUT_EVERY, "chat_defaults": CHAT_DEFAULTS, "feature_layers": list(args.layers),
        "model": str(target.folder), "model_sha256": args.model_sha256,
        "versions": {"openvino": openvino.__version__, "openvino_genai": openvino_genai.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "shards": sorted(shards, key=lambda s: s["index"]),
        "reply_tokens": sum(s["reply_tokens"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
    }
    path = args.out / "manifest.json"
    path.with_suffix(".tmp").write_text(json.dumps(manifest, indent=1))
    os.replace(path.with_suffix(".tmp"), path)


def generate_conversations(args: argparse.Namespace) -> int:
    """``--conversations-only``: generate the shards the corpus lacks (stages 1-2), nothing else."""
    target = Target(args.model, threads=args.threads)
    bench = BenchmarkFilter()
    for index in range(args.shards):
        if corpus.has_shard(args.corpus, index):
            continue
        arrays, records, entry = generate_shard(target, index, args, bench)
        corpus.write_shard(args.corpus, index, arrays, records, entry)
        print(f"shard {index} (conversations only): {entry['conversations']} conversations, {entry['reply_tokens']} "
              f"reply tokens ({entry['generate_s']} s)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="data folder (created; an existing one is resumed)")
    parser.add_argument("--model", type=Path, help="target model folder (default: the installed 4-bit default model)")
    parser.add_argument("--shards", type=int,
                        help="shards to have when done (default: 64, or as many as the corpus holds if more)")
    parser.add_argument("--shard-size", type=int, default=256, help="first-turn conversations per shard")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, default=corpus.CONVERSATIONS,
                        help="where each shard's conversations are kept and read back from (default: the committed "
                             "tools/draft_head/conversations)")
    parser.add_argument("--layers", type=int, nargs="*", default=[],
                        help="also store the outputs of these decoder layers, 0-based (EAGLE-3's low/mid features; "
                             "the fused head uses 1 14 on the 30-layer default model)")
    parser.add_argument("--threads", type=int, default=0, help="OpenVINO inference threads (default: every core)")
    parser.add_argument("--first", type=int, nargs="*", default=[],
                        help="build these shard indices before the others (held-out shards, new data)")
    parser.add_argument("--only", type=int, nargs="+",
                        help="build these shard indices and no others (each below --shards)")
    parser.add_argument("--conversations-only", action="store_true",
                        help="only generate the conversations the corpus lacks (twice as many shards an hour); a later "
                             "run with --out computes their hidden states")
    args = parser.parse_args(argv)
    if args.out is None and not args.conversations_only:
        parser.error("--out is required unless --conversations-only")
    if args.model is None:
        from inference.models.default_model import DEFAULT_MODEL_NAME
        from inference.models.store import models_dir

        args.model = models_dir() / f"{DEFAULT_MODEL_NAME}-int4"
    args.model_sha256 = file_sha256(args.model / "openvino_model.bin")
    plan = {key: getattr(args, key) for key in corpus.PLAN_KEYS}
    corpus.check_plan(args.corpus, plan)
    if args.shards is None:
        args.shards = max([DEFAULT_SHARDS] + [index + 1 for index in corpus.shard_indices(args.corpus)])
    if args.conversations_only:
        return generate_conversations(args)
    args.out.mkdir(parents=True, exist_ok=True)
    previous = args.out / "manifest.json"
    shards: list[dict] = []
    if previous.is_file():
        old = json.loads(previous.read_text())
        for key in corpus.PLAN_KEYS:
            if old[key] != plan[key]:
                raise SystemExit(f"{args.out} was made with {key}={old[key]!r}: resume with the same value")
        if old.get("feature_layers", []) != list(args.layers):
            raise SystemExit(f"{args.out} was made with --layers {old.get('feature_layers', [])}: resume with them")
        shards = [s for s in old["shards"] if shard_path(args.out, s["index"]).is_file()]
    for entry in shards:
        if not corpus.has_shard(args.corpus, entry["index"]):
            keep_data_shard(args.out, args.corpus, entry)
    done = {s["index"] for s in shards}
    target = Target(args.model, tuple(args.layers), args.threads)
    bench = BenchmarkFilter()
    order = [i for i in args.first if i < args.shards] + [i for i in range(args.shards) if i not in args.first]
    if args.only:
        order = [i for i in order if i in args.only]
    for index in order:
        if index in done:
            continue
        if corpus.has_shard(args.corpus, index):
            arrays, records, entry = corpus.read_shard(args.corpus, index)
            source = "from the corpus"
        else:
            arrays, records, entry = generate_shard(target, index, args, bench)
            corpus.write_shard(args.corpus, index, arrays, records, entry)
            source = "generated"
        entry = write_data_shard(target, args.out, arrays, records, entry)
        shards.append(entry)
        write_manifest(args, shards, target)
        total = sum(s["reply_tokens"] for s in shards)
        print(f"shard {index} ({source}): {entry['conversations']} conversations, {entry['reply_tokens']} reply "
              f"tokens ({entry.get('generate_s', 0)} s + {entry['features_s']} s); {total} reply tokens in all",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
