"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and enough strategic merge patch.

Strategic merge patch needs the Go struct tags of every type; the fake approximates them with the merge keys
of the fields tidal and its tests actually touch, keyed by field name. Lists not named here are replaced,
which is also what the real server does for atomic lists such as `spec.taints` and `spec.tolerations`.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from tests.fakes.kube_errors import ApiError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Field name -> patchMergeKey for lists of objects with patchStrategy "merge" in k8s.io/api.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "hostAliases": "ip",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
# Lists of scalars with patchStrategy "merge": the patch's items are added (union), not replacing the list.
MERGED_SCALAR_LISTS = frozenset({"finalizers"})


def apply_patch(target: dict[str, Any], patch: Any, content_type: str, custom: bool) -> dict[str, Any]:
    """Return a patched deep copy of `target`; raise ApiError for unsupported or failing patches."""
    media = content_type.split(";")[0].strip().lower()
    if media == JSON_PATCH:
        if not isinstance(patch, list):
            raise ApiError(400, "json patch body must be a list of operations")
        try:
            result = jsonpatch.apply_patch(target, patch, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
        if not isinstance(result, dict):
            raise ApiError(422, "json patch replaced the whole object with a non-object")
        return result
    if media == MERGE_PATCH:
        _require_object(patch)
        merged: dict[str, Any] = merge_patch(target, patch)
        return merged
    if media == STRATEGIC_MERGE_PATCH:
        if custom:
            # Custom resources have no Go struct tags to drive a strategic merge; upstream refuses it.
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        _require_object(patch)
        patched: dict[str, Any] = strategic_merge_patch(target, patch)
        return patched
    if media == APPLY_PATCH:
        raise ApiError(415, "server-side apply is not supported by the fake API server")
    raise ApiError(415, f"the body of the request was in an unknown format - {media!r}")


def _require_object(patch: Any) -> None:
    if not isinstance(patch, dict):
        raise ApiError(400, "merge patch body must be a JSON object")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch for maps and for the lists named in MERGE_KEYS/MERGED_SCALAR_LISTS.

    Directives handled: `$patch: replace|delete` in maps and list items, `$deleteFromPrimitiveList/<f>`;
    `$setElementOrder/<f>` and `$retainKeys` are accepted and ignored.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    body = {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "replace":
        return _strip_directives(body)
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in body.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, key)
        else:
            result[key] = value
    return result


def _merge_list(current: Any, patch: list[Any], field: str) -> list[Any]:
    if not isinstance(current, list):
        current = []
    if field in MERGED_SCALAR_LISTS:
        appended: list[Any] = copy.deepcopy(current) + [v for v in patch if v not in current]
        return appended
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) and key in item for item in patch):
        return [_strip_directives(item) for item in patch if not _is_delete(item)]
    result: list[Any] = copy.deepcopy(current)
    for item in patch:
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(key) == item[key]
            ),
            None,
        )
        if _is_delete(item):
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _is_delete(item: Any) -> bool:
    return isinstance(item, dict) and item.get("$patch") == "delete"


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
