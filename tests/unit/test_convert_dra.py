"""resource.k8s.io/v1 objects decoded into DRA values, and the API server's rules kept: a malformed object is
one line naming the object, the field path and the value."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.core.dra import (
    AllocationMode,
    ClaimSpec,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    PodClaim,
)
from autoscaler.runtime.kube.convert_dra import (
    ConversionError,
    deviceclass_from_dict,
    pod_claims,
    resourceclaim_from_dict,
    resourceclaimtemplate_from_dict,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEVICE_CLASS = yaml.safe_load(
    """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
  extendedResourceName: nvidia.com/gpu
"""
)
# Two H100s on one node, as NVIDIA's quickstart asks for GPUs, with the product in a selector.
TEMPLATE = yaml.safe_load(
    """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  namespace: research
  name: two-h100
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          allocationMode: ExactCount
          count: 2
          selectors:
          - cel:
              expression: device.attributes["gpu.nvidia.com"].productName.matches("H100")
      constraints:
      - requests: [gpus]
        matchAttribute: gpu.nvidia.com/productName
      config:
      - requests: [gpus]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: TimeSlicing
"""
)
CLAIM = yaml.safe_load(
    """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: research
  name: trainer-0-gpus-x7k2p
spec:
  devices:
    requests:
    - name: gpu
      firstAvailable:
      - name: big
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel:
            expression: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0
      - name: small
        deviceClassName: gpu.nvidia.com
        count: 2
status:
  allocation:
    devices:
      results:
      - request: gpu/big
        driver: gpu.nvidia.com
        pool: gpu-node-3
        device: gpu-0
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - key: metadata.name
          operator: In
          values: [gpu-node-3]
  reservedFor:
  - resource: pods
    name: trainer-0
    uid: 6f0c3a3e-2b1f-4c55-9b8e-1d2e3f4a5b6c
"""
)
POD = yaml.safe_load(
    """
apiVersion: v1
kind: Pod
metadata:
  namespace: research
  name: trainer-0
spec:
  containers:
  - name: ctr
    image: nvcr.io/nvidia/pytorch:25.01-py3
    resources:
      claims:
      - name: gpus
  resourceClaims:
  - name: gpus
    resourceClaimTemplateName: two-h100
  - name: shared
    resourceClaimName: team-gpu
status:
  resourceClaimStatuses:
  - name: gpus
    resourceClaimName: trainer-0-gpus-x7k2p
