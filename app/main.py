"""The ``specchat`` entry point: the window without a subcommand, the command line with one.

Global options come first and apply to both: ``--data-dir`` and ``--config-dir`` set ``SPECCHAT_DATA_DIR`` and
``SPECCHAT_CONFIG_DIR`` for this process, ``--version`` prints the version. Qt is imported only for the window.
Both log to their own file (``app.logging_setup``: ``window.log`` or ``cli.log``, rotated, crash tracebacks too).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.cli.commands import build_parser, run_command
from app.logging_setup import setup_logging


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specchat`` console script and of the bundles; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.data_dir:
        os.environ["SPECCHAT_DATA_DIR"] = str(args.data_dir)
    if args.config_dir:
        os.environ["SPECCHAT_CONFIG_DIR"] = str(args.config_dir)
    problem = folder_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    log_file = setup_logging("window" if args.command is None else "cli")
    if args.command is None:
        from app.gui.application import run

        return run(log_file)
    return run_command(args)


def folder_problem() -> str | None:
    """Why the data or config folder (``--data-dir`` / ``--config-dir``, or their environment variables) cannot be
    used: it exists and is not a folder; None when it is a folder or does not exist yet (it is created)."""
    for what, flag, variable in (("data", "--data-dir", "SPECCHAT_DATA_DIR"), ("config", "--config-dir", "SPECCHAT_CONFIG_DIR")):
        value = os.environ.get(variable)
        if value and Path(value).expanduser().exists() and not Path(value).expanduser().is_dir():
            return f"the {what} folder {value} ({flag} or ${variable}) is a file: give a folder (created if missing)"
    return None


if __name__ == "__main__":
    sys.exit(main())
