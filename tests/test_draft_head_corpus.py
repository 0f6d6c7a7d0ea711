"""The draft head's data outlives a machine: ``generate.py`` keeps each shard's conversations in a corpus
(``tools/draft_head/corpus.py``) and a new data folder is rebuilt from it without generating again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tools.draft_head import corpus, generate


def _generate(tiny_ir, out, corpus_dir, *extra: str) -> None:
    assert generate.main(["--out", str(out), "--model", str(tiny_ir["same"]), "--corpus", str(corpus_dir),
                          "--shards", "2", "--shard-size", "4", "--max-new-tokens", "6", *extra]) == 0


@pytest.fixture(scope="module")
def first_run(tiny_ir, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    _generate(tiny_ir, root / "data", root / "conversations")
    return root


def _load(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def test_each_generated_shard_is_kept_as_token_ids_and_texts(first_run):
    for index in (0, 1):
        data = _load(generate.shard_path(first_run / "data", index))
        kept, records, entry = corpus.read_shard(first_run / "conversations", index)
        for name in corpus.TOKEN_ARRAYS:
            assert np.array_equal(kept[name], data[name]), name
        assert len(records) == len(data["prompt_lengths"]) == entry["conversations"]
        assert entry["reply_tokens"] == len(data["tokens"]) - int(data["prompt_lengths"].sum())
        lines = generate.shard_path(first_run / "data", index, ".jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == records
        stored = _load(corpus.corpus_path(first_run / "conversations", index))
        assert sorted(stored) == sorted(corpus.TOKEN_ARRAYS), "features are recomputed, never committed"
        assert stored["tokens"].dtype == np.uint16


def test_a_new_data_folder_is_rebuilt_from_the_corpus_without_generating(first_run, tiny_ir, tmp_path, monkeypatch):
    def no_generation(*args, **kwargs):
        raise AssertionError("a shard in the corpus was generated again")

    monkeypatch.setattr(generate.Target, "generate", no_generation)
    _generate(tiny_ir, tmp_path / "data", first_run / "conversations")
    for index in (0, 1):
        before = _load(generate.shard_path(first_run / "data", index))
        after = _load(generate.shard_path(tmp_path / "data", index))
        assert before.keys() == after.keys()
        for name, values in before.items():
            # the same IR on the same machine: the teacher-forced pass is repeatable to the bit
            assert np.array_equal(values, after[name]), name
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert [s["index"] for s in manifest["shards"]] == [0, 1]


def test_a_data_folder_made_before_the_corpus_is_copied_into_it(first_run, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setattr(generate.Target, "generate", lambda *a, **k: pytest.fail("nothing should be generated"))
    _generate(tiny_ir, first_run / "data", tmp_path / "conversations")
    for index in (0, 1):
        kept, _, _ = corpus.read_shard(tmp_path / "conversations", index)
        assert np.array_equal(kept["tokens"], _load(generate.shard_path(first_run / "data", index))["tokens"])


def test_a_corpus_refuses_another_plan(first_run, tiny_ir, tmp_path):
    with pytest.raises(SystemExit, match="seed=0"):
        _generate(tiny_ir, tmp_path / "data", first_run / "conversations", "--seed", "1")
    assert not generate.shard_path(tmp_path / "data", 0).exists()


def test_token_ids_that_do_not_fit_are_refused(tmp_path):
    arrays = {"tokens": np.asarray([1, corpus.MAX_VOCAB]), "offsets": [0, 2], "prompt_lengths": [1], "greedy": [True]}
    with pytest.raises(ValueError, match="uint16"):
        corpus.write_shard(tmp_path, 0, arrays, [{}], {"index": 0})
    assert not corpus.has_shard(tmp_path, 0)


def test_conversations_only_fills_the_corpus_and_a_later_run_adds_the_hidden_states(tiny_ir, tmp_path, monkeypatch):
    arguments = ["--model", str(tiny_ir["same"]), "--corpus", str(tmp_path / "conversations"), "--shards", "1",
                 "--shard-size", "4", "--max-new-tokens", "6"]
    assert generate.main([*arguments, "--conversations-only"]) == 0
    assert corpus.has_shard(tmp_path / "conversations", 0) and not list(tmp_path.glob("**/shard-*.npz.tmp*"))
    monkeypatch.setattr(generate.Target, "generate", lambda *a, **k: pytest.fail("nothing should be generated"))
    assert generate.main([*arguments, "--out", str(tmp_path / "data")]) == 0
    data = _load(generate.shard_path(tmp_path / "data", 0))
    kept, _, _ = corpus.read_shard(tmp_path / "conversations", 0)
    assert np.array_equal(data["tokens"], kept["tokens"])
    assert data["hidden"].shape == (len(kept["tokens"]), data["hidden"].shape[1]) and np.isfinite(data["hidden"]).all()


def test_out_is_required_unless_conversations_only(capsys):
    with pytest.raises(SystemExit):
        generate.main(["--shards", "1"])
    assert "--out is required" in capsys.readouterr().err


def test_without_shards_a_rebuild_covers_the_whole_corpus(first_run, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "DEFAULT_SHARDS", 1)
    monkeypatch.setattr(generate.Target, "generate", lambda *a, **k: pytest.fail("nothing should be generated"))
    assert generate.main(["--out", str(tmp_path / "data"), "--model", str(tiny_ir["same"]), "--corpus",
                          str(first_run / "conversations"), "--shard-size", "4", "--max-new-tokens", "6"]) == 0
    assert corpus.shard_indices(first_run / "conversations") == [0, 1]
    assert generate.shard_path(tmp_path / "data", 1).is_file()  # DEFAULT_SHARDS alone would stop after shard 0


def test_a_rebuild_with_layer_features_stores_them_first_shards_first_and_resumes_only_with_them(
        first_run, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setattr(generate.Target, "generate", lambda *a, **k: pytest.fail("nothing should be generated"))
    built = []
    write = generate.write_data_shard
    monkeypatch.setattr(generate, "write_data_shard", lambda target, out, arrays, records, entry: (
        built.append(entry["index"]), write(target, out, arrays, records, entry))[1])
    _generate(tiny_ir, tmp_path / "data", first_run / "conversations", "--layers", "0", "--threads", "1",
              "--first", "1")
    assert built == [1, 0]
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["feature_layers"] == [0] and [s["index"] for s in manifest["shards"]] == [0, 1]
    for index in (0, 1):
        plain = _load(generate.shard_path(first_run / "data", index))
        fused = _load(generate.shard_path(tmp_path / "data", index))
        for name, values in plain.items():
            assert np.array_equal(values, fused[name]), name  # the features beside them change nothing
        layers = fused["layers"].astype(np.float32)
        assert layers.shape == (len(plain["tokens"]), 1, plain["hidden"].shape[1]) and layers.dtype != np.float64
        # the one layer's output, RMS-normalized, is the final hidden state up to the final norm's weight and eps:
        # the ratio of the two is one vector times one number per position
        ratio = plain["hidden"].astype(np.float32) / layers[:, 0]
        np.testing.assert_allclose(ratio / ratio[:1], (ratio / ratio[:1])[:, :1] * np.ones_like(ratio), rtol=2e-2)
    with pytest.raises(SystemExit, match="--layers"):
        _generate(tiny_ir, tmp_path / "data", first_run / "conversations")


def test_only_builds_the_named_shards_and_no_others(first_run, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setattr(generate.Target, "generate", lambda *a, **k: pytest.fail("nothing should be generated"))
    _generate(tiny_ir, tmp_path / "data", first_run / "conversations", "--only", "1")
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert [s["index"] for s in manifest["shards"]] == [1]
    assert not generate.shard_path(tmp_path / "data", 0).is_file()
