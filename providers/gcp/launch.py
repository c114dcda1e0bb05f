"""One VM insert, followed to its end: ``instances.insert`` with a requestId, then the zone operation.

The insert call only accepts the request; whether the zone had capacity is known when the zone operation is
``DONE`` (a stockout is an ``error.errors[].code`` of the operation, not an HTTP error). The operation is
polled with tidal's own ZoneOperationsClient (``ExtendedOperation.result()`` would poll the public endpoint
whatever endpoint the client was built with), at ``pollInterval``, for at most ``operationTimeout``: a
launch never blocks the controller longer than that. An operation still running at the deadline yields a
``pending`` instance, which the next ``instances()`` call reports as it progresses.

``requestId`` makes the insert idempotent: GCE answers a repeated insert with the same requestId with the
same operation instead of a second VM. Each offering of one launch gets its own requestId (a UUID derived
from the launch token and the offering), because reusing the token's requestId for the next candidate
would hand back the first candidate's failed operation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import structlog
from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from autoscaler.cloud import ProviderError
from providers.gcp.bootstrap import LABEL_TOKEN
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error, operation_error

__all__ = ["Launcher", "request_id"]

log = structlog.get_logger("tidal.providers.gcp")
DONE = compute_v1.Operation.Status.DONE


def request_id(token: str, offering_key: str, attempt: int = 0) -> str:
    """The insert's requestId: stable for (launch token, offering, attempt), a valid UUID as GCE requires."""
    try:
        namespace = uuid.UUID(token)
    except ValueError:
        namespace = uuid.uuid5(uuid.NAMESPACE_URL, token)
    name = offering_key if attempt == 0 else f"{offering_key}#{attempt}"
    return str(uuid.uuid5(namespace, name))


class Launcher:
    """Inserts VMs and waits (boundedly) for their zone operations."""

    def __init__(
        self,
        factory: ClientFactory,
        project: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.factory = factory
        self.project = project
        self.monotonic = monotonic
        self.sleep = sleep

    def get(self, zone: str, name: str) -> compute_v1.Instance | None:
        """The VM, or None when it does not exist."""
        try:
            return self.factory.compute().instances.get(
                project=self.project,
                zone=zone,
                instance=name,
                retry=self.factory.retry(),
                timeout=self.factory.timeout,
            )
        except api_exceptions.NotFound:
            return None
        except CALL_ERRORS as err:
            raise api_error(err, f"reading instance {name} in {zone}") from None

    def wait(self, operation: compute_v1.Operation, zone: str) -> compute_v1.Operation | None:
        """Poll the zone operation until DONE (returned) or ``operationTimeout`` passes (None)."""
        deadline = self.monotonic() + self.factory.operation_timeout
        client = self.factory.compute().zone_operations
        while operation.status != DONE:
            left = deadline - self.monotonic()
            if left <= 0:
                return None
            self.sleep(min(self.factory.poll_interval, left))
            try:
                operation = client.get(
                    project=self.project,
                    zone=zone,
                    operation=operation.name,
                    retry=self.factory.retry(),
                    timeout=self.factory.timeout,
                )
            except CALL_ERRORS as err:
                raise api_error(err, f"polling operation {operation.name} in {zone}") from None
        return operation

    def create(
        self, body: compute_v1.Instance, zone: str, *, token: str, offering_key: str
    ) -> compute_v1.Instance | None:
        """Insert ``body`` and follow it; the VM when DONE, None when still running at the deadline.

        Raises NoCapacity, QuotaExceeded, Throttled or ProviderError as the insert or its operation failed.
        """
        what = f"creating {body.name} in {zone}"
        for attempt in range(2):
            rid = request_id(token, offering_key, attempt)
            try:
                operation = self.factory.compute().instances.insert_unary(
                    request=compute_v1.InsertInstanceRequest(
                        project=self.project, zone=zone, instance_resource=body, request_id=rid
                    ),
                    retry=self.factory.retry(),
                    timeout=self.factory.timeout,
                )
            except api_exceptions.Conflict:
                existing = self.get(zone, body.name)
                if existing is not None and existing.labels.get(LABEL_TOKEN) == body.labels.get(LABEL_TOKEN):
                    return existing  # created by an earlier call for this launch
                raise ProviderError(f"{what}: the name is taken by another instance") from None
            except CALL_ERRORS as err:
                raise api_error(err, what) from None
            log.info("gcp_insert_accepted", instance=body.name, zone=zone, operation=operation.name)
            done = self.wait(operation, zone)
            if done is None:
                log.info("gcp_insert_still_running", instance=body.name, zone=zone, operation=operation.name)
                return None
            failure = operation_error(done, what)
            if failure is not None:
                raise failure
            vm = self.get(zone, body.name)
            if vm is not None:
                return vm
            # GCE answered with the finished operation of an earlier insert whose VM has since gone (its
            # requestId is remembered for a while): this launch needs a new VM, so a new requestId.
            log.info("gcp_insert_replayed_gone_instance", instance=body.name, zone=zone)
        raise ProviderError(f"{what}: the instance disappeared right after it was created")
