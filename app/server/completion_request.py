"""``POST /v1/completions``'s request: its model (:class:`CompletionRequest`) and its mapping to an engine request
(:func:`completion_request`: the prompt continued as is, ``echo``; ``max_tokens`` 0 with ``echo``, the prompt alone,
as OpenAI's legacy completions took it to score a prompt), on the fields every completion shares
(``request_common``)."""

from __future__ import annotations

from app.backends.protocol import GenerationRequest
from inference.settings import OutputSettings

from .errors import APIError
from .request_common import (
    GenerationFields,
    ServerLimits,
    check_bounds,
    generation_settings,
    refuse_unsupported,
    response_format_grammar,
)


class CompletionRequest(GenerationFields):
    """``POST /v1/completions``."""

    prompt: str | list[str]
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def completion_request(body: CompletionRequest, limits: ServerLimits) -> GenerationRequest:
    """The engine request of a text completion (the prompt continued as is, without the chat template), within
    what the server sets (``limits``).

    ``max_tokens`` 0 with ``echo`` asks for the prompt alone (``echo_only``; with ``logprobs``, its tokens'
    log-probabilities: lm-eval's loglikelihood requests): nothing is generated.

    Raises:
        APIError: 400 naming the field: an empty prompt or several, ``suffix``, ``best_of`` other than 1, ``n``
            other than 1, ``max_tokens`` 0 without ``echo``, an invalid ``response_format`` or one over
            :data:`MAX_SCHEMA_BYTES`, a setting out of range.
    """
    check_bounds(body.response_format, None)
    refuse_unsupported(body, ("logit_bias", "suffix"))
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of must be 1 (SpecChat generates one reply)", param="best_of", code="invalid_value")
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts: send one (a string)", param="prompt",
                           code="invalid_value")
        prompt = prompt[0]
    if not prompt:
        raise APIError(400, "prompt is empty: send the text to continue", param="prompt", code="invalid_value")
    echo_only = body.max_tokens == 0
    if echo_only and not body.echo:
        raise APIError(400, "max_tokens is 0, which generates nothing: send 1 or more, or 0 with echo: true to have the "
                       "prompt alone back (with logprobs, its tokens' log-probabilities)", param="max_tokens",
                       code="invalid_value")
    output = OutputSettings(grammar=response_format_grammar(body.response_format, limits.schema_grammar), logprobs=body.logprobs)
    asked = 1 if echo_only else body.max_tokens  # the engine's least; echo_only generates nothing
    settings = generation_settings(body, asked, "max_tokens", limits, output, "logprobs")
    return GenerationRequest(messages=[], system_prompt="", settings=settings, prompt=prompt, echo=body.echo,
                             echo_only=echo_only)
