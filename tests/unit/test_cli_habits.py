"""The command line behaves as kubectl users expect: `-o`, `-` for standard input, usage for a bare `tidal`,
one-line errors without a doubled prefix, `tidal config validate`, help on every flag, and counts in words."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import build_parser, main
from autoscaler.cli.render import plan_to_table
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from autoscaler.config.options import Config

REPO = Path(__file__).resolve().parents[2]
KAI = str(REPO / "config/examples/snapshot-kai.yaml")
CATALOG = str(REPO / "config/catalogs/aws-us-east-1.csv")
NOW = "2026-11-20T10:05:00Z"


def test_dash_o_json_is_output_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", KAI, "--catalog", CATALOG, "--now", NOW, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launches"]


def test_catalog_takes_dash_o_too() -> None:
    args = build_parser().parse_args(["catalog", "-o", "csv"])
    assert args.output == "csv"


def test_a_wrong_choice_is_one_line_naming_the_subcommand_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", KAI, "--catalog", CATALOG, "-o", "yaml"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "tidal: error: plan: argument -o/--output: invalid choice: 'yaml' (choose from 'table', 'json')\n"
    )


def test_an_unknown_argument_is_not_prefixed_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", KAI, "--catalog", CATALOG, "--frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tidal: error: ") and err.count("tidal") == 1
    assert "unrecognized arguments: --frobnicate" in err


def test_snapshot_dash_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(Path(KAI).read_text()))
    assert main(["plan", "--snapshot", "-", "--catalog", CATALOG, "--now", NOW, "-o", "json"]) == 0
    from_stdin = json.loads(capsys.readouterr().out)
    assert main(["plan", "--snapshot", KAI, "--catalog", CATALOG, "--now", NOW, "-o", "json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert from_stdin["launches"] == from_file["launches"]


def test_standard_input_given_twice_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(Path(KAI).read_text()))
    assert main(["plan", "--snapshot", "-", "--snapshot", "-", "--catalog", CATALOG]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "standard input is given more than once" in err


def test_a_bare_tidal_prints_its_usage_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tidal")
    for command in ("plan", "catalog", "simulate", "run", "config"):
        assert command in out


def _actions(parser: argparse.ArgumentParser, where: str = "tidal") -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{where} {name}")
        else:
            yield where, action


def test_every_flag_and_argument_has_help() -> None:
    missing = [
        f"{where} {'/'.join(a.option_strings) or a.dest}"
        for where, a in _actions(build_parser())
        if not a.help or a.help == argparse.SUPPRESS
    ]
    assert missing == []


# --- tidal config validate --------------------------------------------------------------------------------


def test_config_validate_names_the_file_field_and_value_of_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"cloud": "digitalocean", "clusterGPULimit": -3, "scanIntervall": "10s"}))
    good = REPO / "config/examples/kai.yaml"
    assert main(["config", "validate", str(bad), str(good)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{bad}: clusterGPULimit: -3 is below 0",
        f"{bad}: scanIntervall: unknown key (did you mean 'scanInterval'?)",
        f"{bad}: cloud: 'digitalocean' is not a cloud tidal knows (choices: aws, azure, gcp, simulated)",
        f"{good}: valid",
    ]
    assert err == "tidal: 3 problems in 1 of 2 files\n"


def test_config_validate_of_good_files_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(REPO / "config/default.yaml"), str(REPO / "config/examples/demo.yaml")]
    assert main(["config", "validate", *files]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{f}: valid" for f in files]


def test_config_validate_of_a_missing_file_is_a_problem_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["config", "validate", str(missing)]) == 1
    assert capsys.readouterr().out == f"{missing}: cannot read the file: No such file or directory\n"


def test_config_schema_still_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    assert "properties" in json.loads(capsys.readouterr().out)


# --- counts in words ---------------------------------------------------------------------------------------


def test_one_pod_and_one_node_are_said_in_the_singular(make_config: Callable[..., Config]) -> None:
    result = plan(PlanInput(snapshot(pod("web-0", cpu="1")), aws_offerings(), make_config(), 1_795_168_800.0))
    head = plan_to_table(result, make_config()).splitlines()[:2]
    assert head[0] == "1 pod needs capacity, 0 need no new node, 0 cannot be placed"
    assert head[1].startswith("launch 1 node for $")


# --- a cloud tidal does not know ---------------------------------------------------------------------------

UNKNOWN = "is not a cloud tidal knows (choices: aws, azure, gcp, simulated)"


def test_plan_with_an_unknown_cloud_says_so_and_lists_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cloud: digitalocean\nregion: nyc3\n")
    assert main(["plan", "--snapshot", KAI, "--catalog", CATALOG, "--config", str(config)]) == 2
    assert capsys.readouterr().err == f"tidal: error: cloud: 'digitalocean' {UNKNOWN}\n"


def test_catalog_with_a_mistyped_cloud_names_the_choices_not_an_extra(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["catalog", "--cloud", "gcpp"]) == 2
    err = capsys.readouterr().err
    assert err == f"tidal: error: cloud: 'gcpp' {UNKNOWN}\n"
    assert "pip install" not in err


def test_simulate_with_an_unknown_cloud_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "kai-day", "--cloud", "oci"]) == 2
    assert capsys.readouterr().err == f"tidal: error: cloud: 'oci' {UNKNOWN}\n"
