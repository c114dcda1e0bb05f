"""What the guides show is what tidal does: the troubleshooting plan output, the KAI preset, the install
command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main as cli
from tests.fakes.helm_chart import CHART, helm

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)


def test_the_troubleshooting_plan_example_prints_what_the_guide_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = fenced_blocks((DOCS / "troubleshooting.md").read_text())
    index = next(i for i, (_, body) in enumerate(blocks) if "config/examples/snapshot-kai.yaml" in body)
    command, (language, shown) = blocks[index][1], blocks[index + 1]
    argv = command.replace("\\\n", " ").split()
    assert argv[:2] == ["tidal", "plan"] and language == "text"
    monkeypatch.chdir(REPO)
    assert cli.main(argv[1:]) == 0
    printed = set(capsys.readouterr().out.splitlines())
    assert [line for line in shown.splitlines() if line and line not in printed] == []


def test_the_kai_guide_shows_the_preset_exactly() -> None:
    preset = yaml.safe_load((REPO / "config" / "examples" / "kai.yaml").read_text())
    shown = next(
        yaml.safe_load(body)
        for language, body in fenced_blocks((DOCS / "kai.md").read_text())
        if language == "yaml" and "pendingPodReasonRegexp" in body
    )
    assert shown == preset


def test_the_install_guides_helm_install_renders_with_its_identity_image_and_dry_run() -> None:
    guide = (DOCS / "install.md").read_text()
    copied = re.search(r"cp charts/tidal/examples/(\w+)\.yaml my-values\.yaml", guide)
    command = next(
        " ".join(line.rstrip("\\").strip() for line in body.splitlines())
        for language, body in fenced_blocks(guide)
        if language == "sh" and "helm install tidal charts/tidal" in body and "my-values.yaml" in body
    )
    assert copied is not None and copied.group(1) == "eks"
    argv = shlex.split(command[command.index("helm install") :].split("#")[0])
    end = next((i for i, word in enumerate(argv[1:], 1) if word == "helm" or word == "kubectl"), len(argv))
    argv = argv[:end]
    assert argv[:4] == ["helm", "install", "tidal", "charts/tidal"]
    # The same release, rendered instead of installed, with the example the guide copies as my-values.yaml.
    args = [str(CHART / "examples" / "eks.yaml") if a == "my-values.yaml" else a for a in argv[4:]]
    done = helm("template", "tidal", str(CHART), *[a for a in args if a != "--create-namespace"])
    assert done.returncode == 0, done.stderr
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(done.stdout) if o}
    account = objects[("ServiceAccount", "tidal")]["metadata"]
    container = objects[("Deployment", "tidal")]["spec"]["template"]["spec"]["containers"][0]
    assert account["namespace"] == "tidal-system"
    assert (
        account["annotations"]["eks.amazonaws.com/role-arn"]
        == "arn:aws:iam::123456789012:role/tidal-autoscaler"
    )
    assert container["image"] == "registry.example.com/tidal-autoscaler:0.2.0-aws"
    assert container["args"] == ["run", "--config", "/etc/tidal/config.yaml", "--dry-run"]


def test_the_gpu_sharing_worked_example_prints_what_the_guide_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = fenced_blocks((DOCS / "gpu-sharing.md").read_text())
    index = next(
        i for i, (_, body) in enumerate(blocks) if "config/examples/snapshot-kai-sharing.yaml" in body
    )
    command, (language, shown) = blocks[index][1], blocks[index + 1]
    argv = command.replace("\\\n", " ").split()
    assert argv[:2] == ["tidal", "plan"] and language == "text"
    monkeypatch.chdir(REPO)
    assert cli.main(argv[1:]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert [line for line in shown.splitlines() if line not in printed] == []
    assert "launch 4 nodes" in shown  # six quarter-GPU replicas on two GPUs, not six
