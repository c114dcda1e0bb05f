"""`tidal catalog --cloud aws`: the offerings EC2 sells in the configured subnets, each price with its source
(against a moto server; the Price List API cannot be reached, so on-demand prices come from the catalog file)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest
import structlog
import yaml

from autoscaler.cli.main import main
from tests.fakes.aws_cloud import (
    CATALOG,
    CREDENTIALS,
    aws_section,
    ec2_client,
    make_network,
    moto_server_url,
    reset_moto_server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(autouse=True)
def logs_on_stderr() -> Iterator[None]:
    """`tidal catalog` does not configure logging yet, and structlog prints to stdout by default; the
    provider's fallback warning must not end up inside the JSON."""
    saved = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    yield
    structlog.configure(**saved)


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    server = moto_server_url()
    reset_moto_server(server)
    network = make_network(ec2_client(server))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS.secret_access_key)
    # moto has no Price List API: send it to a closed port, as when a VPC has no route to it.
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    path = tmp_path / "config.yaml"
    section = aws_section(network, endpointUrl=server, families=["g5"], catalogFallback=str(CATALOG))
    path.write_text(
        yaml.safe_dump({"cloud": "simulated", "region": "us-east-1", "clusterName": "prod", "aws": section})
    )
    return str(path)


def test_catalog_shows_where_each_aws_price_came_from(
    config_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["catalog", "--config", config_file, "--cloud", "aws", "--gpu-only", "--output", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    sources = {
        (r["instanceType"], r["zone"], r["capacityType"]): (r["pricePerHour"], r["priceSource"]) for r in rows
    }
    assert sources["g5.xlarge", "us-east-1a", "on-demand"] == (1.006, "catalog file aws-us-east-1.csv")
    assert sources["g5.xlarge", "us-east-1b", "spot"][1] == "aws spot price history"
    g5 = next(r for r in rows if r["instanceType"] == "g5.xlarge")
    assert (g5["gpus"], g5["gpuModel"], g5["maxPods"]) == (1, "A10G", 58)
    assert {r["zone"] for r in rows} == {"us-east-1a", "us-east-1b"}


def test_catalog_table_has_a_price_source_column(
    config_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["catalog", "--config", config_file, "--cloud", "aws"]) == 0
    out = capsys.readouterr().out
    assert "PRICE SOURCE" in out.splitlines()[0]
    assert "aws spot price history" in out and "catalog file aws-us-east-1.csv" in out
    assert out.rstrip().endswith("offerings for aws us-east-1")


@pytest.fixture
def region_only_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An ``aws:`` section with no subnets and no launch template: enough to list offerings."""
    server = moto_server_url()
    reset_moto_server(server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS.secret_access_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    path = tmp_path / "config.yaml"
    section = {"endpointUrl": server, "families": ["g5"], "catalogFallback": str(CATALOG)}
    path.write_text(
        yaml.safe_dump({"cloud": "aws", "region": "us-east-1", "clusterName": "prod", "aws": section})
    )
    return str(path)


def test_catalog_needs_no_subnets_or_launch_template(
    region_only_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["catalog", "--config", region_only_config, "--cloud", "aws", "--output", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = json.loads(captured.out)
    g5 = {(r["zone"], r["capacityType"]): r["priceSource"] for r in rows if r["instanceType"] == "g5.xlarge"}
    # Every zone of the region where EC2 sells the type, as no subnet narrows them.
    assert {zone for zone, _ in g5} == {"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"}
    assert g5["us-east-1c", "on-demand"] == "catalog file aws-us-east-1.csv"
    assert g5["us-east-1c", "spot"] == "aws spot price history"


def test_catalog_for_a_region_the_fallback_lacks_says_so_and_shows_the_api_prices(
    region_only_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "catalog",
            "--config",
            region_only_config,
            "--cloud",
            "aws",
            "--region",
            "eu-west-1",
            "--output",
            "json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "aws-us-east-1.csv has no rows for region 'eu-west-1'" in captured.err
    assert "prices come from the AWS APIs only" in captured.err
    rows = json.loads(captured.out)
    assert rows and {r["priceSource"] for r in rows} == {"aws spot price history"}
    assert {r["zone"] for r in rows if r["instanceType"] == "g5.xlarge"} == {
        "eu-west-1a",
        "eu-west-1b",
        "eu-west-1c",
    }


def test_catalog_without_api_prices_or_fallback_rows_for_the_region_names_both(
    region_only_config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")  # EC2 unreachable too
    code = main(["catalog", "--config", region_only_config, "--cloud", "aws", "--region", "eu-west-1"])
    err = capsys.readouterr().err
    assert code == 2
    [line] = [line for line in err.splitlines() if line.startswith("tidal: error:")]
    assert "cannot build EC2 offerings (instance types: " in line
    assert "aws.catalogFallback " in line and "has no rows for region 'eu-west-1'" in line
