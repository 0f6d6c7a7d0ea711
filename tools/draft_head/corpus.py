"""The draft head's generated conversations kept in the repository, as token ids and texts: data outlives a machine.

Design rules:

* **Generation's output is what is kept.** A shard's replies take the target 85 s of batched decoding on 2 cores
  (~650 tokens/s) and its prompts are sampled; its hidden states take one exact teacher-forced pass (another 85 s)
  and weigh 60 MB. A session's disk does not survive the session and the repository does, so ``generate.py``
  writes each shard's token ids (``shard-NNNNN.npz``, compressed) and texts (``shard-NNNNN.jsonl.gz``) to
  ``CONVERSATIONS``, which is committed, and recomputes the hidden states from them on any machine.
* **One data set, one plan.** ``manifest.json`` records what fixes the shards' contents (seed, shard size, reply
  length, the target's SHA-256); a data folder built with other values refuses this corpus instead of mixing two
  data sets.
* **Written atomically, texts first.** A shard's ``.npz`` is replaced into place last: a shard is in the corpus only
  once complete.

Arrays of a shard: ``tokens`` uint16 ``[N]`` (the vocabulary must fit: ``MAX_VOCAB``), ``offsets`` int64 ``[n + 1]``
(conversation i is ``tokens[offsets[i]:offsets[i + 1]]``), ``prompt_lengths`` int32 ``[n]``, ``greedy`` bool
``[n]``; the same as a data shard's, less the features ``generate.Target.features`` recomputes.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np

#: The committed corpus of the default model's draft head.
CONVERSATIONS = Path(__file__).resolve().parent / "conversations"
#: Settings that fix a shard's contents: a corpus and a data folder must agree on all of them.
PLAN_KEYS = ("seed", "shard_size", "max_new_tokens", "model_sha256")
#: Token ids are stored as uint16.
MAX_VOCAB = 1 << 16
TOKEN_ARRAYS = ("tokens", "offsets", "prompt_lengths", "greedy")


def corpus_path(corpus: Path, index: int, suffix: str = ".npz") -> Path:
    return corpus / f"shard-{index:05d}{suffix}"


def check_plan(corpus: Path, plan: dict) -> None:
    """Record ``plan`` (``PLAN_KEYS`` -> values) in ``corpus``'s manifest, or check it against the one there.

    Raises:
        SystemExit: the corpus was generated with another value of one of ``PLAN_KEYS``.
    """
    manifest = _read_manifest(corpus)
    for key in PLAN_KEYS:
        if key in manifest and manifest[key] != plan[key]:
            raise SystemExit(f"the conversations in {corpus} were generated with {key}={manifest[key]!r}, not "
                             f"{plan[key]!r}: use the same value, or another --corpus folder")
    _write_manifest(corpus, {**manifest, **{key: plan[key] for key in PLAN_KEYS}})


def has_shard(corpus: Path, index: int) -> bool:
    return corpus_path(corpus, index).is_file()


def shard_indices(corpus: Path) -> list[int]:
    """Indices of the shards ``corpus`` holds, ascending."""
    return sorted(int(path.name[6:11]) for path in corpus.glob("shard-[0-9][0-9][0-9][0-9][0-9].npz"))


def write_shard(corpus: Path, index: int, arrays: dict, records: list[dict], entry: dict) -> None:
    """Keep shard ``index``: ``arrays`` (at least ``TOKEN_ARRAYS``, as a data shard holds them), its text
    ``records`` (one JSON object per conversation) and its manifest ``entry`` (sizes, timings).

    Raises:
        ValueError: a token id does not fit in uint16.
    """
    corpus.mkdir(parents=True, exist_ok=True)
    tokens = np.asarray(arrays["tokens"])
    if tokens.size and (tokens.min() < 0 or tokens.max() >= MAX_VOCAB):
        raise ValueError(f"token ids must lie in [0, {MAX_VOCAB}) to be kept as uint16")
    texts = corpus_path(corpus, index, ".jsonl.gz")
    with gzip.open(texts.with_suffix(".tmp"), "wt", encoding="utf-8") as file:
        file.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    os.replace(texts.with_suffix(".tmp"), texts)
    path = corpus_path(corpus, index)
    temporary = path.with_suffix(".tmp.npz")
    np.savez_compressed(
        temporary, tokens=tokens.astype(np.uint16), offsets=np.asarray(arrays["offsets"], dtype=np.int64),
        prompt_lengths=np.asarray(arrays["prompt_lengths"], dtype=np.int32),
        greedy=np.asarray(arrays["greedy"], dtype=bool),
    )
    os.replace(temporary, path)
    manifest = _read_manifest(corpus)
    shards = [s for s in manifest.get("shards", []) if s["index"] != index] + [entry]
    _write_manifest(corpus, {**manifest, "shards": sorted(shards, key=lambda s: s["index"])})


def read_shard(corpus: Path, index: int) -> tuple[dict, list[dict], dict]:
    """Shard ``index`` as ``write_shard`` kept it: ``TOKEN_ARRAYS`` (tokens as int32), text records, manifest
    entry.

    Raises:
        FileNotFoundError: the corpus has no such shard.
    """
    with np.load(corpus_path(corpus, index)) as data:
        arrays = {name: data[name] for name in TOKEN_ARRAYS}
    arrays["tokens"] = arrays["tokens"].astype(np.int32)
    with gzip.open(corpus_path(corpus, index, ".jsonl.gz"), "rt", encoding="utf-8") as file:
        records = [json.loads(line) for line in file]
    entry = next((s for s in _read_manifest(corpus).get("shards", []) if s["index"] == index), {"index": index})
    return arrays, records, entry


def _read_manifest(corpus: Path) -> dict:
    path = corpus / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_manifest(corpus: Path, manifest: dict) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    path = corpus / "manifest.json"
    path.with_suffix(".tmp").write_text(json.dumps(manifest, indent=1))
    os.replace(path.with_suffix(".tmp"), path)
