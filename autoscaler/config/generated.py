"""Files written from tidal's own sources (the configuration's built defaults and reference, the chart's
values schema and dashboard), each by a script under ``scripts/`` that can also check the file is current."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(output: Path, text: str, *, check: bool, shown_as: str, regenerate: str) -> int:
    """Write ``text`` to ``output`` and return 0; with ``check``, write nothing and return 1, saying
    ``"{shown_as} is out of date: run {regenerate}"`` on stderr, when the file is not ``text``."""
    if not check:
        output.write_text(text, encoding="utf-8")
        return 0
    current = output.read_text(encoding="utf-8") if output.exists() else ""
    if current != text:
        print(f"{shown_as} is out of date: run {regenerate}", file=sys.stderr)
        return 1
    return 0
