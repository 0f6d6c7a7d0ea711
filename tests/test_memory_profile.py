"""bench/memory_profile.py: a fresh worker per configuration reports its resident memory at every stage of a reply,
and the account splits the gap to openvino-genai into parts that add up to it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from memory_profile import CONFIGS, STAGES, WORKLOADS, account, markdown  # noqa: E402


@pytest.mark.parametrize("config", ["no-fast-prefill", "genai"])
def test_a_worker_reports_every_stage_and_its_peak(config, int4_dir):
    run = subprocess.run([sys.executable, str(BENCH / "memory_profile.py"), "--child", config, "--workload",
                          "in32_out32", "--model", str(int4_dir)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    stages = report["stages"]
    assert list(stages) == list(STAGES)
    assert report["peak"] >= max(stages.values()) - 0.5  # VmHWM at the end covers every stage
    # the 4-bit model (93 MB of weights) and its compiled form are resident once loaded
    assert stages["loaded"] - stages["imports"] > 80
    assert stages["first_token"] >= stages["loaded"] - 5


def _cell(peak):
    return {"stages": {stage: peak for stage in STAGES}, "peak": peak}


def test_the_account_splits_the_gap_into_parts_that_add_up():
    peaks = {"specchat": 780, "no-fast-prefill": 560, "openvino-precision": 510, "genai": 470}
    results = {config: {workload: _cell(peaks[config] - 100 * (workload == "in32_out32")) for workload in WORKLOADS}
               for config in CONFIGS}
    split = account(results)["in1024_out32"]
    assert split == {"gap": 310, "fast-prefill copy": 220, "exact numerics": 50, "engine and process": 40}
    report = {"machine": "test", "command": "c", "commit": "x", "finished": "now", "minutes": 0, "results": results,
              "account": account(results)}
    assert "| in1024_out32 | +310 | +220 | +50 | +40 |" in markdown(report)
