"""Drains: PDB refusals are retried, never forced; a drain that cannot finish uncordons and says why."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import ProviderError
from autoscaler.core.disruption.method import Method
from autoscaler.core.model import ON_DEMAND, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.runtime.drain import Drainer, DrainJob, Termination
from autoscaler.runtime.kube.actions import EvictionResult as Result
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import pod

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from autoscaler.core.model import Pod


class FakeActions:
    """Records what the drainer asks of the cluster; evictions answer from a script."""

    def __init__(self, answers: Iterable[Result]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, ...]] = []
        self.on_node: dict[str, Pod] = {}
        self.on_server: Collection[str] | None = None

    def cordon(self, node_name: str, *, taint_key: str = "tidal.dev/disrupted") -> None:
        self.calls.append(("cordon", node_name))

    def uncordon(self, node_name: str, *, taint_key: str = "tidal.dev/disrupted") -> None:
        self.calls.append(("uncordon", node_name))

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Result:
        answer = self.answers.pop(0) if self.answers else Result.BLOCKED
        self.calls.append(("evict", f"{namespace}/{name}", answer.name))
        if answer in (Result.EVICTED, Result.GONE):
            self.on_node = {k: v for k, v in self.on_node.items() if k != f"{namespace}/{name}"}
        return answer

    def delete_node(self, name: str) -> bool:
        self.calls.append(("delete_node", name))
        return True

    def workload_on(self, node_name: str) -> list[str]:
        """The API server's own answer; by default what the cache says too."""
        return sorted(self.on_server if self.on_server is not None else self.on_node)


