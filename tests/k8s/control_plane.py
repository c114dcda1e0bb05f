"""Start and stop a real control plane in a temporary folder, envtest-style.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager run as child processes in their own
sessions, on free loopback ports, logging to ``<folder>/logs``; they are stopped by the PIDs this object
started, never by name. Nodes are API objects: whoever plays the kubelet creates them and reports their
status (see ``tests/k8s/kubelet.py``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import yaml

from tests.k8s.pki import Issued, Pki

SERVICE_CIDR = "10.0.0.0/24"
# What the audit log records: every request of tidal's ServiceAccount (for the least-privilege check),
# nothing else (the scheduler and controller manager would fill it).
TIDAL_USER = "system:serviceaccount:tidal-system:tidal"
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{TIDAL_USER}"]
  - level: None
"""
READY_TIMEOUT = 60.0


class ControlPlaneFailed(RuntimeError):
    """A component exited or never became ready; the message carries the tail of its log."""


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@dataclass
class Process:
    """One component we started: its command line, log and PID."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, grace: float = 15.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self.popen = None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver + kube-scheduler + kube-controller-manager."""

    binaries: dict[str, Path]
    folder: Path
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "logs").mkdir(exist_ok=True)
        self.pki = Pki(self.folder / "pki")
        for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager"):
            self.ports[name] = free_port()
        self.url = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.etcd_url = f"http://127.0.0.1:{self.ports['etcd']}"
        self.kubeconfig = self.write_kubeconfig(
            self.folder / "admin.kubeconfig", "admin", cert=self.pki.admin
        )
        self._scheduler_kc = self.write_kubeconfig(
            self.folder / "scheduler.kubeconfig", "kube-scheduler", cert=self.pki.scheduler
        )
        self._cm_kc = self.write_kubeconfig(
            self.folder / "controller-manager.kubeconfig",
            "kube-controller-manager",
            cert=self.pki.controller_manager,
        )
        self.audit_log = self.folder / "logs" / "audit.jsonl"
        # (started, ready) of every API server start: until its authorizer has synced, a starting server
        # refuses requests it will allow a moment later, which clients see as a passing 403.
        self.restarts: list[tuple[float, float]] = []
        (self.folder / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self._define()

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audited request so far (tidal's ServiceAccount's), oldest first."""
        if not self.audit_log.exists():
            return []
        out = []
        for line in self.audit_log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written right now
        return out

    # ------------------------------------------------------------------ kubeconfigs and clients

    def write_kubeconfig(
        self,
        path: Path,
        user: str,
        *,
        cert: Issued | None = None,
        token: str | None = None,
        namespace: str = "default",
    ) -> Path:
        """A kubeconfig for this API server, authenticating with a client certificate or a bearer token."""
        credentials: dict[str, str] = {}
        if cert is not None:
            credentials = {"client-certificate-data": _b64(cert.cert), "client-key-data": _b64(cert.key)}
        if token is not None:
            credentials = {"token": token}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tidal-test",
                    "cluster": {"server": self.url, "certificate-authority-data": _b64(self.pki.ca[0].cert)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {"name": user, "context": {"cluster": "tidal-test", "user": user, "namespace": namespace}}
            ],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    def admin_client(self) -> kubernetes.client.ApiClient:
        """A client with cluster-admin rights (system:masters)."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 3600) -> str:
        """A bound token for the ServiceAccount, from the TokenRequest API (as a projected volume gets one)."""
        with self.admin_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            body = kubernetes.client.AuthenticationV1TokenRequest(
                spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
            )
            answer = core.create_namespaced_service_account_token(name, namespace, body)
            token: str = answer.status.token
            return token

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig that acts as ``system:serviceaccount:<namespace>:<name>``."""
        token = self.service_account_token(namespace, name)
        return self.write_kubeconfig(path, f"{namespace}-{name}", token=token, namespace=namespace)

    # ------------------------------------------------------------------ processes

    def _define(self) -> None:
        logs = self.folder / "logs"
        pki = self.pki
        b = {k: str(v) for k, v in self.binaries.items()}
        p = self.ports
        self.processes["etcd"] = Process(
            "etcd",
            [
                b["etcd"],
                "--name",
                "tidal-test",
                "--data-dir",
                str(self.folder / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{p['etcd-peer']}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{p['etcd-peer']}",
                "--initial-cluster",
                f"tidal-test=http://127.0.0.1:{p['etcd-peer']}",
                "--initial-cluster-state",
                "new",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            logs / "etcd.log",
        )
        self.processes["kube-apiserver"] = Process(
            "kube-apiserver",
            [
                b["kube-apiserver"],
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                "--endpoint-reconciler-type=none",
                f"--etcd-servers={self.etcd_url}",
                f"--client-ca-file={pki.ca[0].cert}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca[0].cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                "--allow-privileged=true",
                f"--audit-policy-file={self.folder / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
            ],
            logs / "kube-apiserver.log",
        )
        serving = [f"--tls-cert-file={pki.serving.cert}", f"--tls-private-key-file={pki.serving.key}"]
        self.processes["kube-scheduler"] = Process(
            "kube-scheduler",
            [
                b["kube-scheduler"],
                f"--kubeconfig={self._scheduler_kc}",
                f"--authentication-kubeconfig={self._scheduler_kc}",
                f"--authorization-kubeconfig={self._scheduler_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['scheduler']}",
                "--leader-elect=false",
                *serving,
            ],
            logs / "kube-scheduler.log",
        )
        self.processes["kube-controller-manager"] = Process(
            "kube-controller-manager",
            [
                b["kube-controller-manager"],
                f"--kubeconfig={self._cm_kc}",
                f"--authentication-kubeconfig={self._cm_kc}",
                f"--authorization-kubeconfig={self._cm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['controller-manager']}",
                "--leader-elect=false",
                *serving,
                "--controllers=*,-nodeipam",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca[0].cert}",
                f"--cluster-signing-cert-file={pki.ca[0].cert}",
                f"--cluster-signing-key-file={pki.ca[0].key}",
                # Nodes are played through the API: never mark them Unknown for a missing kubelet heartbeat.
                "--node-monitor-grace-period=87600h",
                "--node-startup-grace-period=87600h",
            ],
            logs / "kube-controller-manager.log",
        )

    def start(self) -> None:
        """Start all four and wait until each serves; on failure stop what started and say why."""
        try:
            self.processes["etcd"].start()
            self._wait("etcd", self._etcd_healthy)
            self.start_apiserver()
            self.processes["kube-scheduler"].start()
            self.processes["kube-controller-manager"].start()
            self._wait("kube-scheduler", lambda: self._healthz(self.ports["scheduler"]))
            self._wait("kube-controller-manager", lambda: self._healthz(self.ports["controller-manager"]))
            self._wait("the default ServiceAccount", self._default_service_account)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component, newest first."""
        for name in ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"):
            self.processes[name].stop()

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on its port and wait for /readyz."""
        started = time.time()
        self.processes["kube-apiserver"].start()
        self._wait("kube-apiserver /readyz", self._apiserver_ready)
        if self.processes["kube-apiserver"].popen is not None and hasattr(self, "restarts"):
            self.restarts.append((started, time.time()))

    def second_apiserver(self) -> ControlPlane:
        """Another kube-apiserver on the same etcd, as in a highly available control plane: a client of the
        first one can be cut off while changes go on through this one. Stop it with ``stop_second``."""
        twin = ControlPlane.__new__(ControlPlane)
        twin.binaries, twin.folder, twin.pki = self.binaries, self.folder, self.pki
        twin.ports = {**self.ports, "apiserver": free_port()}
        twin.url = f"https://127.0.0.1:{twin.ports['apiserver']}"
        twin.etcd_url = self.etcd_url
        twin.kubeconfig = twin.write_kubeconfig(
            self.folder / "admin-2.kubeconfig", "admin", cert=self.pki.admin
        )
        argv = [
            f"--secure-port={twin.ports['apiserver']}" if a.startswith("--secure-port=") else a
            for a in self.processes["kube-apiserver"].argv
        ]
        twin.processes = {
            "kube-apiserver": Process("kube-apiserver", argv, self.folder / "logs" / "kube-apiserver-2.log")
        }
        twin.start_apiserver()
        return twin

    def kill_apiserver(self) -> None:
        """SIGKILL the API server, as a crash would: clients see connections refused."""
        self.processes["kube-apiserver"].stop(signal.SIGKILL)

    def _wait(self, what: str, ready: Any, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p for p in self.processes.values() if p.popen is not None and not p.alive]
            if dead:
                raise ControlPlaneFailed(f"{dead[0].name} exited while waiting for {what}:\n{dead[0].tail()}")
            if ready():
                return
            time.sleep(0.1)
        tails = "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in self.processes.values() if p.popen)
        raise ControlPlaneFailed(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")

    # ------------------------------------------------------------------ probes

    def _https(self, url: str) -> tuple[int, str]:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca[0].cert))
        ctx.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")
        except (OSError, ssl.SSLError):
            return 0, ""

    def _apiserver_ready(self) -> bool:
        return self._https(f"{self.url}/readyz")[0] == 200

    def _healthz(self, port: int) -> bool:
        return self._https(f"https://127.0.0.1:{port}/healthz")[0] == 200

    def _default_service_account(self) -> bool:
        return self._https(f"{self.url}/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            doc: dict[str, Any] = json.loads(answer.read())
            return doc

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def compact_etcd(self) -> int:
        """Compact etcd's history to its current revision: every older resourceVersion becomes 410 Gone."""
        key = base64.b64encode(b"/").decode()
        revision = int(self._etcd_post("/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    @property
    def pids(self) -> dict[str, int]:
        return {n: p.popen.pid for n, p in self.processes.items() if p.popen is not None}


def environment_without_proxies() -> dict[str, str]:
    """The environment for child processes talking to loopback servers."""
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
