"""bench/provenance.py's stamp: every benchmark result says which command, commit and CPU made it."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from provenance import cpu_name, run_stamp  # noqa: E402


def test_a_stamp_names_the_command_commit_machine_and_duration(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)  # a pinned worker on an AMX CPU sets it (conftest)
    stamp = run_stamp("free_chat.py", ["--max-tokens", "128"], started=time.time() - 90)
    assert stamp["command"] == "python bench/free_chat.py --max-tokens 128"
    assert stamp["minutes"] == 1.5
    assert stamp["machine"].startswith(cpu_name())
    assert len(stamp["commit"].split("+")[0]) >= 7  # the tests run inside the repository's git checkout
    assert stamp["finished"].endswith(" UTC")


def test_a_run_with_openvinos_kernels_capped_says_so_in_its_machine_and_command(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    stamp = run_stamp("fc_profile.py", ["--rounds", "9"], started=time.time())
    assert stamp["command"] == "ONEDNN_MAX_CPU_ISA=AVX2 python bench/fc_profile.py --rounds 9"
    assert stamp["machine"].startswith(cpu_name()) and stamp["machine"].endswith("capped at AVX2 (ONEDNN_MAX_CPU_ISA)")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert "capped" not in run_stamp("fc_profile.py", [], started=time.time())["machine"]