class FakeProvider:
    name = "fake"

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def terminate(self, instance: Instance) -> None:
        self.terminated.append(instance.id)


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []

    def node(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> None:
        self.sent.append((node_name, reason, message, event_type))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class HeldCordon(FakeActions):
    """Each cordon holds its drain (and its slot in the pool) until ``release`` is set."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__([])
        self.release = release

    def cordon(self, node_name: str, *, taint_key: str = "tidal.dev/disrupted") -> None:
        self.release.wait(10)


class LingeringPods(FakeActions):
    """The API server's answers to successive looks at a node's pods, one list per look."""

    def __init__(self, answers: Iterable[Result], looks: Iterable[list[str]]) -> None:
        super().__init__(answers)
        self.looks = iter(looks)

    def workload_on(self, node_name: str) -> list[str]:
        return next(self.looks)


class RefusingProvider(FakeProvider):
    """A cloud that throttles every termination."""

    def terminate(self, instance: Instance) -> None:
        raise ProviderError("throttled")


INSTANCE = Instance(
    "i-1", "aws:///us-east-1a/i-1", "m6i.large", "us-east-1a", ON_DEMAND, InstanceState.RUNNING
)


def make(
    answers: Iterable[Result],
    pods: Iterable[Pod],
    *,
    actions: FakeActions | None = None,
    provider: FakeProvider | None = None,
) -> tuple[Drainer, FakeActions, FakeProvider, Events]:
    actions = actions if actions is not None else FakeActions(answers)
    actions.on_node = {p.key: p for p in pods}
    clock = Clock()
    provider = provider if provider is not None else FakeProvider()
    events = Events()
    drainer = Drainer(
        actions,
        provider,
        events,
        lambda node: list(actions.on_node.values()),
        max_parallel=2,
        clock=clock,
        sleep=clock.sleep,
        poll_interval=5.0,
    )
    return drainer, actions, provider, events


def test_a_drain_evicts_waits_then_deletes_the_node_and_terminates_the_instance() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, provider, _events = make([Result.EVICTED], [web])
    ok, why = drainer.drain(
        DrainJob("ip-1", (web,), INSTANCE, "utilization 0.10", termination=Termination.UNDERUTILIZED)
    )
    assert (ok, why) == (True, "")
    assert actions.calls == [
        ("cordon", "ip-1"),
        ("evict", "default/web-1", "EVICTED"),
        ("delete_node", "ip-1"),
    ]
    assert provider.terminated == ["i-1"]


def test_a_pdb_refusal_is_retried_until_it_allows() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, _provider, _ = make([Result.BLOCKED, Result.BLOCKED, Result.EVICTED], [web])
    ok, _ = drainer.drain(DrainJob("ip-1", (web,), INSTANCE, "empty", termination=Termination.EMPTY))
    assert ok
    assert [c[2] for c in actions.calls if c[0] == "evict"] == ["BLOCKED", "BLOCKED", "EVICTED"]


def test_a_drain_the_pdb_never_allows_gives_up_uncordons_and_says_why() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, provider, events = make([], [web])
    drainer._run(
        DrainJob("ip-1", (web,), INSTANCE, "utilization 0.10", termination=Termination.UNDERUTILIZED)
    )
    assert ("uncordon", "ip-1") in actions.calls
    assert ("delete_node", "ip-1") not in actions.calls
    assert provider.terminated == []
    assert events.sent[-1][:2] == ("ip-1", "ScaleDownFailed")
    assert "pods still on the node after 1m: default/web-1" in events.sent[-1][2]


def test_a_failed_eviction_aborts_the_drain() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, _, events = make([Result.FAILED], [web])
    drainer._run(DrainJob("ip-1", (web,), INSTANCE, "empty", termination=Termination.EMPTY))
    assert ("uncordon", "ip-1") in actions.calls
    assert "eviction of default/web-1 failed" in events.sent[-1][2]


def test_the_number_of_parallel_drains_is_bounded() -> None:
    release = threading.Event()
    drainer, *_ = make([], [], actions=HeldCordon(release))  # max_parallel=2
    try:
        assert drainer.submit(DrainJob("a", (), None, "empty", termination=Termination.EMPTY))
        assert drainer.submit(DrainJob("b", (), None, "empty", termination=Termination.EMPTY))
        assert not drainer.submit(DrainJob("c", (), None, "empty", termination=Termination.EMPTY))
        assert drainer.active() == {"a", "b"}
    finally:
        release.set()
        drainer.shutdown()


def finished(drainer: Drainer, done: list[tuple[str, str, str]] | None = None) -> list[tuple[str, str, str]]:
    """Record what on_done reports: (node, termination reason label, outcome)."""
    done = [] if done is None else done
    drainer.on_done = lambda job, outcome, why: done.append((job.node, job.termination, outcome))
    return done


def test_every_finished_drain_reports_its_outcome_with_a_bounded_reason() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, *_ = make([Result.EVICTED], [web])
    done = finished(drainer)
    drainer._run(
        DrainJob("ip-1", (web,), INSTANCE, "spot interruption", termination=Termination.SPOT_INTERRUPTION)
    )
    drainer, *_ = make([], [web])
    finished(drainer, done)
    drainer._run(
        DrainJob(
            "ip-1",
            (web,),
            INSTANCE,
            "utilization 0.10, 1 pods can move; unneeded for 5m",
            termination=Termination.of(Method.UNDERUTILISED),
        )
    )
    assert done == [
        ("ip-1", "spot_interruption", "success"),
        ("ip-1", "underutilized", "abandoned"),
    ]


@pytest.mark.parametrize(
    ("method", "label"),
    [
        (Method.INTERRUPTED, "spot_interruption"),
        (Method.EMPTY, "empty"),
        (Method.UNDERUTILISED, "underutilized"),
        (Method.REPLACE, "replaced"),
        (Method.EXPIRED, "expired"),
        (Method.DRIFTED, "drifted"),
        (Method.UNHEALTHY, "unhealthy"),
        ("", "drain"),
    ],
)
def test_the_method_that_decided_a_removal_names_its_termination_label(
    method: Method | str, label: str
) -> None:
    assert Termination.of(method) == label
    assert Termination.of(method).value == label


def test_a_node_removed_whose_instance_would_not_terminate_is_an_error_outcome() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, _, _ = make([Result.EVICTED], [web], provider=RefusingProvider())
    done = finished(drainer)
    drainer._run(DrainJob("ip-1", (web,), INSTANCE, "empty", termination=Termination.EMPTY))
    assert ("delete_node", "ip-1") in actions.calls
    assert ("uncordon", "ip-1") not in actions.calls  # the Node is gone; the orphan cleanup retries
    assert done == [("ip-1", "empty", "error")]


def test_a_drain_stops_acting_the_moment_its_replica_stops_leading() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    db = pod_from_dict(pod("db-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, provider, events = make([Result.BLOCKED, Result.EVICTED, Result.EVICTED], [web, db])
    leading = iter([True, True, True, False])  # cordon, evict web, evict db, then the lease is gone
    drainer.leading = lambda: next(leading)
    done = finished(drainer)
    drainer._run(
        DrainJob("ip-1", (web, db), INSTANCE, "utilization 0.10", termination=Termination.UNDERUTILIZED)
    )
    # One eviction round ran; before the retry of the refused pod the lease was gone: nothing more, not even
    # the uncordon (the new leader owns the node now), and no event.
    assert actions.calls == [
        ("cordon", "ip-1"),
        ("evict", "default/web-1", "BLOCKED"),
        ("evict", "default/db-1", "EVICTED"),
    ]
    assert provider.terminated == []
    assert [e[1] for e in events.sent] == ["ScaleDown"]
    assert done == [("ip-1", "underutilized", "stopped")]
    assert drainer.active() == set()


def test_a_replica_that_cannot_tell_whether_it_leads_does_not_act() -> None:
    drainer, actions, _, _ = make([], [])

    def unknown() -> bool:
        raise RuntimeError("lease unreadable")

    drainer.leading = unknown
    done = finished(drainer)
    drainer._run(DrainJob("ip-1", (), INSTANCE, "empty", termination=Termination.EMPTY))
    assert actions.calls == []
    assert done == [("ip-1", "empty", "stopped")]


def test_a_leader_lost_between_deleting_the_node_and_terminating_leaves_the_instance_alone() -> None:
    drainer, actions, provider, _ = make([], [])
    leading = iter([True, True, False])  # cordon, delete node, (terminate)
    drainer.leading = lambda: next(leading)
    done = finished(drainer)
    drainer._run(DrainJob("ip-1", (), INSTANCE, "empty", termination=Termination.EMPTY))
    assert actions.calls == [("cordon", "ip-1"), ("delete_node", "ip-1")]
    assert provider.terminated == []
    assert done == [("ip-1", "empty", "stopped")]


def test_raising_the_parallel_drain_limit_takes_effect_for_new_drains() -> None:
    drainer, *_ = make([], [])
    drainer._active = {"a", "b"}
    assert not drainer.submit(DrainJob("c", (), None, "empty", termination=Termination.EMPTY))
    drainer.max_parallel = 3
    drainer.leading = lambda: False  # the submitted drain stops at once: this test only counts slots
    assert drainer.submit(DrainJob("c", (), None, "empty", termination=Termination.EMPTY))
    drainer.max_parallel = 1
    assert not drainer.submit(
        DrainJob("d", (), None, "empty", termination=Termination.EMPTY)
    )  # two still run: no new one below the limit
    drainer.shutdown()


def test_a_pod_bound_during_the_drain_that_only_the_api_server_knows_keeps_the_node() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    drainer, actions, provider, _ = make([Result.EVICTED], [web])
    actions.on_server = {"default/late-0": None}  # bound after the snapshot; the cache has not seen it yet
    ok, why = drainer.drain(
        DrainJob("ip-1", (web,), INSTANCE, "utilization 0.10", termination=Termination.UNDERUTILIZED)
    )
    assert (ok, why) == (False, "pod default/late-0 was scheduled to it during the drain")
    assert ("delete_node", "ip-1") not in actions.calls
    assert provider.terminated == []


def test_an_evicted_pod_the_api_server_still_holds_is_waited_for_before_the_node_goes() -> None:
    web = pod_from_dict(pod("web-1", node_name="ip-1", phase="Running", message=None))
    looks = [["default/web-1"], ["default/web-1"], []]  # gone on the third look
    drainer, actions, _, _ = make([Result.EVICTED], [web], actions=LingeringPods([Result.EVICTED], looks))
    ok, _ = drainer.drain(
        DrainJob("ip-1", (web,), INSTANCE, "utilization 0.10", termination=Termination.UNDERUTILIZED)
    )
    assert ok
    assert isinstance(drainer.clock, Clock)
    assert drainer.clock.now == 1010.0  # two polls of 5s each before the last look found it gone
    assert actions.calls[-1] == ("delete_node", "ip-1")
