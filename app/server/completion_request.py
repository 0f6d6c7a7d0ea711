"""``POST /v1/completions``'s request: its model (:class:`CompletionRequest`) and its mapping to engine requests
(:func:`completion_requests`: each prompt continued as is, ``echo``; ``max_tokens`` 0 with ``echo``, the prompt
alone, as OpenAI's legacy completions took it to score a prompt), on the fields every completion shares
(``request_common``). A request may send several prompts (lm-eval with ``batch_size`` > 1, as OpenAI, vLLM and
llama-server take them), at most :data:`MAX_PROMPTS`: one engine request each, answered one choice each."""

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

    prompt: str | list[int | str | list[int]]  # token ids too, as llama-server and vLLM take them (``_prompts``)
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


#: Most prompts one request may send (a 400 beyond): each is generated in its own turn at the queue, so the bound
#: is on one response's size and one client's stay, not on the other clients' waits.
MAX_PROMPTS = 64


def completion_requests(body: CompletionRequest, limits: ServerLimits) -> list[GenerationRequest]:
    """The engine requests of a text completion, one per prompt in the request's order (each prompt continued as is,
    without the chat template, with the same settings), within what the server sets (``limits``). A prompt is text or
    token ids (a list of ints, as llama-server and vLLM take them; the engine checks them against the model's
    vocabulary); ``prompt`` is one prompt, or a list of prompts all of one kind (strings, or lists of token ids).

    ``max_tokens`` 0 with ``echo`` asks for the prompt alone (``echo_only``; with ``logprobs``, its tokens'
    log-probabilities: lm-eval's loglikelihood requests): nothing is generated.

    Raises:
        APIError: 400 naming the field: an empty prompt, more than :data:`MAX_PROMPTS`, a negative token id,
            ``echo`` of token ids without ``logprobs``, ``suffix``, ``best_of`` other than 1, ``n``
            other than 1, ``max_tokens`` 0 without ``echo``, an invalid ``response_format`` or one over
            :data:`MAX_SCHEMA_BYTES`, a setting out of range.
    """
    check_bounds(body.response_format, None)
    refuse_unsupported(body, ("logit_bias", "suffix"))
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of must be 1 (SpecChat generates one reply)", param="best_of", code="invalid_value")
    prompts = _prompts(body.prompt)
    if isinstance(prompts[0], tuple) and body.echo and body.logprobs is None:
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
    return [GenerationRequest(messages=[], system_prompt="", settings=settings, prompt=prompt, echo=body.echo,
                              echo_only=echo_only) for prompt in prompts]


def _prompts(prompt: str | list) -> list[str | tuple[int, ...]]:
    """The request's prompts: each one's text, or its token ids (a list of ints is one prompt; a list of strings or
    of lists of ints, several).

    Raises:
        APIError: 400 on ``prompt`` (or ``prompt[i]``, the prompt at fault): a list mixing ids and prompts, more than
            :data:`MAX_PROMPTS`, an empty one, a negative token id (the message names it).
    """
    if isinstance(prompt, list):
        odd = next((index for index, item in enumerate(prompt) if type(item) is not type(prompt[0])), None)
        if odd is not None:
            raise APIError(400, f"prompt[{odd}] is {json_value(prompt[odd])} and prompt[0] {json_value(prompt[0])}: "
                           "send a string, a list of token ids (integers), or a list of these",
                           param=f"prompt[{odd}]", code="invalid_type")
    if not (isinstance(prompt, list) and prompt and not isinstance(prompt[0], int)):  # one prompt
        return [_prompt(prompt, "prompt")]
    if len(prompt) > MAX_PROMPTS:
        raise APIError(400, f"prompt holds {len(prompt)} prompts: send at most {MAX_PROMPTS} per request (SpecChat's "
                       "limit), or split them over several requests", param="prompt", code="invalid_value")
    return [_prompt(one, f"prompt[{index}]") for index, one in enumerate(prompt)]


def _prompt(prompt: str | list[int], where: str) -> str | tuple[int, ...]:
    """One prompt, the request's ``where``: its text, or its token ids.

    Raises:
        APIError: 400 on ``where``: the prompt is empty, or holds a negative token id.
    """
    if not prompt:
        raise APIError(400, f"{where} is empty: send the text to continue, or its token ids", param=where,
                       code="invalid_value")
    if isinstance(prompt, str):
        return prompt
    for index, token in enumerate(prompt):
        if token < 0:
            raise APIError(400, f"{where} holds the token id {token} at index {index}, which no token has: "
                           "token ids are 0 or more", param=where, code="invalid_value")
    return tuple(prompt)
