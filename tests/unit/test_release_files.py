"""What makes tidal an open-source project one can adopt: the license text, a changelog for the version it
reports, how to report a vulnerability, and a compatibility table that states what the code really uses."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from autoscaler.runtime.kube.cluster_cache import KAI_PODGROUPS, KAI_QUEUES
from autoscaler.version import __version__

REPO = Path(__file__).resolve().parents[2]


def compatibility_table() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Compatibility: what was tested", 1)[1].split("\n## ", 1)[0]
    assert section.count("\n|") >= 5
    return section


def test_the_license_is_the_full_apache_2_text_and_ships_with_the_package() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert [int(n) for n in re.findall(r"^ {3}(\d)\. [A-Z]", text, flags=re.M)] == list(range(1, 10))
    assert "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (project["license"], project["license-files"]) == ("Apache-2.0", ["LICENSE"])
    assert importlib.metadata.metadata("tidal-autoscaler")["License-Expression"] == "Apache-2.0"


def test_the_changelog_has_a_section_for_the_version_tidal_reports() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(__version__)}\b", changelog, flags=re.M)


def test_the_security_policy_says_how_to_report_privately_and_which_versions_get_fixes() -> None:
    policy = (REPO / "SECURITY.md").read_text(encoding="utf-8")
    assert "## Reporting a vulnerability" in policy and "Report a vulnerability" in policy
    assert "Do not open a public issue" in policy
    minor = ".".join(__version__.split(".")[:2])
    assert f"| {minor}.x | yes" in policy


def test_the_compatibility_table_names_the_kubernetes_client_range_pyproject_pins() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "dependencies"
    ]
    pin = next(d for d in dependencies if d.startswith("kubernetes"))
    assert (
        f"`{pin.removeprefix('kubernetes').split('#')[0].strip()}` in pyproject.toml" in compatibility_table()
    )
    installed = importlib.metadata.version("kubernetes")
    assert f"client {installed}" in compatibility_table()


def test_the_compatibility_table_names_the_kai_api_groups_tidal_reads() -> None:
    table = compatibility_table()
    for kind, name in ((KAI_PODGROUPS, "PodGroups"), (KAI_QUEUES, "Queues")):
        assert f"`{kind.group}/{kind.version}` {name}" in table


def test_the_compatibility_table_names_the_recorded_scheduler_version_and_python() -> None:
    table = compatibility_table()
    assert "kube-scheduler v1.36.2" in table
    python = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "requires-python"
    ]
    assert python == ">=3.11" and "| Python | 3.11" in table


def test_the_changelog_has_an_unreleased_section_above_the_dated_release_of_this_version() -> None:
    # Changes made since this version was released are listed under Unreleased until the next release.
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", changelog, flags=re.M)
    assert sections[0] == "Unreleased"
    assert re.fullmatch(rf"{re.escape(__version__)} — \d{{4}}-\d{{2}}-\d{{2}}", sections[1])
    between = changelog.split("## Unreleased", 1)[1].split(f"## {__version__}", 1)[0]
    assert all(line.startswith(("- ", "  ")) for line in between.strip().splitlines())


def test_the_readmes_first_screen_says_how_to_try_it_and_what_it_was_tested_against() -> None:
    first_screen = "\n".join((REPO / "README.md").read_text(encoding="utf-8").splitlines()[:24])
    assert "make demo" in first_screen and "make test" in first_screen
    assert "real Kubernetes v1.36.2 control plane" in first_screen
    assert "fakes of AWS, GCP and Azure" in first_screen
    assert "never run against a real cloud" in first_screen
    assert "has not yet run against a live cluster" not in (REPO / "README.md").read_text(encoding="utf-8")
