"""What an option does is written once, on its model field: the comments of defaults.yaml must say the same."""

from __future__ import annotations

from importlib import resources

import pytest

from autoscaler.config.fields import keys_of
from autoscaler.config.models import SECTION_MODELS, ConfigDocument
from autoscaler.config.reference import Option, description, parse
from autoscaler.config.sections import section_names

_MODEL_PATHS = [
    *keys_of(ConfigDocument),
    *(f"{key}.{sub}" for key, model in SECTION_MODELS.items() for sub in keys_of(model)),
]


def _commented() -> dict[str, Option]:
    text = resources.files("autoscaler.config").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return {o.path: o for top in parse(text) for o in (top, *top.children)}


def _described(path: str) -> str:
    key, _, sub = path.partition(".")
    return description(SECTION_MODELS[key], sub) if sub else description(ConfigDocument, key)


@pytest.mark.parametrize("path", _MODEL_PATHS)
def test_every_option_of_the_models_has_a_description(path: str) -> None:
    assert _described(path).strip()


@pytest.mark.parametrize("path", _MODEL_PATHS)
def test_the_comment_in_defaults_yaml_says_what_the_model_says(path: str) -> None:
    commented = _commented()
    assert path in commented, f"defaults.yaml has no {path}"
    assert commented[path].description == _described(path)


def test_every_key_of_defaults_yaml_is_an_option_of_the_models_or_a_provider_section() -> None:
    providers = set(section_names())
    assert [p for p in _commented() if p not in _MODEL_PATHS and p not in providers] == []
