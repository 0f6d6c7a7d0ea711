"""The prefill copy's graph with OpenVINO's paged attention, made by a child process and kept in the model's folder.

OpenVINO's ``paged_attention_transformation`` (``model._paged_attention_copy``) is a pybind call that holds Python's
GIL for its whole run: 179 ms on 2 Xeon cores for the default model (``tools/gil_watch.py model_load``), ~0.5 s on a
CPU 3x slower, while no other thread, the window's included, runs a line (``tests/gui/test_gil_holds.py`` bars any
hold at 15 ms). So a load does not call it: the model store's child process (``python -m
inference.models.paged_graphs``, run by name: the engine imports nothing of the store) makes the transformed graph
once per model and outputs (the same read, output edits and transformation) and writes it into the model's folder,
in a folder of its own (:func:`variant_name`: ``openvino_model.xml/.bin`` and ``source.json``, which names the IR
files and OpenVINO version it was made from, :func:`source_stamp`); the load waits for it without the GIL and reads
it (``Core.read_model`` of a path lets the GIL go). A folder outside the store (no :data:`STORE_MARK`) gets none:
``load_model`` then compiles the stateful copy, as where the child fails (logged) or the graph has nothing to page.

OpenVINO's IR reader does not know the transformation's ``PagedAttentionExtension`` op (``opset "extension"``), so
each is read as :class:`PagedAttentionExtension`, a Python op of the same name and version that only carries its
inputs, and then swapped for OpenVINO's own op (``openvino.op._PagedAttentionExtension``: the same inputs, its one
attribute, ``write_kv_cache``, at the default the child checked, and the runtime info the CPU plugin requires,
which the IR does not keep: ``source.json``'s ``attention_info``). The graph compiled is the one the transformation
made: the same prefill logits and cache bit for bit (``tests/test_paged_prefill.py``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import openvino as ov
from openvino import Op
from openvino import op as ov_op

from .devices import core

logger = logging.getLogger(__name__)

#: The file that marks a folder of the model store (``inference.models.manifest.MANIFEST_NAME``): only there is a
#: paged graph written.
STORE_MARK = "specchat_manifest.json"
#: The first argument that makes a bundled app (PyInstaller sets ``sys.frozen``; no ``python -m``) run the store's
#: child (``packaging/entry.py``).
INTERNAL_FLAG = "--internal-paged-graph"
#: The longest wait for the child (seconds); it took 1.0 s for the default model on 2 Xeon cores.
BUILD_TIMEOUT_S = 300.0
#: The files of a variant's folder: the graph and ``source.json`` (:func:`source_stamp`; ``"pages"``: whether the
#: transformation found attention to page, without it there is no graph; ``"sizes"``: the graph files' bytes;
#: ``"attention_info"``).
GRAPH_FILES = ("openvino_model.xml", "openvino_model.bin")
STAMP = "source.json"


def variant_name(hidden_states: bool, feature_layers: Sequence[int]) -> str:
    """The folder, inside the model's, of the paged graph with these outputs (``load_model``'s arguments):
    ``paged-hidden`` / ``paged-plain``, then ``-layers-3-9-15`` for ``feature_layers`` (3, 9, 15)."""
    name = "paged-hidden" if hidden_states else "paged-plain"
    return name + "".join(f"-layers-{'-'.join(str(int(layer)) for layer in feature_layers)}" if feature_layers else "")


def source_stamp(folder: Path, hidden_states: bool, feature_layers: Sequence[int]) -> dict:
    """What a paged graph was made from: the model IR's files (size in bytes and mtime in ns each), the OpenVINO
    version and the outputs (``variant_name``'s arguments). A graph whose ``source.json`` says otherwise is made again.

    Raises:
        OSError: an IR file cannot be read.
    """
    files = {name: [(folder / name).stat().st_size, (folder / name).stat().st_mtime_ns] for name in GRAPH_FILES}
    return {"files": files, "openvino": ov.get_version(), "hidden_states": bool(hidden_states),
            "feature_layers": [int(layer) for layer in feature_layers]}


def child_command(folder: Path, hidden_states: bool, feature_layers: Sequence[int]) -> list[str]:
    """The command line of the store's child that makes ``folder``'s paged graph (``inference.models.paged_graphs``)."""
    runner = [INTERNAL_FLAG] if getattr(sys, "frozen", False) else ["-m", "inference.models.paged_graphs"]
    layers = ["--feature-layers", *(str(int(layer)) for layer in feature_layers)] if feature_layers else []
    return [sys.executable, *runner, str(folder), "--hidden-states" if hidden_states else "--no-hidden-states", *layers]


def paged_graph(folder: Path, hidden_states: bool, feature_layers: Sequence[int]) -> ov.Model | None:
    """The graph of ``folder``'s model with OpenVINO's paged attention and the outputs ``load_model`` gives the exact
    one (``model._paged_attention_copy``), read from the folder's variant (module docstring), which a child process
    makes first where it is missing or stale (the caller waits for it, without the GIL: 1.0 s for the default model
    on 2 Xeon cores, once per variant). None: the folder is not the store's, the child failed (logged; not tried
    again for the same source in this process), or the transformation found no attention to page.

    A variant whose files differ in size from what its ``source.json`` records is made again; one OpenVINO cannot
    read is logged and left (the stateful copy is compiled; deleting its folder makes it again).
    """
    if not (folder / STORE_MARK).is_file():
        return None
    try:
        stamp = source_stamp(folder, hidden_states, feature_layers)
    except OSError:
        return None
    built = folder / variant_name(hidden_states, feature_layers)
    made = whole(built, read_stamp(built))
    tried = (str(built), json.dumps(stamp, sort_keys=True))
    if not current(made, stamp) and tried not in _failed:
        _build(folder, hidden_states, feature_layers)
        made = whole(built, read_stamp(built))
    if not current(made, stamp):
        _failed.add(tried)  # not tried again in this process (e.g. a folder it cannot write)
        return None
    if not made.get("pages"):
        return None
    try:
        return read_graph(built / GRAPH_FILES[0], made.get("attention_info", {}))
    except RuntimeError as error:  # damaged: the stateful copy this time (deleting the folder makes it again)
        logger.warning("cannot read the paged prefill graph in %s: %s", built, error)
        return None


def whole(built: Path, made: dict | None) -> dict | None:
    """``made`` if the variant's graph files have the sizes its ``source.json`` gives (``"sizes"``), else None."""
    try:
        sizes = {name: (built / name).stat().st_size for name in (made or {}).get("sizes", {})}
    except OSError:
        return None
    return made if made is not None and sizes == made.get("sizes", {}) else None


