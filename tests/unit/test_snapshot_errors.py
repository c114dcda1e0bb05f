"""A malformed object in a snapshot (or from the API) is one line naming the object, the field path and the value.

The same decoders serve `tidal plan` and the daemon's informers: for the daemon, a ConversionError is what lets
the informer skip that one object with a logged error and keep watching.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.cli.snapshot import SnapshotError, read_snapshots
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.kube.convert import (
    ConversionError,
    node_from_dict,
    parse_time,
    pdb_from_dict,
    pod_from_dict,
    podgroup_from_dict,
    queue_from_dict,
)
from tests.builders import aws_offerings, node, pdb, pod, podgroup, queue, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from autoscaler.config.options import Config

REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def p1(**changes: Any) -> dict[str, Any]:
    """Pod default/p1 with ``changes`` applied as {"spec.priority": value} style paths."""
    obj = pod("p1", gpu=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    return _apply(obj, changes)


def _apply(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for path, value in changes.items():
        *parents, last = path.split(".")
        target = obj
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return obj


def affinity(terms: list[Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


POD_CASES = [
    pytest.param(
        {"spec.affinity": affinity([{"matchExpressions": [{"operator": "Exists"}]}])},
        f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key: missing",
        id="requirement-without-key",
    ),
    pytest.param(
        {"spec.affinity": affinity(["x"])},
        f"{REQUIRED}.nodeSelectorTerms[0]: expected a map, got 'x'",
        id="node-selector-term-not-a-map",
    ),
    pytest.param(
        {
            "spec.affinity": affinity(
                [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "Is", "values": ["arm64"]}]}]
            )
        },
        f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator: 'Is' is not one of In, NotIn, "
        "Exists, DoesNotExist, Gt, Lt",
        id="unknown-operator",
    ),
    pytest.param(
        {
            "spec.affinity": affinity(
                [
                    {
                        "matchExpressions": [
                            {"key": "tidal.dev/gpu-count", "operator": "Gt", "values": ["1", "2"]}
                        ]
                    }
                ]
            )
        },
        f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: must have exactly one value for "
        "operator Gt",
        id="gt-with-two-values",
    ),
    pytest.param(
        {"spec.tolerations": ["x"]}, "spec.tolerations[0]: expected a map, got 'x'", id="toleration"
    ),
    pytest.param(
        {"spec.tolerations": {"key": "nvidia.com/gpu"}},
        "spec.tolerations: expected a list, got {'key': 'nvidia.com/gpu'}",
        id="tolerations-not-a-list",
    ),
    pytest.param(
        {"metadata.ownerReferences": ["x"]},
        "metadata.ownerReferences[0]: expected a map, got 'x'",
        id="owner",
    ),
    pytest.param({"spec.containers": ["x"]}, "spec.containers[0]: expected a map, got 'x'", id="container"),
    pytest.param(
        {"spec.containers": [{"name": "main", "resources": "lots"}]},
        "spec.containers[0].resources: expected a map, got 'lots'",
        id="container-resources",
    ),
    pytest.param({"spec.priority": "high"}, "spec.priority: expected an integer, got 'high'", id="priority"),
    pytest.param(
        {"spec.terminationGracePeriodSeconds": "soon"},
        "spec.terminationGracePeriodSeconds: expected an integer, got 'soon'",
        id="grace-period",
    ),
    pytest.param(
        {
            "status.conditions": [
                {"type": "PodScheduled", "status": "False", "lastTransitionTime": "yesterday"}
            ]
        },
        "status.conditions[0].lastTransitionTime: 'yesterday' is not an RFC 3339 time (e.g. 2026-11-20T10:00:00Z)",
        id="last-transition-time",
    ),
    pytest.param(
        {"metadata.creationTimestamp": "2026-11-20T10:00:00"},
        "metadata.creationTimestamp: '2026-11-20T10:00:00' is not an RFC 3339 time",
        id="timestamp-without-zone",
    ),
    pytest.param(
        {"status.conditions": ["x"]}, "status.conditions[0]: expected a map, got 'x'", id="condition"
    ),
    pytest.param(
        {"spec.volumes": ["scratch"]}, "spec.volumes[0]: expected a map, got 'scratch'", id="volume"
    ),
    pytest.param(
        {"spec.schedulingGates": "wait"}, "spec.schedulingGates: expected a list, got 'wait'", id="gates"
    ),
    pytest.param(
        {"metadata.labels": {"app": {"name": "web"}}},
        "metadata.labels.app: expected a string, got {'name': 'web'}",
        id="label-value",
    ),
    pytest.param(
        {"spec.nodeSelector": ["gpu=true"]},
        "spec.nodeSelector: expected a map, got ['gpu=true']",
        id="selector",
    ),
    pytest.param(
        {"spec.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exist"}]},
        "spec.tolerations[0].operator: 'Exist' is not one of Exists, Equal",
        id="toleration-operator-not-exists-or-equal",
    ),
    pytest.param(
        {"spec.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoScheduling"}]},
        "spec.tolerations[0].effect: 'NoScheduling' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        id="toleration-effect-unknown",
    ),
    pytest.param(
        {"metadata.labels": {"tier": 1}},
        "metadata.labels.tier: expected a string, got 1",
        id="label-value-a-number",
    ),
    pytest.param(
        {"metadata.annotations": {"tidal.dev/weight": 0.5}},
        "metadata.annotations.tidal.dev/weight: expected a string, got 0.5",
        id="annotation-value-a-number",
    ),
    pytest.param(
        {"spec.nodeSelector": {"gpu": True}},
        "spec.nodeSelector.gpu: expected a string, got True",
        id="node-selector-value-a-bool",
    ),
    pytest.param({"status.phase": 1}, "status.phase: expected a string, got 1", id="phase-not-a-string"),
]


@pytest.mark.parametrize(("changes", "message"), POD_CASES)
def test_a_malformed_pod_names_the_field_path_and_value(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversionError) as err:
        pod_from_dict(p1(**changes))
    assert str(err.value).startswith(f"Pod default/p1: {message}")


def test_a_namespace_that_is_not_a_string_names_it() -> None:
    with pytest.raises(ConversionError) as err:
        pod_from_dict(p1(**{"metadata.namespace": 7}))
    assert str(err.value) == "Pod p1: metadata.namespace: expected a string, got 7"


def test_a_fractional_gpu_request_is_rejected_as_the_api_server_does() -> None:
    with pytest.raises(ConversionError) as err:
        pod_from_dict(pod("p1", extra_requests={"nvidia.com/gpu": "0.5"}))
    assert str(err.value) == (
        "Pod default/p1: spec.containers[0].resources.requests.nvidia.com/gpu: '0.5' is not a whole number "
        "(extended resources are whole devices)"
    )


def test_a_node_taint_without_a_key_names_the_taint() -> None:
    obj = node("gpu-a", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"effect": "NoSchedule"}])
    with pytest.raises(ConversionError, match=r"^Node gpu-a: spec\.taints\[1\]\.key: missing$"):
        node_from_dict(obj)


@pytest.mark.parametrize(
    ("effect", "problem"),
    [
        pytest.param(None, "missing", id="missing"),
        pytest.param("", "missing", id="empty"),
        pytest.param(
            "NoScheduling",
            "'NoScheduling' is not one of NoSchedule, PreferNoSchedule, NoExecute",
            id="unknown",
        ),
    ],
)
def test_a_node_taint_needs_a_known_effect(effect: str | None, problem: str) -> None:
    taint = {"key": "dedicated", "value": "batch"}
    if effect is not None:
        taint["effect"] = effect
    with pytest.raises(ConversionError) as err:
        node_from_dict(node("gpu-a", taints=[taint]))
    assert str(err.value) == f"Node gpu-a: spec.taints[0].effect: {problem}"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param(
            "providerID", 12, "spec.providerID: expected a string, got 12", id="provider-id-a-number"
        ),
        pytest.param(
            "unschedulable",
            "false",
            "spec.unschedulable: expected true or false, got 'false'",
            id="quoted-bool",
        ),
    ],
)
def test_a_node_spec_field_of_the_wrong_type_names_it(field: str, value: int | str, message: str) -> None:
    obj = node("cpu-a")
    obj["spec"][field] = value
    with pytest.raises(ConversionError) as err:
        node_from_dict(obj)
    assert str(err.value) == f"Node cpu-a: {message}"


def test_a_node_with_a_bad_ready_time_names_the_condition() -> None:
    obj = node("cpu-a")
    obj["status"]["conditions"][0]["lastTransitionTime"] = 1795168800
    with pytest.raises(ConversionError) as err:
        node_from_dict(obj)
    assert str(err.value).startswith(
        "Node cpu-a: status.conditions[0].lastTransitionTime: 1795168800 is not an RFC 3339 time"
    )


def test_a_pdb_whose_selector_is_not_a_map_names_it() -> None:
    obj = pdb("web", match={"app": "web"}, allowed=1)
    obj["spec"]["selector"] = 5
    with pytest.raises(
        ConversionError, match=r"^PodDisruptionBudget default/web: spec\.selector: expected a map, got 5$"
    ):
        pdb_from_dict(obj)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        pytest.param(
            "minAvailable",
            "abc%",
            "'abc%' is not an integer or a percentage (e.g. '5%')",
            id="malformed-percent",
        ),
        pytest.param("maxUnavailable", -1, "-1 is below 0", id="negative"),
        pytest.param("minAvailable", "150%", "'150%' is more than 100%", id="over-100-percent"),
    ],
)
def test_a_pdb_budget_the_api_server_would_refuse_names_it(
    field: str, value: str | int, problem: str
) -> None:
    obj = pdb("web", match={"app": "web"}, allowed=1)
    obj["spec"].pop("minAvailable")
    obj["spec"][field] = value
    with pytest.raises(ConversionError) as err:
        pdb_from_dict(obj)
    assert str(err.value) == f"PodDisruptionBudget default/web: spec.{field}: {problem}"


@pytest.mark.parametrize("value", [0, 3, "0%", "100%", "05%"])
def test_a_pdb_budget_of_a_count_or_a_percentage_up_to_100_is_accepted(value: int | str) -> None:
    obj = pdb("web", match={"app": "web"}, allowed=1)
    obj["spec"]["minAvailable"] = value
    assert pdb_from_dict(obj).disruptions_allowed == 1


def test_a_podgroup_min_member_beyond_int32_names_it() -> None:
    obj = podgroup("train", min_member=2**31, queue="research")
    with pytest.raises(ConversionError) as err:
        podgroup_from_dict(obj)
    assert str(err.value) == "PodGroup default/train: spec.minMember: 2147483648 is above 2147483647"


def test_a_podgroup_min_member_that_is_not_a_number_names_it() -> None:
    obj = podgroup("train", min_member=4, queue="research")
    obj["spec"]["minMember"] = "abc"
    with pytest.raises(
        ConversionError, match=r"^PodGroup default/train: spec\.minMember: expected an integer, got 'abc'$"
    ):
        podgroup_from_dict(obj)


def test_a_queue_gpu_limit_that_is_not_a_number_names_it() -> None:
    obj = queue("research", quota=8, limit=16)
    obj["spec"]["resources"]["gpu"]["limit"] = "abc"
    with pytest.raises(
        ConversionError,
        match=r"^Queue research: spec\.resources\.gpu\.limit: expected a number of GPUs, got 'abc'$",
    ):
        queue_from_dict(obj)


def test_kai_queues_keep_minus_one_for_no_limit_and_accept_quoted_numbers() -> None:
    obj = queue("research", quota=8, limit=-1)
    obj["spec"]["resources"]["gpu"]["quota"] = "8"
    decoded = queue_from_dict(obj)
    assert (decoded.gpu.quota, decoded.gpu.limit) == (8, None)


def test_a_queue_with_a_fractional_over_quota_weight_is_read_as_kais_crd_allows() -> None:
    obj = queue("research", quota=2, limit=4)
    obj["spec"]["resources"]["gpu"]["overQuotaWeight"] = 0.5
    decoded = queue_from_dict(obj)
    assert (decoded.gpu.quota, decoded.gpu.limit, decoded.gpu.over_quota_weight) == (2, 4, 0.5)


def test_a_queue_over_quota_weight_that_is_not_a_number_names_it() -> None:
    obj = queue("research", quota=2, limit=4)
    obj["spec"]["resources"]["gpu"]["overQuotaWeight"] = "heavy"
    with pytest.raises(
        ConversionError,
        match=r"^Queue research: spec\.resources\.gpu\.overQuotaWeight: expected a number at or above 0, "
        r"got 'heavy'$",
    ):
        queue_from_dict(obj)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("limit", -2, id="limit-below-minus-one"),
        pytest.param("quota", "-0.5", id="quota-negative"),
    ],
)
def test_a_queue_gpu_limit_that_is_negative_but_not_minus_one_names_it(field: str, value: int | str) -> None:
    obj = queue("research", quota=8, limit=16)
    obj["spec"]["resources"]["gpu"][field] = value
    with pytest.raises(ConversionError) as err:
        queue_from_dict(obj)
    assert str(err.value) == (
        f"Queue research: spec.resources.gpu.{field}: {value!r} is below 0 and not -1 (which means no limit)"
    )


def test_an_object_that_is_not_a_map_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match="expected a Kubernetes object"):
        pod_from_dict(["not", "a", "pod"])  # type: ignore[arg-type]


def test_a_garbage_unneeded_since_annotation_reads_as_absent() -> None:
    """Scale-down reads tidal.dev/unneeded-since back with parse_time: garbage means "start counting now"."""
    assert parse_time("2026-11-20T09:00:00Z") == 1795165200.0
    assert parse_time("2026-11-20T10:00:00+01:00") == 1795165200.0
    for garbage in ("", "yesterday", "2026-11-20T09:00:00", "1795165200", None, 1795165200, ["x"]):
        assert parse_time(garbage) is None


def test_the_snapshot_error_names_the_file_and_item(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    bad = p1(**{"spec.tolerations": ["x"]})
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pod("p0"), bad]}))
    with pytest.raises(SnapshotError) as err:
        read_snapshots([path])
    assert str(err.value) == f"{path}: items[1]: Pod default/p1: spec.tolerations[0]: expected a map, got 'x'"


def test_tidal_plan_reports_a_malformed_pod_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snapshot.yaml"
    snap.write_text(yaml.safe_dump(p1(**{"spec.priority": "high"})))
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour\n"
        "aws,us-east-1,g4dn.xlarge,4,16384,1,x86_64,0.526\n"
    )
    code = main(["plan", "--snapshot", str(snap), "--catalog", str(catalog)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"tidal: error: {snap}: Pod default/p1: spec.priority: expected an integer, got 'high'\n"


@pytest.mark.parametrize("mangled", ["yesterday", "2026-11-20 09:00", "2026-11-20T09:00:00", ""])
def test_a_mangled_unneeded_since_annotation_restarts_the_count_instead_of_failing(
    make_config: Callable[..., Config], mangled: str
) -> None:
    now = 1_795_172_400.0  # 2026-11-20T11:00:00Z
    empty = node(
        "gpu-a",
        instance_type="g5.xlarge",
        cpu="4",
        memory="16Gi",
        gpu=1,
        managed=True,
        annotations={"tidal.dev/unneeded-since": mangled},
    )
    result = plan(PlanInput(snapshot(empty), aws_offerings(), make_config(), now))
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [("gpu-a", "unneeded for 0s of 30s")]
    assert result.removal.unneeded_since == {"gpu-a": now}


def test_an_unquoted_creation_timestamp_reads_as_the_time_it_is(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    text = yaml.safe_dump(pod("p1", created="2026-11-20T09:00:00Z"))
    path.write_text(text.replace("'2026-11-20T09:00:00Z'", "2026-11-20T09:00:00Z"))
    assert "creationTimestamp: 2026-11-20T09:00:00Z" in path.read_text()
    (p,) = read_snapshots([path]).snapshot.pods
    assert p.created == parse_time("2026-11-20T09:00:00Z")


def test_a_key_given_twice_in_a_snapshot_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("kind: Pod\nmetadata: {name: a}\nmetadata: {name: b}\n")
    with pytest.raises(SnapshotError, match=r"snap.yaml:3:1: invalid YAML: duplicate key 'metadata'"):
        read_snapshots([path])


def test_a_snapshot_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SnapshotError, match=r"snap.json: invalid JSON: nested too deeply"):
        read_snapshots([path])


def test_a_control_character_in_a_snapshot_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_text("kind: Pod\nmetadata: {name: \x01}\n")
    with pytest.raises(SnapshotError) as caught:
        read_snapshots([path])
    assert "invalid YAML: unacceptable character #x0001" in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("operator", "problem"),
    [
        pytest.param("Equal", "'Equal' must be Exists when key is empty", id="equal"),
        pytest.param(None, "missing (must be Exists when key is empty)", id="defaulted-to-equal"),
    ],
)
def test_a_toleration_without_a_key_must_use_operator_exists(operator: str | None, problem: str) -> None:
    toleration = {"value": "batch", "effect": "NoSchedule"}
    if operator is not None:
        toleration["operator"] = operator
    with pytest.raises(ConversionError) as err:
        pod_from_dict(p1(**{"spec.tolerations": [{"operator": "Exists"}, toleration]}))
    assert str(err.value) == f"Pod default/p1: spec.tolerations[1].operator: {problem}"


def test_a_toleration_with_operator_exists_must_have_no_value() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"}
    with pytest.raises(ConversionError) as err:
        pod_from_dict(p1(**{"spec.tolerations": [toleration]}))
    assert str(err.value) == (
        "Pod default/p1: spec.tolerations[0].value: 'present' must be empty when operator is Exists"
    )


@pytest.mark.parametrize(
    ("effect", "problem"),
    [
        pytest.param("NoSchedule", "'NoSchedule' must be NoExecute", id="no-schedule"),
        pytest.param("PreferNoSchedule", "'PreferNoSchedule' must be NoExecute", id="prefer-no-schedule"),
        pytest.param(None, "missing (must be NoExecute", id="every-effect"),
    ],
)
def test_toleration_seconds_is_only_allowed_with_effect_no_execute(effect: str | None, problem: str) -> None:
    toleration = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
    if effect is not None:
        toleration["effect"] = effect
    with pytest.raises(ConversionError) as err:
        pod_from_dict(p1(**{"spec.tolerations": [toleration]}))
    assert str(err.value).startswith(f"Pod default/p1: spec.tolerations[0].effect: {problem}")
    assert "when tolerationSeconds is set" in str(err.value)
    toleration["effect"] = "NoExecute"
    assert pod_from_dict(p1(**{"spec.tolerations": [toleration]})).tolerations[0].effect == "NoExecute"


def test_a_pdb_with_both_min_available_and_max_unavailable_is_rejected() -> None:
    obj = pdb("web", match={"app": "web"}, allowed=1)
    obj["spec"]["maxUnavailable"] = 0
    with pytest.raises(ConversionError) as err:
        pdb_from_dict(obj)
    assert str(err.value) == (
        "PodDisruptionBudget default/web: spec: minAvailable and maxUnavailable cannot both be set"
    )


def test_a_node_with_two_taints_of_the_same_key_and_effect_is_rejected() -> None:
    taints = [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "batch", "effect": "NoExecute"},
        {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
    ]
    assert len(node_from_dict(node("gpu-a", taints=taints[:2])).taints) == 2
    with pytest.raises(ConversionError) as err:
        node_from_dict(node("gpu-a", taints=taints))
    assert str(err.value) == (
        "Node gpu-a: spec.taints[2]: 'dedicated' with effect NoSchedule is already spec.taints[0] "
        "(taints must be unique by key and effect)"
    )
