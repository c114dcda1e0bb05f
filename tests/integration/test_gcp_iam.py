"""deploy/gcp's custom role grants exactly the permissions of the API calls the provider makes."""

import uuid
from pathlib import Path

import yaml

from autoscaler.core.offering import LaunchRequest
from providers.gcp.permissions import API_PERMISSIONS, SERVICE_ACCOUNT_PERMISSIONS
from tests.fakes.gcp_cloud import FakeGcp, make_provider

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "deploy" / "gcp" / "tidal-autoscaler-role.yaml"


def every_call_the_provider_makes() -> set[str]:
    """Run each provider operation, with each way of naming the template, and return the API methods."""
    with FakeGcp() as gcp:
        gcp.add_node_pool("e2e", "pool")
        gcp.add_reservation("ml", "us-central1-a", "e2-standard-2", 1)
        for provider in (
            make_provider(gcp),
            make_provider(gcp, node_pool="pool"),
            make_provider(gcp, template=gcp.add_node_pool("e2e", "regional", regional=True)),
            make_provider(gcp, gcp={"reservations": ["ml"]}),
        ):
            chosen = next(o for o in provider.offerings() if o.instance_type == "e2-standard-2")
            provider.launch(LaunchRequest(str(uuid.uuid4()), (chosen,), {}, (), {}))
            for instance in provider.instances():
                provider.terminate(instance)
        return set(gcp.compute_server.methods()) | set(gcp.billing_server.methods())


def test_the_role_grants_exactly_the_permissions_of_the_calls_tidal_makes() -> None:
    called = every_call_the_provider_makes()
    unknown = called - set(API_PERMISSIONS)
    assert not unknown, f"API methods without a permission entry: {sorted(unknown)}"
    needed = {p for method in called for p in API_PERMISSIONS[method]}
    role = yaml.safe_load(ROLE.read_text())
    assert set(role["includedPermissions"]) == needed
    assert set(API_PERMISSIONS) == called, "permission entries for API methods tidal never calls"


def test_the_role_file_is_a_custom_role_gcloud_accepts() -> None:
    role = yaml.safe_load(ROLE.read_text())
    assert set(role) == {"title", "description", "stage", "includedPermissions"}
    assert role["stage"] == "GA"
    assert role["includedPermissions"] == sorted(set(role["includedPermissions"]))


def test_acting_as_the_node_service_account_is_granted_outside_the_role_and_documented() -> None:
    role = yaml.safe_load(ROLE.read_text())
    docs = (ROOT / "docs" / "gcp.md").read_text()
    assert not set(SERVICE_ACCOUNT_PERMISSIONS) & set(role["includedPermissions"])
    assert "roles/iam.serviceAccountUser" in docs and "iam.serviceAccounts.actAs" in docs
