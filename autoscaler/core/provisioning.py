"""ProvisioningRequests (``autoscaling.x-k8s.io``): capacity a queue such as Kueue asks for before it creates
the pods, answered through the request's conditions as cluster-autoscaler answers them.

Two classes are served. ``check-capacity.autoscaling.x-k8s.io`` asks whether the pods fit in free room on the
nodes that exist or are launching; nothing is launched for it. ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``
asks for the room all together: its pods are one gang, placed whole onto free room and new nodes or not at
all. Either way, once ``Provisioned`` is true the room is *booked* for the booking time (ten minutes after
``Provisioned`` turned true, as in cluster-autoscaler): the request's pods that have not arrived yet are
placed before any other pod, on the nodes that exist or launch only, so no other pod is planned into their
room and those nodes are not taken away; the pods that do arrive (annotated
``autoscaling.x-k8s.io/consume-provisioning-request: <name>``) take their place. Booked room that is gone (a
node reclaimed, a stranger scheduled into it) is answered ``CapacityRevoked``.

The request's pods count like any pod against ``clusterGPULimit`` and the KAI queues of their templates.
Everything here is pure: the request, its PodTemplates and the time in, the conditions to write out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.core.demand import Claim, Demand, Gang
from autoscaler.core.model import (
    OwnerRef,
    Pod,
    PodTemplate,
    ProvisioningRequest,
    Snapshot,
    StatusCondition,
)
from autoscaler.core.planning.decisions import LaunchPlan

__all__ = [
    "ATOMIC_SCALE_UP",
    "BOOKING_SECONDS",
    "CHECK_CAPACITY",
    "CONSUME_ANNOTATIONS",
    "Answer",
    "Asked",
    "Requests",
    "answer",
    "merge_conditions",
    "requested",
]

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CLASSES = (CHECK_CAPACITY, ATOMIC_SCALE_UP)
# The pod annotation naming the request a pod consumes; cluster-autoscaler still reads the older spelling.
CONSUME_ANNOTATIONS = (
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
)
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
TERMINAL = (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)

BOOKING_SECONDS = 600.0  # cluster-autoscaler's default booking time
# A capacity check that never found room fails after a week, as cluster-autoscaler's does.
CHECK_EXPIRY_SECONDS = 7 * 24 * 3600.0
VALID_UNTIL = "ValidUntilSeconds"  # atomic scale-up: how long after creation to keep trying
NO_RETRY = "noRetry"  # check-capacity: "true" answers Failed instead of retrying


class Phase(enum.StrEnum):
    """Where a request planned in this reconcile stands."""

    CHECK = "check"  # a capacity check not yet answered yes
    ATOMIC = "atomic"  # an atomic scale-up not yet provisioned
    BOOKED = "booked"  # provisioned: its room is held for the pods still to come


@dataclass(frozen=True, slots=True)
class Asked:
    """A request planned in this reconcile: its phase and the gang of its pods still to come."""

    request: ProvisioningRequest
    phase: Phase
    gang: Gang


@dataclass(frozen=True, slots=True)
class Answer:
    """What tidal says of one request: the whole list of conditions to write (``conditions``). When nodes are
    launched for it (``gang`` set), those conditions hold once every launch is accepted, and ``refused``
    otherwise. ``unsupported`` is the warning for a class tidal does not serve (no condition is written on
    it: another autoscaler may serve it)."""

    request: ProvisioningRequest
    conditions: tuple[StatusCondition, ...]
    gang: str = ""
    refused: tuple[StatusCondition, ...] = ()
    unsupported: str = ""

    @property
    def changed(self) -> bool:
        """The conditions differ from those the request carries (times aside)."""
        return _shape(self.conditions) != _shape(self.request.conditions)


@dataclass(frozen=True, slots=True)
class Requests:
    """This reconcile's requests: those to plan (booked first, then by age), and those answered already."""

    asked: tuple[Asked, ...] = ()
    settled: tuple[Answer, ...] = ()

    @property
    def gangs(self) -> list[Gang]:
        return [a.gang for a in self.asked]


