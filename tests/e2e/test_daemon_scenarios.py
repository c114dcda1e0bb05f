"""The daemon end to end: fake API server + scheduler/KAI stand-ins + simulated cloud + `tidal run` pieces."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING

import pytest

from autoscaler.runtime.kube.leader import LeaderElector
from tests.builders import pdb
from tests.e2e.harness import cluster, gpu_pod, podgroup

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from autoscaler.cloud import CloudProvider
    from autoscaler.core.offering import Instance
    from autoscaler.runtime.daemon import Daemon
    from tests.e2e.harness import Cluster

pytestmark = pytest.mark.slow


class CrashedElector(LeaderElector):
    """A leader whose election loop has died: a round renews nothing (and so never releases the lease)."""

    crashed = threading.Event()  # set by the first round that ran crashed

    def try_acquire_or_renew(self) -> bool:
        CrashedElector.crashed.set()
        return False


def test_a_restart_in_the_middle_of_a_launch_does_not_launch_twice(tmp_path: Path) -> None:
    with cluster(tmp_path, simulated={"launchDelay": "2s"}) as c:
        first = c.daemon(identity="tidal-a")
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: len(c.provider.instances()) == 1)
        first.stop()
        c.daemons.remove(first)
        second = c.daemon(identity="tidal-b")
        c.run_until(lambda: c.running() == 1, daemons=[second])
        assert len(c.provider.instances()) == 1


def test_a_reload_of_start_up_options_applies_the_rest_and_says_a_restart_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from structlog.testing import capture_logs

    from tests.e2e.harness import base_config

    monkeypatch.setenv("POD_NAME", "tidal-7d9f-abcde")
    monkeypatch.setenv("POD_NAMESPACE", "tidal-system")
    with cluster(tmp_path) as c:
        d = c.daemon()
        started = d.config
        changed = base_config(
            clusterGPULimit=3,
            clusterName="elsewhere",
            leaderElection={"leaseName": "tidal-2"},
            simulated={"launchDelay": "5s"},
        )
        c.write_config(changed)
        with capture_logs() as logs:
            assert d.watcher is not None and d.watcher.check()
        assert d.config.cluster_gpu_limit == 3  # applied at once
        # Read only at start: they keep their running values, so the provider and the lease stay consistent.
        assert d.config.cluster_name == started.cluster_name == "e2e"
        assert d.config.leader_election == started.leader_election
        assert d.config.providers == started.providers
        keys = ["clusterName", "leaderElection.leaseName", "simulated.launchDelay"]
        assert [e["keys"] for e in logs if e["event"] == "config_restart_required"] == [keys]
        text = d.metrics.render().decode()
        assert 'tidal_config_reloads_total{outcome="restart_required"} 1.0' in text
        assert "tidal_config_last_reload_success 1.0" in text
        assert d.event_queue.flush()  # events are sent in the background
        [event] = [e for e in c.api.list("events", "tidal-system") if e["reason"] == "ConfigRestartRequired"]
        assert "except clusterName, leaderElection.leaseName, simulated.launchDelay" in event["message"]


def test_api_faults_on_lists_watches_and_writes_are_survived(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        watch_fault = c.api.faults.push(500, count=2, verbs={"watch"}, resource="pods")
        list_fault = c.api.faults.push(500, count=1, verbs={"list"}, resource="pods")
        status_fault = c.api.faults.push(500, count=1, verbs={"update"}, resource="configmaps")
        # The API server restarts: every watch ends. The pod informer's reconnects fail twice; meanwhile a
        # pod arrives and the history is compacted, so when a watch finally opens it answers 410 and the
        # informer must relist (and that list fails once too). Only then can tidal see the pod.
        c.api.drop_watches()
        c.wait_for(lambda: watch_fault.hits == 1)  # disconnected, backing off: the old stream saw nothing
        c.api.create(gpu_pod("infer-0"))
        c.api.compact()
        c.run_until(lambda: c.running() == 1)
        assert (watch_fault.hits, list_fault.hits, status_fault.hits) == (2, 1, 1)
        assert len(c.api.faults) == 0
        assert len(c.provider.instances()) == 1
        c.step()
        assert d.controller.last is not None and not d.controller.last.error
        assert d.cache.stats()["pods"]["relists"] >= 1
        assert c.api.get("configmaps", "tidal-system", "tidal-status") is not None  # written again later
        text = d.metrics.render().decode()
        for verb, resource, code, n in [
            ("watch", "pods", "500", 2),
            ("watch", "pods", "410", 1),
            ("list", "pods", "500", 1),
            ("update", "configmaps", "500", 1),
        ]:
            assert (
                f'tidal_kube_api_errors_total{{code="{code}",resource="{resource}",verb="{verb}"}} {n}.0'
                in text
            )


def test_dry_run_launches_nothing_and_says_what_it_would_do(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon(dry_run=True)
        c.api.create(gpu_pod("infer-0"))
        for _ in range(4):
            c.step()
        assert c.provider.instances() == []
        assert d.controller.last is not None and d.controller.last.plan is not None
        assert d.controller.last.plan.launch.launches
        events = [e for e in c.api.list("events") if e.get("reason") == "TriggeredScaleUp"]
        assert events and events[0]["message"].startswith("would launch g4dn.xlarge")
        # tidal's own status object is written in dry-run too, marked so.
        status = c.api.get("configmaps", "tidal-system", "tidal-status")
        assert status is not None and status["data"]["dryRun"] == "true"
        assert "g4dn.xlarge" in status["data"]["status"]


def cpu_pod(name: str, cpu: str, **labels: str) -> dict[str, Any]:
    obj = gpu_pod(name)
    obj["metadata"]["labels"].update(labels)
    obj["metadata"]["ownerReferences"][0].update({"kind": "ReplicaSet", "apiVersion": "apps/v1"})
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    return obj


def test_an_underutilised_node_is_drained_once_its_pdb_allows_and_its_pods_fit_elsewhere(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        c.api.create(cpu_pod("big-a", "3"))
        c.api.create(cpu_pod("big-b", "3"))
        c.run_until(lambda: c.running() == 2)
        assert len(c.nodes()) == 2
        c.api.create(cpu_pod("small-0", "500m", app="small"))
        c.run_until(lambda: c.running() == 3)
        host = next(p["spec"]["nodeName"] for p in c.pods() if p["metadata"]["name"] == "small-0")
        big_there = next(
            p["metadata"]["name"]
            for p in c.pods()
            if p["spec"].get("nodeName") == host and p["metadata"]["name"].startswith("big")
        )
        c.api.create(pdb("small", match={"app": "small"}, allowed=0))
        c.scheduler.finish("default", big_there)
        for _ in range(8):
            c.step()
            time.sleep(0.2)
        assert d.controller.last is not None and d.controller.last.plan is not None
        blocked = {b.node: b.reason for b in d.controller.last.plan.removal.blocked}
        assert blocked[host] == "pod default/small-0 is protected by PodDisruptionBudget default/small"
        assert len(c.nodes()) == 2
        c.api.patch_status("poddisruptionbudgets", "default", "small", {"disruptionsAllowed": 1})
        c.run_until(lambda: len(c.nodes()) == 1, timeout=30)
        assert all(n.name != host for n in c.nodes())
        c.wait_for(lambda: [i.state for i in c.provider.instances() if i.id == host] == ["terminated"])
        c.wait_for(
            lambda: (
                'tidal_terminations_total{outcome="success",reason="underutilized"} 1.0'
                in d.metrics.render().decode()
            )
        )


def test_metrics_and_the_status_configmap_report_the_fleet(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        d.reconcile()
        text = d.metrics.render().decode()
        assert "tidal_cluster_gpus 1.0" in text
        assert (
            'tidal_launches_total{capacity_type="on-demand",instance_type="g4dn.xlarge",outcome="success"'
            in text
        )
        status = c.api.get("configmaps", "tidal-system", "tidal-status")
        assert status is not None and '"nodes"' in status["data"]["status"]


def test_a_capacity_error_on_the_cheapest_offering_falls_back_in_the_same_reconcile(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        d.reconcile()  # the offerings tidal caches still show g4dn.xlarge available
        c.provider.fail_capacity(instance_type="g4dn.xlarge")
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)
        result = d.reconcile()
        assert result.plan is not None
        assert result.plan.launch.launches[0].offering.instance_type == "g4dn.xlarge"
        launched = [o.instance.instance_type for o in result.launched if o.instance is not None]
        assert len(launched) == 1 and launched[0] != "g4dn.xlarge"


def test_a_spot_interruption_notice_drains_the_node_and_plans_its_replacement_at_once(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        doomed = c.provider.instances()[0]
        time.sleep(0.5)  # the daemon's watch catches up with the binding before the notice arrives
        d.reconcile()
        c.provider.warn_interruption(doomed.id)
        result = d.reconcile()
        assert result.drains_started == [doomed.id]
        replacements = [o.instance for o in result.launched if o.instance is not None]
        assert len(replacements) == 1 and replacements[0].id != doomed.id
        # The Job controller recreates the evicted pod at once (not after the doomed node is gone): it lands
        # on the replacement, with no further launch.
        c.wait_for(lambda: c.api.get("pods", "default", "infer-0") is None)
        c.api.create(gpu_pod("infer-0-retry"))
        c.run_until(lambda: c.running() == 1 and all(n.name != doomed.id for n in c.nodes()), timeout=30)
        assert sorted(i.id for i in c.provider.instances()) == sorted([doomed.id, replacements[0].id])
        c.wait_for(
            lambda: (
                'tidal_terminations_total{outcome="success",reason="spot_interruption"} 1.0'
                in d.metrics.render().decode()
            )
        )


def test_a_new_node_is_kept_for_its_grace_period_even_when_its_pod_went_away(tmp_path: Path) -> None:
    with cluster(tmp_path, newNodeGracePeriod="1m") as c:
        c.daemon()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: len(c.provider.instances()) == 1)
        c.api.delete("pods", "default", "infer-0")  # e.g. the job was cancelled while its node launched
        c.run_until(lambda: any(n.gpus for n in c.nodes()))
        deadline = time.monotonic() + 2.5  # well past nodeUnneededDuration (1s)
        while time.monotonic() < deadline:
            c.step()
            time.sleep(0.1)
        assert len(c.nodes()) == 1


def test_an_unschedulable_pod_wakes_the_loop_and_a_node_only_it_can_use_is_launched_before_the_window_closes(
    tmp_path: Path,
) -> None:
    # The scan interval and the batch window are far away: only the pod's PodScheduled=False event can make
    # this reconcile happen, and only a launch that need not wait for the window can come of it this soon.
    with cluster(tmp_path, scanInterval="5m", batchIdleDuration="30s", batchMaxDuration="60s") as c:
        d = c.daemon()
        loop = threading.Thread(target=d.run_forever, name="tidal-loop", daemon=True)
        loop.start()
        c.api.create(gpu_pod("infer-0"))
        time.sleep(0.5)
        assert d.controller.last is None  # a pod without a scheduling verdict is no trigger
        c.scheduler.step()  # the scheduler finds no node and marks the pod unschedulable
        marked = time.monotonic()
        c.wait_for(lambda: d.controller.last is not None and bool(d.controller.last.launched), timeout=20)
        assert time.monotonic() - marked < 20
        assert d.controller.last is not None
        assert [o.instance is not None for o in d.controller.last.launched] == [True]
        assert d.batcher.is_open()  # the window it opened is still gathering pods
        d.stop()
        loop.join(timeout=5)
        assert not loop.is_alive()


def lease_time(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


class Recorded:
    """A provider seen through one replica's drainer: records what that replica asks the cloud to do."""

    def __init__(self, inner: CloudProvider, acted: list[tuple[float, str]]) -> None:
        self._inner, self._acted = inner, acted

    def terminate(self, instance: Instance) -> None:
        self._acted.append((time.monotonic(), "terminate"))
        return self._inner.terminate(instance)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_crashed_leaders_lease_expires_and_its_drain_stops_before_the_standby_acts(tmp_path: Path) -> None:
    election = {"enabled": True, "leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "1s"}
    with cluster(tmp_path, leaderElection=election) as c:
        a, b = c.daemon(identity="tidal-a"), c.daemon(identity="tidal-b")
        c.wait_for(lambda: a.leads() or b.leads())
        leader, standby = (a, b) if a.leads() else (b, a)
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}
        c.api.patch_status("pods", "default", "infer-0", {"conditions": [ready]})  # what its kubelet reports
        c.api.create(pdb("infer", match={"app": "infer"}, allowed=0))
        acted: list[tuple[float, str]] = []
        for verb in ("cordon", "uncordon", "evict", "delete_node"):
            original = getattr(leader.actions, verb)

            def record(
                *args: Any, _verb: str = verb, _original: Callable[..., Any] = original, **kwargs: Any
            ) -> Any:
                acted.append((time.monotonic(), _verb))
                return _original(*args, **kwargs)

            setattr(leader.actions, verb, record)
        leader.drainer.provider = Recorded(c.provider, acted)
        doomed = c.provider.instances()[0]
        time.sleep(0.3)  # the leader's cache sees the PDB
        c.provider.warn_interruption(doomed.id)
        assert leader.reconcile().drains_started == [doomed.id]
        c.wait_for(lambda: [w for _, w in acted].count("evict") >= 1)  # in flight: the PDB refuses

        # The leader's election loop dies without releasing the lease (a crash, or a partition from the API
        # server); its drain thread lives on. Nothing reconciles on it any more.
        assert leader.elector is not None and standby.elector is not None
        crashed = CrashedElector.crashed
        crashed.clear()
        leader.elector.__class__ = CrashedElector  # its next rounds neither renew nor release
        c.daemons.remove(leader)
        c.stop_at_exit(leader)  # its threads must not outlive the test
        c.wait_for(crashed.is_set)  # rounds run one after another: a renewal under way has been written
        lease_key = (leader.elector.namespace, leader.elector.name)
        renewed = c.api.get("leases", *lease_key)
        assert renewed is not None
        last_renewed = lease_time(renewed["spec"]["renewTime"])
        c.run_until(standby.leads, daemons=[standby], timeout=15)
        took_over = time.monotonic()
        lease = c.api.get("leases", *lease_key)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == standby.elector.identity
        # The standby waited for the lease to expire: the old leader's last renewal plus leaseDuration.
        assert lease_time(lease["spec"]["acquireTime"]) >= last_renewed + 3
        assert not leader.leads()
        c.step(daemons=[standby])
        assert standby.controller.last is not None and standby.controller.last.acted
        c.wait_for(lambda: not leader.drainer.active())
        time.sleep(1.5)  # longer than the drain's retry interval: it would have evicted again by now
        # Never two actors: everything the old leader did happened before the standby could act.
        assert acted and all(t < took_over for t, _ in acted)
        assert {w for _, w in acted} == {"cordon", "evict"}  # it left the node as it was, cordon and all
        assert 'tidal_terminations_total{outcome="stopped",reason="spot_interruption"} 1.0' in (
            leader.metrics.render().decode()
        )


