"""SpecChat application: the `specchat` command line (``app.cli``) and the desktop GUI (``app.gui``)."""

__version__ = "0.1.0"
