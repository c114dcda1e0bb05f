"""The ``gcp:`` section: what it accepts, its defaults, and one-line errors naming every bad key at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import load_provider
from autoscaler.config.options import ConfigError, config_from_mapping
from providers.gcp import NodePoolRef, ProviderConfigError, TemplateRef, parse_settings

if TYPE_CHECKING:
    from typing import Any

    from autoscaler.config.options import Config
    from providers.gcp.settings import GcpSettings

TEMPLATE = "projects/my-project/global/instanceTemplates/gke-prod-tidal-4f1d2c3b"


def config(**gcp: Any) -> Config:
    return config_from_mapping(
        {"cloud": "gcp", "region": "us-central1", "zones": ["us-central1-a"], "gcp": gcp}, source="test"
    )


def settings(**gcp: Any) -> GcpSettings:
    cfg = config(**gcp)
    return parse_settings(cfg.providers["gcp"], cfg)


def test_a_project_and_a_template_are_enough_and_everything_else_has_a_default() -> None:
    s = settings(project="my-project", instanceTemplate=TEMPLATE)
    assert s.template == TemplateRef("my-project", "gke-prod-tidal-4f1d2c3b")
    assert (s.endpoint, s.billing_endpoint, s.catalog_fallback, s.node_pool) == (None, None, None, None)
    assert s.price_refresh_interval == 3600
    assert s.gpu_driver_version == "default"


def test_a_bare_template_name_is_a_global_template_of_the_project() -> None:
    assert settings(project="my-project", instanceTemplate="gke-t").template == TemplateRef(
        "my-project", "gke-t"
    )


def test_a_full_regional_template_url_keeps_its_region() -> None:
    url = "https://www.googleapis.com/compute/v1/projects/p-12345/regions/us-central1/instanceTemplates/t"
    assert settings(project="my-project", instanceTemplate=url).template == TemplateRef(
        "p-12345", "t", "us-central1"
    )


def test_a_node_pool_names_the_pool_and_optionally_its_cluster() -> None:
    s = settings(project="my-project", nodePool={"name": "gpu-pool", "cluster": "prod"})
    assert s.node_pool == NodePoolRef("gpu-pool", "prod") and s.template is None


def test_durations_and_endpoints_are_parsed() -> None:
    s = settings(
        project="my-project",
        instanceTemplate=TEMPLATE,
        endpoint="http://127.0.0.1:8080/",
        billingEndpoint="https://billing.example.com",
        priceRefreshInterval="30m",
        operationTimeout="2m",
        pollInterval="500ms",
    )
    assert (s.endpoint, s.billing_endpoint) == ("http://127.0.0.1:8080", "https://billing.example.com")
    assert (s.price_refresh_interval, s.operation_timeout, s.poll_interval) == (1800, 120, 0.5)


def test_every_problem_is_reported_at_once_on_one_line() -> None:
    with pytest.raises(ProviderConfigError) as err:
        settings(
            endpoint="ftp://x",
            priceRefreshInterval="often",
            instanceTemplat=TEMPLATE,
            gpuDriverVersion="newest",
        )
    message = str(err.value)
    assert "\n" not in message
    assert "gcp.project: required" in message
    assert "gcp.endpoint: 'ftp://x' is not an http(s) URL" in message
    assert "gcp.priceRefreshInterval: 'often' is not a duration" in message
    assert "gcp.instanceTemplat: unknown key (did you mean 'instanceTemplate'?)" in message
    assert "gcp.gpuDriverVersion: 'newest' is not one of default, latest, disabled" in message


def test_a_template_or_a_node_pool_is_required_but_not_both() -> None:
    with pytest.raises(ProviderConfigError, match=r"gcp.instanceTemplate: required, or gcp.nodePool"):
        settings(project="my-project")
    with pytest.raises(ProviderConfigError, match=r"give either gcp.instanceTemplate or gcp.nodePool"):
        settings(project="my-project", instanceTemplate=TEMPLATE, nodePool={"name": "p"})


def test_a_template_that_is_not_a_template_url_is_named() -> None:
    with pytest.raises(
        ProviderConfigError, match=r"gcp.instanceTemplate: 'projects/p/zones/a' is not an instance"
    ):
        settings(project="my-project", instanceTemplate="projects/p/zones/a")


def test_zones_must_be_given_and_lie_in_the_region() -> None:
    cfg = config_from_mapping({"cloud": "gcp", "region": "us-central1", "gcp": {}})
    with pytest.raises(ProviderConfigError, match=r"zones: the gcp provider needs the zones"):
        parse_settings({"project": "my-project", "instanceTemplate": TEMPLATE}, cfg)
    # A zone named as GCP names zones, of another region, is refused by the configuration itself; one named
    # otherwise reaches the provider, which refuses it too.
    cfg = config_from_mapping({"cloud": "gcp", "region": "us-central1", "zones": ["us-east-1b"]})
    with pytest.raises(ProviderConfigError, match=r"zones: 'us-east-1b' is not in region 'us-central1'"):
        parse_settings({"project": "my-project", "instanceTemplate": TEMPLATE}, cfg)


def test_a_fallback_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        ProviderConfigError, match=r"gcp.catalogFallback: '.*nope.csv' is not a readable file"
    ):
        settings(project="my-project", instanceTemplate=TEMPLATE, catalogFallback=str(tmp_path / "nope.csv"))


def test_the_provider_registry_refuses_a_bad_section_with_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Built to list offerings (no Kubernetes client), the project may also come from the environment.
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("CLOUDSDK_CORE_PROJECT", raising=False)
    with pytest.raises(ConfigError) as err:
        load_provider("gcp", config(instanceTemplate=TEMPLATE))
    assert str(err.value) == (
        "gcp: gcp.project: required (the project the cluster's VMs run in; or set GOOGLE_CLOUD_PROJECT)"
    )


def test_listing_offerings_needs_no_template_node_pool_or_zones() -> None:
    from dataclasses import replace

    cfg = replace(config(project="my-project"), zones=())
    s = parse_settings(cfg.providers["gcp"], cfg, launching=False)
    assert s.project == "my-project" and s.template is None and s.node_pool is None
    assert [p.split(":")[0] for p in s.launch_problems] == ["gcp.instanceTemplate", "zones"]
    with pytest.raises(ProviderConfigError) as err:
        parse_settings(cfg.providers["gcp"], cfg, launching=True)
    assert [e.split(":")[0] for e in err.value.errors] == ["gcp.instanceTemplate", "zones"]
