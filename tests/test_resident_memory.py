"""Resident memory of the engine (issue 33: peak RSS at most openvino-genai's): freed large blocks go back to the
system (``inference/heap.py``), a loaded model holds no pages of its weights file it read to compile
(``file_pages.release_mapped_file``) nor, after its first pass, of the prefill copy's (``PagedCopy.run``), and the
fast prefill's KV hand-over never holds the cache twice (``kv_states._move_states``). Linux only (``/proc``)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from inference.model import load_model
from inference.precision import PrecisionSettings

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
ROOT = Path(__file__).resolve().parent.parent


def _status(key: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(key + ":"))


@pytest.mark.parametrize("fixed", [True, False])
def test_freed_large_blocks_go_back_to_the_system(fixed):
    """After a freed 16 MiB block, glibc's default serves 1 MiB blocks from its heap and keeps them resident once
    freed between blocks still in use (the control); with the threshold fixed they go back at once."""
    script = textwrap.dedent(f"""
        import numpy as np
        from inference.heap import return_large_blocks
        if {fixed}:
            assert return_large_blocks()
        def rss():
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
        big = np.ones(16 << 20, np.uint8); del big  # raises glibc's dynamic threshold to 16 MiB
        before = rss()
        blocks, spacers = [], []
        for _ in range(64):  # 1 MiB blocks between small live ones (4 MiB in all), as a heap holds them
            blocks.append(np.ones(1 << 20, np.uint8))
            spacers.append(np.ones(64 << 10, np.uint8))
        del blocks
        print(rss() - before)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    kept_mb = float(run.stdout.split()[-1])
    if fixed:
        assert kept_mb < 12, f"{kept_mb - 4:.0f} MiB of 64 freed stayed resident"
    else:
        assert kept_mb > 48, f"glibc's default kept only {kept_mb:.0f} MiB: the control no longer shows the problem"


def _file_resident(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (/proc/self/smaps)."""
    target, inside, total = str(path.resolve()), False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
            inside = len(fields) >= 6 and fields[5] == target
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


def test_a_loaded_model_holds_no_pages_of_its_weights_file(int4_dir):
    """The weights were repacked by the compiles (OpenVINO's and SpecChat's kernels): before, 60 of the file's 93 MB
    stayed resident after a load (Xeon with AMX, 2026-12-05)."""
    weights = int4_dir / "openvino_model.bin"
    model = load_model(int4_dir, "CPU", PrecisionSettings())
    resident = _file_resident(weights)
    assert resident < 0.1 * weights.stat().st_size, f"{resident / 2**20:.0f} MiB of the weights file resident"
    assert model.compiled is not None


def test_the_fast_prefill_hand_over_never_holds_the_kv_cache_twice(int4_dir):
    """A 1,024-token prompt prefilled by the copy and handed over, then a decode step: the peak grows by less than
    1.5x the cache (45 MB; 30 MB in a fresh process); the copy of each variable's data and the copy's own states kept
    it 2.3x (104 MB in a fresh process) before (Xeon, AMX). In a fresh process: after this suite's other tests in
    the same one it read 51 MB, and once +75 MiB (a fresh-clone run, 2026-12-06), the heap's state not the cache's."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, "tests")
        from test_resident_memory import _status
        from inference.kv_cache import KVCache
        from inference.model import load_model
        from inference.precision import PrecisionSettings
        model = load_model(Path({str(int4_dir)!r}), "CPU", PrecisionSettings())
        if model.prefill_compiled is None:
            print("skip"); sys.exit(0)
        cache = KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled)
        ids = [int(t) for t in np.random.default_rng(0).integers(100, 49_000, 1024)]
        cache.prefill(ids, upcoming=len(ids))
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _status("VmRSS")
        logits = cache.forward([ids[0]])  # takes the states back, then a decode step
        growth = _status("VmHWM") - before
        kv_bytes = sum(state.state.data.nbytes for state in cache.request.query_state())
        print(cache.fast_prefilled, growth, kv_bytes, bool(np.isfinite(logits).all()))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.split()[-1] == "skip":
        pytest.skip("no prefill copy on this CPU at the default precision")
    prefilled, growth, kv_bytes, finite = run.stdout.split()[-4:]
    growth, kv_bytes = int(growth), int(kv_bytes)
    assert int(prefilled) == 1024 and kv_bytes > 40 << 20 and finite == "True"
    assert growth < 1.5 * kv_bytes, f"peak +{growth / 2**20:.0f} MiB for a {kv_bytes / 2**20:.0f} MiB cache"


