"""``make head`` (``tools/draft_head/rebuild.py``): the shipped head's recorded stages run with this Python, the
export goes elsewhere than over the shipped head, and a rebuild passes only within the stated tolerance of the
shipped head's held-out acceptance."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inference.draft_head import read_head_manifest
from inference.models.default_head import SHIPPED_HEAD
from tools.draft_head import rebuild


def test_the_stages_are_the_manifest_s_with_this_python_and_the_export_elsewhere(tmp_path):
    manifest = read_head_manifest(SHIPPED_HEAD)
    stages = rebuild.stages(manifest, tmp_path / "head")
    recorded = [command.split() for command in manifest["training"]["rebuild"]["commands"]]
    assert [words[:3] for words in stages] == [[sys.executable, *words[1:3]] for words in recorded]
    assert stages[-1][2] == "tools.draft_head.export" and stages[-1][stages[-1].index("--out") + 1] == str(tmp_path / "head")
    # every other stage as recorded: an earlier export writes the head a later run starts from, where that run reads it
    assert [words[3:] for words in stages[:-1]] == [words[3:] for words in recorded[:-1]]
    assert any(words[2] == "tools.draft_head.export" for words in recorded[:-1])  # (the shipped head has one)
    with pytest.raises(ValueError, match="records no rebuild commands"):
        rebuild.stages({"training": {}}, tmp_path)


def held_out(greedy: float, sampled: float) -> dict:
    return {"training": {"held_out": {"greedy_accept_1": greedy, "sampled_accept_1": sampled}}}


def test_a_rebuild_passes_within_the_tolerance_and_fails_below_it():
    shipped = held_out(0.696, 0.549)
    assert rebuild.shortfalls(held_out(0.696 - 0.019, 0.549 - 0.019), shipped) == []
    assert rebuild.shortfalls(held_out(0.70, 0.60), shipped) == []
    assert rebuild.shortfalls(held_out(0.67, 0.549), shipped) == ["greedy_accept_1 0.670 < 0.696 - 0.02"]
    assert len(rebuild.shortfalls(held_out(0.5, 0.5), shipped)) == 2


def test_a_dry_run_prints_every_stage_and_runs_none(monkeypatch, capsys):
    monkeypatch.setattr(rebuild.subprocess, "run", lambda *a, **k: pytest.fail("ran a stage"))
    assert rebuild.main(["--dry-run", "--out", "build/x"]) == 0
    printed = capsys.readouterr().out.splitlines()
    commands = read_head_manifest(SHIPPED_HEAD)["training"]["rebuild"]["commands"]
    assert len(printed) == len(commands) and printed[-1].endswith(f"--out {Path('build/x').resolve()}")


def test_a_failed_stage_stops_the_rebuild_with_its_exit_code(monkeypatch, capsys):
    monkeypatch.setattr(rebuild.subprocess, "run", lambda *a, **k: rebuild.subprocess.CompletedProcess(a, 3))
    assert rebuild.main(["--out", "build/x"]) == 3
    captured = capsys.readouterr()
    assert captured.out.count("$ ") == 1 and "that stage failed (exit code 3)" in captured.err