def test_spot_interruptions_configured_for_the_simulated_cloud_reach_the_daemon(tmp_path: Path) -> None:
    simulated = {"spotInterruptionRate": 1800, "spotInterruptionNotice": "1s"}  # one every ~2s per node
    with cluster(tmp_path, capacityTypes=["spot"], simulated=simulated) as c:
        d = c.daemon()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: any(e["reason"] == "SpotInterrupted" for e in c.api.list("events")), timeout=30)
        c.run_until(lambda: any(i.state == "terminated" for i in c.provider.instances()), timeout=30)
        c.wait_for(lambda: 'reason="spot_interruption"' in d.metrics.render().decode())


def _gated(name: str, gate: str, **kw: Any) -> dict[str, Any]:
    pod = gpu_pod(name, **kw)
    pod["spec"]["schedulingGates"] = [{"name": gate}]
    return pod


def test_pods_gated_for_a_cost_estimate_get_it_on_the_pod_and_never_a_node(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        c.daemon()
        c.api.create(_gated("what-if-0", "tidal.dev/cost-estimate"))
        c.api.create(podgroup("pg-sweep", 2, "research"))
        for i in (1, 0):
            c.api.create(_gated(f"sweep-{i}", "nodecostestimate", gpus=4, group="pg-sweep"))

        def annotation(name: str) -> str | None:
            pod = c.api.get("pods", "default", name)
            assert pod is not None
            estimate: str | None = pod["metadata"].get("annotations", {}).get("tidal.dev/cost-estimate")
            return estimate

        c.run_until(lambda: annotation("what-if-0") is not None and annotation("sweep-0") is not None)
        for _ in range(3):  # however long they wait, nothing is launched for them
            c.step()
        assert c.provider.instances() == []
        what_if, sweep = annotation("what-if-0"), annotation("sweep-0")
        assert what_if is not None and sweep is not None
        assert json.loads(what_if) == {
            "nodes": [
                {
                    "capacityType": "on-demand",
                    "count": 1,
                    "instanceType": "g4dn.xlarge",
                    "pricePerHour": 0.526,
                }
            ],
            "pricePerHour": 0.526,
        }
        group = json.loads(sweep)
        assert (group["podGroup"], group["pods"], group["nodes"][0]["count"]) == ("default/pg-sweep", 2, 2)
        assert annotation("sweep-1") is None  # a PodGroup's estimate is on its first pod only
        pods = {p["metadata"]["name"]: p for p in c.pods()}
        assert pods["what-if-0"]["spec"]["schedulingGates"] == [{"name": "tidal.dev/cost-estimate"}]
        assert pods["sweep-1"]["spec"]["schedulingGates"] == [{"name": "nodecostestimate"}]
        events = [e for e in c.api.list("events") if e.get("reason") == "CostEstimate"]
        assert {e["involvedObject"]["name"] for e in events} == {"what-if-0", "sweep-0"}
        assert any("g4dn.xlarge (on-demand, $0.5260/h)" in e["message"] for e in events)


def _bound_pod(name: str, node_name: str, **spec: object) -> dict[str, Any]:
    """A running pod the API server has bound to ``node_name`` (another scheduler bound it, or the cache has
    not caught up with the binding)."""
    obj = gpu_pod(name, gpus=0)
    obj["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet"
    obj["spec"].update({"nodeName": node_name, **spec})
    obj["status"] = {"phase": "Running"}
    return obj


def _one_idle_node(c: Cluster, d: Daemon) -> str:
    """Launch a node for a job, let the job finish, and wait until the daemon's cache sees it finished."""
    c.api.create(gpu_pod("infer-0"))
    c.run_until(lambda: c.running() == 1)
    c.scheduler.finish("default", "infer-0")
    c.wait_for(lambda: all(p.finished for p in d.cache.snapshot().pods))
    [managed] = c.nodes()
    name: str = managed.name
    return name


def test_a_pod_bound_where_the_cache_cannot_see_it_keeps_its_node(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        d = c.daemon()
        name = _one_idle_node(c, d)
        # The pod informer loses its watch and cannot get it back; the API server binds a pod meanwhile.
        stalled = c.api.faults.push(500, count=1_000_000, verbs={"watch"}, resource="pods")
        c.api.drop_watches()
        c.wait_for(lambda: stalled.hits >= 1)
        c.api.create(_bound_pod("web-0", name))

        def kept() -> bool:
            return any(
                e["reason"] == "ScaleDownFailed" and "default/web-0" in e["message"]
                for e in c.api.list("events")
            )

        c.run_until(kept)
        assert "default/web-0" not in {p.key for p in d.cache.snapshot().pods}  # the cache never saw it
        assert [n.name for n in c.nodes()] == [name]
        assert not c.nodes()[0].unschedulable  # put back in service
        assert c.api.get("pods", "default", "web-0") is not None
        assert [i.state for i in c.live_instances()] == ["running"]
        c.api.faults.clear()


def test_an_expired_node_is_replaced_before_its_pod_is_evicted(tmp_path: Path) -> None:
    with cluster(tmp_path, disruption={"nodeMaxLifetime": "3s"}) as c:
        c.daemon()
        c.api.create(gpu_pod("train-0"))
        c.run_until(lambda: c.running() == 1)
        [old] = c.nodes()

        def evicted() -> bool:
            return any(r.path.endswith("/pods/train-0/eviction") for r in list(c.api.requests))

        c.run_until(evicted, timeout=30)
        c.wait_for(lambda: old.name not in {n.name for n in c.nodes()})
        requests = list(c.api.requests)
        eviction = next(i for i, r in enumerate(requests) if r.path.endswith("/pods/train-0/eviction"))
        [new] = [n for n in c.nodes() if n.name != old.name]
        # The replacement's GPUs were reported (the kubelet's status patch) before the pod was asked to leave.
        gpus = [
            i
            for i, r in enumerate(requests)
            if r.method == "PATCH" and r.path == f"/api/v1/nodes/{new.name}/status"
        ]
        assert gpus and gpus[0] < eviction
        assert new.allocatable.gpus == 1
        events = [e["reason"] for e in c.api.list("events") if e["involvedObject"]["name"] == old.name]
        assert "DisruptionStarted" in events


def test_the_command_lines_log_format_and_level_survive_a_reload_of_the_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    from autoscaler.runtime.observability.logging import configure_logging
    from tests.e2e.harness import base_config

    with cluster(tmp_path) as c:
        d = c.daemon()
        # As `tidal run --log-format json --log-level info` leaves it: logging set from the flags.
        d.manage_logging, d.log_format, d.log_level = True, "json", "info"
        configure_logging("json", "info")
        c.write_config(base_config(logFormat="console", logLevel="error", clusterGPULimit=3))
        assert d.watcher is not None and d.watcher.check()
        assert d.config.cluster_gpu_limit == 3  # the reload applied
        capsys.readouterr()
        structlog.get_logger("tidal.test").info("after_reload", check=1)
        lines = [line for line in capsys.readouterr().out.splitlines() if "after_reload" in line]
        assert len(lines) == 1 and json.loads(lines[0])["event"] == "after_reload"
