#!/usr/bin/env python3
"""Write docs/configuration.md, the configuration reference, from the configuration models.

    python scripts/gen_config_docs.py           # rewrite the file (the same as: tidal config docs > FILE)
    python scripts/gen_config_docs.py --check   # exit 1 when the file is not what this script writes

The options and their descriptions come from autoscaler/config/models.py and the providers' registered
sections; each one's default from autoscaler/config/defaults.yaml (see autoscaler/config/reference.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autoscaler.config.generated import write_or_check
from autoscaler.config.reference import SourceError, markdown, parse
from autoscaler.config.reference import render as render_options

__all__ = ["SourceError", "main", "render"]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "configuration.md"


def render(text: str) -> str:
    """The Markdown reference for a default file's ``text`` (its options, defaults and comments)."""
    return render_options(parse(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    try:
        text = markdown()
    except SourceError as err:
        print(err, file=sys.stderr)
        return 2
    return write_or_check(
        OUTPUT, text, check=args.check, shown_as=f"{OUTPUT.relative_to(REPO)}", regenerate="tidal config docs"
    )


if __name__ == "__main__":
    sys.exit(main())
