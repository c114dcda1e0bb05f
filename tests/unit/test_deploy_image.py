"""The Dockerfile's invariants (no Docker engine here to build it): multi-stage, slim Python 3.11, non-root,
one cloud's extras chosen by a build argument, and a .dockerignore that keeps the build context minimal."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

import pytest

from autoscaler.version import __version__
from tests.fakes.helm_chart import REPO, find, render

DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    image: str
    name: str = ""
    lines: list[tuple[str, str]] = field(default_factory=list)  # (instruction, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.lines if ins == instruction]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    )
    result = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            result.append((instruction.upper(), " ".join(args.split())))
    return result


def parse() -> list[Stage]:
    """The stages, with the global ARG defaults their FROM lines refer to filled in."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction, args in instructions(DOCKERFILE.read_text()):
        if instruction == "FROM":
            words = args.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], words[0])
            stages.append(Stage(image, words[2] if len(words) > 2 and words[1].upper() == "AS" else ""))
        elif not stages and instruction == "ARG":
            name, _, default = args.partition("=")
            global_args[name] = default
        elif stages:
            stages[-1].lines.append((instruction, args))
    return stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"{args} is not in exec form"
    return value


def test_the_image_is_built_in_two_stages_on_slim_python_311() -> None:
    stages = parse()
    assert len(stages) >= 2 and stages[0].name
    for stage in stages:
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", stage.image), stage.image


def test_the_runtime_stage_only_copies_the_built_virtualenv_and_data() -> None:
    stages = parse()
    build, runtime = stages[0], stages[-1]
    assert runtime.all("RUN") and all("pip" not in run for run in runtime.all("RUN"))
    copies = runtime.all("COPY")
    assert f"--from={build.name} /opt/tidal /opt/tidal" in copies
    assert all(c.startswith("--from=") or c.split()[0].startswith("config/") for c in copies)
    assert not runtime.all("ADD")


def test_the_extras_are_chosen_by_a_build_argument_defaulting_to_aws() -> None:
    build = parse()[0]
    assert "EXTRAS=aws" in build.all("ARG")
    (install,) = [r for r in build.all("RUN") if "pip install" in r]
    assert re.search(r"\.\[\$\{?EXTRAS\}?\]", install)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"aws", "gcp", "azure"} <= extras.keys()


def test_the_build_checks_the_installed_command_runs() -> None:
    build = parse()[0]
    (install,) = [r for r in build.all("RUN") if "pip install" in r]
    assert install.rstrip().endswith("/opt/tidal/bin/tidal --version")


def test_the_image_runs_as_an_unprivileged_numeric_user() -> None:
    runtime = parse()[-1]
    user = runtime.all("USER")[-1]
    uid, _, gid = user.partition(":")
    assert int(uid) > 0 and int(gid or uid) > 0


def test_the_deployment_runs_the_image_user_and_its_entrypoint_with_the_mounted_config() -> None:
    runtime = parse()[-1]
    uid, _, gid = runtime.all("USER")[-1].partition(":")
    spec = find(render(), "Deployment", "tidal")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
        int(uid),
        int(gid),
    )
    assert exec_form(runtime.all("ENTRYPOINT")[-1]) == ["tidal"]
    assert "command" not in container
    assert exec_form(runtime.all("CMD")[-1]) == container["args"]


def test_the_metrics_port_is_exposed() -> None:
    assert parse()[-1].all("EXPOSE") == ["8080"]


def _glob(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regexp: ``**`` spans directories, ``*`` and ``?`` stay within one."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the build context: a pattern matching the path or one of
    its parent directories decides, the last matching pattern wins, ``!`` re-includes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regexp = _glob(pattern.removeprefix("!").strip("/"))
        if any(regexp.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    sources = []
    for stage in parse():
        for copy in stage.all("COPY"):
            words = shlex.split(copy)
            if not words[0].startswith("--from="):
                sources += words[:-1]
    assert sources
    assert [s for s in sources if dockerignore_excludes(s)] == []
    assert [s for s in sources if not (REPO / s).exists()] == []


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        "tests/unit/test_config.py",
        ".git/HEAD",
        "autoscaler/__pycache__/x.pyc",
        "charts/tidal/values.yaml",
        "docs/install.md",
    ],
)
def test_the_build_context_leaves_out_what_the_image_does_not_need(path: str) -> None:
    assert dockerignore_excludes(path)


def _tag_for(extras: str) -> str:
    """The tag the chart expects for an image built with ``--build-arg EXTRAS=<extras>``: the version tidal
    reports (autoscaler/version.py, its one source), so a release that bumps it and forgets a tag fails here."""
    return f"{__version__}-{extras or 'simulated'}"


def _image_tag(examples: tuple[str, ...]) -> str:
    image = find(render(examples=examples), "Deployment", "tidal")["spec"]["template"]["spec"]["containers"][
        0
    ]["image"]
    tag: str = image.rpartition(":")[2]
    return tag


def _default_extras() -> str:
    """The EXTRAS an image built with the Dockerfile's defaults has."""
    found = re.search(r"^ARG EXTRAS=(\S*)", DOCKERFILE.read_text(), re.M)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize(
    ("examples", "extras"),
    [
        ((), _default_extras()),
        (("eks",), "aws"),
        (("gke",), "gcp"),
        (("aks",), "azure"),
        (("simulated",), ""),
    ],
    ids=["defaults", "eks", "gke", "aks", "simulated"],
)
def test_the_chart_runs_the_image_tagged_for_the_extras_its_cloud_needs(
    examples: tuple[str, ...], extras: str
) -> None:
    # The chart's default cloud is tidal's (aws), which is what a build with the Dockerfile's defaults makes.
    assert _image_tag(examples) == _tag_for(extras)


def test_every_build_command_in_the_install_guide_tags_the_image_the_chart_expects() -> None:
    guide = (REPO / "docs" / "install.md").read_text()
    builds = re.findall(r"docker build --build-arg EXTRAS=(\S*) -t (\S+) \.", guide)
    assert {extras for extras, _ in builds} == {"aws", ""}  # a cloud's image, and the simulated one
    for extras, image in builds:
        assert image.rpartition(":")[2] == _tag_for(extras), image
    loaded = re.findall(r"kind load docker-image (\S+)", guide)
    assert loaded == [image for extras, image in builds if not extras]
