"""The settings pane while a remote server answers: the settings of this computer's models (Drafter, Context length;
Decoding and K too, unless the server is SpecChat's, which takes them) are off, and a line says why."""

from __future__ import annotations

from dataclasses import replace

import pytest
from remote_stub import MODEL, RemoteStub


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def test_local_decoding_settings_are_off_while_a_remote_server_answers(qtbot, make_window, stub, no_user_keyring):
    """Newcomer trial: with llama_cpp.server chosen, the side panel still offered Decoding "Auto", Drafter
    "SmolLM2-135M-Instruct-head", Draft tokens per step 4 and Context length 4096, as if they applied: none is sent
    to that server (its context was 2048, set when it started)."""
    window = make_window(wait_model=False)
    pane = window.settings_pane
    fields = (pane.decoding, pane.draft_model, pane.k, pane.n_ctx, pane.n_keep, pane.n_discard)
    assert pane.decoding.isEnabled() and pane.k.isEnabled() and pane.n_ctx.isEnabled()
    window.choice.apply(replace(window.settings, remote_url=stub.url("ok"), remote_model=MODEL, use_remote=True))
    assert [field.isEnabled() for field in fields] == [False] * 6
    assert pane.remote_note.isVisibleTo(pane) and pane.remote_note.text() == (
        "Replies come from a remote server, which decodes with its own settings and context: Sampling applies."
    )
    assert window.choice.settings.generation.context.n_ctx == pane.n_ctx.value()  # nothing changed, only off
    kept = pane.n_ctx.value()
    pane.n_ctx.setValue(5)  # an invalid value (as from the settings file) blocks Send: its field stays on to fix it
    assert pane.n_ctx.isEnabled() and "n_ctx" in pane.errors()
    pane.n_ctx.setValue(kept)
    assert not pane.n_ctx.isEnabled() and not pane.errors()

    window.choice.apply(replace(window.settings, remote_url=stub.url("specchat")))
    window.choice.choose_remote()  # asks the server for its models: it is SpecChat's
    qtbot.waitUntil(lambda: any(window.replies.remote_specchat.values()), timeout=10_000)
    qtbot.waitUntil(lambda: pane.decoding.isEnabled(), timeout=5000)
    assert [field.isEnabled() for field in fields] == [True, False, True, False, False, False]
    assert pane.remote_note.text() == (
        "Replies come from SpecChat's server: it takes Decoding and K, and drafts and keeps its context its own way."
    )

    window.choice.apply(replace(window.settings, use_remote=False))
    assert all(field.isEnabled() for field in fields if field is not pane.draft_model)  # (Drafter: as Auto uses it)
    assert pane.draft_model.isEnabled() == window.settings.generation.decoding.speculative
    assert not pane.remote_note.isVisibleTo(pane)
