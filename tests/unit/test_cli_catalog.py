"""`tidal catalog`: the offerings and prices the configured provider sees, with where each price came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from autoscaler.cli.main import main

if TYPE_CHECKING:
    import pytest

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"


def write_config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cloud": "simulated",
                "region": "us-east-1",
                "zones": ["us-east-1a"],
                "simulated": {"catalog": str(CATALOG), "registerNodes": False},
            }
        )
    )
    return str(path)


def test_catalog_lists_offerings_with_their_price_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["catalog", "--config", write_config(tmp_path), "--gpu-only", "--output", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    g4dn = next(r for r in rows if r["instanceType"] == "g4dn.xlarge" and r["capacityType"] == "on-demand")
    assert (g4dn["gpus"], g4dn["gpuModel"], g4dn["pricePerHour"]) == (1, "T4", 0.526)
    assert g4dn["priceSource"] == "catalog file aws-us-east-1.csv"
    assert all(r["gpus"] > 0 for r in rows)


def test_catalog_table_ends_with_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "--config", write_config(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("INSTANCE TYPE")
    assert out.rstrip().endswith("offerings for simulated us-east-1")


def test_catalog_csv_loads_back_as_a_plan_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autoscaler.runtime.catalog import read_catalog_csv

    assert main(["catalog", "--config", write_config(tmp_path), "--output", "csv"]) == 0
    path = tmp_path / "out.csv"
    path.write_text(capsys.readouterr().out)
    back = read_catalog_csv(path, cloud="simulated", region="us-east-1")
    g4dn = {o.capacity_type: o.price for o in back if o.instance_type == "g4dn.xlarge"}
    assert g4dn == {"on-demand": 0.526, "spot": 0.18936}  # the demo catalog's row, unchanged
    assert {o.zone for o in back} == {"us-east-1a"}
