"""`tidal catalog --cloud azure`: the offerings the Azure provider sees, and where each price came from."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from providers.azure import clients
from tests.fakes.azure_auth import FakeCredential
from tests.fakes.azure_setup import T4, azure_section, running_arm

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

    from tests.fakes.azure_arm import FakeArm


@pytest.fixture
def arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeArm]:
    for fake in running_arm(tmp_path):
        # The CLI builds the provider with its defaults: trust the fake's certificate through the usual
        # CA-bundle variable and stand in for Workload Identity.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(fake.cert))
        monkeypatch.setattr(clients, "default_credential", FakeCredential)
        yield fake


def write_config(tmp_path: Path, azure: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"cloud": "simulated", "region": "eastus", "azure": azure}))
    return str(path)


def catalog_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], azure: dict[str, Any]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    code = main(
        ["catalog", "--config", write_config(tmp_path, azure), "--cloud", "azure", "--output", "json"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    # cmd_catalog leaves logging unconfigured, so structlog's default prints the provider's log lines on
    # stdout ahead of the document.
    document = out.out[out.out.index("[\n") :]
    return {(r["instanceType"], r["zone"], r["capacityType"]): r for r in json.loads(document)}


def test_catalog_lists_azure_offerings_priced_by_the_retail_prices_api(
    arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = catalog_json(tmp_path, capsys, azure_section(arm))
    spot = rows[(T4, "eastus-1", "spot")]
    assert (spot["gpus"], spot["gpuModel"], spot["pricePerHour"]) == (1, "T4", 0.062699)
    assert spot["priceSource"] == "Azure Retail Prices API"


def test_catalog_shows_when_a_price_comes_from_the_fallback_file(
    arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "fallback.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour,spot_usd_per_hour\n"
        f"azure,eastus,{T4},4,28672,1,x86_64,0.55,0.07\n"
    )
    arm.prices_down = True
    rows = catalog_json(tmp_path, capsys, azure_section(arm, catalogFallback=str(catalog)))
    assert (
        rows[(T4, "eastus-1", "spot")]["priceSource"]
        == "catalog file fallback.csv (Retail Prices API unavailable)"
    )
    assert rows[(T4, "eastus-1", "on-demand")]["pricePerHour"] == 0.55


def test_a_bad_azure_section_is_one_line_on_stderr_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    code = main(
        ["catalog", "--config", write_config(tmp_path, {"resourceGroup": "MC_x"}), "--cloud", "azure"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err == "tidal: error: azure.subscriptionId: required (or set AZURE_SUBSCRIPTION_ID)"


def test_the_catalog_asks_for_no_resource_group_or_scale_sets_and_lists_every_size(
    arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = azure_section(arm, resourceGroup=None, scaleSets=None, spotScaleSets=None)
    rows = catalog_json(tmp_path, capsys, section)
    # The sizes of the region with a price, the T4 in spot too, with no scale set to grow.
    assert (T4, "eastus-1", "spot") in rows and (T4, "eastus-1", "on-demand") in rows
    assert rows[(T4, "eastus-1", "spot")]["pricePerHour"] == 0.062699


def test_a_provider_built_to_list_offerings_refuses_to_launch_naming_what_is_missing(arm: FakeArm) -> None:
    from autoscaler.cloud import ProviderError
    from autoscaler.core.offering import LaunchRequest
    from providers.azure import AzureProvider
    from tests.fakes.azure_setup import azure_config

    config = azure_config(arm, azure={"resourceGroup": None, "scaleSets": None, "spotScaleSets": None})
    provider = AzureProvider(
        config,
        credential=FakeCredential(),
        connection_verify=str(arm.cert),
        polling_interval=0,
        launching=False,
    )
    offering = next(o for o in provider.offerings() if o.instance_type == T4)
    with pytest.raises(ProviderError, match=r"cannot launch: azure.resourceGroup: required; azure.scaleSets"):
        provider.launch(LaunchRequest(token="t-1", offerings=(offering,)))
