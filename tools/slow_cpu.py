"""Run a command as on a slower, AVX2-only CPU: in a cgroup (v1) ``cpu`` group whose CFS quota gives it a share of
this machine's cores, with OpenVINO's kernels capped at AVX2; the group is removed after.

    sudo .venv/bin/python tools/slow_cpu.py [--share 0.333] [--period-ms 3] [--isa AVX2] -- CMD [ARGS...]

Why: the responsiveness tests (tests/gui/test_responsiveness.py) failed on an AVX2-only AMD EPYC about 3x slower per
token than the AMD EPYC Zen 5 (AVX-512) they pass on: a call that holds Python's GIL for 15 ms here holds it for
about 45 ms there. This reproduces that machine's timing here:

- ``ONEDNN_MAX_CPU_ISA=AVX2`` (``--isa``, "" to leave it unset) makes OpenVINO's CPU plugin pick the kernels an AVX2
  CPU runs (``brgemm_avx2_f32``; see bench/fc_profile.py);
- the group's quota, ``share x cores x period`` of CPU time in each ``period`` (``cpu.cfs_quota_us``,
  ``cpu.cfs_period_us``), slows every thread of the command, Python's included, by ``1 / share`` on average. The
  period is short (3 ms) so that the throttling itself shows as pauses of at most a few milliseconds, far below the
  tests' 50 ms bound: calibrated in the README (Testing).

It emulates the slower CPU's compute, not its caches or memory bandwidth. Needs root and the cgroup v1 ``cpu``
controller at ``/sys/fs/cgroup/cpu`` (writable); exits with status 2 and a line saying why where they are missing.
The command's exit status is returned.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

#: Where the cgroup v1 cpu controller is mounted.
CPU_CONTROLLER = Path("/sys/fs/cgroup/cpu")


def quota_us(share: float, period_us: int, cores: int) -> int:
    """The CFS quota (microseconds of CPU time per period, all cores together) that gives ``share`` of ``cores``.

    Raises ValueError where the share is not in (0, 1] or the quota would be under the kernel's 1 ms minimum."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], not {share}")
    quota = round(share * cores * period_us)
    if quota < 1000:
        raise ValueError(f"a quota of {quota} us is under the kernel's 1000 us minimum: lengthen the period")
    return quota


def run_slowed(command: list[str], share: float, period_us: int, isa: str) -> int:
    """Run ``command`` in a fresh cpu group holding ``share`` of this machine's cores, return its exit status.

    Raises OSError where the group cannot be made (not root, no cgroup v1 cpu controller)."""
    group = CPU_CONTROLLER / f"specchat-slow-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us(share, period_us, os.cpu_count() or 1)))
        env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa} if isa else dict(os.environ)
        procs = group / "cgroup.procs"
        # the child joins the group before it runs the command: every thread it starts is in the group
        child = subprocess.Popen(command, env=env, preexec_fn=lambda: procs.write_text(str(os.getpid())))
        # SIGTERM (e.g. from ``timeout``) ends the command too, and the group is still removed
        signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.terminate()
            return child.wait()
    finally:
        _remove(group)


def _remove(group: Path) -> None:
    """Move whatever is left in ``group`` (the command's orphans) back to the root group, then remove it."""
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            (CPU_CONTROLLER / "cgroup.procs").write_text(pid)
        except OSError:
            pass  # it ended meanwhile
    group.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--share", type=float, default=1 / 3, help="share of the machine's cores (default 1/3)")
    parser.add_argument("--period-ms", type=float, default=3.0, help="CFS period in ms (default 3)")
    parser.add_argument("--isa", default="AVX2", help='ONEDNN_MAX_CPU_ISA for the command (default AVX2; "" leaves it)')
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    try:
        return run_slowed(command, args.share, round(args.period_ms * 1000), args.isa)
    except (OSError, ValueError) as error:
        print(f"slow_cpu: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
