"""The ``specchat`` command line (``app.main`` calls it for every subcommand); imports no Qt.

The exit status its subcommands share is defined here, where ``commands``, ``serve`` and ``models`` all import it
without importing one another."""

#: Exit status of a subcommand that Ctrl+C stopped (128 + SIGINT, as shells report it): a ``generate`` whose reply
#: was cut, ``serve`` stopped, a ``models`` operation cancelled.
INTERRUPTED = 130

#: Exit status of a subcommand whose output's reader left (``| head``, a pager quit early): 128 + SIGPIPE, as shells
#: report a command that SIGPIPE ended.
BROKEN_PIPE = 141
