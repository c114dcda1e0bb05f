"""Where a benchmark writes its result: bench/results for a recorded run, elsewhere for a short one.

Every script takes ``--short`` (a run of seconds that only shows the benchmark still works; its figures mean
nothing) and ``--out DIR`` (the directory its JSON goes to). A short run never writes to bench/results: without
``--out`` it writes to a new temporary directory and says which.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.provenance import commit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--short`` and ``--out``, the same in every benchmark."""
    parser.add_argument(
        "--short",
        action="store_true",
        help="a run of a few seconds that checks the benchmark works; its result never goes to bench/results",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for the result JSON (default: bench/results; a new temporary one with --short)",
    )


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, refused in one line before anything runs when a short run is pointed at
    bench/results."""
    args = parser.parse_args()
    if args.short and args.out is not None and _inside(args.out, RESULTS):
        parser.error(f"--out {args.out} is inside bench/results, which a --short run never writes to")
    return args


def directory(args: argparse.Namespace) -> Path:
    """The directory this run writes to, made if missing."""
    out: Path | None = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="tidal-bench-")) if args.short else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    args.out = out  # every file of one run goes to the same place
    return out


def write(args: argparse.Namespace, name: str, summary: dict[str, Any]) -> Path:
    """Write ``summary`` with the commit it ran on as ``<name>.json`` and return the path; a short run says so
    in the file and on stderr."""
    doc = {**summary, **({"short": True} if args.short else {}), "commit": commit()}
    path = directory(args) / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    if args.short:
        print(f"short run: result in {path}", file=sys.stderr)
    return path


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True