"""
)


def test_a_device_class_keeps_its_selectors_and_extended_resource_name() -> None:
    assert deviceclass_from_dict(DEVICE_CLASS) == DeviceClass(
        "gpu.nvidia.com",
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",),
        "nvidia.com/gpu",
    )


def test_a_claim_template_for_two_gpus_with_a_product_selector() -> None:
    template = resourceclaimtemplate_from_dict(TEMPLATE)
    assert (template.namespace, template.name) == ("research", "two-h100")
    assert template.spec == ClaimSpec(
        requests=(
            DeviceRequest(
                "gpus",
                exactly=DeviceSubRequest(
                    "gpus",
                    "gpu.nvidia.com",
                    AllocationMode.EXACT_COUNT,
                    2,
                    ('device.attributes["gpu.nvidia.com"].productName.matches("H100")',),
                ),
            ),
        ),
        constraints=(DeviceConstraint(("gpus",), match_attribute="gpu.nvidia.com/productName"),),
    )


def test_count_defaults_to_one_and_mode_to_exact_count() -> None:
    claim = resourceclaim_from_dict(CLAIM)
    big, small = claim.spec.requests[0].alternatives
    assert (big.name, big.count, big.allocation_mode) == ("gpu/big", 1, AllocationMode.EXACT_COUNT)
    assert (small.name, small.count) == ("gpu/small", 2)


def test_an_allocated_claim_names_its_node_devices_and_users() -> None:
    claim = resourceclaim_from_dict(CLAIM)
    assert claim.allocated and claim.allocated_nodes == ("gpu-node-3",)
    assert claim.devices == ("gpu.nvidia.com/gpu-node-3/gpu-0",)
    assert claim.reserved_for == ("trainer-0",)


def test_a_pending_claim_is_not_allocated() -> None:
    claim = copy.deepcopy(CLAIM)
    del claim["status"]
    decoded = resourceclaim_from_dict(claim)
    assert not decoded.allocated and decoded.allocated_nodes == () and decoded.reserved_for == ()


def test_allocation_mode_all_takes_no_count() -> None:
    claim = copy.deepcopy(CLAIM)
    claim["spec"]["devices"]["requests"] = [
        {"name": "all-gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
    ]
    request = resourceclaim_from_dict(claim).spec.requests[0]
    assert request.exactly is not None and request.exactly.allocation_mode == AllocationMode.ALL


def test_a_pods_claims_name_the_template_and_the_claim_made_from_it() -> None:
    assert pod_claims(POD) == (
        PodClaim("gpus", template_name="two-h100", generated_claim_name="trainer-0-gpus-x7k2p"),
        PodClaim("shared", claim_name="team-gpu"),
    )
    assert [c.resolved_claim for c in pod_claims(POD)] == ["trainer-0-gpus-x7k2p", "team-gpu"]


def test_a_pod_without_claims_has_none() -> None:
    assert pod_claims({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {}}) == ()


def _with(obj: dict[str, Any], path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target: Any = obj
    *parents, last = path
    for part in parents:
        target = target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return obj


_DELETE = object()
REQUEST = ("spec", "spec", "devices", "requests", 0)


@pytest.mark.parametrize(
    ("obj", "decode", "message"),
    [
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "count"), 0),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.count: 0 is not a whole "
            "number above 0",
            id="count-zero",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "count"), "2"),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.count: '2' is not a "
            "whole number above 0",
            id="count-as-string",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "allocationMode"), "Some"),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.allocationMode: 'Some' "
            "is not one of ExactCount, All",
            id="unknown-mode",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "allocationMode"), "All"),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.count: 2 must not be "
            "set with allocationMode All",
            id="count-with-all",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "deviceClassName"), _DELETE),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.deviceClassName: missing",
            id="no-device-class",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly"), _DELETE),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0]: exactly one of exactly and "
            "firstAvailable must be set",
            id="neither-exactly-nor-first-available",
        ),
        pytest.param(
            _with(TEMPLATE, (*REQUEST, "exactly", "selectors"), [{"cel": {"expression": ""}}]),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.requests[0].exactly.selectors[0]."
            "cel.expression: missing",
            id="empty-selector",
        ),
        pytest.param(
            _with(TEMPLATE, ("spec", "spec", "devices", "constraints", 0, "requests"), ["gpu"]),
            resourceclaimtemplate_from_dict,
            "ResourceClaimTemplate research/two-h100: spec.spec.devices.constraints[0].requests[0]: 'gpu' is not a "
            "request of this claim",
            id="constraint-names-no-request",
        ),
        pytest.param(
            _with(CLAIM, ("spec", "devices", "requests", 0, "firstAvailable", 1, "name"), "big"),
            resourceclaim_from_dict,
            "ResourceClaim research/trainer-0-gpus-x7k2p: spec.devices.requests[0].firstAvailable[1].name: 'big' "
            "is used by another request of this claim",
            id="duplicate-subrequest",
        ),
        pytest.param(
            _with(CLAIM, ("spec", "devices", "requests", 0, "firstAvailable"), []),
            resourceclaim_from_dict,
            "ResourceClaim research/trainer-0-gpus-x7k2p: spec.devices.requests[0].firstAvailable: must not be empty",
            id="first-available-empty",
        ),
        pytest.param(
            _with(DEVICE_CLASS, ("spec", "selectors"), "type == gpu"),
            deviceclass_from_dict,
            "DeviceClass gpu.nvidia.com: spec.selectors: expected a list, got 'type == gpu'",
            id="selectors-not-a-list",
        ),
        pytest.param(
            _with(POD, ("spec", "resourceClaims", 1, "resourceClaimTemplateName"), "two-h100"),
            pod_claims,
            "Pod research/trainer-0: spec.resourceClaims[1]: exactly one of resourceClaimName and "
            "resourceClaimTemplateName must be set",
            id="pod-claim-names-both",
        ),
    ],
)
def test_a_malformed_dra_object_is_one_line_naming_object_field_and_value(
    obj: dict[str, Any], decode: Callable[[dict[str, Any]], object], message: str
) -> None:
    with pytest.raises(ConversionError) as raised:
        decode(obj)
    assert str(raised.value) == message
