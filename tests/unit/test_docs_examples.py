"""What the guides show is what tidal does: the troubleshooting plan output, the KAI preset, the install
overlay."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main as cli
from tests.fakes.kustomize import KUBECTL

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


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is needed to render deploy/")
def test_the_install_guide_overlay_renders_with_its_identity_image_and_dry_run(tmp_path: Path) -> None:
    guide = (DOCS / "install.md").read_text()
    heredoc = re.search(r"<<'EOF'\n(.*?)\nEOF", guide, flags=re.S)
    assert heredoc is not None and KUBECTL is not None
    kustomization = heredoc.group(1)
    dry_run = next(b for lang, b in fenced_blocks(guide) if lang == "yaml" and "--dry-run" in b)
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    mine = tmp_path / "deploy" / "overlays" / "my-cluster"
    mine.mkdir()
    shutil.copy(REPO / "deploy" / "overlays" / "eks" / "config.yaml", mine / "config.yaml")
    (mine / "kustomization.yaml").write_text(kustomization + "\n" + dry_run)
    out = subprocess.run([KUBECTL, "kustomize", str(mine)], capture_output=True, text=True, check=True).stdout
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out) if o}
    account = objects[("ServiceAccount", "tidal")]["metadata"]["annotations"]
    container = objects[("Deployment", "tidal")]["spec"]["template"]["spec"]["containers"][0]
    assert account["eks.amazonaws.com/role-arn"] == "arn:aws:iam::123456789012:role/tidal-autoscaler"
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
