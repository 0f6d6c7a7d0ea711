"""Every Python package of the app is in pyproject.toml's package list: setuptools installs (and the editable
install exposes, and so PyInstaller bundles) only the packages listed there; ``app.server`` once was missing, and
the bundled ``specchat`` died with "No module named 'app.server'"."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parent.parent


def test_every_package_under_app_and_inference_is_listed():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for root in ("app", "inference")
        for init in (REPO / root).rglob("__init__.py")
    }
    assert found - listed == set(), f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
