"""Bodies checked against a Google API discovery document: every property named must exist in the schema,
with the JSON type the schema gives it (64-bit integers are strings), and enum values must be known ones.

The discovery documents come with google-api-python-client (a dev dependency); a test that needs one skips
when it is missing rather than pass unchecked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["Discovery", "load_discovery"]


@cache
def load_discovery(name: str) -> Discovery | None:
    """The discovery document ``name`` (``compute.v1``) shipped with googleapiclient, or None."""
    try:
        import googleapiclient
    except ImportError:
        return None
    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / f"{name}.json"
    if not path.is_file():
        return None
    return Discovery(json.loads(path.read_text(encoding="utf-8")))


class Discovery:
    """One discovery document: its schemas and its methods by id (``compute.instances.insert``)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.schemas: dict[str, Any] = doc["schemas"]
        self.methods = dict(self._methods(doc))

    def _methods(self, node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for method in (node.get("methods") or {}).values():
            yield method["id"], method
        for child in (node.get("resources") or {}).values():
            yield from self._methods(child)

    @property
    def revision(self) -> str:
        return str(self.doc.get("revision", ""))

    def request_schema(self, method: str) -> str | None:
        """The schema name of ``method``'s request body (None: it has none)."""
        return ((self.methods[method].get("request") or {}).get("$ref")) or None

    def response_schema(self, method: str) -> str | None:
        """The schema name of ``method``'s response body."""
        return ((self.methods[method].get("response") or {}).get("$ref")) or None

    def problems(self, schema: str | dict[str, Any], value: Any, where: str = "") -> list[str]:
        """Every way ``value`` differs from ``schema`` (a name, or an inline schema), with its path."""
        spec = self.schemas[schema] if isinstance(schema, str) else schema
        if "$ref" in spec:
            return self.problems(spec["$ref"], value, where)
        kind = spec.get("type", "any")
        here = where or "(body)"
        if kind == "object":
            if not isinstance(value, dict):
                return [f"{here}: {type(value).__name__}, not an object"]
            out: list[str] = []
            props = spec.get("properties") or {}
            extra = spec.get("additionalProperties")
            for key, item in value.items():
                path = f"{where}.{key}" if where else key
                if key in props:
                    out += self.problems(props[key], item, path)
                elif extra is not None:
                    out += self.problems(extra, item, path)
                else:
                    out.append(f"{path}: not a property of {schema if isinstance(schema, str) else 'it'}")
            return out
        if kind == "array":
            if not isinstance(value, list):
                return [f"{here}: {type(value).__name__}, not an array"]
            return [
                p for i, item in enumerate(value) for p in self.problems(spec["items"], item, f"{where}[{i}]")
            ]
        if kind == "string":
            if not isinstance(value, str):
                return [f"{here}: {value!r} is not a string"]
            if spec.get("format") in ("int64", "uint64") and not value.lstrip("-").isdigit():
                return [f"{here}: {value!r} is not a {spec['format']} string"]
            if "enum" in spec and value not in spec["enum"]:
                return [f"{here}: {value!r} is not one of {', '.join(spec['enum'][:8])}…"]
            return []
        if kind == "integer":
            return (
                []
                if isinstance(value, int) and not isinstance(value, bool)
                else [f"{here}: {value!r} is not an integer"]
            )
        if kind == "number":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            return [] if ok else [f"{here}: {value!r} is not a number"]
        if kind == "boolean":
            return [] if isinstance(value, bool) else [f"{here}: {value!r} is not a boolean"]
        return []
