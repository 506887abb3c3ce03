"""The topology controllers' wiring: shared informers, three runtime controllers, and what wakes which key.

Runs inside ``gpustack-worker controller`` next to the chain (leader-elected). Keys and triggers:

- ``topology-sources`` [TopologySource name]: the source created, deleted or its spec / finalizers
  changed (not its own status); any other source's spec (ownership conflicts) — every source; its owned
  NodeFeatures (by the ``source-uid`` label); a ConfigMap or Secret in the system namespace it references
  (snapshot, CA bundle, credentials); a Node created or deleted (writing sources — like GPUStack's, they
  do not watch Node label drift: after an admin changes a Node's selector labels, a refreshed snapshot or
  a touched source brings the source up to date); a Node's labels changed (read-only ``nodeLabels``
  sources only); a webhook
  source's poll interval and a staleness deadline come back as requeues;
- ``topology-nodes`` [Node name]: the Node added or its labels changed; its Devices created or relabelled;
  a change of what the profile assigner reads of any source — :func:`profiles.wakes_profiles`: whether it
  is in effect (``Stale`` → ``Expired`` too, which flips no ``Ready`` status), its selector, its levels
  (every Node, coalesced for a second);
- ``topology-retire`` [``topologies``]: a Topology or flavor changed; a source as for ``topology-nodes``;
  Node labels (coalesced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.controller import Controller, labels_changed, semantic_changed
from gpustack_worker.runtime.mappers import all_keys, by_index
from gpustack_worker.runtime.metrics import TOPOLOGY_SOURCES_LAPSED
from gpustack_worker.runtime.queue import settings_queue
from gpustack_worker.topology import managers, profiles, sources
from gpustack_worker.topology.steps import TOPOLOGIES_KEY, UID_INDEX, TopologySteps

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from gpustack_worker.api.settings import ControllerSettings
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.registry import InformerRegistry
    from gpustack_worker.runtime.settings import RuntimeSettings, SettingsSource

__all__ = ("Topology",)

#: Node label changes and source readiness flips are recomputed at most once a second (a fleet relabelled
#: by NFD is one pass, not one per Node).
COALESCE_S: Final = 1.0
_REFS: Final = (("configMap", "configMapRef"), ("webhook", "caBundleConfigMapRef"))
_SECRET_REFS: Final = (("webhook", "bearerTokenSecretRef"), ("webhook", "tlsClientCertificateSecretRef"))


def _meta(obj: Any) -> Any:
    return obj.get("metadata") or {}


def _window() -> float:
    return COALESCE_S


def _source_view(obj: Any) -> Any:
    """What wakes a source's own reconcile: not its status (ours)."""
    meta = _meta(obj)
    return meta.get("generation"), meta.get("deletionTimestamp"), meta.get("finalizers"), meta.get("uid")


def _created_or_deleted(_event: str, old: Any | None, new: Any | None) -> bool:
    return old is None or new is None


def _uid_of(obj: Any) -> list[str]:
    uid = _meta(obj).get("uid")
    return [str(uid)] if uid else []


