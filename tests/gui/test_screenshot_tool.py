"""``tools/screenshot.py``: its scenes show the window as a user sees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scene", ["settings", "haiku"])
def test_a_scene_without_a_reply_shows_the_model_ready_not_loading(scene, int4_dir, data_dir, tmp_path):
    """A README trial: `--scene settings` showed "Loading SmolLM2…" and its busy bar in the status bar, while the
    docstring said the scene loaded no model: the window starts loading its model as it opens, and the picture was
    taken mid-load. The scene waits for the model, as a user sees the window once it opened."""
    env = {**os.environ, "SPECCHAT_SCREENSHOT_INSIDE_XVFB": "1", "QT_QPA_PLATFORM": "offscreen",
           "SPECCHAT_DATA_DIR": str(data_dir), "SPECCHAT_CONFIG_DIR": str(tmp_path / "config")}
    output = tmp_path / "scene.png"
    result = subprocess.run([sys.executable, str(REPO / "tools" / "screenshot.py"), "--scene", scene, "--output",
                             str(output)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    status = next(line for line in result.stderr.splitlines() if line.startswith("status bar: "))
    assert status == "status bar: SmolLM2-135M-Instruct · 4-bit · exact" and output.stat().st_size > 0
