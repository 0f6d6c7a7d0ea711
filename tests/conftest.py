"""Shared fixtures: the default model (fetched once into .cache/ of the repo) and engines on it; and the two phases
of ``make test``.

The phases: ``--phase parallel`` (run under pytest-xdist, ``-n 2 --dist loadfile --no-loadscope-reorder``) deselects the tests marked
``serial``; ``--phase serial`` (run alone, after it) keeps only them. ``serial`` marks the tests that assert a
wall-time bound or a GUI stall limit, which another process loading the CPU can break. A phase that selects nothing
passes. Without ``--phase`` every test runs, in the order collected. Each xdist worker is pinned to its share of this process's CPUs (one
core each on 2 cores): with both workers' OpenVINO (and torch) thread pools spread over both cores, the speculative
sampling tests ran 132 s against 105 s in one process; pinned, 90 s (quiet, Zen 5, 2 cores, 2026-12-05).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_DATA = Path(os.environ.get("SPECCHAT_TEST_DATA_DIR", REPO / ".cache" / "test-data"))


def pytest_addoption(parser):
    parser.addoption("--phase", choices=("parallel", "serial"), default=None,
                     help="make test's phases: 'parallel' leaves out the tests marked serial, 'serial' runs only them")


#: What a pinned worker caps oneDNN at on an AMX CPU (see ``pytest_configure``), and the variable saying it did so.
ONE_CPU_ISA_CAP = "AVX512_CORE_BF16"
ONE_CPU_ISA_CAP_MARK = "SPECCHAT_TEST_ONE_CPU_ISA_CAP"


def pytest_configure(config):
    """Pins an xdist worker (``PYTEST_XDIST_WORKER`` gwN of ``PYTEST_XDIST_WORKER_COUNT``) to every Nth CPU of its
    affinity, before anything starts a thread pool (OpenVINO and torch size theirs to the CPUs a process may use).

    A worker left one CPU on a CPU with AMX also caps oneDNN at AVX512_CORE_BF16 (bf16 still native, computed with
    AVX512_BF16 instead of AMX tiles; the serial phase, unpinned, runs AMX): there OpenVINO 2026.4's CPU plugin dies
    of SIGFPE compiling the tiny test llama (``tiny_models``, hidden size 64) in bf16 in a process allowed one CPU
    (measured on an Intel Xeon with AMX: ``taskset -c 1``, with or without INFERENCE_NUM_THREADS 1, NUM_STREAMS 1,
    ENABLE_CPU_PINNING off or KV_CACHE_PRECISION f32; f32 compiles, ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`` compiles,
    the default model compiles; openvinotoolkit/openvino#33300 reports a SIGFPE under ``taskset -c 0``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        cpus = sorted(os.sched_getaffinity(0))
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        pinned = cpus[int(worker.removeprefix("gw")) :: count] or cpus
        os.sched_setaffinity(0, pinned)
        if len(pinned) == 1 and "ONEDNN_MAX_CPU_ISA" not in os.environ and _cpu_has("amx_tile"):
            os.environ["ONEDNN_MAX_CPU_ISA"] = ONE_CPU_ISA_CAP
            os.environ[ONE_CPU_ISA_CAP_MARK] = "1"  # a child given every CPU drops the cap (server_process.py)


def _cpu_has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists ``flag`` (False where there is no /proc/cpuinfo)."""
    try:
        return flag in Path("/proc/cpuinfo").read_text(errors="replace").split()
    except OSError:
        return False


def pytest_collection_modifyitems(config, items):
    """Keeps the tests of this ``--phase``; in the parallel phase, the files holding a ``slow`` or ``installer`` test
    (minutes each) go first, in their order, so that xdist starts them while the other worker goes through the short
    files, not at the end with the other worker idle. xdist hands out files in collection order only with
    ``--no-loadscope-reorder``: by default it sorts them by their number of tests, most first (xdist 3.8,
    ``LoadScopeScheduling.schedule``), which put the one-test ``test_server_load.py`` and the three-test
    ``test_installers.py`` (one and two and a half minutes on the Zen 5) among the last files handed out."""
    phase = config.getoption("--phase")
    if phase is None:
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("serial") is not None) == (phase == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    if phase == "parallel":
        long_files = {item.path for item in keep if item.get_closest_marker("slow") or item.get_closest_marker("installer")}
        keep.sort(key=lambda item: item.path not in long_files)
    items[:] = keep


def pytest_sessionfinish(session, exitstatus):
    if session.config.getoption("--phase") and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """SPECCHAT_DATA_DIR for the whole test session (models are fetched there once and reused)."""
    TEST_DATA.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("SPECCHAT_DATA_DIR")
    os.environ["SPECCHAT_DATA_DIR"] = str(TEST_DATA)
    yield TEST_DATA
    if previous is None:
        os.environ.pop("SPECCHAT_DATA_DIR", None)
    else:
        os.environ["SPECCHAT_DATA_DIR"] = previous


@pytest.fixture(scope="session")
def int4_dir(data_dir) -> Path:
    """The default model, 4-bit (its own Q4_1 weights)."""
    from inference.models.default_model import ensure_default_model

    return ensure_default_model(4)


@pytest.fixture(scope="session")
def int8_dir(data_dir) -> Path:
    """The default model re-encoded at 8 bits: a draft that differs from the 4-bit target."""
    from inference.models.default_model import ensure_default_model

    return ensure_default_model(8)


@pytest.fixture(scope="session")
def target(int4_dir):
    """The 4-bit default model loaded on CPU at the app's default precision (exact: f32, f32 KV cache)."""
    from inference.model import load_model
    from inference.precision import PrecisionSettings

    return load_model(int4_dir, "CPU", PrecisionSettings())


@pytest.fixture(scope="session")
def head_target(int4_dir):
    """The 4-bit default model loaded as the engine loads it for the draft head shipped with it: ``target``'s
    precision, and the outputs of the decoder layers the head fuses (its manifest's ``feature_layers``), without
    which the head is refused (``draft_head.check_head_fits``)."""
    from inference.draft_head import read_head_manifest
    from inference.model import load_model
    from inference.models.default_head import default_head_dir
    from inference.precision import PrecisionSettings

    layers = tuple(read_head_manifest(default_head_dir()).get("feature_layers", ()))
    return load_model(int4_dir, "CPU", PrecisionSettings(), feature_layers=layers)



@pytest.fixture(scope="session")
def draft(int8_dir):
    """The 8-bit default model loaded on CPU (used as a draft)."""
    from inference.model import load_model

    return load_model(int8_dir, "CPU")


@pytest.fixture(scope="session")
def tiny_ir(tmp_path_factory, data_dir) -> dict:
    """Model-manager sources, built once: the default GGUF (``gguf``) and two tiny random IR folders with the
    default tokenizer (``same``) and with two token strings swapped (``other``). Treat them as read-only."""
    from tiny_models import default_gguf, write_tiny_llama

    root = tmp_path_factory.mktemp("tiny-ir")
    gguf = default_gguf(root / "gguf")
    return {
        "gguf": gguf,
        "same": write_tiny_llama(gguf, root / "tiny-same"),
        "other": write_tiny_llama(gguf, root / "tiny-other", swap_tokens=(28, 30)),
    }


@pytest.fixture(scope="session")
def kernel_library(tmp_path_factory) -> Path:
    """SpecChat's kernel library (``tools/build_kernels.py``): the one set-up built (``q4_kernels.LIBRARY``) where it
    is newer than every source under ``inference/kernels`` (the .cpp and the headers it includes), else one compiled
    now into a temporary folder, once a session (a compile is about 30 s on 2 cores), so the tests never run a library
    older than the sources they test. The caller skips where g++ or the CPU cannot build and run it."""
    from inference import q4_kernels
    from tools.build_kernels import SOURCES, build

    library = q4_kernels.LIBRARY
    sources = [path for pattern in ("*.cpp", "*.hpp") for path in SOURCES.glob(pattern)]
    if library.is_file() and library.stat().st_mtime > max(path.stat().st_mtime for path in sources):
        return library
    return build(tmp_path_factory.mktemp("kernels") / library.name)


@pytest.fixture(scope="module")
def server(data_dir, int4_dir):
    """``specchat serve`` on the default model in its own process, one per test module that asks (a module that
    needs other flags defines its own)."""
    from server_process import ServerProcess

    with ServerProcess() as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    """The ``openai`` client of this module's ``server``."""
    import openai

    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=180)