class Topology:
    """The topology controllers over one informer registry."""

    def __init__(
        self,
        client: Client,
        settings: SettingsSource[ControllerSettings],
        registry: InformerRegistry,
        *,
        system_namespace: str = kinds.SYSTEM_NAMESPACE,
    ) -> None:
        boot = settings.current
        reg = registry
        ns = system_namespace
        self.sources = reg.informer(
            kinds.TOPOLOGY_SOURCE, field_manager=managers.SOURCE_STATUS, indexers={UID_INDEX: _uid_of}
        )
        TOPOLOGY_SOURCES_LAPSED.watch(self.sources.store, sources.lapsed_state, known=sources.LAPSED_STATES)
        self.nodefeatures = reg.informer(
            kinds.NODE_FEATURE,
            namespace=ns,
            label_selector=keys.TOPOLOGY_SOURCE_UID,
            field_manager=managers.SOURCE,
        )
        self.config_maps = reg.informer(kinds.CONFIG_MAP, namespace=ns)
        self.secrets = reg.informer(kinds.SECRET, namespace=ns)
        self.nodes = reg.informer(kinds.NODE, field_manager=managers.NODE_TOPOLOGY)
        self.devices = reg.informer(kinds.DEVICES, field_manager=managers.NODE_TOPOLOGY)
        by_type = keys.RESOURCE_TYPE + "={}"
        self.topologies = reg.informer(
            kinds.TOPOLOGY,
            label_selector=by_type.format(keys.TYPE_TOPOLOGY),
            field_manager=managers.NODE_TOPOLOGY,
        )
        self.flavors = reg.informer(kinds.RESOURCE_FLAVOR, label_selector=by_type.format(keys.TYPE_NODES))
        self.steps = TopologySteps(
            client,
            topology_sources=self.sources,
            nodefeatures=self.nodefeatures,
            config_maps=self.config_maps,
            secrets=self.secrets,
            nodes=self.nodes,
            devices=self.devices,
            topologies=self.topologies,
            flavors=self.flavors,
            namespace=ns,
        )
        self.source_ctl = self._controller("topology-sources", self.steps.source, boot)
        self.node_ctl = self._controller(
            "topology-nodes", self.steps.node_profile, boot, workers=boot.node_profile_workers
        )
        self.retire_ctl = self._controller("topology-retire", self.steps.retire_topologies, boot)

        every_source = all_keys(self.sources.store)
        # Any source's spec or deletion wakes every source (its own key included): conflicts are pairwise.
        self.source_ctl.watch(self.sources, mapper=every_source, predicates=[semantic_changed(_source_view)])
        self.source_ctl.watch(
            self.nodefeatures,
            mapper=by_index(
                self.sources.store,
                UID_INDEX,
                lambda nf: [_meta(nf).get("labels", {}).get(keys.TOPOLOGY_SOURCE_UID, "")],
            ),
        )
        self.source_ctl.watch(self.config_maps, mapper=self._referencing(_REFS))
        self.source_ctl.watch(self.secrets, mapper=self._referencing(_SECRET_REFS))
        self.source_ctl.watch(
            self.nodes,
            mapper=self._sources_where(writing=True),
            predicates=[_created_or_deleted],
            delay=_window,
        )
        self.source_ctl.watch(
            self.nodes, mapper=self._sources_where(writing=False), predicates=[labels_changed], delay=_window
        )

        every_node = all_keys(self.nodes.store)
        # The echo of the controller's own profile write (the Node's label, its Devices' mirror) wakes it
        # not: on a cold fleet that was one no-op reconcile per write, 8,625 at 5,000 Nodes.
        self.node_ctl.watch(
            self.nodes, predicates=[labels_changed], hold=self.steps.node_applier.echo_hold(self.nodes)
        )
        self.node_ctl.watch(
            self.devices, predicates=[labels_changed], hold=self.steps.devices_applier.echo_hold(self.devices)
        )
        self.node_ctl.watch(
            self.sources, mapper=every_node, predicates=[profiles.wakes_profiles], delay=_window
        )

        retire = lambda _obj: (TOPOLOGIES_KEY,)  # noqa: E731
        self.retire_ctl.watch(self.topologies, mapper=retire)
        self.retire_ctl.watch(self.flavors, mapper=retire)
        self.retire_ctl.watch(self.sources, mapper=retire, predicates=[profiles.wakes_profiles])
        self.retire_ctl.watch(self.nodes, mapper=retire, predicates=[labels_changed], delay=_window)
        settings.subscribe(lambda _s: self.resync())

    def _referencing(self, refs: Iterable[tuple[str, str]]) -> Callable[[Any], list[str]]:
        """Map a ConfigMap / Secret to the sources referencing it (few sources: a scan)."""
        pairs = tuple(refs)

        def mapper(obj: Any) -> list[str]:
            meta = _meta(obj)
            target = (meta.get("namespace"), meta.get("name"))
            out = []
            for source in self.sources.store.list():
                spec = source.get("spec") or {}
                for arm, field in pairs:
                    ref = (spec.get(arm) or {}).get(field) or {}
                    if (ref.get("namespace"), ref.get("name")) == target:
                        out.append(str(_meta(source)["name"]))
            return out

        return mapper

    def _sources_where(self, *, writing: bool) -> Callable[[Any], list[str]]:
        def mapper(_obj: Any) -> list[str]:
            return [
                str(_meta(s)["name"]) for s in self.sources.store.list() if sources.is_writing(s) == writing
            ]

        return mapper

    @property
    def controllers(self) -> list[Controller]:
        return [self.source_ctl, self.node_ctl, self.retire_ctl]

    def start_keys(self) -> None:
        """Keys that exist without any event."""
        self.retire_ctl.enqueue_all([TOPOLOGIES_KEY])

    @staticmethod
    def _controller(
        name: str, reconcile: Callable[[str], Awaitable[Any]], boot: RuntimeSettings, *, workers: int = 0
    ) -> Controller:
        return Controller(
            name, reconcile, settings_queue(name, boot), workers=workers or boot.controller_workers
        )

    def resync(self) -> None:
        """Enqueue every key of every controller."""
        self.source_ctl.enqueue_all(self.sources.store.keys())
        self.node_ctl.enqueue_all(self.nodes.store.keys())
        self.retire_ctl.enqueue_all([TOPOLOGIES_KEY])
