"""The ``specchat`` command line (``app.main`` calls it for every subcommand); imports no Qt."""
