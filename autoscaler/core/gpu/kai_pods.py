"""Pods KAI Scheduler runs for itself or marks as expendable, recognised from their namespace and labels.

- **Reservation pods.** To hold a GPU that fractional pods share, KAI's binder binds a pod straight to the
  node (``spec.nodeName``, no scheduler) in namespace ``kai-resource-reservation``, labelled
  ``app: kai-resource-reservation`` and ``runai-gpu-group: <group id>``, requesting ``nvidia.com/gpu: 1``
  and annotated ``karpenter.sh/do-not-disrupt: "true"`` (``pkg/binder/binding/resourcereservation``).
  The fractional pods sharing that GPU carry the same ``runai-gpu-group`` label once bound.
- **Scaling pods.** KAI's optional node-scale-adjuster creates, for unschedulable GPU-sharing pods, pods of
  whole GPUs that cluster-autoscaler and Karpenter can see: namespace ``kai-scale-adjust``, label
  ``app: scaling-pod`` and the labels ``shared-gpu-pod-name`` / ``shared-gpu-pod-namespace`` naming the pod
  each stands for (``pkg/nodescaleadjuster/scaler``). They are scheduled by the default scheduler.
- **Background pods.** Pods labelled ``kai.scheduler/background: "true"`` (the backgroundpods plugin's default
  selector) give their node's capacity back to KAI whenever a workload needs it, and are evicted if it does.

Namespaces and the ``app`` values are KAI install flags; the defaults are used unless a caller passes others.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "BACKGROUND_LABEL",
    "GPU_GROUP_LABEL",
    "RESERVATION_APP",
    "RESERVATION_NAMESPACE",
    "SCALE_ADJUST_NAMESPACE",
    "SCALING_POD_APP",
    "SHARED_POD_NAMESPACE_LABEL",
    "SHARED_POD_NAME_LABEL",
    "gpu_groups",
    "is_background",
    "is_reservation_pod",
    "is_scale_adjuster_pod",
    "scaled_pod",
]

BACKGROUND_LABEL = "kai.scheduler/background"
RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_APP = "kai-resource-reservation"
GPU_GROUP_LABEL = "runai-gpu-group"
SCALE_ADJUST_NAMESPACE = "kai-scale-adjust"
SCALING_POD_APP = "scaling-pod"
SHARED_POD_NAME_LABEL = "shared-gpu-pod-name"
SHARED_POD_NAMESPACE_LABEL = "shared-gpu-pod-namespace"
_APP = "app"


def is_background(labels: Mapping[str, str]) -> bool:
    """A pod KAI may evict whenever its capacity is wanted (``kai.scheduler/background: "true"``, exactly as
    KAI's label selector matches it: the value is case-sensitive)."""
    return labels.get(BACKGROUND_LABEL) == "true"


def is_reservation_pod(
    namespace: str, labels: Mapping[str, str], *, reservation_namespace: str = RESERVATION_NAMESPACE
) -> bool:
    """A KAI reservation pod: in the reservation namespace, with KAI's app label or a GPU-group label.

    It holds one whole GPU for the fractional pods of its group, so it counts as that GPU's use.
    """
    if namespace != reservation_namespace:
        return False
    return labels.get(_APP) == RESERVATION_APP or GPU_GROUP_LABEL in labels


def gpu_groups(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU groups (shared devices) a bound pod belongs to: ``runai-gpu-group`` and, for a share on several
    devices, every ``runai-gpu-group/<group>`` label; sorted, empty when the pod shares none."""
    first = labels.get(GPU_GROUP_LABEL)
    if not first:
        return ()
    prefix = GPU_GROUP_LABEL + "/"
    return tuple(sorted({first, *(v for k, v in labels.items() if k.startswith(prefix) and v)}))


def is_scale_adjuster_pod(
    namespace: str, labels: Mapping[str, str], *, scale_adjust_namespace: str = SCALE_ADJUST_NAMESPACE
) -> bool:
    """A proxy pod of KAI's node-scale-adjuster: it asks for whole GPUs on behalf of a sharing pod that tidal
    already plans for, so counting it too would launch for the same demand twice."""
    if SHARED_POD_NAME_LABEL in labels and SHARED_POD_NAMESPACE_LABEL in labels:
        return True  # set on every scaling pod, whatever the install's namespace and app label
    return namespace == scale_adjust_namespace and labels.get(_APP) == SCALING_POD_APP


def scaled_pod(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(namespace, name) of the pod a scaling pod stands for, when its labels say."""
    name = labels.get(SHARED_POD_NAME_LABEL)
    namespace = labels.get(SHARED_POD_NAMESPACE_LABEL)
    return (namespace, name) if name and namespace else None
