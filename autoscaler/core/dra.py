"""Dynamic Resource Allocation (``resource.k8s.io/v1``, GA in Kubernetes 1.34) as tidal reads it.

A pod names claims in ``spec.resourceClaims`` (a ResourceClaim, or a ResourceClaimTemplate from which
Kubernetes makes one claim per pod). A claim requests devices: each request is either ``exactly`` one kind of
device (a DeviceClass, ``allocationMode`` ``ExactCount`` with ``count``, default 1, or ``All`` matching devices
of the node) or ``firstAvailable``, an ordered list of such alternatives. A device matches when every CEL
selector of its DeviceClass and of the request is true (:mod:`autoscaler.core.dra_selectors`).

NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu) publishes each GPU under the driver ``gpu.nvidia.com`` with
the attributes ``type`` (``gpu``, ``mig`` or ``vfio``), ``productName`` (NVML's name, e.g.
``NVIDIA A100-SXM4-40GB``), ``brand``, ``architecture`` (``Ampere``, ``Hopper``...),
``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion`` (versions), ``uuid``, PCI
attributes, and the capacity ``memory`` (bytes); a MIG device adds ``profile`` and ``parentUUID``. Its
DeviceClasses are ``gpu.nvidia.com`` (``type == 'gpu'``, extended resource ``nvidia.com/gpu``) and
``mig.nvidia.com`` (``type == 'mig'``). :func:`autoscaler.core.dra_devices.offering_devices` gives the
devices a node of an offering will publish, with only what is known before the node exists, and
:func:`~autoscaler.core.dra_devices.match_devices` what a request takes of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "GPU_CLASS",
    "MIG_CLASS",
    "NVIDIA_DRIVER",
    "AllocationMode",
    "ClaimSpec",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceRequest",
    "DeviceSubRequest",
    "DraObjects",
    "PodClaim",
    "ResourceClaim",
    "ResourceClaimTemplate",
]

NVIDIA_DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"


class AllocationMode(StrEnum):
    """How many devices one request takes."""

    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    """One kind of device: a DeviceClass, how many, and the request's own CEL selectors."""

    name: str
    device_class: str
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    selectors: tuple[str, ...] = ()
    admin_access: bool = False  # a monitoring request: sees devices in use, allocates nothing


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A claim's request: ``exactly`` one kind, or the first of ``first_available`` that can be satisfied."""

    name: str
    exactly: DeviceSubRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()

    @property
    def alternatives(self) -> tuple[DeviceSubRequest, ...]:
        """The kinds of device that satisfy the request, in the order the scheduler tries them."""
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    """All devices of ``requests`` (every request when empty) share ``match_attribute`` or differ in
    ``distinct_attribute`` (a fully qualified attribute name, ``gpu.nvidia.com/productName``)."""

    requests: tuple[str, ...] = ()
    match_attribute: str = ""
    distinct_attribute: str = ""


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What a ResourceClaim (or each claim a template makes) asks for."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """A ResourceClaim: its spec, and whether (and where) it is allocated."""

    namespace: str
    name: str
    spec: ClaimSpec
    allocated: bool = False
    # The nodes an allocated claim is bound to (from status.allocation.nodeSelector's metadata.name fields).
    allocated_nodes: tuple[str, ...] = ()
    reserved_for: tuple[str, ...] = ()  # names of the pods using it
    devices: tuple[str, ...] = ()  # allocated devices, "driver/pool/device"


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    """A ResourceClaimTemplate: the spec of the claim made for each pod that names it."""

    namespace: str
    name: str
    spec: ClaimSpec


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: selectors every device of the class matches, and the extended resource it stands for."""

    name: str
    selectors: tuple[str, ...] = ()
    extended_resource_name: str = ""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name, or a template; for a template, the
    generated claim's name once Kubernetes made it (``status.resourceClaimStatuses``)."""

    name: str
    claim_name: str = ""
    template_name: str = ""
    generated_claim_name: str = ""

    @property
    def resolved_claim(self) -> str:
        """The ResourceClaim the pod uses, when known: the named one or the generated one."""
        return self.claim_name or self.generated_claim_name


@dataclass(frozen=True, slots=True)
class DraObjects:
    """The DRA objects of a cluster, each kind sorted by (namespace, name); ``served`` is False when the API
    server does not serve ``resource.k8s.io/v1`` (then no pod can use DRA, and the tuples are empty)."""

    device_classes: tuple[DeviceClass, ...] = ()
    claims: tuple[ResourceClaim, ...] = ()
    claim_templates: tuple[ResourceClaimTemplate, ...] = ()
    served: bool = True
