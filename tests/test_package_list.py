"""Every Python package of the app is in pyproject.toml's package list: setuptools installs (and the editable
install exposes, and so PyInstaller bundles) only the packages listed there; ``app.server`` once was missing, and
the bundled ``specchat`` died with "No module named 'app.server'"."""

from __future__ import annotations

import subprocess
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


def test_every_folder_python_could_import_is_listed_with_its_data():
    """A folder without ``__init__.py`` is still importable (a namespace package): setuptools warns ("Package
    'inference.models.data' is absent from the `packages` configuration") when one holding package data is not
    listed, and a later setuptools may leave its files out. Folders whose names are not identifiers (the head's
    folder) cannot be imported and ship as their package's data. Folders git ignores are build outputs
    (``inference/kernels/build``, made at set-up after the package is installed): absent from a fresh clone, they
    cannot be listed (setuptools refuses a listed package whose folder is missing); PyInstaller ships them."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = [folder for root in ("app", "inference") for folder in [REPO / root, *(REPO / root).rglob("*")]
               if folder.is_dir() and folder.name != "__pycache__"
               and all(part.isidentifier() for part in folder.relative_to(REPO).parts)]
    ignored = set(subprocess.run(["git", "check-ignore", "--stdin"], cwd=REPO, capture_output=True, text=True,
                                 input="\n".join(str(f.relative_to(REPO)) for f in folders)).stdout.split())
    importable = {".".join(folder.relative_to(REPO).parts) for folder in folders
                  if str(folder.relative_to(REPO)) not in ignored}
    assert "inference.models.data" in importable
    assert importable - set(setuptools["packages"]) == set()
    assert setuptools["package-data"]["inference.models.data"] == ["*/*"]
