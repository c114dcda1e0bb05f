"""Nothing silent: input that cannot be right is an error, and input that is valid but does nothing useful is
a warning where people look (tidal plan's stderr; the daemon's log, status ConfigMap and metrics)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from autoscaler.cli.main import main
from autoscaler.config.options import Config, ConfigError, config_from_mapping
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.observability.metrics import Metrics
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_CPU, INSUFFICIENT_GPU, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "config" / "catalogs" / "aws-us-east-1.csv"
MISSPELT = "Insuficient"  # matches no scheduler's message


# --- zones of another region ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cloud", "region", "zone", "named"),
    [
        ("aws", "us-east-1", "us-west-2a", "us-west-2"),
        ("aws", "us-east-1", "us-west-2-lax-1a", "us-west-2"),
        ("gcp", "us-central1", "europe-west4-b", "europe-west4"),
        ("azure", "eastus", "westus2-1", "westus2"),
    ],
)
def test_a_zone_of_another_region_is_a_configuration_error(
    cloud: str, region: str, zone: str, named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"cloud": cloud, "region": region, "zones": [zone]})
    assert caught.value.errors == [
        f"zones: {zone!r} is a zone of {named}, not of region {region!r} ({cloud} names a zone after its region)"
    ]


@pytest.mark.parametrize(
    ("cloud", "region", "zones"),
    [
        ("aws", "us-east-1", ["us-east-1a", "us-east-1-bos-1a"]),
        ("gcp", "us-central1", ["us-central1-a", "us-central1-f"]),
        ("azure", "eastus", ["eastus-1", "eastus-3"]),
    ],
)
def test_zones_of_the_configured_region_are_accepted(cloud: str, region: str, zones: list[str]) -> None:
    assert config_from_mapping({"cloud": cloud, "region": region, "zones": zones}).zones == tuple(zones)


@pytest.mark.parametrize(
    ("cloud", "zone"), [("aws", "use1-az1"), ("azure", "1"), ("simulated", "us-west-2a")]
)
def test_a_zone_whose_name_does_not_say_its_region_is_left_to_the_provider(cloud: str, zone: str) -> None:
    assert config_from_mapping({"cloud": cloud, "region": "us-east-1", "zones": [zone]}).zones == (zone,)


def test_plan_with_a_zone_of_another_region_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"cloud": "aws", "region": "us-east-1", "zones": ["us-west-2a"]}))
    argv = ["plan", "--snapshot", "config/examples/snapshot-kai.yaml", "--catalog", str(CATALOG)]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        assert main([*argv, "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"tidal: error: {config}: zones: 'us-west-2a' is a zone of us-west-2, not of region 'us-east-1' "
        "(aws names a zone after its region)"
    ]


# --- a pendingPodReasonRegexp that matches nothing -------------------------------------------------------


def write_plan_inputs(tmp_path: Path, regexp: str) -> list[str]:
    snap = tmp_path / "snap.yaml"
    jobs = [pod("web-1", message=INSUFFICIENT_CPU), pod("infer-1", gpu=1, message=INSUFFICIENT_GPU)]
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": jobs}))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"cloud": "aws", "region": "us-east-1", "pendingPodReasonRegexp": regexp})
    )
    return ["plan", "--snapshot", str(snap), "--catalog", str(CATALOG), "--config", str(config)]


def test_plan_warns_when_the_regexp_matches_none_of_the_unschedulable_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*write_plan_inputs(tmp_path, MISSPELT), "--output", "json"]) == 0
    out, err = capsys.readouterr()
    warning = "pendingPodReasonRegexp matched 0 of 2 unschedulable pods in the snapshot"
    assert [line for line in err.splitlines() if "warning" in line] == [
        f"tidal: warning: {warning}: tidal launches for none of them (check the regexp against their messages "
        "with tidal plan)"
    ]
    assert json.loads(out)["warnings"][0].startswith(warning)


def test_plan_does_not_warn_when_the_regexp_matches_one_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(write_plan_inputs(tmp_path, "Insufficient nvidia")) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.fixture
def config(tmp_path: Path, make_config: Callable[..., Config]) -> Callable[..., Config]:
    def build(**keys: object) -> Config:
        return make_config(simulated={"catalog": str(CATALOG)}, **keys)

    return build


def reconcile_with(cfg: Config, *pods: dict[str, object]) -> tuple[Controller, Metrics, CallRecorder, Clock]:
    clock, metrics, actions = Clock(), Metrics(), CallRecorder()
    controller = Controller(
        config=lambda: cfg,
        cluster=StaticCluster(snapshot(*pods)),
        provider=SimulatedProvider(cfg, clock=clock),
        actions=actions,
        events=CallRecorder(),
        metrics=metrics,
        clock=clock,
    )
    return controller, metrics, actions, clock


def status_warnings(actions: CallRecorder) -> list[str]:
    *_, data = actions.named("write_status")[-1]
    warnings: list[str] = json.loads(data["status"])["warnings"]
    return warnings


def test_the_daemon_logs_writes_to_status_and_exports_a_regexp_that_matches_no_unschedulable_pod(
    config: Callable[..., Config],
) -> None:
    cfg = config(pendingPodReasonRegexp=MISSPELT)
    controller, metrics, actions, _ = reconcile_with(
        cfg, pod("web-1", message=INSUFFICIENT_CPU), pod("infer-1", gpu=1, message=INSUFFICIENT_GPU)
    )
    with capture_logs() as logs:
        result = controller.reconcile_once()
        controller.reconcile_once()  # said once, not on every reconcile
    assert result.plan is not None and result.plan.launch.launches == ()
    warning = "pendingPodReasonRegexp matched 0 of 2 unschedulable pods in the last 10 minutes"
    logged = [e for e in logs if e["event"] == "pending_reason_regexp_matches_nothing"]
    assert len(logged) == 1 and logged[0]["warning"].startswith(warning)
    assert status_warnings(actions)[0].startswith(warning)
    exported = metrics.render().decode()
    assert 'tidal_pending_reason_regexp_pods{result="matched"} 0.0' in exported
    assert 'tidal_pending_reason_regexp_pods{result="unmatched"} 2.0' in exported


def test_the_daemons_warning_looks_back_ten_minutes_not_at_one_reconcile(
    config: Callable[..., Config],
) -> None:
    # A pod the regexp matched five minutes ago still shows the regexp works; after ten, it no longer does.
    cfg = config(pendingPodReasonRegexp="Insufficient nvidia")
    controller, _, actions, clock = reconcile_with(cfg, pod("infer-1", gpu=1, message=INSUFFICIENT_GPU))
    controller.reconcile_once()
    controller.cluster = StaticCluster(snapshot(pod("web-1", message=INSUFFICIENT_CPU)))
    clock.now += 300
    controller.reconcile_once()
    assert status_warnings(actions) == []
    clock.now += 301
    controller.reconcile_once()
    assert status_warnings(actions)[0].startswith(
        "pendingPodReasonRegexp matched 0 of 1 unschedulable pods in the last 10 minutes"
    )


# --- simulations that serve nothing, and options that do nothing ----------------------------------------


def test_a_simulation_that_serves_no_pod_exits_nonzero_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # kai-day allows only AWS instance families: a GCP catalog has none of them.
    argv = ["simulate", "--scenario", "kai-day", "--no-bound", "--cloud", "gcp", "--region", "us-central1"]
    assert main([*argv, "--catalog", str(REPO / "config" / "catalogs" / "gcp-us-central1.csv")]) == 1
    out, err = capsys.readouterr()
    assert "pods ran 0 of 34, never served 34" in out
    assert "tidal: 34 of 34 pods were never served: no offering in families g4dn,g5,g6,m6i,m7i (22)" in err
    assert err.splitlines()[-1] == "tidal: error: no pod ran in this simulation"


@pytest.mark.parametrize(
    "option",
    [["--compression", "10"], ["--sample", "0.5"], ["--window", "24h"], ["--start", "1h"], ["--seed", "3"]],
)
def test_a_trace_option_without_a_trace_is_a_usage_error(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", "kai-day", *option]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"tidal: error: simulate: {option[0]} only apply to a trace: give --trace CSV "
        "(scenario kai-day replays none)"
    )
