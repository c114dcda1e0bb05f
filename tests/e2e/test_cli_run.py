"""`tidal run --once` through the command line, against the fake API server via a kubeconfig file."""

import yaml

from autoscaler.cli import main
from tests.e2e.harness import base_config, gpu_pod
from tests.fakes.kube_apiserver import FakeApiServer


def kubeconfig(url, path):
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


def test_run_once_reconciles_and_launches(tmp_path, capsys):
    with FakeApiServer() as api:
        pod = gpu_pod("infer-0")
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "no nodes available to schedule pods",
            }
        ]
        api.create(pod)
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(base_config(simulated={"registerNodes": False})))
        code = main(
            ["run", "--once", "--config", str(config), "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]
        )
        assert code == 0
        events = [e for e in api.list("events") if e.get("reason") == "TriggeredScaleUp"]
        assert len(events) == 1 and "g4dn.xlarge" in events[0]["message"]


def test_run_with_an_invalid_config_is_one_line_and_exit_2(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("clusterGPULimt: 4\n")
    code = main(["run", "--once", "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "clusterGPULimt: unknown key (did you mean 'clusterGPULimit'?)" in err


def test_run_with_an_unknown_cloud_names_the_installed_providers(tmp_path, capsys):
    with FakeApiServer() as api:
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"cloud": "oracle", "region": "us-ashburn-1"}))
        code = main(
            ["run", "--once", "--config", str(config), "--kubeconfig", kubeconfig(api.url, tmp_path / "kc")]
        )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "cloud 'oracle' has no installed provider" in err and "simulated" in err
