"""The shape of the configuration document as pydantic models: camelCase keys, no unknown key, every value
checked by a tidal converter (``config.schema``) so a mistake reads the same one line however it is found.

Every option carries its description: the JSON Schema, docs/configuration.md and the comments of
``defaults.yaml`` (a test holds them equal) all say what the models say. The building blocks (checked fields,
the :class:`Section` base, pydantic's errors as tidal's lines) are in :mod:`autoscaler.config.fields`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from autoscaler.config import schema as schema
from autoscaler.config.fields import (
    ANY_LIST,
    DURATION,
    NUMBER,
    QUANTITY,
    SELECTOR,
    STRING,
    STRING_MAP,
    AtLeastOne,
    Duration,
    Flag,
    Overhead,
    Quantity,
    Regexp,
    Section,
    Share,
    Strings,
    Text,
    Wait,
    checked,
    choice,
    integer,
    nullable,
)
from autoscaler.config.values import KEEP, RELEASE, WAIT
from autoscaler.core.disruption.budgets import Budget, budget_list
from autoscaler.core.disruption.unhealthy import ConditionRule, condition_rules
from autoscaler.core.gpu.layouts import GpuSharing
from autoscaler.core.gpu.layouts import gpu_sharing as sharing_of_gpus
from autoscaler.core.model import CAPACITY_TYPES, ON_DEMAND, Taint

__all__ = [
    "KEEP",
    "RELEASE",
    "SECTION_MODELS",
    "VERBATIM",
    "WAIT",
    "ConfigDocument",
    "Section",
    "checked",
]


_CLUSTER_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = "a DNS label (lowercase letters, digits and '-')"


class ScaleDownModel(Section):
    enabled: Flag = Field(description="Whether tidal removes nodes at all.")
    node_unneeded_duration: Wait = Field(description="How long a node must be unneeded before it is removed.")
    unneeded_without_demand: Wait = Field(
        description=(
            "An empty node that no waiting pod could use (none held back by its KAI queue, none of a gang "
            "not yet whole, that would fit it) is removed after this, not nodeUnneededDuration: only pods "
            "that arrive later would have used it. Equal to nodeUnneededDuration turns this off."
        )
    )
    utilization_threshold_bin_packing: Share = Field(
        description="A bin-packing node below this share (0 to 1) of requested cpu and memory is drained and removed."
    )
    utilization_threshold_bin_selection: Share = Field(
        description=(
            "A bin-selection node below this share (0 to 1) of requested cpu and memory is drained and "
            "removed."
        )
    )
    max_parallel_drains: AtLeastOne = Field(description="Most nodes drained at the same time.")
    max_empty_bulk_delete: AtLeastOne = Field(description="Most empty nodes deleted in one reconcile.")
    replace_savings: Share = Field(
        description=(
            "An under-used node whose pods fit nowhere else is drained when new nodes would hold them "
            "for at least this share (0 to 1) of its price less, within the cluster limits; its pods "
            "then get those nodes. No node is replaced while a limit keeps pending pods out. 1 turns "
            "replacing off."
        )
    )
    replace_young_pods_within: Wait = Field(
        description=(
            "A node above its utilization threshold is replaced too when every pod on it started less "
            "than this ago and new nodes would hold them for 20% (or replaceSavings, if lower) less: a "
            "pod the scheduler put on a node bought for a bigger one would otherwise keep it for its "
            "whole run. 0s turns this off."
        )
    )
    multi_node: Flag = Field(
        description=(
            "Under-used nodes whose pods started within replaceYoungPodsWithin are consolidated together: "
            "drained onto the room of the nodes that stay, or one of them replaced by new nodes (Ready "
            "first) that hold the pods of all of them for at least replaceSavings less, the rest following "
            "onto their room. Off by default: in the simulated weeks it cost more than it saved "
            "(bench/results/policy-changes.md)."
        )
    )


class ReservationsModel(Section):
    reserved_nodes: Annotated[str, checked(schema.choice((KEEP, RELEASE)), choice((KEEP, RELEASE)))] = Field(
        description=(
            "keep: a node in a reservation that lasts is never removed by scale-down (removing it saves"
            " nothing); release: it is removed like any other node when empty or when its pods fit "
            "elsewhere."
        )
    )
    drain_before_block_end: Duration = Field(
        description=(
            "Nodes on a Capacity Block are cordoned and drained this long before the block ends (EC2 "
            "terminates them from 30 minutes before the end), their pods planned again like those of a "
            "spot interruption."
        )
    )
    before_block_start: Annotated[
        str, checked(schema.choice((WAIT, ON_DEMAND.value)), choice((WAIT, ON_DEMAND.value)))
    ] = Field(
        description=(
            "Pods that only a Capacity Block not yet started would hold: wait for it (their reason "
            "names its start), or on-demand (they get on-demand nodes meanwhile)."
        )
    )


class DisruptionModel(Section):
    budgets: Annotated[tuple[Budget, ...], checked(budget_list, ANY_LIST)] = Field(
        description=(
            'Most nodes disrupted at once: each budget allows a count ("3") or a share of tidal\'s nodes'
            ' ("10%"), for the methods in its reasons (empty, underutilised, replace, expired, drifted,'
            " unhealthy; all when absent), optionally only from each time a cron schedule (UTC) names, "
            "for a duration. Spot interruptions never wait."
        )
    )
    node_max_lifetime: Wait = Field(
        description=(
            "A node tidal launched this long ago is replaced (a new node Ready first); 0s keeps nodes "
            "for ever."
        )
    )
    drift: Flag = Field(
        description=(
            "Replace nodes launched with nodeLabels, nodeTaints or a provider node template the "
            "configuration no longer has."
        )
    )
    unhealthy_conditions: Annotated[tuple[ConditionRule, ...], checked(condition_rules, ANY_LIST)] = Field(
        description=(
            "Node conditions that make a node unhealthy once held that long, e.g. {type: Ready, status:"
            ' "False", duration: 30m}; such a node is drained without waiting for a replacement.'
        )
    )
    replacement_timeout: Duration = Field(
        description=(
            "A replacement not Ready (GPUs visible) within this is given up: the node keeps its pods "
            "and is left alone for as long."
        )
    )


class SpotModel(Section):
    interruption_cost_hours: Annotated[
        float, checked(schema.number(minimum=0, maximum=8760), {**NUMBER, "minimum": 0, "maximum": 8760})
    ] = Field(
        description=(
            "Hours of work a spot interruption loses for pods that do not say (tidal.dev/interruption-cost):"
            " the time since their last checkpoint. Spot offerings are ranked by their price plus the "
            "expected cost of interruptions: the interruption rate the cloud publishes for the type (AWS "
            "Spot Advisor buckets) x the node's price x (these hours + restartTime). 0 with restartTime 0 "
            "ranks those pods' offerings by price alone."
        )
    )
    restart_time: Wait = Field(
        description=(
            "What an interruption costs beyond the work lost: booting a replacement node and restarting "
            "its pods, counted at the node's price."
        )
    )
    bucket_period: Duration = Field(
        description=(
            "The running time in which a spot type's published share of instances is interrupted: the AWS "
            "Spot Advisor's buckets (under 5%, 5-10%, 10-15%, 15-20%, over 20%) are shares of a month, 730h."
            " A shorter period counts interruptions as more frequent (spot nodes that live a day see more "
            "of them per hour than a month's share says)."
        )
    )


class LeaderElectionModel(Section):
    enabled: Flag = Field(
        description="Whether to elect a leader (turn off only when running a single replica)."
    )
    namespace: Annotated[
        str,
        checked(schema.text(pattern=_CLUSTER_NAME, rule="a DNS label", max_length=63), STRING),
    ] = Field(description="Namespace of the Lease object.")
    lease_name: Annotated[
        str, checked(schema.text(pattern=r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rule="a DNS name"), STRING)
    ] = Field(description="Name of the Lease object.")
    lease_duration: Duration = Field(
        description="How long a leader's lease lasts without renewal before another replica may take over."
    )
    renew_deadline: Duration = Field(
        description=(
            "How long the leader keeps retrying to renew before it gives up leading (shorter than "
            "leaseDuration)."
        )
    )
    retry_period: Annotated[float, checked(schema.duration(minimum=1.0), DURATION)] = Field(
        description="How long replicas wait between attempts to acquire or renew the lease (at least 1s)."
    )


class KubeClientModel(Section):
    qps: Annotated[float, checked(schema.number(minimum=0), {**NUMBER, "minimum": 0})] = Field(
        description="Requests a second, sustained; 0 turns the limit off."
    )
    burst: AtLeastOne = Field(description="Requests that may go out at once after a quiet spell.")


class ConfigDocument(Section):
    """Every top-level option but the providers' sections, which each provider checks with its own model."""

    cloud: Text = Field(
        description="Cloud provider that launches nodes (a tidal.providers plugin name: aws, gcp, azure, simulated)."
    )
    region: Text = Field(description="Cloud region the cluster runs in; every node is launched there.")
    zones: Strings = Field(
        description="Zones nodes may be launched in; an empty list means every zone the cloud offers in the region."
    )
    cluster_name: Annotated[
        str, checked(schema.text(pattern=_CLUSTER_NAME, max_length=63, rule=_DNS_LABEL), STRING)
    ] = Field(
        description=(
            "Name of this cluster (lowercase DNS label); cloud instances are tagged with it to tell "
            "clusters apart."
        )
    )
    labels: Annotated[
        Mapping[str, str],
        checked(schema.string_map(label_syntax=True, label_values=True, selector=True), SELECTOR),
    ] = Field(
        description=(
            'Opt-in pod labels, "key=value,key2=value2" or a map; a pod counts only with all of them '
            '("" = every pod).'
        )
    )
    pod_annotations: Annotated[
        Mapping[str, str], checked(schema.string_map(label_syntax=True, selector=True), SELECTOR)
    ] = Field(
        description=(
            'Opt-in pod annotations, same forms as labels; a pod counts only with all of them ("" = '
            "none needed)."
        )
    )
    scheduler_names: Strings = Field(
        description="Schedulers whose pending pods tidal provisions for; an empty list means pods of any scheduler."
    )
    pending_pod_reason_regexp: Annotated[re.Pattern[str], checked(schema.regexp(), {"type": "string"})] = (
        Field(
            description=(
                "A pending pod counts only if its PodScheduled message matches this regexp. The default "
                "counts every message but KAI's queue holds (starting OverLimit, OverQuota or "
                "NonPreemptibleOverQuota, or mentioning a quota): a new node would not let those pods run. "
                '".*" counts every message (see docs/kai.md).'
            )
        )
    )
    # The two keys whose camelCase keeps an acronym whole, as Luna spells them.
    cluster_gpu_limit: Annotated[
        int | None,
        checked(schema.optional(schema.integer(minimum=0)), nullable(integer(0))),
        Field(alias="clusterGPULimit"),
    ] = Field(
        description=(
            "Most GPUs the whole cluster may have: every node counts, tidal's or not, registered or "
            "still launching. tidal never launches past it (null means no limit)."
        )
    )
    cluster_cpu_limit: Annotated[
        int | None,
        checked(schema.optional(schema.quantity), nullable(QUANTITY)),
        Field(alias="clusterCPULimit"),
    ] = Field(
        description=(
            'Most cpu the whole cluster may have, as a cpu quantity (e.g. "512"): every node counts, '
            "tidal's or not, registered or still launching. tidal never launches past it (null means no"
            " limit)."
        )
    )
    max_nodes: Annotated[
        int | None, checked(schema.optional(schema.integer(minimum=0)), nullable(integer(0)))
    ] = Field(description="Most nodes tidal manages at once; null means no limit.")
    max_node_cost_per_hour: Annotated[
        float | None,
        checked(schema.optional(schema.number(positive=True)), nullable({**NUMBER, "exclusiveMinimum": 0})),
    ] = Field(description="Most a single node may cost, in USD per hour; null means no limit.")
    max_fallback_price_ratio: Annotated[
        float | None,
        checked(schema.optional(schema.number(above=1)), nullable({**NUMBER, "exclusiveMinimum": 1})),
    ] = Field(
        description=(
            "Most a fallback may cost, as a multiple of the price of the offering chosen for a node: "
            "when the cloud has no capacity for the chosen one, a launch tries only fallbacks up to "
            "this ratio (above 1; null: no cap); past them, tidal plans again with what the cloud "
            "refused left out."
        )
    )
    exact_plan_max_pods: Annotated[int, checked(schema.integer(minimum=0), integer(0))] = Field(
        description=(
            "Most pods a scale-up may put on new nodes for tidal to also work out the exact cheapest nodes "
            "for them (a mixed-integer program solved with OR-Tools CP-SAT, the exact extra) and launch those"
            " instead when they cost less; 0 turns the exact step off. The batch's size and the solver's "
            "deterministic work, not the clock, decide the plan, so it is the same on every machine."
        )
    )
    exact_plan_time_limit: Duration = Field(
        description=(
            "Most wall-clock time the exact step may take, a safety net for a machine far slower than "
            "expected: past it the step gives up and the heuristic's plan stands."
        )
    )
    queue_budgets: Annotated[
        Mapping[str, float],
        checked(
            schema.number_map(item=schema.number(positive=True)),
            {"type": ["object", "null"], "additionalProperties": {**NUMBER, "exclusiveMinimum": 0}},
        ),
    ] = Field(
        description=(
            "Most USD per hour the nodes serving each KAI queue may cost, e.g. {research: 20.0}; queues"
            " not named have no budget. A node serves the queues of its pods, each paying the share of "
            "its price that its pods' GPU requests are of all GPUs requested there (cpu requests on a "
            "node without GPU pods). Like clusterGPULimit it holds new nodes back: a node opened for a "
            "queue's pods counts its whole price against that queue, and pods whose queue it would take"
            " past its budget wait, with a reason naming the queue and the budget."
        )
    )
    capacity_types: Annotated[
        tuple[str, ...],
        checked(
            schema.string_list(item=schema.choice(CAPACITY_TYPES), non_empty=True, unique=True),
            {
                "type": "array",
                "items": choice(CAPACITY_TYPES),
                "minItems": 1,
                "uniqueItems": True,
            },
        ),
    ] = Field(
        description=(
            "Capacity types tidal may launch, most preferred first: spot, on-demand, reserved. Reserved"
            " capacity (capacity reservations and Capacity Blocks the cloud section selects) is used "
            "first wherever it is listed: it is paid for already (see docs/reservations.md)."
        )
    )
    spot: SpotModel = Field(
        description=(
            "Ranking spot offerings by their expected cost with interruptions counted (see "
            "docs/spot-interruptions.md); which capacity types a pod may get is still capacityTypes'."
        )
    )
    instance_family_inclusions: Strings = Field(
        description="Instance families tidal may launch (e.g. [g5, p4d]); an empty list means every family."
    )
    instance_family_exclusions: Strings = Field(
        description="Instance families tidal never launches (e.g. [t2, t3])."
    )
    instance_type_regexp: Regexp = Field(
        description=(
            "Instance types tidal may launch: a regexp searched for in the type name, as in Luna; "
            'anchor it to match the whole name (^(g5|p4d)\\. or ^m6i\\.large$). "" means any instance '
            "type."
        )
    )
    gpu_skus: Strings = Field(
        description="GPU models tidal may launch (e.g. [A10G, L4]); an empty list means any GPU model."
    )
    architectures: Annotated[
        tuple[str, ...],
        checked(
            schema.string_list(item=schema.architecture, non_empty=True, unique=True),
            {"type": "array", "items": choice(("amd64", "arm64", "x86_64", "aarch64")), "minItems": 1},
        ),
    ] = Field(description="CPU architectures tidal may launch: amd64, arm64.")
    bin_select_pod_cpu_threshold: Quantity = Field(
        description="Pods requesting at least this much cpu get a dedicated right-sized node (bin-selection)."
    )
    bin_select_pod_memory_threshold: Quantity = Field(
        description="Pods requesting at least this much memory get a dedicated right-sized node (bin-selection)."
    )
    bin_packing_node_cpu: Quantity = Field(
        description="Smallest cpu capacity of the shared nodes that small pods are packed onto (bin-packing)."
    )
    bin_packing_node_memory: Quantity = Field(
        description="Smallest memory capacity of the shared nodes that small pods are packed onto (bin-packing)."
    )
    bin_packing_node_min_pod_count: AtLeastOne = Field(
        description=(
            "Smallest pod capacity (max pods) of the shared nodes that small pods are packed onto "
            "(bin-packing)."
        )
    )
    bin_packing_node_type_regexp: Regexp = Field(
        description=(
            "Instance types used for bin-packing nodes: a regexp searched for in the type name, as in "
            'Luna (anchor it with ^ and $ to match the whole name). "" means any instance type.'
        )
    )
    node_labels: Annotated[
        Mapping[str, str], checked(schema.string_map(label_syntax=True, label_values=True), STRING_MAP)
    ] = Field(description="Extra labels put on every node tidal launches (e.g. {team: ml}).")
    node_taints: Annotated[tuple[Taint, ...], checked(schema.taint_list, ANY_LIST)] = Field(
        description=('Taints put on every node tidal launches, as "key=value:Effect" or "key:Effect".')
    )
    node_tags: Annotated[Mapping[str, str], checked(schema.string_map(label_syntax=False), STRING_MAP)] = (
        Field(description="Extra cloud tags put on every instance tidal launches.")
    )
    daemon_set_overhead: Overhead = Field(
        description=(
            "Resources DaemonSet pods take on each new node (e.g. {cpu: 200m, memory: 256Mi}); null = "
            "from DaemonSets."
        )
    )
    kube_reserved: Overhead = Field(
        description="Resources the kubelet and system reserve on each new node; null uses the cloud's own formula."
    )
    max_pods_per_node: Annotated[int, checked(schema.integer(minimum=1, maximum=1000), integer(1, 1000))] = (
        Field(description="Pods a node can run when the cloud's offering does not say (1 to 1000).")
    )
    gpu_node_taint: Flag = Field(
        description="Taint GPU nodes nvidia.com/gpu=present:NoSchedule so pods that need no GPU stay off them."
    )
    assume_extended_resource_toleration: Flag = Field(
        description=(
            "Plan GPU pods as if the ExtendedResourceToleration admission plugin had given them the GPU"
            " taint's toleration. Pods read from the API server already carry it where the plugin is on"
            " (GKE); leave this off unless your snapshots are written by hand."
        )
    )
    gpu_sharing: Annotated[GpuSharing, checked(sharing_of_gpus, {"type": ["object", "null"]})] = Field(
        description=(
            "How new GPU nodes share their GPUs, as NVIDIA's GPU operator does it when tidal labels "
            "them (see docs/gpu-sharing.md). migLayouts: the nvidia.com/mig.config layout for new nodes"
            " of a GPU model that pods asking for nvidia.com/mig-<profile> get, e.g. {A100: "
            "all-1g.10gb, H100: all-balanced} (whole-GPU pods still get uncut nodes of that model); "
            "migStrategy: the device plugin's MIG strategy, mixed or single; migCustomLayouts: layouts "
            "of your own mig-parted config by name, {name: {1g.10gb: 4, 3g.40gb: 1}}. "
            "devicePluginConfigs: the device plugin's configs by name, as in its ConfigMap "
            "(sharing.timeSlicing or sharing.mps with replicas); devicePluginConfigByModel: the config "
            "every new node of a GPU model runs (label nvidia.com/device-plugin.config), e.g. {T4: "
            "ts4}: such a node offers GPUs x replicas nvidia.com/gpu. dra: true lets tidal launch "
            "NVIDIA GPU nodes for pods whose ResourceClaims ask for GPUs (NVIDIA's DRA driver publishes"
            " their GPUs; nodes are labelled tidal.dev/gpu-allocation: dra)."
        )
    )
    scale_down: ScaleDownModel = Field(
        description="Removing nodes tidal launched once they are empty or under-used."
    )
    reservations: ReservationsModel = Field(
        description="Capacity bought ahead: capacity reservations and Capacity Blocks (see docs/reservations.md)."
    )
    disruption: DisruptionModel = Field(
        description=(
            "Taking nodes out of service beyond scale-down: budgets, and expired, drifted and unhealthy"
            " nodes."
        )
    )
    scan_interval: Duration = Field(description="How often tidal reconciles when nothing has changed.")
    batch_idle_duration: Wait = Field(
        description=(
            "Pending pods are gathered until none has arrived for this long, so they are planned together; a"
            " node that pods arriving later could share or make cheaper waits at most this long after its first"
            " pod was planned onto it, even while pods keep arriving."
        )
    )
    batch_max_duration: Duration = Field(
        description=(
            "Longest the batch window stays open, however often pods keep arriving; when it closes, everything"
            " planned is launched."
        )
    )
    registration_timeout: Duration = Field(
        description="A launched node that has not joined the cluster by then is terminated and replaced."
    )
    gpu_readiness_timeout: Duration = Field(
        description="A GPU node whose GPUs are not allocatable by then is terminated and replaced."
    )
    offering_unavailable_duration: Duration = Field(
        description=(
            "How long an offering (or a quota's whole scope) the cloud refused is skipped before tidal "
            "tries it again; each refusal in a row doubles it, up to 8 times as long."
        )
    )
    gang_launch_timeout: Duration = Field(
        description="A gang whose nodes could not all be launched by then has those launched for it terminated."
    )
    new_node_grace_period: Wait = Field(
        description="A new node is not considered for removal until it is this old."
    )
    max_parallel_launches: AtLeastOne = Field(description="Most node launches in flight at the same time.")
    leader_election: LeaderElectionModel = Field(
        description="Only one tidal replica acts at a time; the others wait on a Lease."
    )
    kube_client: KubeClientModel = Field(
        description=(
            "Client-side rate limit on tidal's requests to the Kubernetes API server (read at start; a "
            "change needs a restart)."
        )
    )
    metrics_address: Annotated[str, checked(schema.address, {"type": "string", "pattern": ":[0-9]+$"})] = (
        Field(
            description=(
                'Address of the Prometheus metrics and health endpoints, host:port (":8080" listens on '
                "every interface)."
            )
        )
    )
    log_format: Annotated[
        str, checked(schema.choice(("auto", "json", "console")), choice(("auto", "json", "console")))
    ] = Field(description="Log format: json, console, or auto (console on a terminal, json otherwise).")
    log_level: Annotated[
        str,
        checked(
            schema.choice(("debug", "info", "warning", "error")),
            choice(("debug", "info", "warning", "error")),
        ),
    ] = Field(description="Least severe log level written: debug, info, warning, error.")


SECTION_MODELS: dict[str, type[Section]] = {
    "scaleDown": ScaleDownModel,
    "spot": SpotModel,
    "reservations": ReservationsModel,
    "disruption": DisruptionModel,
    "leaderElection": LeaderElectionModel,
    "kubeClient": KubeClientModel,
}

# A Luna-style ConfigMap entry for a string option is taken verbatim: read as YAML, a regexp such as
# "[0-9]+" would turn into a list and "a: b" into a map.
VERBATIM = frozenset(
    {
        "cloud",
        "region",
        "clusterName",
        "labels",
        "podAnnotations",
        "pendingPodReasonRegexp",
        "instanceTypeRegexp",
        "binPackingNodeTypeRegexp",
        "metricsAddress",
        "logFormat",
        "logLevel",
    }
)
