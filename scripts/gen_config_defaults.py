#!/usr/bin/env python3
"""Write autoscaler/config/built_defaults.py: the configuration's defaults, validated, as Python.

    python scripts/gen_config_defaults.py           # rewrite the file
    python scripts/gen_config_defaults.py --check   # exit 1 when the file is not what this script writes

``defaults.yaml`` goes through the same validation as any configuration (``config_from_mapping``); the values it
gives are written out as the Python that makes them, so a command run without a configuration file starts from
them without reading YAML or importing pydantic. A test holds the file equal to what this script writes now,
and the configuration it makes equal to the validated defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from autoscaler.config.generated import write_or_check
from autoscaler.config.options import _defaults, provider_sections, validated_defaults

__all__ = ["OUTPUT", "main", "render"]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "autoscaler" / "config" / "built_defaults.py"
INDENT = "    "
LINE_LENGTH = 110  # pyproject.toml's [tool.ruff]

HEADER = '''"""The configuration's defaults: ``defaults.yaml`` as validation makes it, written as Python.

Written by scripts/gen_config_defaults.py; do not edit (change defaults.yaml and run the script). A test holds
this file equal to what the script writes, and :func:`options` equal to the validated defaults.
"""

from __future__ import annotations

'''


class _Writer:
    """Python source for a value, laid out as ruff formats it; the names it needs imported."""

    def __init__(self) -> None:
        self.imports: set[tuple[str, str]] = set()

    def _name(self, cls: type) -> str:
        self.imports.add((cls.__module__, cls.__qualname__.split(".")[0]))
        return cls.__qualname__

    def value(self, value: Any, depth: int) -> str:
        if value is None or (isinstance(value, bool | int | float) and not isinstance(value, enum.Enum)):
            return repr(value)
        if isinstance(value, str):
            return _string(value)
        if isinstance(value, enum.Enum):
            return f"{self._name(type(value))}.{value.name}"
        if isinstance(value, re.Pattern):
            self.imports.add(("re", ""))
            return _laid_out("re.compile(", [_string(value.pattern), str(value.flags)], ")", depth)
        if isinstance(value, MappingProxyType):
            self.imports.add(("types", "MappingProxyType"))
            return f"MappingProxyType({self.value(dict(value), depth)})"
        if isinstance(value, dict):
            items = [f"{self.value(k, depth + 1)}: {self.value(v, depth + 1)}" for k, v in value.items()]
            return _laid_out("{", items, "}", depth)
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            only = self.value(value[0], depth + 1) if len(value) == 1 else ""
            if len(value) == 1 and "\n" not in only:  # its comma is not a magic one: ruff joins the lines
                return f"({only},)"
            return _laid_out("(", [self.value(v, depth + 1) for v in value], ")", depth)
        if isinstance(value, list):
            return _laid_out("[", [self.value(v, depth + 1) for v in value], "]", depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            if any(not f.init for f in fields):
                raise TypeError(f"{type(value).__name__} has fields its __init__ does not take")
            args = [f"{f.name}={self.value(getattr(value, f.name), depth + 1)}" for f in fields]
            return _laid_out(f"{self._name(type(value))}(", args, ")", depth)
        raise TypeError(f"no Python written for a {type(value).__name__}: {value!r}")

    def import_lines(self) -> str:
        plain = sorted(module for module, name in self.imports if not name)
        named: dict[str, list[str]] = {}
        for module, name in self.imports:
            if name:
                named.setdefault(module, []).append(name)
        named.setdefault("typing", []).append("Any")
        stdlib = [f"import {m}" for m in plain]
        stdlib += [_from(m, n) for m, n in sorted(named.items()) if m in _STDLIB]
        own = [_from(m, n) for m, n in sorted(named.items()) if m not in _STDLIB]
        return "\n".join(stdlib) + "\n\n" + "\n".join(own) + "\n"


_STDLIB = {"types", "typing", "re"}


def _from(module: str, names: list[str]) -> str:
    """An import as ruff's isort writes it: on one line if it fits, else one name a line."""
    line = f"from {module} import {', '.join(sorted(names))}"
    if len(line) <= LINE_LENGTH:
        return line
    return _laid_out(f"from {module} import (", sorted(names), ")", 0)


def _string(text: str) -> str:
    """A string literal in double quotes, as ruff writes it."""
    literal = repr(text)
    if literal.startswith("'") and '"' not in text:
        return '"' + literal[1:-1] + '"'
    return literal


def _laid_out(opening: str, items: Iterable[str], closing: str, depth: int) -> str:
    """A call or display with one item a line and a trailing comma (ruff keeps it so); empty, on one line."""
    items = list(items)
    if not items:
        return opening + closing
    inner = INDENT * (depth + 1)
    return opening + "\n" + "".join(f"{inner}{item},\n" for item in items) + INDENT * depth + closing


def render() -> str:
    """The file's text."""
    config = validated_defaults()
    writer = _Writer()
    options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "providers"}
    documented = {name: _defaults()[name] for name in provider_sections() if name in _defaults()}
    body = writer.value(options, 1)
    sections = writer.value(documented, 0)
    return (
        HEADER
        + writer.import_lines()
        + '\n__all__ = ["PROVIDER_SECTIONS", "options"]\n\n'
        + "# The providers' sections defaults.yaml documents, as written there; each provider checks its own.\n"
        + f"PROVIDER_SECTIONS: dict[str, Any] = {sections}\n\n\n"
        + "def options() -> dict[str, Any]:\n"
        + f'{INDENT}"""Every option but the providers\' sections, at its default: ``Config``\'s arguments."""\n'
        + f"{INDENT}return {body}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    return write_or_check(
        OUTPUT,
        text,
        check=args.check,
        shown_as=f"{OUTPUT.relative_to(REPO)}",
        regenerate="python scripts/gen_config_defaults.py",
    )


if __name__ == "__main__":
    sys.exit(main())
