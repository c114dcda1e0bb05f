"""A file written from tidal's own sources, by its script: written when asked, and only reported when checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.config.generated import write_or_check


def test_a_stale_file_is_reported_with_how_to_write_it_again_and_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "values.schema.json"
    schema.write_text("{}\n", encoding="utf-8")

    code = write_or_check(
        schema, '{"type": "object"}\n', check=True, shown_as="values.schema.json", regenerate="make schema"
    )

    assert code == 1
    assert capsys.readouterr().err == "values.schema.json is out of date: run make schema\n"
    assert schema.read_text(encoding="utf-8") == "{}\n"


def test_a_missing_file_is_stale(tmp_path: Path) -> None:
    assert write_or_check(tmp_path / "gone.md", "# x\n", check=True, shown_as="gone.md", regenerate="x") == 1


def test_a_current_file_passes_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "configuration.md"
    docs.write_text("# Options\n", encoding="utf-8")

    assert write_or_check(docs, "# Options\n", check=True, shown_as="configuration.md", regenerate="x") == 0
    assert capsys.readouterr().err == ""


def test_without_the_check_the_file_is_written(tmp_path: Path) -> None:
    docs = tmp_path / "configuration.md"

    assert write_or_check(docs, "# Options\n", check=False, shown_as="configuration.md", regenerate="x") == 0
    assert docs.read_text(encoding="utf-8") == "# Options\n"
