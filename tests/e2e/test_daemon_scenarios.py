"""The daemon end to end: fake API server + scheduler/KAI stand-ins + simulated cloud + `tidal run` pieces."""

import time

import pytest

from tests.e2e.harness import cluster, gpu_pod, podgroup, queue

pytestmark = pytest.mark.slow


def test_scale_from_zero_for_one_gpu_pod(tmp_path):
    with cluster(tmp_path) as c:
        c.daemon()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        nodes = c.nodes()
        assert [n.labels["node.kubernetes.io/instance-type"] for n in nodes] == ["g4dn.xlarge"]
        assert nodes[0].labels["tidal.dev/managed"] == "true"
        assert nodes[0].labels["tidal.dev/capacity-type"] == "on-demand"
        assert len(c.provider.instances()) == 1
        events = [e for e in c.api.list("events") if e.get("reason") == "TriggeredScaleUp"]
        assert events and "g4dn.xlarge" in events[0]["message"]


def test_seed_scenario_kai_queues_launch_only_what_the_queues_may_use_and_go_back_to_zero(tmp_path):
    with cluster(tmp_path, schedulerNames=["kai-scheduler"]) as c:
        c.api.create(queue("research", quota=4, limit=8))
        c.api.create(queue("production", quota=8, limit=12))
        d = c.daemon()
        for i in range(6):
            c.api.create(
                gpu_pod(f"serve-{i}", namespace="production", queue="production", scheduler="kai-scheduler")
            )
        c.run_until(lambda: c.running("production") == 6)
        assert c.gpus_up() == 6
        for i in range(10):
            c.api.create(
                gpu_pod(f"sweep-{i}", namespace="research", queue="research", scheduler="kai-scheduler")
            )
        c.run_until(lambda: c.running("research") == 8)
        for _ in range(5):  # the two held pods must never cause a launch, however long they wait
            c.step()
        assert c.gpus_up() == 14
        assert c.launched_gpus_peak == 14
        held = [p for p in c.pods("research") if p["status"].get("phase") == "Pending"]
        assert len(held) == 2
        assert all(p["status"]["conditions"][0]["message"].startswith("OverLimit") for p in held)
        assert d.controller.last and d.controller.last.plan
        # Jobs finish; the held pods are withdrawn; GPU nodes go to zero.
        for p in c.pods():
            if p["status"].get("phase") == "Running":
                c.scheduler.finish(p["metadata"]["namespace"], p["metadata"]["name"])
            else:
                c.api.delete("pods", p["metadata"]["namespace"], p["metadata"]["name"])
        c.run_until(lambda: c.gpus_up() == 0 and not c.nodes(), timeout=30)


def test_a_gang_gets_all_its_capacity_at_once(tmp_path):
    with cluster(tmp_path, schedulerNames=["kai-scheduler"]) as c:
        c.api.create(queue("production", quota=8, limit=12))
        c.api.create(podgroup("pg-train", 4, "production"))
        c.daemon()
        for i in range(4):
            c.api.create(
                gpu_pod(f"train-{i}", queue="production", group="pg-train", scheduler="kai-scheduler")
            )
        c.run_until(lambda: c.running() == 4)
        assert c.gpus_up() == 4


def test_a_gang_larger_than_the_gpu_limit_gets_nothing(tmp_path):
    with cluster(tmp_path, schedulerNames=["kai-scheduler"], clusterGPULimit=3) as c:
        c.api.create(podgroup("pg-train", 4, "production"))
        d = c.daemon()
        for i in range(4):
            c.api.create(gpu_pod(f"train-{i}", group="pg-train", scheduler="kai-scheduler"))
        for _ in range(6):
            c.step()
        assert c.provider.instances() == []
        unplaced = d.controller.last.plan.launch.unplaced
        assert len(unplaced) == 4 and "clusterGPULimit 3 reached" in unplaced[0].reason


def test_the_gpu_limit_holds_under_a_burst(tmp_path):
    with cluster(tmp_path, clusterGPULimit=4) as c:
        c.daemon()
        for i in range(12):
            c.api.create(gpu_pod(f"burst-{i}"))
        c.run_until(lambda: c.running() == 4)
        for _ in range(4):
            c.step()
        assert c.launched_gpus_peak == 4
        assert c.gpus_up() == 4


def test_a_restart_in_the_middle_of_a_launch_does_not_launch_twice(tmp_path):
    with cluster(tmp_path, simulated={"launchDelay": "2s"}) as c:
        first = c.daemon(identity="tidal-a")
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: len(c.provider.instances()) == 1)
        first.stop()
        c.daemons.remove(first)
        second = c.daemon(identity="tidal-b")
        c.run_until(lambda: c.running() == 1, daemons=[second])
        assert len(c.provider.instances()) == 1


