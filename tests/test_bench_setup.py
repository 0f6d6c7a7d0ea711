"""bench/setup.sh installs what the engine imports: the benchmark runs the engine from its own venv, and a package
the engine gained but the setup lacks fails every SpecChat run of the benchmark (llguidance once did)."""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imported_packages(folder: Path) -> set[str]:
    packages = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                packages |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                packages.add(node.module.split(".")[0])
    return packages - set(sys.stdlib_module_names) - {"__future__", "inference", "app"}


def test_the_bench_setup_installs_every_package_the_engine_imports():
    setup = (ROOT / "bench" / "setup.sh").read_text(encoding="utf-8")
    engine_line = re.search(r'^have "import ([^"]+)" \|\| \\\n\s+"\$\{PIP\[@\]\}" "openvino==', setup, re.MULTILINE)
    assert engine_line, "bench/setup.sh's engine step (step 1) is not where this test looks"
    checked = {name.strip() for name in engine_line.group(1).split(",")}
    needed = _imported_packages(ROOT / "inference") | _imported_packages(ROOT / "inference" / "models")
    assert "llguidance" in needed and "openvino" in needed  # the scan sees the engine's imports
    # the conversion extra's packages (and huggingface_hub, which it brings) come with optimum-intel in step 4
    assert needed - checked <= {"torch", "transformers", "optimum", "nncf", "huggingface_hub"}, (
        f"bench/setup.sh step 1 does not install {sorted(needed - checked)}")
