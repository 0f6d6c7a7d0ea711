"""The SpecChat window (PySide6, qasync); ``app.gui.application.run`` starts it."""
