"""SpecChat's OpenAI-compatible server (no Qt): ``create_app`` builds the ASGI application, ``specchat serve`` runs
it with uvicorn (``app.cli.serve``)."""

from .app import create_app

__all__ = ["create_app"]