def test_leader_failover_never_has_two_actors(tmp_path):
    election = {"enabled": True, "leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "1s"}
    with cluster(tmp_path, leaderElection=election) as c:
        a = c.daemon(identity="tidal-a")
        b = c.daemon(identity="tidal-b")
        deadline = time.monotonic() + 10
        while not (a.is_leader() or b.is_leader()) and time.monotonic() < deadline:
            time.sleep(0.2)
        leader, standby = (a, b) if a.is_leader() else (b, a)
        assert not standby.is_leader()
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        assert standby.controller.last is not None and not standby.controller.last.acted
        assert len(c.provider.instances()) == 1
        leader.stop()
        c.daemons.remove(leader)
        c.api.create(gpu_pod("infer-1"))
        c.run_until(lambda: c.running() == 2, timeout=30)
        assert standby.is_leader()
        assert len(c.provider.instances()) == 2


def test_a_good_config_reload_applies_and_a_bad_one_keeps_the_last_good(tmp_path):
    from tests.e2e.harness import base_config

    with cluster(tmp_path) as c:
        d = c.daemon()
        assert d.config.cluster_gpu_limit is None
        c.write_config(base_config(clusterGPULimit=2))
        assert d.watcher is not None and d.watcher.check()
        assert d.config.cluster_gpu_limit == 2
        c.write_config(base_config(clusterGPULimit=-5))
        d.watcher.check()
        assert d.config.cluster_gpu_limit == 2
        metrics = d.metrics.render().decode()
        assert 'tidal_config_reloads_total{outcome="invalid"} 1.0' in metrics
        for i in range(4):
            c.api.create(gpu_pod(f"infer-{i}"))
        c.run_until(lambda: c.running() == 2)
        for _ in range(3):
            c.step()
        assert c.launched_gpus_peak == 2


def test_api_faults_are_survived(tmp_path):
    with cluster(tmp_path) as c:
        d = c.daemon()
        c.api.faults.push(500, count=3, verbs={"list", "watch"}, resource="pods")
        c.api.faults.push(429, count=2, verbs={"patch"}, resource="nodes")
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        assert len(c.provider.instances()) == 1
        assert d.controller.last is not None and not d.controller.last.error


def test_dry_run_launches_nothing_and_says_what_it_would_do(tmp_path):
    with cluster(tmp_path) as c:
        d = c.daemon(dry_run=True)
        c.api.create(gpu_pod("infer-0"))
        for _ in range(4):
            c.step()
        assert c.provider.instances() == []
        assert d.controller.last is not None and d.controller.last.plan.launch.launches
        events = [e for e in c.api.list("events") if e.get("reason") == "TriggeredScaleUp"]
        assert events and events[0]["message"].startswith("would launch g4dn.xlarge")


def cpu_pod(name, cpu, **labels):
    obj = gpu_pod(name)
    obj["metadata"]["labels"].update(labels)
    obj["metadata"]["ownerReferences"][0].update({"kind": "ReplicaSet", "apiVersion": "apps/v1"})
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    return obj


def test_an_underutilised_node_is_drained_once_its_pdb_allows_and_its_pods_fit_elsewhere(tmp_path):
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
        c.api.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "small", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "small"}}},
                "status": {
                    "disruptionsAllowed": 0,
                    "currentHealthy": 1,
                    "desiredHealthy": 1,
                    "expectedPods": 1,
                },
            }
        )
        c.scheduler.finish("default", big_there)
        for _ in range(8):
            c.step()
            time.sleep(0.2)
        blocked = {b.node: b.reason for b in d.controller.last.plan.removal.blocked}
        assert blocked[host] == "pod default/small-0 is protected by PodDisruptionBudget default/small"
        assert len(c.nodes()) == 2
        c.api.patch_status("poddisruptionbudgets", "default", "small", {"disruptionsAllowed": 1})
        c.run_until(lambda: len(c.nodes()) == 1, timeout=30)
        assert all(n.name != host for n in c.nodes())
        assert [i.state for i in c.provider.instances() if i.id == host] == ["terminated"]


def test_metrics_and_the_status_configmap_report_the_fleet(tmp_path):
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


def test_a_capacity_error_on_the_cheapest_offering_falls_back_in_the_same_reconcile(tmp_path):
    with cluster(tmp_path) as c:
        d = c.daemon()
        d.reconcile()  # the offerings tidal caches still show g4dn.xlarge available
        c.provider.fail_capacity(instance_type="g4dn.xlarge")
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)
        result = d.reconcile()
        assert result.plan.launch.launches[0].offering.instance_type == "g4dn.xlarge"
        launched = [o.instance.instance_type for o in result.launched if o.instance is not None]
        assert len(launched) == 1 and launched[0] != "g4dn.xlarge"


def test_a_spot_interruption_notice_drains_the_node_and_plans_its_replacement_at_once(tmp_path):
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


@pytest.mark.xfail(
    strict=True,
    reason="scale-down does not read newNodeGracePeriod yet (autoscaler/planning/scaledown.py)",
)
def test_a_new_node_is_kept_for_its_grace_period_even_when_its_pod_went_away(tmp_path):
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
