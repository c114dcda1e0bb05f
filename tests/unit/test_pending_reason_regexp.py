"""Which pending messages count: the default pendingPodReasonRegexp and the KAI preset against every message a
real kube-scheduler v1.36.2 wrote (../shared/data/scheduler, read in place) and the KAI messages docs/kai.md
quotes. A queue hold never counts; a shortage a new node can fix always does."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main as cli
from autoscaler.config.options import default_config
from autoscaler.sim.presets import KAI_PENDING_REGEXP

REPO = Path(__file__).resolve().parents[2]
CASES = REPO.parent / "shared" / "data" / "scheduler" / "kube-scheduler-v1.36-cases.jsonl"
KAI_GUIDE = REPO / "docs" / "kai.md"
PRESET = REPO / "config" / "examples" / "kai.yaml"

# The recorder made one node eligible at a time by cordoning the others (or, for pods tolerating that taint,
# filling their pod slots): those counts are the recording's, not a reason of the node the verdict is about.
CORDONED = re.compile(r"^\d+ node\(s\) were unschedulable$")
FILLED = re.compile(r"^\d+ Too many pods$")


def default_regexp() -> re.Pattern[str]:
    return default_config().pending_pod_reason_regexp


def preset_regexp() -> re.Pattern[str]:
    return re.compile(yaml.safe_load(PRESET.read_text(encoding="utf-8"))["pendingPodReasonRegexp"])


REGEXPS = {"default": default_regexp, "kai-preset": preset_regexp}


@cache
def recorded() -> tuple[tuple[str, bool], ...]:
    """(message, whether the other nodes were filled rather than cordoned) of every infeasible node verdict,
    in file order, without repeats."""
    if not CASES.is_file():
        pytest.skip(f"{CASES} is not present")
    seen: dict[tuple[str, bool], None] = {}
    with CASES.open(encoding="utf-8") as handle:
        for line in handle:
            case = json.loads(line)
            for message in case["messages"].values():
                seen[(message, "tolerateAll" in case["features"])] = None
    return tuple(seen)


def recorded_messages() -> list[str]:
    return list(dict.fromkeys(message for message, _ in recorded()))


def own_reasons(message: str, filled: bool) -> str:
    """The message with only the reasons of the node it is about: ``0/3 nodes are available: 1 Insufficient
    cpu, 2 node(s) were unschedulable. ...`` becomes ``0/3 nodes are available: 1 Insufficient cpu.``"""
    head, _, reasons = message.partition(": ")
    listed = reasons.split(". ", 1)[0]
    isolation = FILLED if filled else CORDONED
    kept = [r for r in listed.split(", ") if not isolation.match(r)]
    return f"{head}: {', '.join(kept)}."


def guide_messages(kind: str) -> list[str]:
    """The messages docs/kai.md lists in its ``text`` block that follows the line naming ``kind``."""
    text = KAI_GUIDE.read_text(encoding="utf-8")
    block = re.search(rf"{kind}:\n\n```text\n(.*?)\n```", text, flags=re.S)
    assert block, f"docs/kai.md has no text block after '{kind}:'"
    return [line.replace("\\n", "\n") for line in block.group(1).splitlines() if line]


@pytest.mark.parametrize("which", REGEXPS)
def test_every_message_kube_scheduler_recorded_counts(which: str) -> None:
    messages = recorded_messages()
    assert len(messages) >= 80
    regexp = REGEXPS[which]()
    assert [m for m in messages if not regexp.search(m)] == []


@pytest.mark.parametrize("which", REGEXPS)
def test_every_recorded_reason_counts_without_the_recordings_own_cordon_counts(which: str) -> None:
    reasons = sorted({own_reasons(m, filled) for m, filled in recorded()})
    assert not any(r.endswith(": .") for r in reasons)
    assert any("didn't match pod topology spread constraints" in r for r in reasons)
    regexp = REGEXPS[which]()
    assert [r for r in reasons if not regexp.search(r)] == []


@pytest.mark.parametrize("which", REGEXPS)
def test_no_queue_hold_kai_writes_counts(which: str) -> None:
    holds = guide_messages("Queue holds")
    assert len(holds) >= 6
    regexp = REGEXPS[which]()
    assert [m for m in holds if regexp.search(m)] == []


@pytest.mark.parametrize("which", REGEXPS)
def test_every_capacity_message_kai_writes_counts(which: str) -> None:
    shortages = guide_messages("Capacity shortfalls")
    assert len(shortages) >= 5
    regexp = REGEXPS[which]()
    assert [m for m in shortages if not regexp.search(m)] == []


def test_the_simulator_applies_the_kai_presets_regexp_to_kai_scenarios() -> None:
    assert yaml.safe_load(PRESET.read_text(encoding="utf-8"))["pendingPodReasonRegexp"] == KAI_PENDING_REGEXP


def test_the_preset_sets_only_the_keys_about_kai() -> None:
    # Laid over a cloud's config.yaml, anything else here would silently replace the user's value.
    preset = yaml.safe_load(PRESET.read_text(encoding="utf-8"))
    assert sorted(preset) == ["pendingPodReasonRegexp", "schedulerNames"]


def test_a_plan_with_no_configuration_buys_nothing_for_pods_kai_holds_over_their_queue_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--snapshot", "config/examples/snapshot-kai.yaml"]
    argv += [
        "--catalog",
        "config/catalogs/aws-us-east-1.csv",
        "--now",
        "2026-11-20T10:05:00Z",
        "--output",
        "json",
    ]
    held = {"research/finetune-bert-large-x7k2p", "research/sweep-lr-3e-4-q9w8d"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    launched_for = {pod for launch in doc["launches"] for pod in launch["pods"]}
    assert launched_for & held == set()
    assert {i["pod"]: i["kind"] for i in doc["ignored"] if i["pod"] in held} == dict.fromkeys(
        held, "reason-mismatch"
    )
