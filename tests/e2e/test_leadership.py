"""A daemon kept from the Lease says so: in its log, in /readyz and in the status ConfigMap (the API server's
authorizer refuses the Lease here, which is why this is not one of the RBAC-proven daemon scenarios)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest

from tests.e2e.harness import cluster, gpu_pod

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_a_replica_the_api_server_keeps_from_the_lease_says_why_in_readyz_and_the_status_configmap(
    tmp_path: Path,
) -> None:
    election = {"enabled": True, "leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "1s"}
    with cluster(tmp_path, leaderElection=election) as c:
        # The Role was applied without the Lease rules: every Lease call is forbidden.
        c.api.authorizer = lambda verb, group, resource, sub, ns: resource != "leases"
        d = c.daemon()
        assert d.elector is not None and d.elector.try_acquire_or_renew() is False
        ready, detail = d.health.readiness()
        assert ready  # a replica that is not leading is still ready to take over
        assert (
            "not leading (lease tidal-system/tidal): RBAC refuses to read lease tidal-system/tidal" in detail
        )
        c.api.create(gpu_pod("infer-0"))
        time.sleep(0.2)
        result = d.reconcile()
        assert not result.acted and c.provider.instances() == []
        assert d.status_writer.flush()  # the status is written in the background
        status = c.api.get("configmaps", "tidal-system", "tidal-status")
        assert status is not None
        leader = json.loads(status["data"]["status"])["leader"]
        assert (leader["identity"], leader["leading"], leader["lease"]) == (
            "tidal-0",
            False,
            "tidal-system/tidal",
        )
        assert leader["reason"].startswith("RBAC refuses to read lease tidal-system/tidal")
