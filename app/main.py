"""The ``specchat`` entry point: the window without a subcommand, the command line with one.

Global options come first and apply to both: ``--data-dir`` and ``--config-dir`` set ``SPECCHAT_DATA_DIR`` and
``SPECCHAT_CONFIG_DIR`` for this process, ``--version`` prints the version. Qt is imported only for the window.
Both log to their own file (``app.logging_setup``: ``window.log`` or ``cli.log``, rotated, crash tracebacks too).
"""

from __future__ import annotations

import os
import sys

from app.cli.commands import build_parser, run_command
from app.logging_setup import setup_logging


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specchat`` console script and of the bundles; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.data_dir:
        os.environ["SPECCHAT_DATA_DIR"] = str(args.data_dir)
    if args.config_dir:
        os.environ["SPECCHAT_CONFIG_DIR"] = str(args.config_dir)
    log_file = setup_logging("window" if args.command is None else "cli")
    if args.command is None:
        from app.gui.application import run

        return run(log_file)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
