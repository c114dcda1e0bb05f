"""Per-pod annotations tidal honours, with Luna's spellings accepted as aliases.

Luna users can move to tidal without editing workloads: every ``tidal.dev/x`` annotation is also read as
``node.elotl.co/x`` (instance selection) or ``pod.elotl.co/x`` (pod behaviour). tidal's spelling wins when both
are present.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Literal

INSTANCE_OFFERINGS = "tidal.dev/instance-offerings"
INSTANCE_GPU_SKUS = "tidal.dev/instance-gpu-skus"
INSTANCE_FAMILY_INCLUSIONS = "tidal.dev/instance-family-inclusions"
INSTANCE_FAMILY_EXCLUSIONS = "tidal.dev/instance-family-exclusions"
INSTANCE_TYPE_REGEXP = "tidal.dev/instance-type-regexp"
INSTANCE_MAX_COST = "tidal.dev/instance-max-cost"
INSTANCE_PARTIAL_GPU = "tidal.dev/instance-partial-gpu"
# The capacity reservations (ids or names) a pod may run in: a targeted reservation is used only for pods
# that name it, and a pod that names reservations uses no other.
CAPACITY_RESERVATION = "tidal.dev/capacity-reservation"
IGNORE = "tidal.dev/ignore"
# The work one spot interruption of its node loses the pod, as a duration ("45m", "6h"; "0" for a pod that loses
# nothing): spot offerings are ranked by their price plus the expected cost of interruptions.
INTERRUPTION_COST = "tidal.dev/interruption-cost"
DO_NOT_EVICT = "tidal.dev/do-not-evict"

# A pod with this scheduling gate is never launched for: tidal estimates the node it would buy and writes that
# on the pod (the annotation of the same name) and in an event. Luna names its gate "nodecostestimate".
COST_ESTIMATE = "tidal.dev/cost-estimate"
LUNA_COST_ESTIMATE = "nodecostestimate"

# KAI's annotation naming the PodGroup a pod belongs to, and the preemptibility values KAI knows (on a pod's
# label or its PodGroup).
POD_GROUP_ANNOTATION = "pod-group-name"


class Preemptibility(enum.StrEnum):
    """What KAI may do to a pod's workload to make room for another."""

    PREEMPTIBLE = "preemptible"
    NON_PREEMPTIBLE = "non-preemptible"
    SEMI_PREEMPTIBLE = "semi-preemptible"


PREEMPTIBILITY: tuple[str, ...] = tuple(p.value for p in Preemptibility)

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"

_LUNA_PREFIX = {
    INSTANCE_OFFERINGS: "node.elotl.co/",
    INSTANCE_GPU_SKUS: "node.elotl.co/",
    INSTANCE_FAMILY_INCLUSIONS: "node.elotl.co/",
    INSTANCE_FAMILY_EXCLUSIONS: "node.elotl.co/",
    INSTANCE_TYPE_REGEXP: "node.elotl.co/",
    INSTANCE_MAX_COST: "node.elotl.co/",
    IGNORE: "pod.elotl.co/",
    DO_NOT_EVICT: "pod.elotl.co/",
}

INSTANCE_ANNOTATIONS = (
    INSTANCE_OFFERINGS,
    INSTANCE_GPU_SKUS,
    INSTANCE_FAMILY_INCLUSIONS,
    INSTANCE_FAMILY_EXCLUSIONS,
    INSTANCE_TYPE_REGEXP,
    INSTANCE_MAX_COST,
    INSTANCE_PARTIAL_GPU,
    CAPACITY_RESERVATION,
)


def alias(name: str) -> str | None:
    """Luna's spelling of a tidal annotation, if it has one."""
    prefix = _LUNA_PREFIX.get(name)
    return prefix + name.split("/", 1)[1] if prefix else None


def lookup(annotations: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """``(spelling found, value)`` for a tidal annotation or its Luna alias; ``None`` when absent."""
    if name in annotations:
        return name, annotations[name]
    other = alias(name)
    if other and other in annotations:
        return other, annotations[other]
    return None


def is_true(annotations: Mapping[str, str], name: str) -> bool:
    """A boolean annotation set to ``"true"`` (case-insensitive) under either spelling."""
    found = lookup(annotations, name)
    return found is not None and found[1].strip().lower() == "true"


def is_cost_estimate_gate(gate: str) -> bool:
    """tidal's cost-estimate scheduling gate, or Luna's (``nodecostestimate``, with or without a prefix such as
    ``node.elotl.co/``)."""
    return gate == COST_ESTIMATE or gate.rsplit("/", 1)[-1] == LUNA_COST_ESTIMATE


def split_list(value: str) -> tuple[str, ...]:
    """``"a, b,c"`` → ``("a", "b", "c")``."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def preemptibility(value: object) -> Preemptibility | Literal[""]:
    """A KAI preemptibility value, lowercased; "" for none or one KAI does not know (it then goes by priority,
    and so does tidal)."""
    text = value.lower() if isinstance(value, str) else ""
    return Preemptibility(text) if text in PREEMPTIBILITY else ""
