"""Which installed models the window offers as drafts for a target, and which one it takes unasked: the settings
pane's Drafter list (``app.gui.model_choice``) and the Models dialog's pair check (``widgets.models_dialog``) both ask
here, so that the two never disagree (and neither imports the other)."""

from __future__ import annotations

from inference.models.store import ModelManifest, compatible_drafts


def draft_choices(target: ModelManifest | None, installed: list[ModelManifest]) -> tuple[list[ModelManifest], str]:
    """The drafts offered for ``target`` and the one preselected: the only place that decides either.

    Returns:
        ``(compatible, preselected)``: the installed models with the target's tokenizer
        (``inference.models.store.compatible_drafts``), those that can never be faster (:func:`never_faster`) last,
        and the folder of the one taken when the user chooses draft-model decoding without a draft: the smallest
        compatible model on disk (the draft's cost is what speculative decoding must win back) that is not one of
        those, "" when there is none.
    """
    compatible = compatible_drafts(target, installed)
    useful = [manifest for manifest in compatible if not never_faster(target, manifest)]
    smallest = min(useful, key=lambda manifest: manifest.size_bytes or float("inf"), default=None)
    return useful + [m for m in compatible if m not in useful], str(smallest.path) if smallest is not None else ""


def never_faster(target: ModelManifest | None, draft: ModelManifest) -> bool:
    """Whether ``draft`` is the target's own model (the same ``name``, not a draft head) at as many bits as the
    target or more (newcomer trial: the default model's 8-bit copy was offered to draft for its 4-bit copy): the
    same weights, no smaller, so each drafted token costs about a target's pass and drafting never beats plain
    decoding. False when either bit-width is unknown."""
    if target is None or draft.is_draft_head or draft.name != target.name:
        return False
    return draft.bits is not None and target.bits is not None and draft.bits >= target.bits