NO_REQUESTS = Requests()


def _shape(conditions: Iterable[StatusCondition]) -> list[tuple[str, str, str, str]]:
    return sorted((c.type, c.status, c.reason, c.message) for c in conditions)


def merge_conditions(
    current: Sequence[StatusCondition],
    updates: Iterable[tuple[str, str, str, str]],
    now: float,
    generation: int = 0,
) -> tuple[StatusCondition, ...]:
    """``current`` with each ``(type, status, reason, message)`` of ``updates`` set; a condition keeps its
    transition time while its status stays the same (``metav1.Condition`` semantics)."""
    out = {c.type: c for c in current}
    order = [c.type for c in current]
    for kind, status, reason, message in updates:
        old = out.get(kind)
        since = old.last_transition if old is not None and old.status == status else now
        out[kind] = StatusCondition(kind, status, reason, message, since, generation)
        if kind not in order:
            order.append(kind)
    return tuple(out[k] for k in order)


def _true(request: ProvisioningRequest, kind: str) -> bool:
    c = request.condition(kind)
    return c is not None and c.status == "True"


def consumer_of(pod: Pod) -> str:
    """The name of the request a pod consumes, "" when none."""
    return next((pod.annotations[a] for a in CONSUME_ANNOTATIONS if pod.annotations.get(a)), "")


def _consumers(pods: Iterable[Pod]) -> dict[tuple[str, str], list[Pod]]:
    out: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods:
        name = consumer_of(pod)
        if name and not pod.finished and not pod.terminating:
            out.setdefault((pod.namespace, name), []).append(pod)
    return out


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def requested(snapshot: Snapshot, now: float) -> Requests:
    """Sort the snapshot's ProvisioningRequests into those to plan now (each as a gang of the pods it still
    waits for) and those answered without a plan (expired, failed, unreadable, of a class tidal does not
    serve). Requests already failed, expired or revoked are left alone."""
    if not snapshot.provisioning_requests:
        return NO_REQUESTS
    templates = {(t.namespace, t.name): t for t in snapshot.pod_templates}
    consumers = _consumers(snapshot.pods)
    asked: list[Asked] = []
    settled: list[Answer] = []
    for pr in sorted(snapshot.provisioning_requests, key=lambda r: (r.created, r.namespace, r.name)):
        if any(_true(pr, kind) for kind in TERMINAL):
            continue
        found = _ask(pr, templates, consumers.get((pr.namespace, pr.name), []), now)
        if isinstance(found, Answer):
            if found.changed or found.unsupported:
                settled.append(found)
        elif found is not None:
            asked.append(found)
    asked.sort(key=lambda a: a.phase != Phase.BOOKED)  # stable: by age within each
    return Requests(tuple(asked), tuple(settled))


def _fail(pr: ProvisioningRequest, reason: str, message: str, now: float) -> Answer:
    updates = [(FAILED, "True", reason, message)]
    if pr.condition(ACCEPTED) is None:
        updates.insert(0, (ACCEPTED, "True", "Accepted", ACCEPTED_MESSAGE))
    return Answer(pr, merge_conditions(pr.conditions, updates, now, pr.generation))


ACCEPTED_MESSAGE = "ProvisioningRequest is accepted by tidal"


