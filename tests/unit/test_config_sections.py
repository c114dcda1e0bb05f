"""A provider registers its own configuration section, found through the ``tidal.providers`` entry points.

The third-party provider here is installed the way a plugin is: a distribution's ``entry_points.txt`` on
``sys.path``, naming a class whose ``settings_model`` validates the ``acme:`` section.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cloud import available_providers
from autoscaler.config.options import ConfigError, config_from_mapping, default_config, provider_sections
from autoscaler.config.reference import json_schema, markdown
from autoscaler.runtime.catalog import offering_templates

PLUGIN = '''
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class AcmeSettings(BaseModel):
    """The acme: section."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")

    api_url: str = Field(description="Where the Acme Cloud API answers.")
    max_machines: int = Field(default=10, ge=1, description="Most machines tidal may hold.")


class AcmeProvider:
    settings_model = AcmeSettings

    def __init__(self, config):
        self.settings = AcmeSettings.model_validate(dict(config.providers["acme"]))
'''


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "acme_cloud.py").write_text(PLUGIN)
    dist = tmp_path / "acme_cloud-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-cloud\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [tidal.providers]
            acme = acme_cloud:AcmeProvider
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    monkeypatch.delitem(sys.modules, "acme_cloud", raising=False)


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data, source="config.yaml")
    assert "\n" not in str(caught.value)
    return caught.value.errors


@pytest.mark.usefixtures("acme_installed")
def test_an_installed_provider_adds_its_section_to_the_configuration() -> None:
    assert "acme" in provider_sections()
    config = config_from_mapping({"cloud": "acme", "acme": {"apiUrl": "https://api.acme.example"}})
    assert config.providers["acme"] == {"apiUrl": "https://api.acme.example"}


@pytest.mark.usefixtures("acme_installed")
def test_the_defaults_built_without_validation_have_an_installed_providers_section_too() -> None:
    # Past the cache: the defaults of this process may have been built before the plugin was installed.
    config = default_config.__wrapped__()
    assert config.providers["acme"] == {}
    assert list(config.providers) == list(config_from_mapping({}).providers)


@pytest.mark.usefixtures("acme_installed")
def test_a_provider_section_is_validated_by_the_providers_own_model() -> None:
    assert errors_of({"acme": {"apiUrl": "https://api.acme.example", "maxMachines": 0}}) == [
        "acme.maxMachines: 0 is not valid (input should be greater than or equal to 1)"
    ]


@pytest.mark.usefixtures("acme_installed")
def test_a_misspelt_key_in_a_provider_section_gets_a_suggestion_from_its_model() -> None:
    assert errors_of({"acme": {"apiUrl": "https://api.acme.example", "maxMachine": 3}}) == [
        "acme.maxMachine: unknown key (did you mean 'maxMachines'?)"
    ]


@pytest.mark.usefixtures("acme_installed")
def test_a_required_key_of_a_provider_section_is_named() -> None:
    assert errors_of({"acme": {"maxMachines": 3}}) == ["acme.apiUrl: required"]


@pytest.mark.usefixtures("acme_installed")
def test_an_unknown_top_level_key_is_matched_against_registered_sections_too() -> None:
    assert errors_of({"acmee": {"apiUrl": "x"}}) == ["acmee: unknown key (did you mean 'acme'?)"]


def test_without_the_plugin_its_section_is_an_unknown_key() -> None:
    assert "acme" not in provider_sections()
    assert errors_of({"acme": {"apiUrl": "x"}}) == ["acme: unknown key"]


def test_a_built_in_provider_without_a_model_still_takes_any_map_and_checks_it_when_it_starts() -> None:
    config = config_from_mapping({"azure": {"subscriptionId": 7}})
    assert config.providers["azure"] == {"subscriptionId": 7}


@pytest.mark.usefixtures("acme_installed")
def test_a_registered_provider_model_is_in_the_json_schema_with_its_descriptions() -> None:
    section = json_schema()["properties"]["acme"]
    assert section["additionalProperties"] is False
    assert section["required"] == ["apiUrl"]
    assert section["properties"]["maxMachines"]["description"] == "Most machines tidal may hold."


@pytest.mark.usefixtures("acme_installed")
def test_a_registered_provider_model_is_documented_in_the_reference() -> None:
    text = markdown()
    assert "| `acme.apiUrl` | `required` | Where the Acme Cloud API answers. |" in text
    assert "| `acme.maxMachines` | `10` | Most machines tidal may hold. |" in text


@pytest.mark.usefixtures("acme_installed")
def test_the_sections_the_clouds_and_the_node_templates_read_the_installed_packages_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listings = 0
    listing = importlib.metadata.distributions

    def counted(**where: Any) -> Iterable[importlib.metadata.Distribution]:
        nonlocal listings
        listings += 1
        return listing(**where)

    # What every reading of the entry points goes through: a listing of each installed distribution.
    monkeypatch.setattr(importlib.metadata, "distributions", counted)
    assert "acme" in provider_sections()
    assert "acme" in available_providers()
    assert offering_templates("acme") is None  # its module builds none
    assert listings == 1
