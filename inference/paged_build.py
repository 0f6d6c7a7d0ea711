"""The child process that makes a model's paged prefill graph (``inference.paged_graph``): it holds its own GIL, not
the window's, through OpenVINO's ``paged_attention_transformation``.

    python -m inference.paged_build FOLDER OUT (--hidden-states | --no-hidden-states) [--feature-layers N ...]

Writes into the folder OUT (it exists) the graph of ``model._paged_attention_copy`` for these outputs and its
``source.json`` (``paged_graph.write_graph``); exit status 0, or 1 with the error on stderr. A graph whose paged
attention has an attribute other than OpenVINO's default is written as none to page (``"pages": false``): the
parent's reader would give it the default (``paged_graph.PagedAttentionExtension``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from openvino import op as ov_op

from .model import _paged_attention_copy
from .paged_graph import source_stamp, write_graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden-states", action=argparse.BooleanOptionalAction, required=True)
    parser.add_argument("--feature-layers", type=int, nargs="*", default=[])
    args = parser.parse_args(argv)
    stamp = source_stamp(args.folder, args.hidden_states, args.feature_layers)
    model = _paged_attention_copy(args.folder, args.hidden_states, args.feature_layers)
    attentions = [node for node in model.get_ops() if node.get_type_name() == "PagedAttentionExtension"] \
        if model is not None else []
    if attentions:
        first = attentions[0]
        default = ov_op._PagedAttentionExtension([first.input_value(i) for i in range(first.get_input_size())])
        if any(node.get_attributes() != default.get_attributes() for node in attentions):
            model = None
    write_graph(model, args.out, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
