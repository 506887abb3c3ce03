"""The NFD NodeFeature a writing TopologySource owns for each Node it describes.

Name ``gpustack-topology-<16 hex>`` (FNV-1a 64 of the source UID, a NUL and the Node name), in the system
namespace, labelled ``nfd.node.kubernetes.io/node-name`` (nfd-master merges every NodeFeature of a Node by
it) and ``topology.gpustack.ai/source-uid`` (which source owns it), controlled by the TopologySource (so a
source deleted without its finalizer still takes its NodeFeatures with it through garbage collection).
``spec.labels`` is exactly the snapshot's writable labels of that Node; nfd-master projects them onto the
Node. The source never writes a Node label itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("nodefeature_body", "same_content")


def nodefeature_body(
    source_name: str, source_uid: str, node: str, labels: Mapping[str, str], *, namespace: str
) -> dict[str, Any]:
    """The NodeFeature of ``source`` for ``node`` carrying ``labels``."""
    return {
        "apiVersion": kinds.NODE_FEATURE.api_version,
        "kind": kinds.NODE_FEATURE.kind,
        "metadata": {
            "name": keys.topology_source_nodefeature_name(source_uid, node),
            "namespace": namespace,
            "labels": {keys.NFD_NODE_NAME: node, keys.TOPOLOGY_SOURCE_UID: source_uid},
            "ownerReferences": [
                {
                    "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
                    "kind": kinds.TOPOLOGY_SOURCE.kind,
                    "name": source_name,
                    "uid": source_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"labels": dict(labels)},
    }


def same_content(desired: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether ``cached`` carries exactly the desired labels, spec labels and controller reference — an
    edit by anyone (an added key included, which our apply alone would not remove) is a difference."""
    if cached is None:
        return False
    want_meta, have_meta = desired.get("metadata") or {}, cached.get("metadata") or {}
    have_labels = have_meta.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in (want_meta.get("labels") or {}).items()):
        return False
    if dict((cached.get("spec") or {}).get("labels") or {}) != dict(
        (desired.get("spec") or {}).get("labels") or {}
    ):
        return False
    want_owner = (want_meta.get("ownerReferences") or [{}])[0]
    owners = have_meta.get("ownerReferences") or ()
    return any(o.get("uid") == want_owner.get("uid") and o.get("controller") for o in owners)
