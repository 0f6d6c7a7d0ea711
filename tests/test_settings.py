"""Each impossible setting raises a ValueError that names the setting and its range."""

import pytest

from inference.settings import ContextSettings, GenerationSettings, SamplingSettings, SpeculativeSettings


@pytest.mark.parametrize(
    "settings,names",
    [
        (SpeculativeSettings(k=0), ["K", "[1, 16]"]),
        (SpeculativeSettings(k=17), ["K", "[1, 16]"]),
        (ContextSettings(n_ctx=512, n_keep=512), ["n_keep", "511"]),
        (ContextSettings(n_ctx=512, n_keep=600), ["n_keep"]),
        (ContextSettings(n_ctx=512, n_keep=4, n_discard=508), ["n_discard", "n_keep + n_discard < n_ctx"]),
        (ContextSettings(n_ctx=512, n_keep=4, n_discard=0), ["n_discard"]),
        (ContextSettings(n_ctx=8), ["n_ctx", "16"]),
        (SamplingSettings(temperature=-1), ["temperature"]),
        (SamplingSettings(top_p=0), ["top_p", "(0, 1]"]),
        (SamplingSettings(top_p=1.5), ["top_p"]),
        (SamplingSettings(top_k=-2), ["top_k"]),
        (SamplingSettings(max_new_tokens=0), ["max_new_tokens"]),
        (SamplingSettings(seed=-1), ["seed"]),
        (SamplingSettings(stop_strings=("",)), ["stop_strings"]),
    ],
)
def test_invalid_setting_names_itself(settings, names):
    with pytest.raises(ValueError) as error:
        settings.validate()
    for name in names:
        assert name in str(error.value)


def test_n_ctx_above_the_models_trained_length_is_refused():
    with pytest.raises(ValueError, match=r"n_ctx must be in \[16, 8192\]"):
        ContextSettings(n_ctx=9000).validate(max_position_embeddings=8192)


def test_decoding_is_checked_and_defaults_are_valid():
    GenerationSettings().validate(8192)
    with pytest.raises(ValueError, match="decoding"):
        GenerationSettings(decoding="beam").validate()


def test_n_discard_default_is_half_of_the_rest():
    assert ContextSettings(n_ctx=512, n_keep=4).resolve() == (4, 254)
    assert ContextSettings(n_ctx=512, n_keep=4, n_discard=100).resolve() == (4, 100)
