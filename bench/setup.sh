#!/usr/bin/env bash
# Benchmark environment (issue 6): a separate venv, bench/.venv, so the peers' heavy stacks
# (torch, transformers, optimum-intel, a from-source llama.cpp) never touch the app's .venv.
# Idempotent: each step is skipped when its import already works. Re-run freely.
#
#   bash bench/setup.sh            # ~10 min the first time on 2 cores (llama.cpp compiles), seconds after
#
# Versions that worked together (2 cores, Python 3.11, Linux x86-64):
#   openvino / openvino-genai / openvino-tokenizers 2026.4.1, llama-cpp-python 0.3.x (built from source),
#   torch 2.13.0+cpu, transformers 5.5.x, optimum-intel 2.2.0, nncf 3.4.0, matplotlib, psutil.
# torchvision is deliberately absent: optimum-intel declares it, but a PyPI torchvision that does not match
# this torch breaks transformers' model imports ("operator torchvision::nms does not exist").
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BENCH_VENV:-$HERE/.venv}"
PYTHON="${PYTHON:-python3}"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet)
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip

have() { "$PY" -c "$1" >/dev/null 2>&1; }

# 1. The engine's own dependencies (the repo root is put on sys.path by bench/speed.py; no PySide6 needed).
#    tests/test_bench_setup.py checks that this list covers every package inference/ imports.
have "import openvino, openvino_genai, openvino_tokenizers, numpy, gguf, platformdirs, filelock, llguidance" || \
  "${PIP[@]}" "openvino==2026.4.*" "openvino-genai==2026.4.*" "openvino-tokenizers==2026.4.*" \
              "numpy>=1.24" "gguf>=0.17" "platformdirs>=4" "filelock>=3.12" "llguidance>=1.9,<2"

# 2. Measuring and plotting.
have "import matplotlib, psutil" || "${PIP[@]}" matplotlib psutil

# 3. torch: the CPU wheel, pinned (a plain `torch` requirement may pull a multi-GB CUDA build).
#    Here pip's find-links holds torch-2.13.0+cpu; elsewhere add --index-url https://download.pytorch.org/whl/cpu.
have "import torch" || "${PIP[@]}" "torch==2.13.0"

# 4. optimum-intel without torchvision: install its dependencies explicitly, then optimum-intel --no-deps.
if ! have "import optimum.intel, transformers, nncf, accelerate; from optimum.intel import OVModelForCausalLM"; then
  "${PIP[@]}" "transformers==5.5.4" "huggingface_hub>=0.23.2,<1.22" "nncf==3.4.*" accelerate "optimum==2.3.*" \
              sentencepiece protobuf scipy onnx
  "${PIP[@]}" --no-deps "optimum-intel==2.2.*"
fi
"$PY" -m pip uninstall --quiet --yes torchvision >/dev/null 2>&1 || true

# 5. llama-cpp-python, compiled from source for this CPU (no CUDA, no prebuilt wheel): ~8 min on 2 cores. The
#    [server] extra brings llama-server (python -m llama_cpp.server) for the server benchmark.
#    A native build may not run here: llama.cpp 0.3.x's AMX kernels segfault in the first decode on Xeons with
#    AMX. bench/llama_smoke.py runs a 16-token completion in a child process; when it fails, llama.cpp is rebuilt
#    with the CPU's AVX/AVX2/AVX-512 kernels named one by one and AMX off, and checked again.
LLAMA_COMMON="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF"
build_llama() {
  CMAKE_ARGS="$1 $LLAMA_COMMON" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "${PIP[@]}" --force-reinstall --no-binary llama-cpp-python --no-cache-dir "llama-cpp-python[server]==0.3.*"
}
without_amx() {
  local flags; flags="$(grep -m1 '^flags' /proc/cpuinfo || true)"
  local args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
  case "$flags" in *avx512f*) args="$args -DGGML_AVX512=ON" ;; esac
  case "$flags" in *avx512_vnni*) args="$args -DGGML_AVX512_VNNI=ON" ;; esac
  echo "$args"
}
if ! have "import llama_cpp, llama_cpp.server"; then
  build_llama "${CMAKE_ARGS:--DGGML_NATIVE=ON}"
fi
if ! "$PY" "$HERE/llama_smoke.py"; then
  echo "bench/setup.sh: rebuilding llama.cpp without its AMX kernels" >&2
  build_llama "$(without_amx)"
  "$PY" "$HERE/llama_smoke.py" || { echo "bench/setup.sh: llama.cpp does not run on this CPU even without AMX" >&2; exit 1; }
fi

"$PY" - <<'PY'
import importlib.metadata as md
for name in ["openvino", "openvino-genai", "llama-cpp-python", "torch", "transformers", "optimum", "optimum-intel",
             "nncf", "matplotlib", "psutil", "numpy"]:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: MISSING")
PY
