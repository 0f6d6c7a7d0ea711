"""SpecChat application: the `specchat` command line and the desktop GUI."""
