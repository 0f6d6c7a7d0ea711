"""A short catalogue of recommended target/draft pairs that share a tokenizer.

Each entry names exact Hugging Face repository ids. A pre-converted OpenVINO repository (``OpenVINO/...``) is
downloaded as it is; a transformers repository is converted at the bit-width the user picks (4 by default), which
needs the conversion extra. Sizes are approximate download sizes in MB (for transformers repositories: of the 4-bit
result); the window and ``specchat models catalogue`` say them in MiB, as estimates (``CatalogueModel.size_mib``). Gated repositories (Llama) need the licence accepted on the hub and ``HF_TOKEN`` set.

Pairing is still checked on the real files (:func:`inference.models.inspect.check_pair`) once both are installed:
the logits width must be equal too. That is why Qwen2.5-7B (152,064 logits) is not paired with Qwen2.5-0.5B
(151,936 logits) here, though their tokenizers agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CatalogueModel:
    """One model of a pair: repository id, approximate size in MB once installed, licence, pre-converted or not;
    ``built_in``: the default model itself (the repository it was trained as), which a pair takes from the store's
    own copy at the chosen bit-width (``default_model.ensure_default_model``) instead of downloading and converting
    it (its converted copy would take the built-in model's name, which the store keeps for it)."""

    repo_id: str
    size_mb: int
    licence: str
    openvino: bool
    gated: bool = False
    built_in: bool = False

    @property
    def name(self) -> str:
        return self.repo_id.split("/")[-1]

    @property
    def size_mib(self) -> int:
        """``size_mb`` in MiB (2**20 bytes, the store's unit), to two significant digits, so that an estimate reads
        as one (1000 MB is 954 MiB, said 950: the dialog's "954 + 86" read more precise than the catalogue knows)."""
        mib = self.size_mb * 10**6 / 2**20
        return round(round(mib, 1 - math.floor(math.log10(mib))))


@dataclass(frozen=True)
class CataloguePair:
    """A recommended target with its draft; ``note`` says why they fit and what to expect."""

    title: str
    target: CatalogueModel
    draft: CatalogueModel
    vocab_size: int
    note: str

    def as_dict(self) -> dict:
        data = asdict(self)
        data["target"]["name"] = self.target.name
        data["draft"]["name"] = self.draft.name
        return data


PAIRS: tuple[CataloguePair, ...] = (
    CataloguePair(
        "SmolLM2 1.7B with SmolLM2 135M (the built-in model) as draft",
        CatalogueModel("HuggingFaceTB/SmolLM2-1.7B-Instruct", 1000, "Apache-2.0", openvino=False),
        CatalogueModel("HuggingFaceTB/SmolLM2-135M-Instruct", 90, "Apache-2.0", openvino=False, built_in=True),
        49152,
        "Same tokenizer as the default model; the 135M draft is about 12x smaller than the target.",
    ),
    CataloguePair(
        "Qwen2.5 1.5B Instruct with Qwen2.5 0.5B Instruct as draft",
        CatalogueModel("Qwen/Qwen2.5-1.5B-Instruct", 1000, "Apache-2.0", openvino=False),
        CatalogueModel("Qwen/Qwen2.5-0.5B-Instruct", 400, "Apache-2.0", openvino=False),
        151936,
        "Both have 151,936 logits (Qwen2.5 7B and larger have 152,064 and do not pair with 0.5B).",
    ),
    CataloguePair(
        "Llama 3.2 3B Instruct with Llama 3.2 1B Instruct as draft",
        CatalogueModel("meta-llama/Llama-3.2-3B-Instruct", 2000, "Llama 3.2 Community License", openvino=False, gated=True),
        CatalogueModel("meta-llama/Llama-3.2-1B-Instruct", 800, "Llama 3.2 Community License", openvino=False, gated=True),
        128256,
        "Gated: accept the licence on the hub and set HF_TOKEN before downloading.",
    ),
    CataloguePair(
        "Phi-3 mini 4k Instruct with the FastDraft 50M draft (pre-converted)",
        CatalogueModel("OpenVINO/Phi-3-mini-4k-instruct-int8-ov", 3900, "MIT", openvino=True),
        CatalogueModel("OpenVINO/Phi-3-mini-FastDraft-50M-int8-ov", 60, "MIT", openvino=True),
        32064,
        "FastDraft (Intel) is a 50M-parameter draft trained to agree with Phi-3 mini; both are OpenVINO IR already.",
    ),
    CataloguePair(
        "Llama 3.1 8B Instruct with the FastDraft 150M draft",
        CatalogueModel("meta-llama/Llama-3.1-8B-Instruct", 4800, "Llama 3.1 Community License", openvino=False, gated=True),
        CatalogueModel("OpenVINO/Llama-3.1-8B-Instruct-FastDraft-150M-int8-ov", 170, "Llama 3.1 Community License", openvino=True),
        128256,
        "The target is converted locally (gated: set HF_TOKEN); the FastDraft draft is pre-converted.",
    ),
)


def pairs() -> list[CataloguePair]:
    """The recommended pairs, smallest target first."""
    return sorted(PAIRS, key=lambda pair: pair.target.size_mb)
