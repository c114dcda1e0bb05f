"""Spot where the interruption risk and the pods' tolerance allow: spot offerings are ranked by their price
plus the expected cost of their interruptions to the pods placed there.

Prices and Spot Advisor buckets are those of us-east-1 in the shared catalog (2025-06-28 advisor data):
m6i.2xlarge spot $0.16128/h in bucket 4 (over 20% a month), m5.2xlarge spot $0.17664/h in bucket 2 (10-15%),
both 8 vCPU and 32 GiB; on demand both $0.384/h."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.cli.render import why_lines
from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.spot_risk import bucket_rate, pod_interruption_hours, risk_price
from autoscaler.runtime.catalog import CatalogError, read_catalog_csv
from tests.builders import offering, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0
ROOT = Path(__file__).resolve().parents[2]
SPOT_AND_ON_DEMAND = "spot,on-demand"


def spot(instance_type: str, price: float, bucket: int) -> Offering:
    return replace(
        offering(instance_type, 8, 32, price, capacity_type="spot"), interruption_rate=bucket_rate(bucket)
    )


def catalog() -> list[Offering]:
    return [
        spot("m6i.2xlarge", 0.16128, 4),
        spot("m5.2xlarge", 0.17664, 2),
        offering("m6i.2xlarge", 8, 32, 0.384),
    ]


def batch_pod(name: str, offerings: str = SPOT_AND_ON_DEMAND, lost: str | None = None) -> dict[str, Any]:
    annotations = {"tidal.dev/instance-offerings": offerings}
    if lost is not None:
        annotations["tidal.dev/interruption-cost"] = lost
    return pod(name, cpu="6", memory="24Gi", annotations=annotations)


def run(make_config: Callable[..., Config], *pods: dict[str, Any], **cfg: Any) -> Plan:
    return plan(PlanInput(snapshot(*pods), catalog(), make_config(**cfg), NOW))


def chosen(result: Plan) -> list[str]:
    return [f"{la.offering.instance_type}/{la.offering.capacity_type}" for la in result.launch.launches]


# Spot nodes that live about a day: a month's share of interruptions counted as a day's.
DAY = {"spot": {"bucketPeriod": "24h"}}


def test_a_pod_that_loses_a_day_of_work_gets_the_dearer_spot_type_that_is_interrupted_less(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("train-1", lost="24h"), **DAY)
    assert chosen(result) == ["m5.2xlarge/spot"]


def test_a_pod_that_loses_nothing_gets_the_cheapest_spot_type(make_config: Callable[..., Config]) -> None:
    result = run(make_config, batch_pod("render-1", lost="0"), **DAY)
    assert chosen(result) == ["m6i.2xlarge/spot"]


def test_a_pod_that_would_lose_ten_days_of_work_gets_on_demand_when_it_allows_it(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("train-1", lost="240h"), **DAY)
    assert chosen(result) == ["m6i.2xlarge/on-demand"]


def test_a_spot_only_pod_stays_on_spot_however_much_its_interruptions_cost(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("train-1", offerings="spot", lost="240h"), **DAY)
    assert chosen(result) == ["m5.2xlarge/spot"]


def test_pods_that_do_not_say_lose_interruption_cost_hours(make_config: Callable[..., Config]) -> None:
    tolerant = run(make_config, batch_pod("a-1"), spot={"bucketPeriod": "24h", "interruptionCostHours": 0})
    careful = run(make_config, batch_pod("a-1"), spot={"bucketPeriod": "24h", "interruptionCostHours": 24})
    assert chosen(tolerant) == ["m6i.2xlarge/spot"]
    assert chosen(careful) == ["m5.2xlarge/spot"]


def test_by_default_a_months_share_of_interruptions_leaves_a_ten_percent_cheaper_spot_type_first(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("train-1", lost="24h"))
    assert chosen(result) == ["m6i.2xlarge/spot"]


def test_the_plan_names_the_expected_interruption_cost_of_a_chosen_spot_node(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("train-1", lost="24h"), **DAY)
    why = result.launch.launches[0].why
    assert why is not None and why.interruption is not None
    # bucket 2 is 15% of instances a month, counted as 15% a day; an interruption costs 24h of work + 5m restart
    rate = -math.log(1 - 0.15) / 24
    expected = 0.17664 * rate * (24 + 5 / 60)
    assert why.interruption.expected == pytest.approx(expected)
    text = "\n".join(why_lines(result.launch.launches))
    assert f"expected ${expected:.4f}/h, ${0.17664 + expected:.4f}/h in all" in text
    assert "m6i.2xlarge spot $0.1613/h ($0.0154/h cheaper, but its interruptions are expected to cost" in text


def test_an_on_demand_node_has_no_interruption_line(make_config: Callable[..., Config]) -> None:
    result = run(make_config, batch_pod("train-1", lost="240h"), **DAY)
    why = result.launch.launches[0].why
    assert why is not None and why.interruption is None
    assert "spot interruptions" not in "\n".join(why_lines(result.launch.launches))


def test_the_expected_price_adds_rate_times_the_nodes_price_for_the_hours_lost() -> None:
    o = spot("m6i.2xlarge", 0.16128, 4)
    assert risk_price(o, 10.0) == pytest.approx(0.16128 * (1 + bucket_rate(4) * 10.0))
    assert risk_price(offering("m6i.2xlarge", 8, 32, 0.384), 10.0) == 0.384


def test_a_bucket_is_the_hourly_rate_at_which_its_share_of_instances_is_interrupted_in_a_month() -> None:
    assert 1 - math.exp(-bucket_rate(0) * 730) == pytest.approx(0.05)
    assert 1 - math.exp(-bucket_rate(4) * 730) == pytest.approx(0.30)
    assert bucket_rate(0) < bucket_rate(1) < bucket_rate(2) < bucket_rate(3) < bucket_rate(4)


@pytest.mark.parametrize(("value", "hours"), [("0", 0.0), ("45m", 0.75), ("6h", 6.0), ("1h30m", 1.5)])
def test_the_interruption_cost_annotation_is_the_work_lost_as_a_duration(value: str, hours: float) -> None:
    assert pod_interruption_hours({"tidal.dev/interruption-cost": value}, 1.0, 300) == pytest.approx(
        hours + 5 / 60
    )


@pytest.mark.parametrize("value", ["2", "soon", "-1h", ""])
def test_an_interruption_cost_that_is_not_a_duration_is_one_line_naming_the_annotation(value: str) -> None:
    with pytest.raises(ValueError) as caught:
        pod_interruption_hours({"tidal.dev/interruption-cost": value}, 1.0, 300)
    assert str(caught.value) == (
        f"annotation tidal.dev/interruption-cost: {value!r} is not the work an interruption loses as a "
        "duration (e.g. 45m, 6h, 0)"
    )


def test_the_catalogs_spot_interruption_bucket_becomes_the_spot_offerings_rate() -> None:
    offerings = read_catalog_csv(ROOT / "config/catalogs/aws-us-east-1.csv", cloud="aws", region="us-east-1")
    g4dn = {o.capacity_type: o for o in offerings if o.instance_type == "g4dn.xlarge"}
    assert g4dn[SPOT].interruption_rate == bucket_rate(3)  # bucket 3 in the catalog
    assert g4dn[ON_DEMAND].interruption_rate == 0.0


def test_a_bucket_outside_0_to_4_is_a_catalog_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour,"
        "spot_usd_per_hour,spot_interruption_bucket\n"
        "aws,us-east-1,m6i.2xlarge,8,32768,0,x86_64,0.384,0.16128,7\n"
    )
    with pytest.raises(CatalogError) as caught:
        read_catalog_csv(path, cloud="aws", region="us-east-1")
    assert str(caught.value) == f"{path}:2: spot_interruption_bucket: '7' is not a bucket from 0 to 4"


def test_a_pod_with_a_bad_interruption_cost_is_left_out_with_one_line_naming_it(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, batch_pod("bad-1", lost="2"))
    assert result.launch.launches == ()
    assert [(i.pod, i.reason.value, i.detail) for i in result.demand.ignored] == [
        (
            "default/bad-1",
            "bad-annotation",
            "annotation tidal.dev/interruption-cost: '2' is not the work an interruption loses as a duration "
            "(e.g. 45m, 6h, 0)",
        )
    ]