def _ask(
    pr: ProvisioningRequest,
    templates: Mapping[tuple[str, str], PodTemplate],
    consumers: Sequence[Pod],
    now: float,
) -> Asked | Answer | None:
    if pr.class_name not in CLASSES:
        return Answer(
            pr,
            pr.conditions,
            unsupported=(
                f"provisioningClassName {pr.class_name!r} is not served by tidal (it serves "
                f"{CHECK_CAPACITY} and {ATOMIC_SCALE_UP}); tidal leaves this request to whatever serves it"
            ),
        )
    if pr.unreadable:
        return _fail(
            pr, "InvalidProvisioningRequest", f"tidal cannot read this request: {pr.unreadable}", now
        )
    pods: list[Pod] = []
    for i, pod_set in enumerate(pr.pod_sets):
        template = templates.get((pr.namespace, pod_set.template))
        if template is None:
            # Kueue creates the PodTemplates with the request; the cache may not have them yet.
            message = f"waiting for PodTemplate {pr.namespace}/{pod_set.template} (podSets[{i}]) to exist"
            updates = [(ACCEPTED, "True", "Accepted", ACCEPTED_MESSAGE)]
            if not _true(pr, PROVISIONED):
                updates.append((PROVISIONED, "False", "PodTemplateNotFound", message))
            return Answer(pr, merge_conditions(pr.conditions, updates, now, pr.generation))
        if template.pod is None:
            return _fail(
                pr,
                "FailedToCreatePods",
                f"PodTemplate {template.namespace}/{template.name} (podSets[{i}]) cannot be read: {template.error}",
                now,
            )
        pods += [_pod(pr, template.pod, i, j) for j in range(pod_set.count)]
    provisioned = pr.condition(PROVISIONED)
    if provisioned is not None and provisioned.status == "True":
        since = provisioned.last_transition if provisioned.last_transition is not None else pr.created
        if now - since >= BOOKING_SECONDS:
            return Answer(
                pr,
                merge_conditions(
                    pr.conditions,
                    [(BOOKING_EXPIRED, "True", "CapacityReservationTimeExpired", BOOKING_EXPIRED_MESSAGE)],
                    now,
                    pr.generation,
                ),
            )
        waiting = _unconsumed(pods, consumers)
        if not waiting:
            return None  # every pod arrived: the room is theirs
        return Asked(pr, Phase.BOOKED, Gang(gang_key(pr), len(waiting), tuple(waiting), Claim.BOOKED))
    if pr.class_name == CHECK_CAPACITY:
        if now - pr.created >= CHECK_EXPIRY_SECONDS:
            return _fail(
                pr, "Expired", "ProvisioningRequest is expired: no capacity was found within 7 days", now
            )
        return Asked(pr, Phase.CHECK, Gang(gang_key(pr), len(pods), tuple(pods), Claim.FREE))
    valid = pr.parameters.get(VALID_UNTIL, "")
    limit = _seconds(valid) if valid else None
    if valid and limit is None:
        return _fail(
            pr,
            "InvalidProvisioningRequest",
            f"parameters.{VALID_UNTIL} {valid!r} is not a number of seconds",
            now,
        )
    if limit is not None and now - pr.created >= limit:
        return _fail(
            pr,
            "Expired",
            f"ProvisioningRequest is expired: not provisioned within {VALID_UNTIL} {valid}",
            now,
        )
    return Asked(pr, Phase.ATOMIC, Gang(gang_key(pr), len(pods), tuple(pods), Claim.NEW))


BOOKING_EXPIRED_MESSAGE = "Capacity reservation time is expired"


def gang_key(pr: ProvisioningRequest) -> str:
    """How a request's pods are named as one gang in plans, logs and launches."""
    return f"provisioningrequest:{pr.namespace}/{pr.name}"


def _pod(pr: ProvisioningRequest, template: Pod, i: int, j: int) -> Pod:
    """One of the pods a request stands for, as its template describes it; named after the request (the
    ``-<podSet>-<index>`` suffix cluster-autoscaler uses), never a pod that exists."""
    annotations = dict(template.annotations)
    annotations[CONSUME_ANNOTATIONS[0]] = pr.name
    annotations[CLASS_ANNOTATION] = pr.class_name
    return replace(
        template,
        namespace=pr.namespace,
        name=f"{pr.name}-provreq-{i}-{j}",
        uid=f"{pr.uid or pr.key}/{i}/{j}",
        created=pr.created,
        annotations=annotations,
        node_name="",
        phase="Pending",
        scheduled=None,
        owner=OwnerRef("ProvisioningRequest", pr.name, True),
    )


