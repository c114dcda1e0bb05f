"""Kubernetes API errors as the fake API server reports them.

Every failure leaves the fake as a `Status` object with the same `code`, `reason` and message wording as a
real kube-apiserver, because client code (ours and the `kubernetes` package's) branches on those fields.
"""

from __future__ import annotations

from typing import Any

# HTTP status -> the StatusReason a real API server puts next to it.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a failure `Status` object as the real API server serialises it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def success_status(code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build a success `Status` object (what deletes of most resources, evictions and bindings return)."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """A request failure carrying the `Status` the fake server sends back."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "")
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """The `Status` body for this error."""
        return status_object(self.code, self.message, self.reason, self.details)


def _details(qualified: str, name: str | None) -> dict[str, Any]:
    # The real server puts the resource (plural) in `kind` and the group separately.
    plural, _, group = qualified.partition(".")
    details: dict[str, Any] = {"kind": plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(qualified: str, name: str) -> ApiError:
    """`pods "x" not found`."""
    return ApiError(404, f'{qualified} "{name}" not found', details=_details(qualified, name))


def already_exists(qualified: str, name: str) -> ApiError:
    """`pods "x" already exists`."""
    return ApiError(409, f'{qualified} "{name}" already exists', "AlreadyExists", _details(qualified, name))


def conflict(qualified: str, name: str, why: str) -> ApiError:
    """`Operation cannot be fulfilled on pods "x": <why>`."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        details=_details(qualified, name),
    )


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def expired(requested: int, oldest: int) -> ApiError:
    """The 410 a watch or continue token gets once its resourceVersion has been compacted away."""
    return ApiError(410, f"too old resource version: {requested} ({oldest})", "Expired")


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, message)


def invalid(qualified: str, name: str, message: str) -> ApiError:
    """422 Invalid, as validation failures are reported."""
    return ApiError(
        422, f'{qualified} "{name}" is invalid: {message}', details=_details(qualified, name or None)
    )
