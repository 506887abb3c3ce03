"""ModelDeployment bodies as the tests write them (issue 30: built here once, returned as plain dicts).

``model_deployment(name, namespace, role("decode", instanceType=..., template=template()))``: a role is
its name and the fields a test gives it, in the order given; :func:`template` is the one-container Pod
template most roles run (no resources of its own: a role's ``resources`` decide what its Pods ask for).
"""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import kinds

__all__ = ("ENGINE_IMAGE", "model_deployment", "role", "template")

#: An image no node pulls: the control plane admits and binds these Pods, no kubelet runs them.
ENGINE_IMAGE = "registry.invalid/engine:1"


def template(*, container: str = "engine", image: str = ENGINE_IMAGE) -> dict[str, Any]:
    """A role's Pod template of one container named ``container`` running ``image``."""
    return {"spec": {"containers": [{"name": container, "image": image}]}}


def role(name: str, **fields: Any) -> dict[str, Any]:
    """A role named ``name`` with ``fields`` (``instanceType``, ``size``, ``template``, …) after it."""
    return {"name": name, **fields}


def model_deployment(
    name: str,
    namespace: str,
    *roles: dict[str, Any],
    model: dict[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A ModelDeployment of ``roles`` (and ``model`` when given), with ``metadata`` fields after the name
    and namespace."""
    spec: dict[str, Any] = {"roles": list(roles)}
    if model is not None:
        spec["model"] = model
    return {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec,
    }
