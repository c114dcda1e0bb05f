"""Least privilege on the real API server: tidal's ServiceAccount, with exactly the chart's RBAC, is never
refused by it across every scenario of this folder, and every rule it is granted is used.

The API server's audit log records each request of that ServiceAccount (tests/k8s/control_plane.py's
policy); these tests read it after the scenarios ran, so they are ordered last in the session (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from tests.k8s.cluster import tidal_manifests
from tests.k8s.control_plane import TIDAL_USER, ControlPlane

SCENARIO_MODULES = (
    "test_scale_up",
    "test_faults",
    "test_leadership",
    "test_reload",
    "test_autoscaling_requests",
    "test_kai",
    "test_gpu_fleet",
    "test_gpu_taint",
    "test_disruption",
    "test_unreadable_objects",
    "test_dra",
    "test_spot",
    "test_cost_estimate",
)


@dataclass(frozen=True)
class Request:
    group: str
    resource: str  # with its subresource: "pods/eviction"
    verb: str
    name: str
    code: int
    at: float  # epoch seconds the server received it


def tidal_requests(events: Iterable[dict[str, Any]]) -> list[Request]:
    out = []
    for e in events:
        if e.get("user", {}).get("username") != TIDAL_USER or e.get("stage") != "ResponseComplete":
            continue
        ref = e.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # non-resource URLs (/version, /api discovery) need no rule
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        received = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        out.append(
            Request(
                ref.get("apiGroup", ""),
                resource,
                e["verb"],
                ref.get("name", ""),
                int(e.get("responseStatus", {}).get("code", 0)),
                received,
            )
        )
    return out


def granted() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(apiGroup, resource, verb, resourceNames) of every rule the chart grants tidal."""
    out = []
    for obj in tidal_manifests():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in obj["rules"]:
            for group in rule.get("apiGroups", [""]):
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.append((group, resource, verb, tuple(rule.get("resourceNames", ()))))
    return out


def test_tidal_is_never_refused_by_the_api_server(control_plane: ControlPlane) -> None:
    requests = tidal_requests(control_plane.audit_events())
    if not requests:
        pytest.skip("no scenario ran tidal in this session")
    # A restarting API server refuses what it has not yet loaded the RBAC for; the fault scenarios restart
    # it on purpose, and tidal retries. Outside those windows nothing may be refused.
    windows = [(start, ready + 2.0) for start, ready in control_plane.restarts[1:]]
    refused = sorted(
        {
            f"{r.verb} {r.group or 'core'}/{r.resource} {r.name}".rstrip()
            for r in requests
            if r.code == 403 and not any(a <= r.at <= b for a, b in windows)
        }
    )
    assert refused == [], "\n".join(refused)


def test_every_rule_tidal_is_granted_is_used(
    control_plane: ControlPlane, request: pytest.FixtureRequest
) -> None:
    ran = {
        item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py") for item in request.session.items
    }
    missing = [m for m in SCENARIO_MODULES if m not in ran]
    if missing:
        pytest.skip(f"needs every scenario of this folder in the run; not selected: {', '.join(missing)}")
    used = {(r.group, r.resource, r.verb) for r in tidal_requests(control_plane.audit_events())}
    unused = sorted(
        f"{verb} {group or 'core'}/{resource}"
        for group, resource, verb, _ in granted()
        if (group, resource, verb) not in used
    )
    assert unused == [], "\n".join(unused)
