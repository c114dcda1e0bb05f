"""Inter-pod affinity, topology spread and host ports as read from a pod: what the API server would refuse is
one line naming the object and the field, and what it accepts is read the way kube-scheduler reads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.core.model import HostPort, Requirement
from autoscaler.runtime.kube.convert import ConversionError, pod_from_dict
from tests.builders import anti_affinity, pod, zone_spread

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

ANTI = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
SPREAD = "spec.topologySpreadConstraints[0]"


def web(**kw: Any) -> dict[str, Any]:
    return pod("web-0", labels={"app": "web", "pod-template-hash": "5d8f7c9b6"}, **kw)


BAD = [
    pytest.param(
        web(
            pod_anti_affinity=[
                {
                    "labelSelector": {
                        "matchExpressions": [{"key": "app", "operator": "Is", "values": ["web"]}]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        ),
        f"{ANTI}.labelSelector.matchExpressions[0].operator: 'Is' is not one of In, NotIn, Exists, DoesNotExist",
        id="unknown-selector-operator",
    ),
    pytest.param(
        web(
            pod_anti_affinity=[
                {
                    "labelSelector": {
                        "matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["1"]}]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        ),
        f"{ANTI}.labelSelector.matchExpressions[0].operator: 'Gt' is not one of In, NotIn, Exists, DoesNotExist",
        id="node-only-operator-in-a-pod-selector",
    ),
    pytest.param(
        web(pod_anti_affinity=[anti_affinity("", {"app": "web"})]),
        f"{ANTI}.topologyKey: missing",
        id="empty-topology-key",
    ),
    pytest.param(
        web(pod_anti_affinity=[{"labelSelector": {"matchLabels": {"app": "web"}}}]),
        f"{ANTI}.topologyKey: missing",
        id="no-topology-key",
    ),
    pytest.param(
        web(
            pod_anti_affinity=[
                {"topologyKey": "kubernetes.io/hostname", "matchLabelKeys": ["pod-template-hash"]}
            ]
        ),
        f"{ANTI}.matchLabelKeys: cannot be set when labelSelector is not set",
        id="match-label-keys-without-selector",
    ),
    pytest.param(
        web(spread=[{**zone_spread({"app": "web"}), "maxSkew": 0}]),
        f"{SPREAD}.maxSkew: 0 is not a whole number above 0",
        id="max-skew-zero",
    ),
    pytest.param(
        web(spread=[{**zone_spread({"app": "web"}), "topologyKey": ""}]),
        f"{SPREAD}.topologyKey: missing",
        id="spread-empty-topology-key",
    ),
    pytest.param(
        web(spread=[{**zone_spread({"app": "web"}), "whenUnsatisfiable": "Sometimes"}]),
        f"{SPREAD}.whenUnsatisfiable: 'Sometimes' is not one of DoNotSchedule, ScheduleAnyway",
        id="unknown-when-unsatisfiable",
    ),
    pytest.param(
        web(spread=[{**zone_spread({"app": "web"}), "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 3}]),
        f"{SPREAD}.minDomains: can only be set with whenUnsatisfiable DoNotSchedule",
        id="min-domains-with-schedule-anyway",
    ),
    pytest.param(
        web(spread=[{**zone_spread({"app": "web"}), "nodeTaintsPolicy": "Always"}]),
        f"{SPREAD}.nodeTaintsPolicy: 'Always' is not one of Honor, Ignore",
        id="unknown-taints-policy",
    ),
    pytest.param(
        web(spread=[zone_spread({"app": "web"}), zone_spread({"app": "web"}, max_skew=2)]),
        "spec.topologySpreadConstraints[1]: topologyKey 'topology.kubernetes.io/zone' with DoNotSchedule is "
        "already topologySpreadConstraints[0]",
        id="duplicate-constraint",
    ),
    pytest.param(
        web(host_ports=[70000]),
        "spec.containers[0].ports[0].hostPort: 70000 is not a port number (1-65535)",
        id="host-port-out-of-range",
    ),
]


@pytest.mark.parametrize(("obj", "message"), BAD)
def test_a_constraint_the_api_server_would_refuse_names_the_pod_and_field(
    obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConversionError) as err:
        pod_from_dict(obj)
    assert str(err.value) == f"Pod default/web-0: {message}"


@pytest.mark.parametrize(("obj", "message"), BAD[:1] + BAD[5:6] + BAD[6:7])
def test_tidal_plan_gives_one_line_for_such_a_constraint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: dict[str, Any], message: str
) -> None:
    snap = tmp_path / "snap.yaml"
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [obj]}))
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,on_demand_usd_per_hour\naws,us-east-1,m6i.large,2,8192,0.096\n"
    )
    code = main(["plan", "--snapshot", str(snap), "--catalog", str(catalog)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"tidal: error: {snap}: items[0]: Pod default/web-0: {message}\n"


def test_match_label_keys_become_part_of_the_selector_as_the_api_server_stores_them() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
        "matchLabelKeys": ["pod-template-hash"],
        "mismatchLabelKeys": ["tenant"],
    }
    read = pod_from_dict(web(pod_anti_affinity=[term]))
    assert read.pod_anti_affinity[0].selector == (
        Requirement("app", "In", ("web",)),
        Requirement("pod-template-hash", "In", ("5d8f7c9b6",)),
    )
    assert read.pod_anti_affinity[0].owner_namespace == "default"


def test_schedule_anyway_spread_is_read_and_left_out_of_feasibility() -> None:
    read = pod_from_dict(web(spread=[{**zone_spread({"app": "web"}), "whenUnsatisfiable": "ScheduleAnyway"}]))
    assert read.spread == ()


def test_host_network_makes_every_container_port_a_host_port() -> None:
    obj = web()
    obj["spec"]["hostNetwork"] = True
    obj["spec"]["containers"][0]["ports"] = [
        {"containerPort": 9100},
        {"containerPort": 53, "protocol": "UDP"},
    ]
    assert pod_from_dict(obj).host_ports == (HostPort(9100), HostPort(53, "UDP"))


def test_a_sidecars_host_port_counts_and_a_plain_init_containers_does_not() -> None:
    obj = web()
    obj["spec"]["initContainers"] = [
        {"name": "setup", "ports": [{"containerPort": 1, "hostPort": 8080}]},
        {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 2, "hostPort": 15001}]},
    ]
    assert pod_from_dict(obj).host_ports == (HostPort(15001),)


def test_pod_level_requests_replace_the_containers_cpu_and_memory_but_not_their_gpus() -> None:
    obj = pod("train-0", cpu="1", memory="1Gi", gpu=1)
    obj["spec"]["resources"] = {"requests": {"cpu": "4"}, "limits": {"memory": "16Gi"}}
    read = pod_from_dict(obj)
    assert (read.requests.cpu, read.requests.memory // 2**20 // 1000, read.requests.gpus) == (4000, 16384, 1)
