"""`tidal run --once` through the command line, against the fake API server via a kubeconfig file."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.cloud import ProviderNotFound, load_provider
from tests.e2e.harness import base_config, gpu_pod
from tests.fakes.kube_apiserver import FakeApiServer

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def kubeconfig(url: str, path: Path) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "tidal", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tidal"}}],
            }
        )
    )
    return str(path)


def unschedulable_gpu_pod(name: str) -> dict[str, object]:
    """A one-GPU pod kube-scheduler found no node for."""
    pod = gpu_pod(name)
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "no nodes available to schedule pods",
        }
    ]
    return pod


def test_run_once_reconciles_and_launches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeApiServer() as api:
        api.create(unschedulable_gpu_pod("infer-0"))
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(base_config(simulated={"registerNodes": False})))
        code = main(
            ["run", "--once", "--config", str(config), "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]
        )
        assert code == 0
        events = [e for e in api.list("events") if e.get("reason") == "TriggeredScaleUp"]
        assert len(events) == 1 and "g4dn.xlarge" in events[0]["message"]


def test_run_with_an_invalid_config_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("clusterGPULimt: 4\n")
    code = main(["run", "--once", "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "clusterGPULimt: unknown key (did you mean 'clusterGPULimit'?)" in err


def test_run_with_an_unknown_cloud_names_the_valid_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeApiServer() as api:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"cloud": "oracle", "region": "us-ashburn-1"}))
        code = main(
            ["run", "--once", "--config", str(config), "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]
        )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert (
        err
        == "tidal: error: cloud: 'oracle' is not a cloud tidal knows (choices: aws, azure, gcp, simulated)"
    )


def test_run_names_an_unknown_cloud_before_it_reads_the_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"cloud": "digitalocean", "region": "nyc3"}))
    code = main(
        ["run", "--once", "--config", str(config), "--kubeconfig", str(tmp_path / "no-such-kubeconfig")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("tidal: error: cloud: 'digitalocean' is not a cloud tidal knows")
    assert "kubeconfig" not in err


BLOCK_AWS_SDK = '''
import sys


class BlockAwsSdk:
    """As if boto3 and botocore were not installed (tidal-autoscaler installed without the aws extra)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("boto3", "botocore"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, BlockAwsSdk())
