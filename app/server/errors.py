"""OpenAI's error JSON (:class:`APIError`) and the refusals every endpoint words alike: an engine setting out of
range named as the request names it (:func:`setting_error`), a draft model this server does not run, an internal
error that says nothing of its cause (:func:`internal_error`), a reply cut, or a request left waiting, by the
server stopping (:func:`server_stopped`), an error the web framework raised (:func:`framework_error`)."""

from __future__ import annotations

import re
from http import HTTPStatus

from inference.settings import SettingError

#: Engine setting names (``SettingError.field``) as the request names them.
_PARAMS = {
    "max_new_tokens": "max_tokens",
    "stop_strings": "stop",
    "decoding": "specchat.mode",
    "k": "specchat.k",
    "n_ctx": "specchat.n_ctx",
    "n_keep": "specchat.n_keep",
    "n_discard": "specchat.n_discard",
    "grammar": "response_format",  # tools' schemas are refused with the request; one failing later is the format's
}


#: OpenAI's error types of the statuses that have their own (other 4xx: ``invalid_request_error``; 5xx: ``server_error``).
_HTTP_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}
#: Codes of statuses the server's own refusals already name (a 413 of the framework's reads as the server's).
_HTTP_CODES = {413: "request_too_large"}


class APIError(Exception):
    """An error answered in OpenAI's JSON: ``{"error": {"message", "type", "param", "code"}}``.

    Attributes:
        status: the HTTP status; message: one line saying what is wrong and what to do; type: OpenAI's error
        type (``invalid_request_error``, ``authentication_error``, ``rate_limit_error``, ``server_error``...);
        param: the request field at fault, or None; code: a short machine-readable code, or None;
        headers: extra response headers (``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON object of the error."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def setting_error(error: SettingError, max_param: str = "max_tokens", logprobs_param: str = "logprobs",
                  prompt_param: str = "prompt") -> APIError:
    """A ``SettingError`` as a 400 naming the request field (``max_tokens``, ``stop``, ``specchat.n_ctx``...), in
    the message too: "max_tokens must be >= 1, got 0", not the engine's "max_new_tokens must be ..."; the prompt as
    ``prompt_param`` (``prompt[2]``, one of a completion's several prompts)."""
    names = {"max_new_tokens": max_param, "logprobs": logprobs_param, "prompt": prompt_param}
    param = names.get(error.field) or _PARAMS.get(error.field, error.field)
    return APIError(400, error.renamed(param), param=param, code="invalid_value")


def no_draft_model(advice: str) -> APIError:
    """A request for draft-model decoding (``specchat.mode`` ``spec_model``) on a server that runs no draft model:
    a 400 that says how to run one (``advice``, e.g. the flags to restart with) and what works without one."""
    return APIError(
        400,
        f'specchat.mode "spec_model" needs a draft model, and this server has none: {advice}; or send "mode": '
        '"spec_lookup" (prompt lookup drafts from the conversation, without a draft model) or "ar"',
        param="specchat.mode", code="no_draft_model",
    )  # fmt: skip


def internal_error(what: str) -> APIError:
    """A 500 that says ``what`` failed and where to look, and nothing of the exception (which is logged)."""
    return APIError(500, f"{what} (an internal error; the server's log has the details): retry, or report it",
                    type="server_error", code="internal_error")


def server_stopped(began: bool = True) -> APIError:
    """A reply the server cut because it is stopping (Ctrl+C, SIGTERM, the window closing): a 503, or in a stream
    an ``{"error": ...}`` event in place of the finish chunk and ``[DONE]``, so that no client takes it for whole.
    ``began`` False: the request still waited for its turn, so nothing was generated (the message says so)."""
    what = ("the reply ended (it is shutting down): the reply is incomplete" if began else
            "this request's turn came (it is shutting down): nothing was generated")
    return APIError(503, f"the server stopped before {what}; send the request again once the server runs",
                    type="server_error", code="server_stopped")


def framework_error(status: int, detail: str) -> APIError:
    """An HTTP error the web framework raised (a Starlette ``HTTPException``: 415, 413, ...) in OpenAI's JSON, with a
    code as every refusal of the server's own has: ``request_too_large`` for a 413 (as the server's own 413 of a body
    too large), else the status's name in snake case (``unsupported_media_type``; ``http_599`` for a status HTTP
    does not name); its type by status (``server_error`` for a 5xx)."""
    try:
        name = re.sub(r"\W+", "_", HTTPStatus(status).phrase.lower()).strip("_")
    except ValueError:
        name = f"http_{status}"
    kind = _HTTP_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return APIError(status, detail, type=kind, code=_HTTP_CODES.get(status, name))
