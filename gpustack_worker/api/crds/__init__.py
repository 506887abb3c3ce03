"""Our CustomResourceDefinitions as pydantic v2 models (group ``worker.gpustack.ai``, ``v1alpha1``).

One module per kind; :mod:`.common` holds the shared building blocks. The models are the single
source of the CRD YAML under ``manifests/crds/`` (see :mod:`gpustack_worker.api.crdgen`) and are what
controllers parse server objects with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api.crds.devices import Devices
from gpustack_worker.api.crds.instance_type import InstanceType
from gpustack_worker.api.crds.model_deployment import ModelDeployment
from gpustack_worker.api.crds.node_model_store import NodeModelStore
from gpustack_worker.api.crds.topology_source import TopologySource

if TYPE_CHECKING:
    from gpustack_worker.api.crds.common import KubeObject

__all__ = ("ALL_KINDS", "Devices", "InstanceType", "ModelDeployment", "NodeModelStore", "TopologySource")

#: Every kind we serve, in manifest order.
ALL_KINDS: tuple[type[KubeObject], ...] = (
    Devices,
    InstanceType,
    ModelDeployment,
    NodeModelStore,
    TopologySource,
)