def test_the_copys_first_pass_hands_back_the_weights_file_it_reads(int4_dir):
    """The paged copy's first pass reads its whole weights file to repack the weights (86 MiB of the default model,
    which stayed resident until then); it hands the pages back as it goes (``PagedCopy.run``), and the passes after
    it read little of the file (4 MiB measured: what is read in place). Logits as without. In a fresh process, as
    the app loads (after other paged copies of the same file ran in this one, 89 MiB were found resident: not
    understood yet)."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, "tests")
        from test_resident_memory import _file_resident
        from inference.kv_cache import KVCache
        from inference.paged_copy import PagedCopy
        from inference.model import load_model
        from inference.precision import PrecisionSettings
        model = load_model(Path({str(int4_dir)!r}), "CPU", PrecisionSettings())
        if model.prefill_compiled is None or not PagedCopy.pages(model.prefill_compiled):
            print("skip"); sys.exit(0)
        ids = list(range(300, 400))
        cache = KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled,
                        prefill_weights=model.prefill_weights)
        first = cache.prefill(ids[:80])
        after_first = _file_resident(model.prefill_weights)
        cache.prefill(ids[80:])
        after_second = _file_resident(model.prefill_weights)
        kept = KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled)  # pages not handed back
        same = bool(np.array_equal(kept.prefill(ids[:80]), first))
        print(cache.fast_prefilled, after_first, after_second, _file_resident(model.prefill_weights), same)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.split()[-1] == "skip":
        pytest.skip("no paged prefill copy on this CPU at the default precision")
    prefilled, after_first, after_second, after_third, same = run.stdout.split()[-5:]
    assert int(prefilled) == 100 and int(after_first) < 1 << 20, f"{int(after_first) >> 20} MiB of the file resident"
    assert int(after_second) < 16 << 20 and int(after_third) < 16 << 20  # the copy's weights were repacked once
    assert same == "True"

def test_a_reset_cache_frees_its_states_and_computes_as_a_fresh_one(int4_dir):
    """``InferRequest.reset_state`` kept the plugin's memory of every variable: a reset cache held its last prompt's
    KV cache resident (47 MB at 1,024 tokens) while the next prompt was prefilled. ``KVCache.reset`` frees it, and the
    cache then computes what a fresh one does, bit for bit. In a fresh process (after test_paged_prefill's tests in
    the same one, the freed memory stayed resident: reused, not returned)."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, "tests")
        from test_resident_memory import _status
        from inference.kv_cache import KVCache
        from inference.model import load_model
        from inference.precision import PrecisionSettings
        model = load_model(Path({str(int4_dir)!r}), "CPU", PrecisionSettings(fast_prefill="off"))
        ids = [int(t) for t in np.random.default_rng(1).integers(100, 49_000, 600)]
        cache = KVCache(model.compiled, model.rope)
        cache.forward(ids, last_only=True)
        kv_bytes = sum(state.state.data.nbytes for state in cache.request.query_state())
        before = _status("VmRSS")
        cache.reset()
        freed = before - _status("VmRSS")
        fresh = KVCache(model.compiled, model.rope)
        same = np.array_equal(cache.forward(ids[:40]), fresh.forward(ids[:40])) \\
            and np.array_equal(cache.forward(ids[40:41]), fresh.forward(ids[40:41]))
        print(kv_bytes, freed, len(cache) == 41, bool(same))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    kv_bytes, freed, counted, same = run.stdout.split()[-4:]
    assert int(kv_bytes) > 25 << 20  # 600 tokens: 30 layers x 2 x 3 heads x 64 x 4 bytes each
    assert int(freed) > 0.7 * int(kv_bytes), f"{int(freed) >> 20} MiB freed of a {int(kv_bytes) >> 20} MiB cache"
    assert counted == "True" and same == "True"


def test_the_copys_pass_buffers_go_before_the_hand_over_and_its_passes_hand_back_the_file(int4_dir):
    """The paged copy's compiled model kept its last pass's buffers (and its request) until the next pass, so the
    hand-over's exact f32 cache (45 MiB at 1,024 tokens) grew on top of them: the peak +35 MiB over the pass's end at
    the first long prompt, +25 at the second (fresh process, Xeon with AMX, 2026-12-06). ``PagedCopy.release`` frees
    them first: +19 and +8. The second prompt runs in a fresh request: the same logits and cache, bit for bit.
    Each pass of the copy reads its tokens' embedding rows in place from its weights file (1,024 tokens: 29 MiB, Linux
    mapping pages around each one read, which stayed resident from the second long prompt on): handed back as it runs."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, "tests")
        from test_resident_memory import _file_resident, _status
        from inference.kv_cache import KVCache
        from inference.paged_copy import PagedCopy
        from inference.model import load_model
        from inference.precision import PrecisionSettings
        model = load_model(Path({str(int4_dir)!r}), "CPU", PrecisionSettings())
        if model.prefill_compiled is None or not PagedCopy.pages(model.prefill_compiled):
            print("skip"); sys.exit(0)
        cache = KVCache(model.compiled, model.rope, prefill_model=model.prefill_compiled,
                        prefill_weights=model.prefill_weights)
        ids = [int(t) for t in np.random.default_rng(2).integers(100, 49_000, 1024)]
        files = []
        runs = []
        for _ in range(2):
            cache.reset()
            first = cache.prefill(ids, upcoming=len(ids))
            files.append(_file_resident(model.prefill_weights))
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            before = _status("VmRSS")
            logits = cache.forward([ids[0]])  # the hand-over, then a decode step
            growth = _status("VmHWM") - before
            runs.append((first, logits, cache.layer_keys(11), growth))
        kv_bytes = sum(state.state.data.nbytes for state in cache.request.query_state())
        same = all(np.array_equal(a, b) for a, b in zip(runs[0][:3], runs[1][:3]))
        print(cache.fast_prefilled, kv_bytes, runs[0][3], runs[1][3], max(files), same)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.split()[-1] == "skip":
        pytest.skip("no paged prefill copy on this CPU at the default precision")
    prefilled, kv_bytes, first_growth, second_growth, file_bytes, same = run.stdout.split()[-6:]
    assert int(prefilled) == 2048 and int(kv_bytes) > 40 << 20
    # before: +35 and +25 MiB (0.78x and 0.55x the cache); now +19 and +8 (the first after the copy's first pass)
    for growth, bar in ((int(first_growth), 0.6), (int(second_growth), 0.35)):
        assert growth < bar * int(kv_bytes), f"hand-over +{growth >> 20} MiB for a {int(kv_bytes) >> 20} MiB cache"
    assert int(file_bytes) < 4 << 20, f"{int(file_bytes) >> 20} MiB of the copy's weights file resident after a pass"
    assert same == "True"
