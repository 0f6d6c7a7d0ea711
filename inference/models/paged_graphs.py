"""The model store's child process that makes a model's paged prefill graph (``inference.paged_graph``) and writes it
into the model's folder: it holds its own GIL, not the window's, through OpenVINO's ``paged_attention_transformation``.

    python -m inference.models.paged_graphs FOLDER (--hidden-states | --no-hidden-states) [--feature-layers N ...]

(a bundled app: ``specchat --internal-paged-graph ...``, ``packaging/entry.py``). ``model.load_model`` runs it
(``paged_graph._build``) where FOLDER, a model folder of the store, lacks a current graph for these outputs. It makes
the graph of ``model._paged_attention_copy`` in a new hidden folder beside the variant's (``.paged-hidden-XXXX``),
writes the IR and ``source.json`` last (:func:`write_graph`), then puts that folder in the variant's place
(``paged_graph.variant_name``), so a reader finds a whole one or none; a current one another load's child put there
meanwhile is kept (a reader may have it open), a stale one replaced. Exit status 0, or 1 with the error on stderr
(its folder removed). A graph whose paged attention has an attribute other than OpenVINO's default is written as
none to page (``"pages": false``): the reader would give it the default (``paged_graph.PagedAttentionExtension``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import openvino as ov
from openvino import op as ov_op

from ..model import _paged_attention_copy
from ..paged_graph import BUILD_TIMEOUT_S, GRAPH_FILES, STAMP, current, read_stamp, source_stamp, variant_name, whole


def write_graph(model: ov.Model | None, out: Path, stamp: dict) -> None:
    """Write into the folder ``out`` ``model``'s IR (``GRAPH_FILES``, f32 constants kept f32) unless it is None
    (nothing to page), then ``source.json``: ``stamp``, ``"pages"``, ``"sizes"`` (the IR files' bytes, which the
    reader checks), and ``"attention_info"``, each paged attention's runtime info by its name (``{"k_head_size": 64,
    "num_k_heads": 3, ...}``: the CPU plugin requires it, and the IR does not keep it)."""
    info = {}
    if model is not None:
        ov.serialize(model, str(out / GRAPH_FILES[0]), str(out / GRAPH_FILES[1]))
        for node in model.get_ops():
            if node.get_type_name() == "PagedAttentionExtension":
                rt_info = node.get_rt_info()
                info[node.get_friendly_name()] = {key: rt_info[key].astype(int) for key in rt_info.keys()}
    sizes = {name: (out / name).stat().st_size for name in GRAPH_FILES} if model is not None else {}
    (out / STAMP).write_text(json.dumps({**stamp, "pages": model is not None, "sizes": sizes, "attention_info": info}),
                             encoding="utf-8")


def _default_attributes(model: ov.Model) -> bool:
    """Whether every paged attention of ``model`` has OpenVINO's default attributes (what the reader gives)."""
    attentions = [node for node in model.get_ops() if node.get_type_name() == "PagedAttentionExtension"]
    if not attentions:
        return True
    first = attentions[0]
    default = ov_op._PagedAttentionExtension([first.input_value(i) for i in range(first.get_input_size())])
    return all(node.get_attributes() == default.get_attributes() for node in attentions)


def build(folder: Path, hidden_states: bool, feature_layers: list[int]) -> Path:
    """Make and install ``folder``'s paged graph for these outputs (module docstring); returns the variant's folder.
    Hidden folders that builds killed before their end left (older than ``BUILD_TIMEOUT_S``) are removed first.

    Raises:
        OSError: the folder cannot be written; RuntimeError: OpenVINO cannot read or transform the model.
    """
    built = folder / variant_name(hidden_states, feature_layers)
    for stale in folder.glob(f".{built.name}-*"):
        if stale.is_dir() and time.time() - stale.stat().st_mtime > BUILD_TIMEOUT_S:
            shutil.rmtree(stale, ignore_errors=True)
    stamp = source_stamp(folder, hidden_states, feature_layers)
    work = Path(tempfile.mkdtemp(prefix=f".{built.name}-", dir=folder))
    try:
        model = _paged_attention_copy(folder, hidden_states, feature_layers)
        write_graph(model if model is not None and _default_attributes(model) else None, work, stamp)
        if current(whole(built, read_stamp(built)), stamp):  # another load's child made it meanwhile: it may be open
            return built
        shutil.rmtree(built, ignore_errors=True)  # a stale one
        try:
            os.replace(work, built)
        except OSError:  # another child put its own there since
            if not current(whole(built, read_stamp(built)), stamp):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--hidden-states", action=argparse.BooleanOptionalAction, required=True)
    parser.add_argument("--feature-layers", type=int, nargs="*", default=[])
    args = parser.parse_args(argv)
    build(args.folder, args.hidden_states, args.feature_layers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
