"""``usage.prompt_tokens_details.cached_tokens`` through the real server (a subprocess on 127.0.0.1, the default
4-bit model) in a chat long enough to roll its context: it counts the prompt tokens read from the KV cache, never
the tokens earlier rolls dropped from it (newcomer trial: 412 cached tokens reported at n_ctx 256)."""

from __future__ import annotations

N_CTX = 256
QUESTIONS = ["Tell me about the history of Paris in detail.", "And what about London?", "Describe Rome too.",
             "Now compare Berlin and Madrid.", "What about Vienna?", "And Prague?"]


def test_cached_tokens_stay_within_the_cache_as_the_chat_rolls(client):
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    dropped = 0  # tokens the earlier replies' rolls dropped from the cache
    checked_after_rolls = 0
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        reply = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=60,
                                               extra_body={"specchat": {"n_ctx": N_CTX}})
        stats = reply.model_extra["specchat"]
        cached = reply.usage.prompt_tokens_details.cached_tokens
        not_prefilled = reply.usage.prompt_tokens - stats["prefilled_tokens"]  # the prompt's prefix the engine had seen
        assert 0 <= cached <= min(N_CTX, not_prefilled), (question, cached, stats)
        if stats["rolls"] == 0:  # this reply rolled nothing: the cache held all it had seen but what earlier rolls dropped
            assert cached == not_prefilled - dropped, (question, cached, dropped, stats)
            checked_after_rolls += dropped > 0
        dropped += stats["discarded_tokens"]
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert dropped > 0 and checked_after_rolls >= 1  # the chat rolled, and a later turn read the rolled cache

    messages.append({"role": "user", "content": "And Budapest?"})  # streamed, its usage in the last chunk
    chunks = list(client.chat.completions.create(
        model="any", messages=messages, temperature=0, max_tokens=60, stream=True,
        stream_options={"include_usage": True}, extra_body={"specchat": {"n_ctx": N_CTX}}))
    usage = chunks[-1].usage
    assert 0 < usage.prompt_tokens_details.cached_tokens <= N_CTX < usage.prompt_tokens


def test_a_prompt_over_n_ctx_says_how_many_of_its_tokens_the_model_did_not_read(client):
    """After a roll, a turn that fits the rolled cache rolls nothing itself (``discarded_tokens`` 0, ``rolls`` 0),
    yet its prompt is longer than n_ctx: newcomer trial, 298 prompt tokens at n_ctx 256 with nothing said dropped.
    ``unread_prompt_tokens`` counts them, earlier rolls' drops included."""
    messages = [{"role": "system", "content": "You are Bob, a terse assistant. Always sign with -Bob."}]
    seen = []
    for question in ["What is 2+2?", "Name a fruit.", "Tell me about Paris in two sentences.",
                     "What colour is the sky?", "Name three animals.", "What is your name?", "Summarize our chat."]:
        messages.append({"role": "user", "content": question})
        reply = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=60,
                                               extra_body={"specchat": {"n_ctx": N_CTX}})
        stats, usage = reply.model_extra["specchat"], reply.usage
        unread = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens - stats["prefilled_tokens"]
        assert stats["unread_prompt_tokens"] == unread, (question, stats, usage)
        if usage.prompt_tokens <= N_CTX and stats["rolls"] == 0 and sum(s["rolls"] for s in seen) == 0:
            assert unread == 0, (question, stats, usage)  # nothing rolled yet: the whole prompt was read
        seen.append(stats)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    over = [s for s in seen if s["prompt_tokens"] > N_CTX and s["rolls"] == 0]
    assert over and all(s["unread_prompt_tokens"] >= s["prompt_tokens"] - N_CTX for s in over), seen