def _unconsumed(pods: Sequence[Pod], consumers: Sequence[Pod]) -> list[Pod]:
    """The request's pods not yet stood in for by a pod that consumes it: each consumer takes the place of
    one pod of the same requests (else of any)."""
    left = list(pods)
    for consumer in sorted(consumers, key=lambda p: p.key):
        if not left:
            break
        same = next((k for k, p in enumerate(left) if p.requests == consumer.requests), len(left) - 1)
        left.pop(same)
    return left


def answer(requests: Requests, demand: Demand, launch: LaunchPlan, now: float) -> tuple[Answer, ...]:
    """The conditions each request gets from this plan, with those settled without one."""
    ignored = {i.pod: i.detail for i in demand.ignored}
    unplaced = {u.pod: u.reason for u in launch.unplaced}
    absorbed = {a.pod: a.node for a in launch.absorbed}
    launched: dict[str, list[str]] = {}
    for la in launch.launches:
        if la.gang:
            launched.setdefault(la.gang, []).append(la.offering.instance_type)
    out = list(requests.settled)
    for a in requests.asked:
        out += _answer_one(a, ignored, unplaced, absorbed, launched.get(a.gang.key, []), now)
    return tuple(out)


def _answer_one(
    a: Asked,
    ignored: Mapping[str, str],
    unplaced: Mapping[str, str],
    absorbed: Mapping[str, str],
    launched: Sequence[str],
    now: float,
) -> list[Answer]:
    pr, keys = a.request, [p.key for p in a.gang.pods]
    why = next((ignored[k] for k in keys if k in ignored), "") or next(
        (unplaced[k] for k in keys if k in unplaced), ""
    )
    accepted = [] if _true(pr, ACCEPTED) else [(ACCEPTED, "True", "Accepted", ACCEPTED_MESSAGE)]

    def conditions(*updates: tuple[str, str, str, str]) -> tuple[StatusCondition, ...]:
        return merge_conditions(pr.conditions, [*accepted, *updates], now, pr.generation)

    def one(*updates: tuple[str, str, str, str]) -> list[Answer]:
        found = Answer(pr, conditions(*updates))
        return [found] if found.changed else []

    if a.phase == Phase.BOOKED:
        if not why:
            return one()
        return one((CAPACITY_REVOKED, "True", "CapacityIsRevoked", f"the booked capacity is gone: {why}"))
    if not why and all(k in absorbed for k in keys):
        nodes = sorted(set(absorbed.values()) & {absorbed[k] for k in keys})
        message = f"Capacity is found in the cluster: {len(keys)} pods fit on {', '.join(nodes)}"
        return one((PROVISIONED, "True", "CapacityIsFound", message))
    if not why and a.phase == Phase.ATOMIC and launched:
        counts: dict[str, int] = {}
        for t in launched:
            counts[t] = counts.get(t, 0) + 1
        shapes = ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))
        return [
            Answer(
                pr,
                conditions(
                    (
                        PROVISIONED,
                        "True",
                        "CapacityIsProvisioned",
                        f"Capacity is provisioned: launching {shapes}",
                    )
                ),
                gang=a.gang.key,
                refused=conditions(
                    (
                        PROVISIONED,
                        "False",
                        "CapacityIsNotFound",
                        f"the cloud refused a launch of {shapes}; tidal will try again",
                    )
                ),
            )
        ]
    why = why or "no room for every pod"
    if a.phase == Phase.CHECK and pr.parameters.get(NO_RETRY) == "true":
        return one((FAILED, "True", "CapacityIsNotFound", f"Capacity is not found: {why}"))
    return one(
        (PROVISIONED, "False", "CapacityIsNotFound", f"Capacity is not found, tidal will try again: {why}")
    )
