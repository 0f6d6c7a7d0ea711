"""bench/steadiness.py: its summary of token intervals, and its background load really takes a core."""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from steadiness import Busy, markdown, summarize  # noqa: E402


def test_the_summary_reads_percentiles_over_steps_and_spread_over_rounds():
    rounds = [np.full(10, 10.0), np.full(10, 12.0), np.concatenate([np.full(9, 11.0), [50.0]])]
    cell = summarize(rounds)
    assert cell["median"] == 11.0
    assert cell["p99"] > 12.0 and cell["p90"] == 12.0
    assert cell["spread"] == (12.0 - 10.0) / 11.0


def test_a_busy_process_takes_cpu_time_and_stops():
    with Busy(1, 10) as busy:
        process = busy.processes[0]
        time.sleep(1.0)
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        assert int(fields[16]) == 10  # its nice value
        assert int(fields[11]) + int(fields[12]) > 0  # utime + stime: it ran
    assert process.poll() is not None


def test_the_report_states_each_engines_slowdown_and_the_ratio():
    cell = {"median": 10.0, "p90": 11.0, "p99": 12.0, "spread": 0.1}
    slow = {"median": 15.0, "p90": 20.0, "p99": 30.0, "spread": 0.4}
    report = {"machine": "m", "command": "c", "commit": "x", "finished": "now", "minutes": 1, "rounds": 2,
              "tokens": 8, "results": {"quiet": {"SpecChat": cell, "openvino-genai": cell},
                                       "one busy core": {"SpecChat": slow, "openvino-genai": cell}}}
    text = markdown(report)
    assert "| one busy core | SpecChat | 15.0 | 20.0 | 30.0 | 0.40 | 1.50x |" in text
    assert "quiet 1.00, one busy core 1.50" in text
