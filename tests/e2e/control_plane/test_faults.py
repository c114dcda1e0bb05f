"""Faults of the API server under a running tidal: not there at all, restarted, its history compacted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.workloads import deployment, job, pod_template
from tests.e2e.harness import base_config
from tests.k8s.cluster import Objects
from tests.k8s.control_plane import ControlPlane, free_port
from tests.k8s.tidal import ROOT, wait_until


def kubeconfig_for(server: str, path: Path, **user: str) -> Path:
    """A kubeconfig naming ``server``, trusting whatever it presents unless a CA is given."""
    cluster: dict[str, Any] = {"server": server}
    if "ca" in user:
        cluster["certificate-authority"] = user.pop("ca")
    elif not user.pop("verify", ""):
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user or {"token": "not-a-real-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def config_file(path: Path, **overrides: Any) -> Path:
    path.write_text(yaml.safe_dump({**base_config(**overrides), "logFormat": "json"}))
    return path


def tidal_argv(config: Path, kubeconfig: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autoscaler",
        "run",
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig),
        *extra,
    ]


def run_once(tmp_path: Path, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """``tidal run --once`` with the e2e configuration and this kubeconfig, its output captured."""
    return subprocess.run(
        tidal_argv(config_file(tmp_path / "c.yaml"), kubeconfig, "--once"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_run_once_without_an_api_server_exits_non_zero_with_one_line_naming_it(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = run_once(tmp_path, kubeconfig_for(server, tmp_path / "kc"))
    assert done.returncode == 4
    assert time.monotonic() - started < 30
    assert done.stderr.strip().splitlines() == [
        f"tidal: cannot reach the Kubernetes API server at {server}: connection refused"
    ]
    assert "Traceback" not in done.stdout + done.stderr
    assert "Retrying" not in done.stdout  # urllib3's own retry chatter stays out of the log


def test_the_daemon_waits_for_a_missing_api_server_with_growing_pauses_and_readyz_says_why(
    tmp_path: Path,
) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    port = free_port()
    log = tmp_path / "tidal.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            tidal_argv(
                config_file(tmp_path / "c.yaml", metricsAddress=f"127.0.0.1:{port}"),
                kubeconfig_for(server, tmp_path / "kc"),
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:

        def four_attempts() -> list[dict[str, Any]] | None:
            seen = [e for e in json_lines(log.read_text()) if e["event"] == "api_server_unreachable"]
            return seen if len(seen) >= 4 else None

        attempts = wait_until(four_attempts, timeout=40, what="four attempts to reach the API server")
        assert [a["retry_in"] for a in attempts[:4]] == [1.0, 2.0, 4.0, 8.0]
        assert {a["error"] for a in attempts} == {
            f"cannot reach the Kubernetes API server at {server}: connection refused"
        }
        assert proc.poll() is None  # still running, still trying
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2)
            raise AssertionError("/readyz answered 200 without an API server")
        except urllib.error.HTTPError as err:
            assert err.code == 500  # any status >= 400 fails a probe; tidal answers as kube-apiserver does
            assert f"cannot reach the Kubernetes API server at {server}" in err.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    assert code == 0
    assert "Traceback" not in log.read_text()


def test_credentials_the_api_server_refuses_are_named_as_such(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = kubeconfig_for(
        control_plane.url, tmp_path / "kc", token="expired-or-forged", ca=str(control_plane.pki.ca[0].cert)
    )
    done = run_once(tmp_path, kubeconfig)
    assert done.returncode == 4
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        f"tidal: the Kubernetes API server at {control_plane.url} refused tidal's credentials: HTTP 401"
    )


def test_a_server_certificate_tidal_cannot_verify_is_named(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The kubeconfig trusts the system's CAs only, not the cluster's own.
    kubeconfig = kubeconfig_for(control_plane.url, tmp_path / "kc", token="t", verify="yes")
    done = run_once(tmp_path, kubeconfig)
    assert done.returncode == 4
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        f"tidal: cannot reach the Kubernetes API server at {control_plane.url}: TLS: certificate verify failed"
    )


def test_an_api_server_restart_deletes_nothing_launches_nothing_twice_and_the_next_pod_is_served(
    cluster: Cluster, control_plane: ControlPlane
) -> None:
    cfg = cluster.config()
    tidal = cluster.tidal(cfg)
    cluster.create(deployment("web", replicas=2, cpu="1", memory="2Gi"))
    cluster.wait_bound(2)
    cloud = cluster.cloud(cfg)
    instances = {i.id for i in cloud.live()}
    nodes = {n.metadata.name for n in cluster.nodes()}

    control_plane.kill_apiserver()
    time.sleep(6)  # the outage: several scan intervals and scale-down windows pass
    assert {i.id for i in cloud.live()} == instances
    assert tidal.running
    control_plane.start_apiserver()

    assert {n.metadata.name for n in cluster.nodes()} == nodes
    cluster.create(job("late", pods=1, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(3, timeout=90)
    assert len({i.id for i in cloud.launched()} - instances) == 1
    assert "Traceback" not in tidal.output()


def test_a_watch_expired_by_compaction_is_relisted_without_losing_what_changed_meanwhile(
    cluster: Cluster, control_plane: ControlPlane
) -> None:
    cfg = cluster.config()
    tidal = cluster.tidal(cfg)
    tidal.wait_reconciles(2)
    other = control_plane.second_apiserver()
    try:
        control_plane.kill_apiserver()
        # While tidal's server is down, a pod is created through the other one, and etcd's history of it is
        # compacted away: tidal's watch can only resume with a relist.
        with other.admin_client() as api:
            Objects(api).apply(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "during-outage", "namespace": cluster.namespace},
                    "spec": pod_template("during-outage", cpu="2", memory="8Gi", gpus=1)["spec"],
                }
            )
        control_plane.compact_etcd()
        control_plane.start_apiserver()
    finally:
        other.processes["kube-apiserver"].stop()

    wait_until(
        lambda: any(e["event"] == "watch expired, relisting" for e in tidal.events()),
        timeout=60,
        what="tidal relisting after 410 Gone",
    )
    [pod] = cluster.wait_bound(1, timeout=90)
    assert pod.metadata.name == "during-outage"
