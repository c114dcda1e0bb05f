"""`tidal plan --snapshot` on a 10,000-pod cluster snapshot, against merely parsing that snapshot's JSON.

Two snapshots of 10,000 pods:

- ``cluster``: what ``kubectl get pods,nodes -A -o json`` returns for a cluster of 500 nodes: 9,000 pods running
  (Deployments, a DaemonSet on every node, with the status, env, probes, volumes and owner references real pods
  carry) and 1,000 pending;
- ``pending``: 10,000 pending pods with only the fields tidal reads (bench/plan_scale.py's workload), every one
  of them demand to plan.

The benchmark times the whole command as a user runs it (a new process: start-up, reading, converting,
planning, printing) and, in the same run, ``json.loads`` of the file; the target is a ratio of at most 4.
Beside the wall times it records CPU seconds (the command's, as its process reports them, and the parse's):
on a machine busy with other work the wall times stretch with the load, the CPU seconds much less.

    python bench/plan_snapshot.py [--pods N] [--nodes N] [--repeat K]
    python bench/plan_snapshot.py --short [--out DIR]   # 60 pods: a check that it still runs
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import output  # noqa: E402
from bench.plan_scale import workload  # noqa: E402

CATALOG = ROOT / "config" / "catalogs" / "aws-us-east-1.csv"
T = "2026-11-20T09:{:02d}:{:02d}Z"
PENDING = (
    "0/500 nodes are available: 480 Insufficient cpu, 20 node(s) had untolerated taint(s). preemption: "
    "0/500 nodes are available: 500 No preemption victims found for incoming pod."
)


def _time(i: int) -> str:
    return T.format((i // 60) % 60, i % 60)


def node(i: int) -> dict[str, Any]:
    """A Node as ``kubectl get -o json`` returns it."""
    name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
    zone = "us-east-1" + "abc"[i % 3]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": f"10.0.{i // 250}.{i % 250}",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": "2026-11-18T08:12:04Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "m6i.4xlarge",
                "beta.kubernetes.io/os": "linux",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "eks.amazonaws.com/nodegroup": "general",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m6i.4xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
            },
            "name": name,
            "resourceVersion": str(51971240 + i),
            "uid": f"386c9992-382c-56cf-9fd4-{i:012d}",
        },
        "spec": {"providerID": f"aws:///{zone}/i-0a3f5c9e1b{i:07d}"},
        "status": {
            "addresses": [
                {"address": f"10.0.{i // 250}.{i % 250}", "type": "InternalIP"},
                {"address": name, "type": "InternalDNS"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": {
                "cpu": "15890m",
                "ephemeral-storage": "95551679124",
                "memory": "63408036Ki",
                "pods": "234",
            },
            "capacity": {
                "cpu": "16",
                "ephemeral-storage": "104845292Ki",
                "memory": "64424740Ki",
                "pods": "234",
            },
            "conditions": [
                {
                    "lastHeartbeatTime": "2026-11-20T09:59:41Z",
                    "lastTransitionTime": "2026-11-18T08:12:41Z",
                    "message": message,
                    "reason": reason,
                    "status": status,
                    "type": kind,
                }
                for kind, status, reason, message in (
                    (
                        "MemoryPressure",
                        "False",
                        "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available",
                    ),
                    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    (
                        "PIDPressure",
                        "False",
                        "KubeletHasSufficientPID",
                        "kubelet has sufficient PID available",
                    ),
                    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                )
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.109-118.189.amzn2023.x86_64",
                "kubeProxyVersion": "v1.31.2-eks-7f9249a",
                "kubeletVersion": "v1.31.2-eks-7f9249a",
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20241031",
            },
        },
    }


def pod(i: int, rnd: random.Random, node_name: str | None, daemon: bool = False) -> dict[str, Any]:
    """A Pod as ``kubectl get -o json`` returns it: spec defaults filled in, status written by the kubelet."""
    app = "node-exporter" if daemon else f"svc-{i % 40}"
    name = f"{app}-{i:06x}" if daemon else f"{app}-7d9f8b6c5-{i:05x}"
    if daemon:
        cpu, memory = "100m", "128Mi"
    elif node_name:
        cpu, memory = rnd.choice([("250m", "512Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("1500m", "3Gi")])
    else:  # the pending ones are bigger: some fit the room left on the nodes, the rest need new ones
        cpu, memory = rnd.choice([("1", "2Gi"), ("2", "4Gi")])
    owner = {"apiVersion": "apps/v1", "blockOwnerDeletion": True, "controller": True, "uid": f"uid-{app}"}
    owner.update(
        {"kind": "DaemonSet", "name": app} if daemon else {"kind": "ReplicaSet", "name": f"{app}-7d9f8b6c5"}
    )
    container = {
        "name": app,
        "image": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{app}:v2.14.{i % 7}",
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
        ],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "readinessProbe": {
            "failureThreshold": 3,
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 10,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        },
        "resources": {"limits": {"memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": f"kube-api-access-{i % 99999:05d}",
                "readOnly": True,
            }
        ],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node_name:
        status = {
            "conditions": [
                {"lastProbeTime": None, "lastTransitionTime": _time(i), "status": "True", "type": kind}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "containerID": f"containerd://{i:064x}",
                    "image": container["image"],
                    "imageID": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{app}@sha256:{i:064x}",
                    "lastState": {},
                    "name": app,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": _time(i)}},
                }
            ],
            "hostIP": "10.0.1.23",
            "phase": "Running",
            "podIP": f"10.0.{(i >> 8) & 255}.{i & 255}",
            "podIPs": [{"ip": f"10.0.{(i >> 8) & 255}.{i & 255}"}],
            "qosClass": "Burstable",
            "startTime": _time(i),
        }
    else:
        status["conditions"] = [
            {
                "lastProbeTime": None,
                "lastTransitionTime": _time(i),
                "message": PENDING,
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }
        ]
    spec: dict[str, Any] = {
        "containers": [container],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
        "volumes": [
            {
                "name": f"kube-api-access-{i % 99999:05d}",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                "name": "kube-root-ca.crt",
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        "path": "namespace",
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": _time(i),
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c5"},
            "name": name,
            "namespace": "monitoring" if daemon else "shop",
            "ownerReferences": [owner],
            "resourceVersion": str(60000000 + i),
            "uid": f"c0ffee00-0000-4000-8000-{i:012d}",
        },
        "spec": spec,
        "status": status,
    }


def snapshot(pods: int, nodes: int, pending: int, seed: int = 11) -> dict[str, Any]:
    """A ``kind: List`` of every object, as ``kubectl get -o json`` prints it."""
    rnd = random.Random(seed)
    items = [node(i) for i in range(nodes)]
    names = [n["metadata"]["name"] for n in items]
    for i in range(nodes):  # one DaemonSet pod per node
        items.append(pod(i, rnd, names[i], daemon=True))
    for i in range(pods - nodes - pending):
        items.append(pod(nodes + i, rnd, names[i % nodes]))
    for i in range(pending):
        items.append(pod(pods + i, rnd, None))
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def measure(path: Path, repeat: int) -> dict[str, Any]:
    """Median wall time of ``json.loads`` of the file and of ``tidal plan`` on it, in the same run."""
    tidal = Path(sys.executable).with_name("tidal")
    command = [str(tidal), "plan", "--snapshot", str(path), "--catalog", str(CATALOG), "--output", "json"]
    parse, runs, parse_cpu, runs_cpu = [], [], [], []
    out = ""
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        json.loads(path.read_text(encoding="utf-8"))
        parse.append(time.perf_counter() - t0)
        parse_cpu.append(time.process_time() - c0)
        t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        runs.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs_cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        out = done.stdout
    plan = json.loads(out)
    return {
        "snapshotBytes": path.stat().st_size,
        "parseSecondsMedian": round(statistics.median(parse), 4),
        "planSecondsMedian": round(statistics.median(runs), 4),
        "planSecondsAll": [round(r, 4) for r in runs],
        "planOverParse": round(statistics.median(runs) / statistics.median(parse), 2),
        "parseCpuSecondsMedian": round(statistics.median(parse_cpu), 4),
        "planCpuSecondsMedian": round(statistics.median(runs_cpu), 4),
        "planOverParseCpu": round(statistics.median(runs_cpu) / statistics.median(parse_cpu), 2),
        "launches": len(plan["launches"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pending", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:
        args.pods, args.nodes, args.pending, args.repeat = 60, 5, 10, 1
    summary: dict[str, Any] = {"benchmark": "plan_snapshot", "pods": args.pods}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Path(tmp) / "cluster.json"
        cluster.write_text(json.dumps(snapshot(args.pods, args.nodes, args.pending)), encoding="utf-8")
        summary["cluster"] = {
            "nodes": args.nodes,
            "pendingPods": args.pending,
            **measure(cluster, args.repeat),
        }
        pending = Path(tmp) / "pending.json"
        pending.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": workload(args.pods)}))
        summary["pending"] = {"pendingPods": args.pods, **measure(pending, args.repeat)}
    summary["machine"] = {"python": platform.python_version(), "processor": platform.machine()}
    print(json.dumps(summary, indent=2))
    output.write(args, "plan_snapshot", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
