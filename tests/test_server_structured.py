"""``specchat serve`` as the usual clients use it, with the official ``openai`` client against the server in a
subprocess: a request without sampling fields gets the model's own sampling, ``response_format`` returns JSON that
matches its schema in every decoding mode (greedy replies equal the engine's constrained ones), and
log-probabilities come back for chat and text completions (``echo`` included), streamed or not."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import openai
import pytest

from inference.chat import ChatSession
from inference.constraints import json_schema_grammar
from inference.draft_head import HEAD_K, load_head
from inference.engine import Engine
from inference.generation_config import recommended_sampling
from inference.models.default_head import default_head_dir
from inference.settings import GenerationSettings, OutputSettings, SamplingSettings, SpeculativeSettings

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "hobbies": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
ASK_PERSON = [{"role": "user", "content": "Describe a person called Ada as JSON with name, age and hobbies."}]
MODES = [None, {"mode": "spec_lookup", "k": 4}]


def _repeated_four_gram(text: str) -> tuple | None:
    words = text.split()
    counts = Counter(tuple(words[i : i + 4]) for i in range(len(words) - 3))
    gram, count = counts.most_common(1)[0] if counts else (None, 0)
    return gram if count >= 4 else None


def test_a_request_without_sampling_fields_gets_the_models_sampling_and_a_coherent_reply(client, head_target):
    """As ``llm`` sends it: no temperature, top_p or penalty. OpenAI's cloud defaults (temperature 1, top_p 1, no
    penalty) gave gibberish on the default model; its recommended sampling (temperature 0.7, top-p 0.9, repetition
    penalty 1.1) is what the reply is sampled with (the engine's reply with it and the same seed), and the replies
    have no 4-gram repeated 4 times in 200 words."""
    question = [{"role": "user", "content": "Name two planets and say one thing about each."}]
    served = client.chat.completions.create(model="specchat", messages=question, max_tokens=40, seed=7)
    # decoded as the server decodes it: Auto with the default head, whose seeded sampled reply plans from preset
    # costs and its own drafts (auto_decoding.seeded_sampling), so that the same seed gives the same reply
    settings = GenerationSettings(sampling=replace(recommended_sampling(head_target.folder), seed=7, max_new_tokens=40),
                                  speculative=SpeculativeSettings(k=HEAD_K))
    engine = Engine(head_target, load_head(default_head_dir()))
    expected = [e for e in ChatSession(engine, "", question).reply(settings) if hasattr(e, "stats")][-1]
    assert expected.stats.mode == "auto" and set(expected.stats.by_drafter) <= {"head", "lookup", "plain"}
    assert served.choices[0].message.content == expected.stats.text
    for seed, topic in enumerate(["Name two planets and say one thing about each.", "Tell me about the ocean."]):
        reply = client.chat.completions.create(
            model="specchat", messages=[{"role": "user", "content": topic}], max_tokens=300, seed=seed
        )
        text = " ".join(reply.choices[0].message.content.split()[:200])
        assert len(text.split()) >= 20, text
        assert _repeated_four_gram(text) is None, text
        long_words = [w for w in text.split() if len(w.strip(".,!?;:()\"'")) > 18]
        assert len(long_words) <= 1, f"gibberish: {long_words}"


@pytest.mark.parametrize("extension", MODES, ids=["ar", "spec_lookup"])
def test_json_object_and_json_schema_replies_parse_greedy_and_sampled(client, extension):
    extra = {"specchat": extension} if extension else {}
    for temperature, seed in ((0.0, None), (0.7, 5)):
        free = client.chat.completions.create(
            model="specchat", messages=[{"role": "user", "content": "Give me a JSON object with the name and the "
                                         "capital of France."}], response_format={"type": "json_object"},
            temperature=temperature, seed=seed, max_tokens=200, extra_body=extra)
        assert isinstance(json.loads(free.choices[0].message.content), dict)
        assert free.choices[0].finish_reason == "stop"
        person = client.chat.completions.create(
            model="specchat", messages=ASK_PERSON, response_format=PERSON_FORMAT, temperature=temperature, seed=seed,
            max_tokens=200, extra_body=extra)
        value = json.loads(person.choices[0].message.content)
        assert set(value) == {"name", "age", "hobbies"} and isinstance(value["age"], int)


def test_a_greedy_schema_reply_is_the_engines_constrained_reply_streamed_or_not(client, target):
    engine = Engine(target)
    settings = GenerationSettings(sampling=SamplingSettings(max_new_tokens=120),
                                  output=OutputSettings(grammar=json_schema_grammar(PERSON)))
    expected = [e for e in ChatSession(engine, "", ASK_PERSON).reply(settings) if hasattr(e, "stats")][-1].stats.text
    reply = client.chat.completions.create(model="specchat", messages=ASK_PERSON, response_format=PERSON_FORMAT,
                                           temperature=0, max_tokens=120,
                                           extra_body={"repetition_penalty": 1.0})
    assert reply.choices[0].message.content == expected
    stream = client.chat.completions.create(model="specchat", messages=ASK_PERSON, response_format=PERSON_FORMAT,
                                            temperature=0, max_tokens=120, stream=True,
                                            extra_body={"repetition_penalty": 1.0, "specchat": {"mode": "spec_lookup"}})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == expected


def test_a_text_completion_with_response_format_continues_with_json_that_matches(client):
    prompt = "Ada is 36 and likes chess and music. As JSON:\n"
    extra = {"response_format": PERSON_FORMAT}
    reply = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=200, extra_body=extra)
    value = json.loads(reply.choices[0].text)
    assert set(value) == {"name", "age", "hobbies"} and isinstance(value["age"], int)
    assert reply.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=200, stream=True,
                                         extra_body=extra)
    assert "".join(chunk.choices[0].text for chunk in streamed) == reply.choices[0].text


def test_a_schema_the_server_cannot_enforce_is_a_400_naming_it(client):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": "zero"}}}
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="specchat", messages=ASK_PERSON, response_format=bad, max_tokens=4)
    assert error.value.body["param"] == "response_format.json_schema.schema"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("schema", [{"$ref": "#"},
                                    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}])
def test_a_schema_no_reply_can_follow_is_a_400_and_the_server_goes_on(client, schema, stream):
    """Schemas that compile but admit no finite value (found by a newcomer: they were 500s with a traceback). Where
    llguidance finds it only at the first token, a stream has already begun and carries the same message as its
    error event."""
    bad = {"type": "json_schema", "json_schema": {"name": "loop", "schema": schema}}
    with pytest.raises(openai.APIError) as error:
        reply = client.chat.completions.create(model="specchat", messages=ASK_PERSON, response_format=bad,
                                               max_tokens=8, stream=stream)
        list(reply) if stream else None
    assert "response_format cannot be followed by any reply" in error.value.message
    if not stream:
        assert isinstance(error.value, openai.BadRequestError) and error.value.body["param"] == "response_format"
    assert client.chat.completions.create(model="specchat", messages=ASK_PERSON, max_tokens=2).usage.completion_tokens == 2


def test_chat_log_probabilities_streamed_and_not(client):
    reply = client.chat.completions.create(model="specchat", messages=ASK_PERSON, temperature=0, max_tokens=12,
                                           logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 12
    assert "".join(bytes(t.bytes).decode("utf-8", "replace") for t in content) == reply.choices[0].message.content
    for token in content:
        assert len(token.top_logprobs) == 3 and token.top_logprobs[0].token == token.token
        assert token.top_logprobs[0].logprob == pytest.approx(token.logprob) and token.logprob <= 0
    chunks = list(client.chat.completions.create(model="specchat", messages=ASK_PERSON, temperature=0, max_tokens=12,
                                                 logprobs=True, top_logprobs=3, stream=True,
                                                 extra_body={"specchat": {"mode": "spec_lookup"}}))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content], abs=2e-3)


def test_completion_log_probabilities_with_echo(client):
    prompt = "The capital of France is"
    reply = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=3, logprobs=2,
                                      echo=True)
    choice = reply.choices[0]
    assert choice.text.startswith(prompt)
    logprobs = choice.logprobs
    prompt_tokens = reply.usage.prompt_tokens
    assert len(logprobs.tokens) == prompt_tokens + reply.usage.completion_tokens
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(v <= 0 for v in logprobs.token_logprobs[1:])
    assert all(len(top) == 2 for top in logprobs.top_logprobs[1:])
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))]
    greedy = logprobs.tokens[prompt_tokens]
    assert max(logprobs.top_logprobs[prompt_tokens], key=logprobs.top_logprobs[prompt_tokens].get) == greedy
    plain = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=3, logprobs=0)
    assert plain.choices[0].logprobs.tokens == logprobs.tokens[prompt_tokens:]
    assert all(math.isclose(a, b, abs_tol=1e-3) for a, b in
               zip(plain.choices[0].logprobs.token_logprobs, logprobs.token_logprobs[prompt_tokens:]))


def test_a_prompt_is_scored_without_generating_with_max_tokens_0(client):
    """lm-eval's loglikelihood requests (``local-completions``) send ``max_tokens`` 0 with ``echo`` and ``logprobs``,
    which OpenAI's legacy completions took to score a prompt alone: they were refused ("max_tokens must be >= 1").
    The prompt comes back with its tokens' log-probabilities (those a reply after it would echo), nothing generated,
    finish_reason length; streamed the same."""
    prompt = "The capital of France is"
    scored = client.completions.create(model="specchat", prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    choice = scored.choices[0]
    assert (choice.text, choice.finish_reason) == (prompt, "length")
    assert (scored.usage.completion_tokens, scored.usage.total_tokens) == (0, scored.usage.prompt_tokens)
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == scored.usage.prompt_tokens > 1 and "".join(logprobs.tokens) == prompt
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(len(top) == 1 for top in logprobs.top_logprobs[1:])
    replied = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=1, echo=True,
                                        logprobs=1).choices[0].logprobs
    assert logprobs.tokens == replied.tokens[:-1]
    assert logprobs.token_logprobs[1:] == pytest.approx(replied.token_logprobs[1:-1], abs=1e-4)
    assert logprobs.top_logprobs == replied.top_logprobs[:-1]
    chunks = list(client.completions.create(model="specchat", prompt=prompt, max_tokens=0, echo=True, logprobs=1,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == prompt and chunks[-1].choices[0].finish_reason == "length"
    assert [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens] == logprobs.tokens
    bare = client.completions.create(model="specchat", prompt=prompt, max_tokens=0, echo=True)
    assert (bare.choices[0].text, bare.choices[0].logprobs, bare.usage.completion_tokens) == (prompt, None, 0)


def test_a_prompt_of_token_ids_is_read_as_its_text(client, int4_dir):
    """lm-eval (``local-completions``) sends token ids by default, as llama-server and vLLM take them: they were
    answered 400 "send a string". The ids' reply and scores are the text's; an id past the vocabulary is a 400 that
    names it."""
    from inference.tokenizer_cache import shared_tokenizer

    prompt = "The capital of France is"
    ids = [int(t) for t in shared_tokenizer(int4_dir).encode(prompt, add_special_tokens=False).input_ids.data[0]]
    as_text = client.completions.create(model="specchat", prompt=prompt, temperature=0, max_tokens=4)
    as_ids = client.completions.create(model="specchat", prompt=ids, temperature=0, max_tokens=4)
    assert as_ids.choices[0].text == as_text.choices[0].text
    assert (as_ids.usage.prompt_tokens, as_ids.usage.completion_tokens) == (len(ids), 4)
    assert as_ids.usage.prompt_tokens_details.cached_tokens == len(ids) - 1  # the text's prompt, kept in the cache
    text_scored = client.completions.create(model="specchat", prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    ids_scored = client.completions.create(model="specchat", prompt=[ids], max_tokens=0, echo=True, logprobs=2)
    assert ids_scored.choices[0].text == prompt
    assert ids_scored.choices[0].logprobs.tokens == text_scored.choices[0].logprobs.tokens
    assert ids_scored.choices[0].logprobs.token_logprobs == text_scored.choices[0].logprobs.token_logprobs
    streamed = list(client.completions.create(model="specchat", prompt=ids, max_tokens=1, echo=True, logprobs=1,
                                              temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed).startswith(prompt)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="specchat", prompt=[ids[0], 10**6], max_tokens=1, stream=stream)
        assert refused.value.body["param"] == "prompt"
        assert refused.value.body["message"] == ("prompt holds the token id 1000000 at index 1, which is not in "
                                                 "the model's vocabulary: its ids are 0 to 49151")


def test_several_prompts_in_one_request_get_a_choice_each_as_lm_eval_sends_them(client, int4_dir):
    """lm-eval with ``batch_size`` > 1 sends several prompts in one request (lists of token ids, or strings), which
    was a 400 ("send one"): each gets the choice a request of its own gets (its index its place; echo, logprobs and
    finish_reason its own), the usage is their sum, and streamed, each prompt's chunks carry its index."""
    from inference.tokenizer_cache import shared_tokenizer

    prompts = ["The capital of France is", "One, two, three,"]
    tokenizer = shared_tokenizer(int4_dir)
    ids = [[int(t) for t in tokenizer.encode(p, add_special_tokens=False).input_ids.data[0]] for p in prompts]
    alone = [client.completions.create(model="specchat", prompt=one, max_tokens=1, echo=True, logprobs=1,
                                       temperature=0) for one in ids]
    batched = client.completions.create(model="specchat", prompt=ids, max_tokens=1, echo=True, logprobs=1,
                                        temperature=0)
    assert [choice.index for choice in batched.choices] == [0, 1]
    for choice, one in zip(batched.choices, alone):
        assert (choice.text, choice.finish_reason) == (one.choices[0].text, one.choices[0].finish_reason)
        assert choice.logprobs.tokens == one.choices[0].logprobs.tokens
        assert choice.logprobs.token_logprobs[1:] == pytest.approx(one.choices[0].logprobs.token_logprobs[1:], abs=1e-3)
    assert batched.choices[0].text.startswith(prompts[0]) and batched.choices[1].text.startswith(prompts[1])
    assert (batched.usage.prompt_tokens, batched.usage.completion_tokens) == (len(ids[0]) + len(ids[1]), 2)
    texts = client.completions.create(model="specchat", prompt=prompts, max_tokens=4, temperature=0)
    assert [c.text for c in texts.choices] == [
        client.completions.create(model="specchat", prompt=p, max_tokens=4, temperature=0).choices[0].text
        for p in prompts]
    chunks = list(client.completions.create(model="specchat", prompt=prompts, max_tokens=4, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    streamed = ["".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in (0, 1)]
    assert streamed == [c.text for c in texts.choices]
    indices = [c.choices[0].index for c in chunks if c.choices]
    assert indices == sorted(indices)  # one prompt after another
    assert chunks[-1].usage.completion_tokens == texts.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="specchat", prompt=[ids[0], [ids[0][0], 10**6]], max_tokens=1)
    assert refused.value.body["param"] == "prompt[1]"
    assert refused.value.body["message"].startswith("prompt[1] holds the token id 1000000 at index 1")


def test_a_prompt_of_several_that_the_model_refuses_is_a_400_before_any_is_generated(client):
    """lm-eval's batch whose second prompt the model refuses (a token id past the vocabulary; with echo and
    logprobs, more tokens than it scores): unstreamed, the first was generated and thrown away with a 400;
    streamed, its choice came, then an error event. Every prompt is checked first: a 400 naming ``prompt[1]``
    before anything is generated, streamed or not."""
    from app.backends.protocol import MAX_SCORED_PROMPT_TOKENS

    too_long = [1] * (MAX_SCORED_PROMPT_TOKENS + 1)
    for prompts, message in (
        ([[1, 2], [3, 10**6]], "prompt[1] holds the token id 1000000 at index 1, which is not in the model's "
         "vocabulary: its ids are 0 to 49151"),
        ([[1, 2], too_long], f"prompt[1] has {len(too_long)} tokens: echo with logprobs scores at most "
         f"{MAX_SCORED_PROMPT_TOKENS}; send a shorter prompt, or leave echo or logprobs out"),
    ):
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                client.completions.create(model="specchat", prompt=prompts, max_tokens=0, echo=True, logprobs=1,
                                          stream=stream)
            assert (refused.value.body["param"], refused.value.body["message"]) == ("prompt[1]", message)
