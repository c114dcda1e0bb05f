"""tidal itself as a user runs it: ``tidal run`` in its own process, as the ServiceAccount the chart creates.

The configuration is a mounted ConfigMap as the kubelet lays it out (``config.yaml`` a symlink through
``..data``, swapped atomically on change), so hot reload is exercised the way it happens in a pod.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.control_plane import ControlPlane, free_port

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "tidal-system"
SERVICE_ACCOUNT = "tidal"


class MountedConfig:
    """A ConfigMap volume with one key, ``config.yaml``, updated the way the kubelet does it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "config.yaml"
        self._version = 0

    def write(self, config: dict[str, Any]) -> None:
        self._version += 1
        data = self.folder / f"..{self._version}"
        data.mkdir()
        (data / "config.yaml").write_text(yaml.safe_dump(config))
        link = self.folder / "..data_tmp"
        link.symlink_to(data.name)
        link.replace(self.folder / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/config.yaml")


class Tidal:
    """One ``tidal run`` process; its log is kept for assertions."""

    def __init__(
        self,
        control_plane: ControlPlane,
        folder: Path,
        config: dict[str, Any],
        *,
        name: str = "tidal-0",
        once: bool = False,
        kubeconfig: Path | None = None,
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = free_port()
        self.mounted = MountedConfig(folder / "config")
        self.write_config(config)
        self.kubeconfig = kubeconfig or control_plane.service_account_kubeconfig(
            NAMESPACE, SERVICE_ACCOUNT, folder / "kubeconfig"
        )
        self.log = folder / f"{name}.log"
        argv = [
            sys.executable,
            "-m",
            "autoscaler",
            "run",
            "--config",
            str(self.mounted.path),
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        if once:
            argv.append("--once")
        env = {
            **os.environ,
            "POD_NAME": name,
            "POD_NAMESPACE": NAMESPACE,
            "PYTHONUNBUFFERED": "1",
        }
        self.argv = argv
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def write_config(self, config: dict[str, Any]) -> None:
        """Update the mounted configuration, as editing the ConfigMap does; its health server stays put."""
        self.mounted.write({**config, "metricsAddress": f"127.0.0.1:{self.port}"})

    def start(self) -> Tidal:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(  # our own command line
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=ROOT,
                start_new_session=True,
            )
        return self

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def kill(self) -> None:
        """kill -9: no lease release, no clean-up, as a node failure or OOM kill."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        """tidal's JSON log lines (logFormat: json), parsed."""
        out = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def probe(self, path: str) -> tuple[int, str]:
        """GET a path of tidal's health server (``/readyz``, ``/healthz``, ``/metrics``)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")
        except OSError as err:
            return 0, str(err)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include ``labels`` (0 when absent or unreachable)."""
        status, text = self.probe("/metrics")
        if status != 200:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric_name, _, label_text = series.partition("{")
            if metric_name != name:
                continue
            if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
                total += float(value)
        return total

    def reconciles(self) -> int:
        """Successful reconciles so far."""
        return int(self.metric("tidal_reconcile_total", outcome="success"))

    def wait_reconciles(self, more: int = 2, timeout: float = 30.0) -> None:
        """Until ``more`` further reconciles have completed."""
        target = self.reconciles() + more
        wait_until(lambda: self.reconciles() >= target, timeout=timeout, what=f"{more} more reconciles")


def wait_until(done: Any, *, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``done()`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f}s: {what}")
        time.sleep(interval)
