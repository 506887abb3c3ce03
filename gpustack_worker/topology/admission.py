"""The validating admission webhook of ``TopologySource``: AdmissionReview in, out.

:func:`review` is a pure function from the API server's ``admission.k8s.io/v1`` ``AdmissionReview`` to
the response review. On CREATE and UPDATE it runs every rule of
:func:`~gpustack_worker.topology.spec_check.spec_errors` on ``request.object.spec`` and refuses the
object when any fails, the way controller-runtime's ``admission.Denied`` does (``allowed: false``,
``status.code`` 403, ``reason: Forbidden``), with a message listing every problem by field path and the
same problems as ``status.details.causes``. The API server prefixes the message with
``admission webhook "topologysources.worker.gpustack.ai" denied the request:``.

Allowed without checks:

* other operations (DELETE, CONNECT);
* an UPDATE that leaves ``spec`` as it was (only metadata changes: labels, annotations, the reconciler
  removing its finalizer) — a source admitted before a rule existed must still be deletable and
  editable outside its spec (validation ratcheting, as the API server does for CRD schemas);
* an UPDATE of an object already being deleted (``deletionTimestamp`` set).

A request that cannot be read (no ``request``, no object, an object that is not a TopologySource)
gets a denied response with a clear message, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpustack_worker.api import kinds
from gpustack_worker.topology.spec_check import FieldError, format_errors, spec_errors

__all__ = ("ADMISSION_API_VERSION", "review")

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
#: What controller-runtime's ``admission.Denied`` answers.
_DENIED_CODE: Final = 403
_DENIED_REASON: Final = "Forbidden"
_VALIDATED_OPERATIONS: Final = ("CREATE", "UPDATE")


def _response(uid: str, allowed: bool, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if status is not None:
        response["status"] = dict(status)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def _denied(uid: str, message: str, causes: list[FieldError] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "status": "Failure",
        "code": _DENIED_CODE,
        "reason": _DENIED_REASON,
        "message": message,
    }
    if causes:
        status["details"] = {
            "group": kinds.TOPOLOGY_SOURCE.group,
            "kind": kinds.TOPOLOGY_SOURCE.kind,
            "causes": [
                {"reason": "FieldValueInvalid", "field": e.path, "message": e.message} for e in causes
            ],
        }
    return _response(uid, False, status)


def _spec(obj: Any) -> Any:
    return obj.get("spec") if isinstance(obj, Mapping) else None


def review(request: Mapping[str, Any], *, namespace: str) -> dict[str, Any]:
    """The ``AdmissionReview`` response to the review ``request`` (the whole body the API server posts).

    ``namespace`` is the worker namespace ConfigMap / Secret references must point into.
    """
    req = request.get("request") if isinstance(request, Mapping) else None
    if not isinstance(req, Mapping):
        return _denied("", "not an admission.k8s.io/v1 AdmissionReview: no request")
    uid = req.get("uid")
    uid = uid if isinstance(uid, str) else ""
    operation = req.get("operation")
    if operation not in _VALIDATED_OPERATIONS:
        return _response(uid, True)
    resource = req.get("resource")
    expected = (kinds.TOPOLOGY_SOURCE.group, kinds.TOPOLOGY_SOURCE.plural)
    if isinstance(resource, Mapping) and (resource.get("group"), resource.get("resource")) != expected:
        return _denied(
            uid,
            f"this webhook validates {expected[1]}.{expected[0]} only, "
            f"not {resource.get('resource')}.{resource.get('group')}",
        )
    obj = req.get("object")
    if not isinstance(obj, Mapping):
        return _denied(uid, f"{operation} request without a readable object")
    if operation == "UPDATE":
        meta = obj.get("metadata")
        if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
            return _response(uid, True)
        old = req.get("oldObject")
        if isinstance(old, Mapping) and "spec" in old and _spec(old) == _spec(obj):
            return _response(uid, True)
    errors = spec_errors(obj.get("spec"), namespace=namespace)
    if not errors:
        return _response(uid, True)
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    what = f"TopologySource {name}" if name else "TopologySource"
    return _denied(uid, f"{what} is invalid: {format_errors(errors)}", errors)
