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
    json_value,
    refuse_unsupported,
    response_format_grammar,
)


class CompletionRequest(GenerationFields):
    """``POST /v1/completions``."""

    prompt: str | list[int | str | list[int]]  # token ids too, as llama-server and vLLM take them (``_one_prompt``)
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def completion_request(body: CompletionRequest, limits: ServerLimits) -> GenerationRequest:
    """The engine request of a text completion (the prompt continued as is, without the chat template), within
    what the server sets (``limits``). The prompt is text or token ids (a list of ints, as llama-server and vLLM take
    them; the engine checks them against the model's vocabulary); a list of one prompt is that prompt.

    ``max_tokens`` 0 with ``echo`` asks for the prompt alone (``echo_only``; with ``logprobs``, its tokens'
    log-probabilities: lm-eval's loglikelihood requests): nothing is generated.

    Raises:
        APIError: 400 naming the field: an empty prompt or several, a negative token id, ``echo`` of token ids
            without ``logprobs``, ``suffix``, ``best_of`` other than 1, ``n``
            other than 1, ``max_tokens`` 0 without ``echo``, an invalid ``response_format`` or one over
            :data:`MAX_SCHEMA_BYTES`, a setting out of range.
    """
    check_bounds(body.response_format, None)
    refuse_unsupported(body, ("logit_bias", "suffix"))
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of must be 1 (SpecChat generates one reply)", param="best_of", code="invalid_value")
    prompt = _one_prompt(body.prompt)
    if isinstance(prompt, tuple) and body.echo and body.logprobs is None:
        raise APIError(400, "echo of a prompt of token ids needs logprobs (its text comes from its scored tokens): "
                       "send logprobs (0 or more), or the prompt as text", param="echo", code="invalid_value")
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


def _one_prompt(prompt: str | list) -> str | tuple[int, ...]:
    """The request's one prompt: its text, or its token ids (a list of ints; a list of one string or one list of ints
    is that prompt).

    Raises:
        APIError: 400 on ``prompt``: a list mixing ids and prompts, several prompts, an empty one, a negative token id
            (the message names it).
    """
    where = "prompt"
    if isinstance(prompt, list):
        odd = next((index for index, item in enumerate(prompt) if type(item) is not type(prompt[0])), None)
        if odd is not None:
            raise APIError(400, f"prompt[{odd}] is {json_value(prompt[odd])} and prompt[0] {json_value(prompt[0])}: "
                           "send a string, a list of token ids (integers), or a list of one of these",
                           param=f"prompt[{odd}]", code="invalid_type")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):  # a list of prompts
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts: send one (a string, or a list of token ids); "
                           "SpecChat generates one reply per request", param="prompt", code="invalid_value")
        prompt, where = prompt[0], "prompt[0]"
    if not prompt:
        raise APIError(400, "prompt is empty: send the text to continue, or its token ids", param="prompt",
                       code="invalid_value")
    if isinstance(prompt, str):
        return prompt
    for index, token in enumerate(prompt):
        if token < 0:
            raise APIError(400, f"{where} holds the token id {token} at index {index}, which no token has: "
                           "token ids are 0 or more",
                           param="prompt", code="invalid_value")
    return tuple(prompt)
