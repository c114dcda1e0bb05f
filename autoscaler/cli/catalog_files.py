"""The catalog files ``tidal plan`` prices a plan from: one or several laid over each other, and for
``cloud: simulated`` the cloud and region of the catalog's rows that the simulated cloud would sell.

A later file's instance type replaces every offering of that type in the files before it (all its zones and
capacity types), so a small file of negotiated prices can be laid over a public catalog. Every offering
carries the node template the configured cloud's provider builds for it, as the live provider's would.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.config.values import Config
from autoscaler.core.offering import Offering
from autoscaler.runtime.catalog import CatalogError, offering_templates, read_catalog_csv

SIMULATED = "simulated"


@dataclass(frozen=True, slots=True)
class Catalogs:
    """Offerings read from ``files`` (in order, later files winning), for ``cloud`` and ``region``."""

    files: tuple[str, ...]
    cloud: str
    region: str
    offerings: tuple[Offering, ...]

    def describe(self) -> str:
        """Which files were read and which of their rows, for a person."""
        files = ", then ".join(self.files)
        later = " (later files win per instance type)" if len(self.files) > 1 else ""
        return f"{files}{later}, rows of {self.cloud} {self.region}"


def _pairs(path: str) -> dict[str, list[str]]:
    """cloud -> regions, in the file's order, of every row of a catalog file."""
    pairs: dict[str, list[str]] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            for row in csv.DictReader(handle):
                cloud, region = (row.get("cloud") or "").strip(), (row.get("region") or "").strip()
                regions = pairs.setdefault(cloud, [])
                if region not in regions:
                    regions.append(region)
    except OSError as err:
        raise CatalogError(f"{path}: {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise CatalogError(f"{path}: not a CSV file ({err})") from None
    return pairs


def _pick(wanted: object, fallback: str, present: Sequence[str], key: str, what: str, files: str) -> str:
    """The configured choice, else ``fallback`` when the files have it, else the only one they have: the
    rule the simulated cloud itself follows."""
    listed = ", ".join(present) or "none"
    if isinstance(wanted, str) and wanted:
        if wanted not in present:
            raise CatalogError(
                f"{SIMULATED}.{key}: {wanted!r} has no rows in {files} ({what}s there: {listed})"
            )
        return wanted
    if fallback in present:
        return fallback
    if len(present) == 1:
        return present[0]
    raise CatalogError(
        f"{SIMULATED}.{key}: not set, and {files} has rows of several {what}s ({listed}) and none is "
        f"{fallback!r}: set {SIMULATED}.{key} to the one the simulated cloud sells"
    )


def scope(paths: Sequence[str], config: Config) -> tuple[str, str]:
    """The cloud and region whose rows count: the configured ones, or for ``cloud: simulated`` those of
    ``simulated.catalogCloud`` and ``simulated.catalogRegion`` (else the only ones in the files)."""
    if config.cloud != SIMULATED:
        return config.cloud, config.region
    settings = config.providers.get(SIMULATED) or {}
    pairs: dict[str, list[str]] = {}
    for path in paths:
        for cloud, regions in _pairs(path).items():
            known = pairs.setdefault(cloud, [])
            known.extend(r for r in regions if r not in known)
    files = " + ".join(paths)
    cloud = _pick(settings.get("catalogCloud"), config.cloud, sorted(pairs), "catalogCloud", "cloud", files)
    region = _pick(
        settings.get("catalogRegion"), config.region, sorted(pairs[cloud]), "catalogRegion", "region", files
    )
    return cloud, region


def read_catalogs(paths: Sequence[str | os.PathLike[str]], config: Config) -> Catalogs:
    """The offerings of ``paths`` laid over each other; CatalogError when they have none to offer."""
    names = [os.fspath(p) for p in paths]
    cloud, region = scope(names, config)
    template = offering_templates(config.cloud)
    by_type: dict[str, list[Offering]] = {}
    for name in names:
        layer: dict[str, list[Offering]] = {}
        for offering in read_catalog_csv(
            name,
            cloud=cloud,
            region=region,
            zones=config.zones,
            max_pods=config.max_pods_per_node,
            template=template,
        ):
            layer.setdefault(offering.instance_type, []).append(offering)
        by_type.update(layer)
    offerings = tuple(o for group in by_type.values() for o in group)
    if not offerings:
        raise CatalogError(f"{' + '.join(names)}: no rows for cloud {cloud!r} region {region!r}")
    return Catalogs(tuple(names), cloud, region, offerings)
