"""DRA claims as GPU demand: which GPU nodes tidal could launch satisfy a pod's ResourceClaims, and how many
of their GPUs the pod takes.

Nodes whose GPUs NVIDIA's DRA driver publishes advertise no ``nvidia.com/gpu``: the scheduler allocates
devices from ResourceSlices. tidal plans them with a stand-in resource, ``dra.tidal.dev/gpu``: a DRA node
offers one per GPU, a pod takes as many as its claims allocate. A pod is resolved once per plan, against every
GPU type tidal may launch: a type satisfies it when every request of its claims matches that many of the
type's devices (:func:`autoscaler.core.dra_devices.match_devices`). A selector tidal cannot evaluate on a type rules that
type out, so a guess never launches a node; when no type is left, the pod carries why, and is never launched
for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from autoscaler.core.census import PodCensus
from autoscaler.core.dra import NVIDIA_DRIVER, ClaimSpec, DraObjects
from autoscaler.core.model import Pod, Snapshot
from autoscaler.core.resources import MILLI

__all__ = ["DRA_GPU", "DRA_LABEL", "DeviceType", "resolve_claims"]

DRA_GPU = "dra.tidal.dev/gpu"
# On nodes tidal launches for DRA pods: their GPUs are published by the DRA driver, not the device plugin.
DRA_LABEL = ("tidal.dev/gpu-allocation", "dra")

DeviceType = tuple[str, int, int]  # (GPU model, memory of one GPU in MiB, GPUs per node)


def resolve_claims(
    snapshot: Snapshot, types: Iterable[DeviceType], *, census: PodCensus | None = None
) -> Snapshot:
    """The snapshot with every pod that names ResourceClaims resolved: bound pods take the GPUs their
    allocated claims hold, pending ones the GPUs their claims would take on each type in ``types`` (or carry
    why none would do). Pods without claims are the same objects. ``census`` is that of the snapshot's pods,
    when the caller has it."""
    if census is not None and census.describes(snapshot.pods):
        if not census.claims:
            return snapshot
    elif not any(p.claims for p in snapshot.pods):
        return snapshot
    kinds = tuple(sorted(set(types)))
    found = _Found(snapshot.dra)
    pods = tuple(_resolve(p, found, kinds) if p.claims else p for p in snapshot.pods)
    return replace(snapshot, pods=pods)


class _Found:
    """The DRA objects by name, looked up for every pod that names a claim."""

    def __init__(self, dra: DraObjects) -> None:
        self.served = dra.served
        self.claims = {(c.namespace, c.name): c for c in dra.claims}
        self.templates = {(t.namespace, t.name): t for t in dra.claim_templates}
        self.classes = {c.name: c for c in dra.device_classes}


def _specs(pod: Pod, found: _Found) -> tuple[list[ClaimSpec], int, str]:
    """The claim specs still to allocate, the GPUs of claims already allocated, and an error."""
    claims, templates = found.claims, found.templates
    specs: list[ClaimSpec] = []
    allocated = 0
    for pc in pod.claims:
        claim = claims.get((pod.namespace, pc.resolved_claim)) if pc.resolved_claim else None
        if claim is not None and claim.allocated:
            gpus = sum(1 for d in claim.devices if d.startswith(NVIDIA_DRIVER + "/"))
            if not pod.node_name and claim.allocated_nodes:
                where = ", ".join(claim.allocated_nodes)
                return (
                    [],
                    0,
                    f"ResourceClaim {claim.name} is allocated on {where}: the pod can only run there",
                )
            allocated += gpus
            continue
        if claim is not None:
            specs.append(claim.spec)
        elif pc.template_name:
            template = templates.get((pod.namespace, pc.template_name))
            if template is None:
                return [], 0, f"ResourceClaimTemplate {pod.namespace}/{pc.template_name} does not exist"
            specs.append(template.spec)
        else:
            return [], 0, f"ResourceClaim {pod.namespace}/{pc.claim_name} does not exist"
    return specs, allocated, ""


def _resolve(pod: Pod, found: _Found, types: tuple[DeviceType, ...]) -> Pod:
    if not found.served:
        return replace(
            pod,
            dra_error="spec.resourceClaims: resource.k8s.io/v1 is not served (no DeviceClass is known), so no "
            "claim can be allocated",
        )
    specs, allocated, error = _specs(pod, found)
    if error:
        return replace(pod, dra_error=error)
    if pod.node_name or not specs:
        return _taking(pod, allocated, frozenset())
    if not types:
        return replace(
            pod,
            dra_error="no GPU offering is planned for DRA: set gpuSharing.dra: true to launch GPU nodes for "
            "ResourceClaims",
        )
    # The devices and the selectors' evaluator, only for a pod whose claims are still to allocate: a plan
    # without one (most) does without CEL.
    from autoscaler.core.dra_devices import match_devices, offering_devices
    from autoscaler.core.dra_selectors import Unsupported

    classes = found.classes
    takes: dict[DeviceType, int] = {}
    unsupported: list[str] = []
    misses: list[str] = []
    for kind in types:
        devices = offering_devices(kind[0], kind[1], kind[2])
        total = 0
        for spec in specs:
            if any(c.distinct_attribute for c in spec.constraints):
                unsupported.append("a distinctAttribute constraint (tidal plans nodes of alike GPUs)")
                total = -1
                break
            for request in spec.requests:
                match = match_devices(request, classes, devices)
                if isinstance(match, Unsupported):
                    unsupported.append(match.reason)
                    total = -1
                    break
                if not match.fits:
                    misses.append(match.reason)
                    total = -1
                    break
                total += match.devices
            if total < 0:
                break
        if 0 < total <= kind[2]:
            takes[kind] = total
    if not takes:
        why = unsupported[0] if unsupported else (misses[0] if misses else "no GPU tidal may launch")
        return replace(
            pod, dra_error=f"no GPU node tidal may launch satisfies the pod's ResourceClaims: {why}"
        )
    # allocationMode All takes every device of a node: plan the smallest node that satisfies the claims.
    least = min(takes.values())
    return _taking(pod, allocated + least, frozenset(k for k, n in takes.items() if n == least))


def _taking(pod: Pod, gpus: int, kinds: frozenset[DeviceType]) -> Pod:
    requests = pod.requests + {DRA_GPU: gpus * MILLI} if gpus else pod.requests
    return replace(pod, requests=requests, dra_types=kinds)
