"""`tidal catalog --cloud gcp`: GCE offerings and prices, with where each price came from."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, cast

import pytest
import structlog
import yaml

from autoscaler.cli.main import main
from tests.fakes.gcp_cloud import FakeGcp
from tests.fakes.gcp_fixtures import SAMPLE, machines

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any, TextIO


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        yield fake


class _Stderr:
    """Whatever sys.stderr is when a line is written (pytest swaps it per test)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def logs_on_stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """The command's output is stdout; log lines (a billing outage is warned about) go to stderr."""
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(cast("TextIO", _Stderr()))
    )  # only written to
    yield
    structlog.reset_defaults()


def write(tmp_path: Path, document: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**document, "cloud": "aws", "logLevel": "warning"}))
    return str(path)


def rows(capsys: pytest.CaptureFixture[str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["instanceType"], r["zone"], r["capacityType"]): r for r in json.loads(capsys.readouterr().out)}


def test_the_catalog_lists_gce_gpu_offerings_priced_from_the_billing_catalog(
    gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, gcp.config(template=gcp.add_node_pool("e2e", "tidal")))

    code = main(["catalog", "--config", config, "--cloud", "gcp", "--gpu-only", "--output", "json"])

    found = rows(capsys)
    assert code == 0 and all(r["gpus"] > 0 for r in found.values())
    a100 = found[("a2-highgpu-1g", "us-central1-a", "spot")]
    assert (a100["gpuModel"], a100["gpuMemoryMiB"]) == ("A100", 40960)
    assert a100["pricePerHour"] == pytest.approx(machines()["a2-highgpu-1g"].spot, rel=1e-4)
    assert {r["priceSource"] for r in found.values()} == {"billing catalog"}


def test_the_catalog_says_when_prices_come_from_the_fallback_file(
    gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = gcp.config(
        template=gcp.add_node_pool("e2e", "tidal"),
        gcp={"billingEndpoint": "http://127.0.0.1:9", "catalogFallback": str(SAMPLE)},
    )

    code = main(["catalog", "--config", write(tmp_path, document), "--cloud", "gcp", "--output", "json"])

    found = rows(capsys)
    assert code == 0
    assert found[("e2-standard-4", "us-central1-b", "on-demand")]["pricePerHour"] == pytest.approx(0.134023)
    assert {r["priceSource"] for r in found.values()} == {"catalog file gcp-us-central1.csv"}


def test_a_bad_gcp_section_is_one_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, {"region": "us-central1", "gcp": {"project": "Not A Project"}})
    assert main(["catalog", "--config", config, "--cloud", "gcp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tidal: error: gcp: gcp.project: 'Not A Project'")


def test_the_catalog_asks_for_no_launch_settings_and_lists_every_zone_of_the_region(
    gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No project (the environment names it), no instance template or node pool, no zones: read-only.
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", gcp.project)
    document = gcp.config()
    del document["zones"], document["gcp"]["project"]
    config = write(tmp_path, document)

    code = main(["catalog", "--config", config, "--cloud", "gcp", "--gpu-only", "--output", "json"])

    found = rows(capsys)
    assert code == 0
    assert {zone for _, zone, _ in found} == set(gcp.zones)


def test_a_provider_built_to_list_offerings_refuses_to_launch_naming_what_is_missing(gcp: FakeGcp) -> None:
    from autoscaler.cloud import ProviderError
    from autoscaler.config.options import config_from_mapping
    from autoscaler.core.offering import LaunchRequest
    from providers.gcp import GcpProvider

    provider = GcpProvider(config_from_mapping(gcp.config(), source="test"), launching=False)
    offering = next(o for o in provider.offerings() if o.instance_type == "e2-standard-4")
    with pytest.raises(ProviderError, match=r"cannot launch: gcp.instanceTemplate: required"):
        provider.launch(LaunchRequest(token="t-1", offerings=(offering,)))


def test_the_daemons_provider_still_needs_the_launch_settings(gcp: FakeGcp) -> None:
    from autoscaler.config.options import config_from_mapping
    from providers.gcp import GcpProvider
    from providers.gcp.settings import ProviderConfigError

    document = gcp.config()
    del document["zones"]
    with pytest.raises(ProviderConfigError) as err:
        GcpProvider(config_from_mapping(document, source="test"), kube_api_client=object())
    assert any("gcp.instanceTemplate: required" in e for e in err.value.errors)
    assert any(e.startswith("zones: the gcp provider needs the zones") for e in err.value.errors)
