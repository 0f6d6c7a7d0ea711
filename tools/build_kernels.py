"""Build SpecChat's CPU kernels (``inference/kernels/q4_matmul.cpp``, an OpenVINO extension) at set-up: the Makefile's
install targets and ``packaging/build_linux.sh`` run it, the app never does (``inference.q4_kernels``).

    python tools/build_kernels.py        # ~30 s on 2 cores; writes inference/kernels/build/libspecchat_kernels.so

g++ (C++17) compiles it against the OpenVINO of the Python running this (headers and libraries ship in its wheel),
for AVX2, FMA and F16C, on Linux x86-64. Where that cannot be done (no g++, another system, a failed compile) it
prints one line and exits 0: the app then runs OpenVINO's own kernels and says so.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The ops' sources (the .cpp and the headers it includes).
SOURCES = ROOT / "inference" / "kernels"
ISA = ["-mavx2", "-mfma", "-mf16c"]


def compile_source(source: Path, out_path: Path, vnni: bool, extra: list[str]) -> Path:
    """Compile ``source`` (with ``SOURCES`` on the include path) to ``out_path`` with ``-O3``, the AVX2 flags (and
    AVX-512 VNNI where ``vnni``), no contraction of multiplies and adds (the ops' order is their exactness); returns
    ``out_path``.

    Raises:
        subprocess.CalledProcessError: g++ failed. FileNotFoundError: no g++.
    """
    isa = ISA + (["-mavx512vnni", "-mavx512vl"] if vnni else [])
    subprocess.run(["g++", "-O3", *isa, "-ffp-contract=off", "-std=c++17", f"-I{SOURCES}", str(source), *extra,
                    "-o", str(out_path)], check=True)
    return out_path


def build(out_path: Path, vnni: bool = False) -> Path:
    """Compile the extension (``SOURCES/q4_matmul.cpp``) against this Python's OpenVINO into ``out_path`` (a .so);
    ``vnni`` builds the AVX-512 VNNI kernel of ``Q4MatMul`` instead of the AVX2 one. Returns ``out_path``.

    Raises:
        subprocess.CalledProcessError, FileNotFoundError: as :func:`compile_source`.
    """
    import openvino as ov

    root = Path(ov.__file__).parent
    libs = [str(next((root / "libs").glob("libopenvino.so.*"))), str(root / "libs" / "libtbb.so.12")]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    return compile_source(SOURCES / "q4_matmul.cpp", out_path, vnni, ["-shared", "-fPIC", f"-I{root / 'include'}", *libs])


def main() -> int:
    """Build ``inference.q4_kernels.LIBRARY`` where possible; one line either way; always 0."""
    sys.path.insert(0, str(ROOT))
    from inference.q4_kernels import LIBRARY

    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        print(f"SpecChat's CPU kernels not built: they build on Linux x86-64 only (this is {platform.system()} "
              f"{platform.machine()}); OpenVINO's kernels will run")
    elif shutil.which("g++") is None:
        print("SpecChat's CPU kernels not built: no g++ found (install g++ and re-run `python tools/build_kernels.py`); "
              "OpenVINO's kernels will run")
    else:
        temporary = LIBRARY.with_suffix(".so.part")
        try:
            build(temporary)
            temporary.replace(LIBRARY)
            print(f"SpecChat's CPU kernels built: {LIBRARY.relative_to(ROOT)}")
        except (subprocess.CalledProcessError, OSError, StopIteration) as error:
            temporary.unlink(missing_ok=True)
            print(f"SpecChat's CPU kernels not built: compiling failed ({error}); OpenVINO's kernels will run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
