"""A pod's request = max(sum of containers + sidecars, largest init container) + overhead."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.resources import Resources
from autoscaler.runtime.kube.convert import ConversionError, pod_from_dict
from tests.builders import pod

if TYPE_CHECKING:
    from typing import Any


def _requests(**kw: Any) -> Resources:
    return pod_from_dict(pod("web-1", **kw)).requests


def test_sum_of_containers_is_the_request() -> None:
    obj = pod("web-1", cpu="500m", memory="1Gi")
    obj["spec"]["containers"].append(
        {"name": "proxy", "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}
    )
    assert pod_from_dict(obj).requests == Resources.parse({"cpu": "750m", "memory": "1152Mi"})


def test_a_large_init_container_sets_the_request_when_it_exceeds_the_containers() -> None:
    init = [{"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}]
    assert _requests(cpu="500m", memory="1Gi", init_containers=init) == Resources.parse(
        {"cpu": "2", "memory": "1Gi"}
    )


def test_restartable_init_containers_are_added_like_containers() -> None:
    init = [
        {"name": "log-shipper", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
    ]
    # The sidecar runs next to the app (500m + 100m) and next to the later init container (1 + 100m).
    assert _requests(cpu="500m", memory=None, init_containers=init) == Resources.parse({"cpu": "1100m"})


def test_pod_overhead_is_added() -> None:
    obj = pod("kata-1", cpu="1", memory="1Gi")
    obj["spec"]["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    assert pod_from_dict(obj).requests == Resources.parse({"cpu": "1250m", "memory": "1144Mi"})


def test_a_limit_without_a_request_counts_as_the_request() -> None:
    assert _requests(cpu="1", memory="1Gi", gpu=2).gpus == 2


def _with_limits(limits: dict[str, Any], **kw: Any) -> dict[str, Any]:
    obj = pod("web-1", **kw)
    obj["spec"]["containers"][0]["resources"]["limits"] = limits
    return obj


def test_limits_that_repeat_the_requests_leave_them_as_they_are() -> None:
    obj = _with_limits({"memory": "1Gi"}, cpu="500m", memory="1Gi")
    assert pod_from_dict(obj).requests == Resources.parse({"cpu": "500m", "memory": "1Gi"})


def test_a_limit_above_its_request_does_not_raise_the_request() -> None:
    obj = _with_limits({"cpu": "2", "memory": "2Gi"}, cpu="500m", memory="1Gi")
    assert pod_from_dict(obj).requests == Resources.parse({"cpu": "500m", "memory": "1Gi"})


def test_a_limit_on_a_resource_not_requested_is_the_request_beside_limits_that_repeat_requests() -> None:
    obj = _with_limits({"memory": "1Gi", "nvidia.com/gpu": "1"}, cpu="500m", memory="1Gi")
    assert pod_from_dict(obj).requests == Resources.parse(
        {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    )


def test_a_malformed_limit_is_an_error_naming_it_though_its_request_is_fine() -> None:
    obj = _with_limits({"memory": "1 Gi"}, cpu="500m", memory="1Gi")
    with pytest.raises(ConversionError, match=r"spec.containers\[0\].resources.limits.memory: '1 Gi'"):
        pod_from_dict(obj)


def test_extended_resources_are_kept() -> None:
    r = _requests(extra_requests={"amd.com/gpu": "1", "hugepages-2Mi": "512Mi"})
    assert r["amd.com/gpu"] == 1000
    assert r["hugepages-2Mi"] == 512 * 2**20 * 1000


def test_a_negative_request_is_an_error_naming_the_field() -> None:
    obj = pod("bad-1", cpu="-1")
    with pytest.raises(
        ConversionError,
        match=r"Pod default/bad-1: spec.containers\[0\].resources.requests.cpu: '-1' is negative",
    ):
        pod_from_dict(obj)


def test_an_absurd_request_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConversionError, match=r"requests.cpu: '1e30' is out of range"):
        pod_from_dict(pod("bad-1", cpu="1e30"))