'''


def test_run_without_the_clouds_sdk_says_which_extra_to_install_in_one_line(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_AWS_SDK)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"cloud": "aws", "region": "us-east-1", "logFormat": "json"}))
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "run",
            "--once",
            "--config",
            str(config),
            "--kubeconfig",
            kubeconfig("http://127.0.0.1:9", tmp_path / "kc"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "tidal: error: cloud 'aws' needs the aws extra: pip install 'tidal-autoscaler[aws]' "
        "(module 'boto3' is not installed)"
    ]
    assert "Traceback" not in done.stdout + done.stderr


def test_a_provider_that_cannot_import_its_sdk_is_named_with_the_missing_module() -> None:
    def needs_oci(*args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError("No module named 'oci'", name="oci")

    with pytest.raises(ProviderNotFound) as raised:
        load_provider("oracle", registry={"oracle": needs_oci})
    assert (
        str(raised.value) == "cloud 'oracle': its provider cannot be loaded (module 'oci' is not installed)"
    )
    with pytest.raises(ProviderNotFound, match=r"needs the gcp extra: pip install 'tidal-autoscaler\[gcp\]'"):
        load_provider("gcp", registry={"gcp": needs_oci})


def test_run_lays_a_second_config_file_over_the_first(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.create(unschedulable_gpu_pod("infer-0"))
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(base_config(simulated={"registerNodes": False})))
        preset = tmp_path / "kai.yaml"
        preset.write_text("clusterGPULimit: 0\n")  # the preset wins: nothing may be launched
        argv = ["run", "--once", "--config", str(config), "--config", str(preset)]
        assert main([*argv, "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]) == 0
        reasons = {e["reason"]: e["message"] for e in api.list("events")}
        assert "TriggeredScaleUp" not in reasons
        assert "clusterGPULimit 0 reached" in reasons["NotTriggerScaleUp"]


def test_run_names_an_option_set_in_two_config_files_once_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeApiServer() as api:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(base_config(clusterGPULimit=32, simulated={"registerNodes": False})))
        preset = tmp_path / "kai.yaml"
        preset.write_text(yaml.safe_dump({"clusterGPULimit": 16, "schedulerNames": ["kai-scheduler"]}))
        argv = ["run", "--once", "--config", str(config), "--config", str(preset)]
        assert main([*argv, "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]) == 0
    captured = capsys.readouterr()
    logged = [
        line for line in (captured.out + captured.err).splitlines() if "configuration_key_set_twice" in line
    ]
    assert len(logged) == 1
    assert "clusterGPULimit" in logged[0] and str(config) in logged[0] and str(preset) in logged[0]


def test_run_once_without_the_leases_namespace_exits_non_zero_saying_why_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeApiServer(namespaces=("default", "kube-system")) as api:
        api.create(unschedulable_gpu_pod("infer-0"))
        config = tmp_path / "config.yaml"
        config.write_text(
            yaml.safe_dump(base_config(leaderElection={"enabled": True}, simulated={"registerNodes": False}))
        )
        code = main(
            ["run", "--once", "--config", str(config), "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]
        )
        launched = [e for e in api.list("events") if e.get("reason") == "TriggeredScaleUp"]
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert err[-1].startswith(
        "tidal: not leading (lease tidal-system/tidal): namespace 'tidal-system' does not"
    )
    assert err[-1].endswith("nothing was done")
    assert [line for line in err if line.startswith("tidal:")] == [err[-1]]
    assert launched == []


def two_contexts(url: str, path: Path) -> str:
    """A kubeconfig whose current context points nowhere, and a context "fake" that reaches the API server."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "nowhere",
                "clusters": [
                    {"name": "fake", "cluster": {"server": url}},
                    {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}},
                ],
                "users": [{"name": "tidal", "user": {"token": "not-a-secret"}}],
                "contexts": [
                    {"name": "fake", "context": {"cluster": "fake", "user": "tidal"}},
                    {"name": "nowhere", "context": {"cluster": "nowhere", "user": "tidal"}},
                ],
            }
        )
    )
    return str(path)


def test_run_context_picks_the_kubeconfig_context_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeApiServer() as api:
        api.create(unschedulable_gpu_pod("infer-0"))
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(base_config(simulated={"registerNodes": False})))
        kc = two_contexts(api.url, tmp_path / "kc")
        code = main(["run", "--once", "--config", str(config), "--kubeconfig", kc, "--context", "fake"])
        assert code == 0
        assert [e for e in api.list("events") if e.get("reason") == "TriggeredScaleUp"]


def test_run_with_a_context_the_kubeconfig_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(base_config()))
    kc = two_contexts("http://127.0.0.1:9", tmp_path / "kc")
    code = main(["run", "--once", "--config", str(config), "--kubeconfig", kc, "--context", "prod"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "prod" in err


def test_run_log_flags_win_over_the_configurations_log_format_and_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    with FakeApiServer() as api:
        config = tmp_path / "config.yaml"
        settings = base_config(simulated={"registerNodes": False})
        config.write_text(yaml.safe_dump({**settings, "logFormat": "console", "logLevel": "warning"}))
        kc = kubeconfig(api.url, tmp_path / "kc")
        args = ["run", "--once", "--config", str(config), "--kubeconfig", kc]
        assert main([*args, "--log-format", "json", "--log-level", "info"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line JSON, though the file says console
    # The file says warning; the flag says info, so the info event of reading the configuration is there.
    assert any(r["event"] == "configuration_read" and r["level"] == "info" for r in records)


def test_run_text_log_format_is_readable_lines_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeApiServer() as api:
        config = tmp_path / "config.yaml"
        config.write_text(
            yaml.safe_dump({**base_config(simulated={"registerNodes": False}), "logFormat": "json"})
        )
        kc = kubeconfig(api.url, tmp_path / "kc")
        args = ["run", "--once", "--config", str(config), "--kubeconfig", kc]
        assert main([*args, "--log-format", "text", "--log-level", "info"]) == 0
    out = capsys.readouterr().out
    read = next(line for line in out.splitlines() if "configuration_read" in line)
    assert not read.lstrip().startswith("{")
