"""The process-wide tokenizer cache: one openvino-genai Tokenizer per distinct tokenizer, never a wrong one."""

from __future__ import annotations

import re
import shutil

import pytest

from inference.tokenizer_cache import TOKENIZER_FILES, shared_tokenizer


def _copy_tokenizer(source, dest):
    dest.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, dest / name)
    return dest


def test_bit_widths_of_one_model_share_one_tokenizer(int4_dir, int8_dir, tmp_path):
    assert shared_tokenizer(int8_dir) is shared_tokenizer(int4_dir)
    # each export numbers OpenVINO's node names anew (the 8-bit variant's IRs may or may not carry the same numbers
    # as the 4-bit ones, depending on what the exporting process made before): a renumbered copy is the same tokenizer
    copy = _copy_tokenizer(int4_dir, tmp_path / "renumbered")
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        text = (copy / name).read_text()
        (copy / name).write_text(re.sub(r'name="([^"]*?)_(\d+)"', lambda m: f'name="{m[1]}_{int(m[2]) + 7919}"', text))
    assert (copy / "openvino_tokenizer.xml").read_bytes() != (int4_dir / "openvino_tokenizer.xml").read_bytes()
    assert shared_tokenizer(copy) is shared_tokenizer(int4_dir)


def test_a_different_tokenizer_gets_its_own(tiny_ir, tmp_path):
    same, other = shared_tokenizer(tiny_ir["same"]), shared_tokenizer(tiny_ir["other"])
    assert same is not other
    # tokens 28 and 30 are swapped in "other": each tokenizer decodes with its own vocabulary
    assert same.decode([28, 30]) == other.decode([30, 28]) != same.decode([30, 28])


def test_edited_tokenizer_files_are_not_served_from_the_cache(int4_dir, tmp_path):
    copy = _copy_tokenizer(int4_dir, tmp_path / "copy")
    assert shared_tokenizer(copy) is shared_tokenizer(int4_dir)
    xml = copy / "openvino_tokenizer.xml"
    text = xml.read_text()
    assert "named SmolLM" in text  # the chat template's default system prompt
    xml.write_text(text.replace("named SmolLM", "named Edited"))
    messages = [{"role": "user", "content": "Hi"}]
    assert shared_tokenizer(copy) is not shared_tokenizer(int4_dir)
    assert "named Edited" in shared_tokenizer(copy).apply_chat_template(messages, add_generation_prompt=True)
    assert "named SmolLM" in shared_tokenizer(int4_dir).apply_chat_template(messages, add_generation_prompt=True)


def test_unreadable_tokenizer_raises_and_is_not_cached(int4_dir, tmp_path):
    broken = _copy_tokenizer(int4_dir, tmp_path / "broken")
    data = (broken / "openvino_tokenizer.bin").read_bytes()
    (broken / "openvino_tokenizer.bin").write_bytes(data[: len(data) // 3])
    with pytest.raises(RuntimeError):
        shared_tokenizer(broken)
    with pytest.raises(RuntimeError):  # tried again, not served a half-built entry
        shared_tokenizer(broken)


def test_a_folder_without_a_tokenizer_has_no_digest_and_no_tokenizer(int4_dir, tmp_path):
    """Every missing folder had one digest (that of four absent files), and openvino-genai builds a Tokenizer that
    cannot encode from a missing folder: the first one built was cached under that digest and served for every
    other missing folder. A folder that is missing, or holds none of the tokenizer files, is refused by name."""
    from inference.tokenizer_cache import tokenizer_digest

    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, said in ((tmp_path / "missing1", "the folder does not exist"),
                         (tmp_path / "missing2", "the folder does not exist"),
                         (empty, "the folder holds no tokenizer")):
        with pytest.raises(FileNotFoundError, match=said) as refused:
            tokenizer_digest(folder)
        assert refused.value.filename == str(folder)
        with pytest.raises(OSError):
            shared_tokenizer(folder)  # (not an empty Tokenizer)
    # a folder with its tokenizer still gets the digest of its files
    copy = _copy_tokenizer(int4_dir, tmp_path / "copy")
    assert tokenizer_digest(copy) == tokenizer_digest(int4_dir)
