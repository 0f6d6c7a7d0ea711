"""SpecChat's OpenAI-compatible server (no Qt): ``create_app`` builds the ASGI application (``app.server.app``),
``app.binding`` says where it may listen; ``specchat serve`` runs it with uvicorn (``app.cli.serve``).

``create_app`` is imported on first use, so that building the command line's parser does not import FastAPI.
"""

__all__ = ["create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
