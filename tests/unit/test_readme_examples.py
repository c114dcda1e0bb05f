"""Every `tidal` command the README shows works as printed: concrete commands run (a cluster's own snapshot
replaced by the example one), and every flag combination of a synopsis (`[--now ...]`, `a|b|c`) parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autoscaler.cli import main as cli
from autoscaler.sim.run import prepare
from autoscaler.sim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# Files the README's commands take from `kubectl get` on the reader's cluster: the example cluster instead.
FROM_THE_CLUSTER = {
    "snapshot.yaml": "config/examples/snapshot-kai.yaml",
    "kai-objects.yaml": "config/examples/snapshot-empty-cluster.yaml",
}
# Scenarios that take minutes: their commands are checked up to the run (scenario, trace and catalog found).
LONG = {"burst-10k", "alibaba-week"}


def commands() -> list[str]:
    """Each `tidal` command in the README's sh blocks, continuation lines joined, comments dropped."""
    found = []
    for block in re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(("tidal ", ".venv/bin/tidal ")):
                found.append(re.sub(r"\s+", " ", line))
    return found


def is_synopsis(command: str) -> bool:
    return "[" in command or re.search(r"\S\|\S", command) is not None


def expansions(synopsis: str) -> list[list[str]]:
    """Argument lists for each way to write the synopsis: with no optional group, with each one alone, and with
    all of them; every ``a|b|c`` alternative is taken once."""
    groups = re.findall(r"\[([^\]]*)\](?:\.\.\.)?", synopsis)
    required = re.sub(r"\[[^\]]*\](?:\.\.\.)?", " ", synopsis).split()[1:]
    chosen_groups = [[], *([g] for g in groups), groups]
    out = []
    for chosen in chosen_groups:
        words = required + [w for g in chosen for w in g.split()]
        choices = [w.split("|") if "|" in w else [w] for w in words]
        width = max(len(c) for c in choices)
        for i in range(width):
            out.append([c[min(i, len(c) - 1)] for c in choices])
    return out


def runnable(command: str) -> list[str]:
    """The command's arguments with files from the reader's cluster replaced and $TIDAL_DATA expanded."""
    from autoscaler.sim.scenario import data_directory

    if "$TIDAL_DATA" in command and not data_directory().is_dir():
        pytest.skip("the data directory (TIDAL_DATA) is not present")
    expanded = command.replace("$TIDAL_DATA", str(data_directory()))
    words = shlex.split(expanded)[1:]
    return [FROM_THE_CLUSTER.get(w, w) for w in words]


CONCRETE = [c for c in commands() if not is_synopsis(c)]
SYNOPSES = [c for c in commands() if is_synopsis(c)]


def test_the_readme_shows_commands_of_every_subcommand() -> None:
    shown = {c.split()[1] for c in commands()}
    assert {"plan", "simulate", "run"} <= shown
    assert len(CONCRETE) >= 5 and len(SYNOPSES) >= 3


@pytest.mark.parametrize("synopsis", SYNOPSES)
def test_every_flag_combination_of_a_synopsis_parses(synopsis: str) -> None:
    parser = cli.build_parser()
    for argv in expansions(synopsis):
        argv = [FROM_THE_CLUSTER.get(w, w) for w in argv]
        try:
            parser.parse_args(argv)
        except cli.UsageError as err:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{' '.join(argv)}: {err}")


@pytest.mark.parametrize("command", CONCRETE)
def test_a_concrete_command_runs_as_printed(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = runnable(command)
    monkeypatch.chdir(REPO)
    if argv[0] == "run":
        cli.build_parser().parse_args(argv)  # needs a cluster: parsing is what can be checked here
        return
    scenario = argv[argv.index("--scenario") + 1] if "--scenario" in argv else ""
    if scenario in LONG:
        args = cli.build_parser().parse_args(argv)
        assert prepare(
            load_scenario(scenario), catalog=args.catalog[0] if args.catalog else None
        ).scenario.jobs
        return
    assert cli.main(argv) == 0, capsys.readouterr().err


def test_the_synopsis_expansion_takes_every_alternative_and_group() -> None:
    argv = expansions("tidal plan --output table|json [--now T]")
    assert ["plan", "--output", "json"] in argv and ["plan", "--output", "table", "--now", "T"] in argv


def test_trace_options_in_the_readme_are_given_with_a_trace() -> None:
    for command in commands():
        words = command.split()
        if any(w in words for w in ("--window", "--sample", "--compression", "--start")):
            assert "--trace" in words or "alibaba-week" in command, command