#: The variants (folder, stamp) whose child failed in this process.
_failed: set[tuple[str, str]] = set()


def current(made: dict | None, stamp: dict) -> bool:
    """Whether a variant's ``source.json`` (``made``) was made from what :func:`source_stamp` now says (``stamp``)."""
    return made is not None and all(made.get(key) == value for key, value in stamp.items())


def read_stamp(built: Path) -> dict | None:
    """A variant folder's ``source.json``, or None (absent or unreadable: not made yet)."""
    try:
        return json.loads((built / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _build(folder: Path, hidden_states: bool, feature_layers: Sequence[int]) -> None:
    """Run the store's child for this variant and wait for it (without the GIL); a failure is logged."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        result = subprocess.run(child_command(folder, hidden_states, feature_layers), stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, errors="replace", env=env, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("no paged prefill graph for %s: %s", folder, error)
        return
    if result.returncode != 0:
        logger.warning("no paged prefill graph for %s: its child exited %s: %s", folder, result.returncode,
                       (result.stderr or result.stdout)[-2000:])


class PagedAttentionExtension(Op):
    """Stands in for OpenVINO's ``PagedAttentionExtension`` while its IR is read (module docstring): the same type
    name and version (``extension``), its inputs, and outputs typed as the real op's for this graph (0: the query's
    type and shape ``[tokens, heads * head size]``; 1 and 2, the scores: ``[?]``). :func:`read_graph` swaps it out."""

    #: The instances the reader made, in order (:func:`read_graph` takes them under ``_reading``).
    made: list[PagedAttentionExtension] = []

    def __init__(self, inputs=None):
        super().__init__(self, inputs)
        PagedAttentionExtension.made.append(self)

    def validate_and_infer_types(self):
        kind = self.get_input_element_type(0)
        self.set_output_type(0, kind, self.get_input_partial_shape(0))
        self.set_output_type(1, kind, ov.PartialShape([-1]))
        self.set_output_type(2, kind, ov.PartialShape([-1]))

    def clone_with_new_inputs(self, new_inputs):
        return PagedAttentionExtension(new_inputs)

    def visit_attributes(self, visitor):
        return True


_reading = threading.Lock()
_registered = False


def read_graph(path: Path, attention_info: dict[str, dict[str, int]]) -> ov.Model:
    """Read a paged graph's IR (``path``, its ``.xml``) with OpenVINO's own ``PagedAttentionExtension`` in place of
    each placeholder (module docstring), given the runtime info ``attention_info`` names for it (``write_graph``);
    the GIL is let go while OpenVINO reads.

    Raises:
        RuntimeError: OpenVINO cannot read it, an op read differs from OpenVINO's (outputs' types or shapes), or
            ``attention_info`` lacks one.
    """
    global _registered
    with _reading:
        if not _registered:
            core().add_extension(PagedAttentionExtension)
            _registered = True
        PagedAttentionExtension.made = []
        try:
            model = core().read_model(path)
            placeholders = [node for node in PagedAttentionExtension.made if node.get_output_size() == 3
                            and any(node.output(0).get_target_inputs())]
        finally:
            PagedAttentionExtension.made = []
    for node in placeholders:
        real = ov_op._PagedAttentionExtension([node.input_value(i) for i in range(node.get_input_size())])
        for i in range(node.get_output_size()):
            if (real.get_output_element_type(i), real.get_output_partial_shape(i)) != \
                    (node.get_output_element_type(i), node.get_output_partial_shape(i)):
                raise RuntimeError(f"{path}: {node.get_friendly_name()} output {i} reads as "
                                   f"{node.get_output_partial_shape(i)}, OpenVINO's op gives "
                                   f"{real.get_output_partial_shape(i)}")
            for target in node.output(i).get_target_inputs():
                target.replace_source_output(real.output(i))
        name = node.get_friendly_name()
        if name not in attention_info:
            raise RuntimeError(f"{path}: no runtime info for {name} in {STAMP}")
        real.set_friendly_name(name)
        rt_info = real.get_rt_info()
        for key, value in attention_info[name].items():
            rt_info[key] = value
    return model
