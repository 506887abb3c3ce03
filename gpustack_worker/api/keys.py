"""Every label key, annotation key, resource name, object name and unit constant in one place.

Controllers, the simulator and the tests import these instead of writing string literals, so a
format lives exactly once, spelled as GPUStack's other components spell it (they read and write the same
keys on the same objects). Builders that need an algorithm (``aKey``/``gKey``) live in
:mod:`gpustack_worker.api.identity`; the text rules in :mod:`gpustack_worker.api.normalize`.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from gpustack_worker.api.normalize import fnv64a_hex

# pruning's ownership stamp (value: the controller's name), spelled once in runtime.prune
from gpustack_worker.runtime.prune import OWNER_LABEL as OWNER_LABEL

# --- units -----------------------------------------------------------------------------------------
#: Credit units per whole accelerator (``M``): fractional shares stay integral in Kueue's int64 math.
UNITS_PER_ACCELERATOR: Final = 1_600_000
#: One ownership share of a card (``M / 10``).
UNITS_PER_SHARE: Final = 160_000
#: Ownership shares per card (``SharedResourceMaxSize``).
SHARES_PER_ACCELERATOR: Final = 10
#: Units per VRAM percent (``M / 100``).
UNITS_PER_PERCENT: Final = 16_000

# --- prefixes ---------------------------------------------------------------------------------------
LABEL_PREFIX: Final = "gpustack.ai/"
FEATURE_PREFIX: Final = "feature.gpustack.ai/"
ACCELERATABLE_PREFIX: Final = "acceleratable.feature.gpustack.ai/"
GENERAL_PREFIX: Final = "general.feature.gpustack.ai/"
NOTE_PREFIX: Final = "note.gpustack.ai/"
TOPOLOGY_PREFIX: Final = "topology.gpustack.ai/"
CREDITS_PREFIX: Final = "credits.gpustack.ai/"

# --- node identity and stage-1/2 inputs -------------------------------------------------------------
HOSTNAME: Final = "kubernetes.io/hostname"
OS: Final = "kubernetes.io/os"
ARCH: Final = "kubernetes.io/arch"
MANAGED: Final = "gpustack.ai/managed"
ACCELERATABLE: Final = "feature.gpustack.ai/acceleratable"
CPU_ONLY: Final = "feature.gpustack.ai/cpu-only"
NFD_CPU_VENDOR: Final = "feature.node.kubernetes.io/cpu-model.vendor_id"
NFD_CPU_FAMILY: Final = "feature.node.kubernetes.io/cpu-model.family"
NFD_CPU_ID: Final = "feature.node.kubernetes.io/cpu-model.id"


def pci_present(pci_vendor: str) -> str:
    """NFD's PCI presence label ``feature.node.kubernetes.io/pci-<vendorID>.present``."""
    return f"feature.node.kubernetes.io/pci-{pci_vendor}.present"


CPU_NAME_ANNOTATION: Final = "feature.gpustack.ai/cpu-name"
#: The CPU detail annotations ``feature.gpustack.ai/cpu-<suffix>`` (NodeFeatureRule ``gpustack-cpu-info``).
CPU_DETAIL_SUFFIXES: Final = (
    "family",
    "physical-cores",
    "threads-per-core",
    "logical-cores",
    "stepping",
    "cache-line",
    "hz",
    "boost-freq",
    "cache-l1i",
    "cache-l1d",
    "cache-l2",
    "cache-l3",
)
CPU_DETAIL_ANNOTATIONS: Final = tuple(f"{FEATURE_PREFIX}cpu-{suffix}" for suffix in CPU_DETAIL_SUFFIXES)

# --- RDMA -------------------------------------------------------------------------------------------
RDMA_CAPABLE: Final = "feature.gpustack.ai/rdma.capable"
RDMA_DISTANCE: Final = "feature.gpustack.ai/rdma.distance"
RDMA_NUMA: Final = "feature.gpustack.ai/rdma.numa"

# --- NFD --------------------------------------------------------------------------------------------
NFD_NODE_NAME: Final = "nfd.node.kubernetes.io/node-name"
NFD_FEATURE_LABELS_ANNOTATION: Final = "nfd.node.kubernetes.io/feature-labels"
#: NFD's namespace (its Helm chart's and its manifests' default).
NFD_NAMESPACE: Final = "node-feature-discovery"
PART_OF: Final = "app.kubernetes.io/part-of"
#: The label the API server sets on every Namespace to its name (selectors pick Namespaces by name).
NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"
WORKER_PART_OF: Final = "gpustack-operator-worker"

# --- topology ---------------------------------------------------------------------------------------
TOPOLOGY_PROFILE: Final = "topology.gpustack.ai/profile"
#: The cloud provider's standard keys: read-only inputs, never written (a snapshot may only repeat them).
STANDARD_REGION: Final = "topology.kubernetes.io/region"
STANDARD_ZONE: Final = "topology.kubernetes.io/zone"
STANDARD_TOPOLOGY_KEYS: Final = (STANDARD_REGION, STANDARD_ZONE)
#: The conventional private levels a ConfigMap or webhook inventory publishes.
PRIVATE_REGION: Final = "topology.gpustack.ai/region"
PRIVATE_ZONE: Final = "topology.gpustack.ai/zone"
PRIVATE_RACK: Final = "topology.gpustack.ai/rack"
#: Topograph's label domains (read-only inputs) and its fabric tier keys ``fabric.topograph.run/tier-<N>``.
TOPOGRAPH_FABRIC_PREFIX: Final = "fabric.topograph.run/"
TOPOGRAPH_ACCELERATOR_PREFIX: Final = "accelerator.topograph.run/"
TOPOGRAPH_TIER_PREFIX: Final = "fabric.topograph.run/tier-"
#: The label on a writing source's NodeFeatures naming the TopologySource's UID.
TOPOLOGY_SOURCE_UID: Final = "topology.gpustack.ai/source-uid"
#: The finalizer a writing TopologySource carries until its NodeFeatures are gone.
FINALIZER_TOPOLOGY_SOURCE: Final = "worker.gpustack.ai/topology-source"
#: The ``apiVersion`` of a TopologySource snapshot document.
SNAPSHOT_API_VERSION: Final = "topology.gpustack.ai/v1alpha1"
#: The data keys a webhook source reads: Secret ``token`` (bearer), Secret ``tls.crt`` + ``tls.key``
#: (client certificate, the ``kubernetes.io/tls`` layout) and ConfigMap ``ca.crt`` (CA bundle).
WEBHOOK_TOKEN_KEY: Final = "token"
WEBHOOK_TLS_CERT_KEY: Final = "tls.crt"
WEBHOOK_TLS_KEY_KEY: Final = "tls.key"
WEBHOOK_CA_BUNDLE_KEY: Final = "ca.crt"

# --- Kueue chain metadata ---------------------------------------------------------------------------
RESOURCE_TYPE: Final = "resource.gpustack.ai/type"
SCHEDULE_QUEUE_ANNOTATION: Final = "schedule.gpustack.ai/queue"
DERIVED_FROM_NODE: Final = "schedule.gpustack.ai/derived-from-node"
FINALIZER_CONTROLLED: Final = "gpustack.ai/controlled"
LOCAL_QUEUE_PREFIX: Final = "gpustack-fnv64-"
#: ClusterQueue / InstanceType schedule label of a chain-derived type the other grouping named: its queue
#: selects no flavor (no flavor carries the label), so one flavor feeds one derived queue.
OTHER_GROUPING: Final = "schedule.gpustack.ai/other-grouping"
#: InstanceType label naming its entrance LocalQueue.
QUEUE_ENTRANCE: Final = "schedule.gpustack.ai/queue-entrance"
#: ``resource.gpustack.ai/type`` values: operator flavors, operator queues, generated Topologies.
TYPE_NODES: Final = "nodes"
TYPE_INSTANCE_TYPES: Final = "instancetypes"
TYPE_TOPOLOGY: Final = "topology"
#: ClusterQueue annotations written by the queue controller: the queue is filled for TAS, it is held for
#: want of resource groups, and the phase and saved stop policy of the chain's HoldAndDrain
#: (docs/chain.md, "The stop-policy state machine of a queue").
TAS_QUEUE: Final = "topology.gpustack.ai/tas-queue"
EMPTY_PLAN_HOLD: Final = "topology.gpustack.ai/empty-plan-hold"
MIGRATION_PHASE: Final = "topology.gpustack.ai/migration-phase"
MIGRATION_STOP_POLICY: Final = "topology.gpustack.ai/migration-stop-policy"
#: The ClusterQueue condition the queue controller owns (its reasons: docs/chain.md, "The stop-policy
#: state machine of a queue").
TOPOLOGY_READY: Final = "TopologyReady"
#: The two AdmissionChecks the worker applies, and their controller names (GPUStack's own, so the objects
#: stay interchangeable with that system's).
NODE_DEVICES_CHECK: Final = "gpustack-node-devices"
NODE_DEVICES_CONTROLLER: Final = "worker.gpustack.ai/node-devices"
JOINT_CHECK: Final = "gpustack-model-deployment-joint"
JOINT_CONTROLLER: Final = "worker.gpustack.ai/model-deployment-joint"
#: The chain controllers' Events' ``reportingController`` (a write one object's reconcile was refused).
CHAIN_CONTROLLER: Final = "worker.gpustack.ai/chain"
#: The ModelDeployment controller's Events' ``reportingController`` (a role that renders no Pods).
MODEL_DEPLOYMENT_CONTROLLER: Final = "worker.gpustack.ai/model-deployment"
#: Kueue ties a Pod to its Workload (annotation, the Workload's name) and PodSet (label): Gate 3's
#: inflight accounting reads both (docs/admission.md, "Gate 3").
KUEUE_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
KUEUE_PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
#: The Device Manager's durable per-container allocation record on a Pod (a JSON map keyed by container).
ACCELERATOR_ALLOCATED: Final = "device.gpustack.ai/accelerator.allocated"

# --- ModelDeployment Pods (Kueue pod groups) --------------------------------------------------------
#: Kueue's label and annotation domain: a key under it, or under a subdomain of it (Kueue's
#: ``provreq.kueue.x-k8s.io/`` parameters), is Kueue's input or output on a Pod.
KUEUE_DOMAIN: Final = "kueue.x-k8s.io"
#: The domain of the ModelDeployment Pod identity labels below.
MODEL_DEPLOYMENT_DOMAIN: Final = "modeldeployment.gpustack.ai"
#: Kueue's Pod integration (pkg/controller/jobs/pod): the LocalQueue label, the group's label and size
#: annotation, the role-hash annotation the group's PodSet is named after, a member's index in the group,
#: and the TAS requests Kueue reads off a Pod.
QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME: Final = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"
POD_GROUP_POD_INDEX: Final = "kueue.x-k8s.io/pod-group-pod-index"
ROLE_HASH: Final = "kueue.x-k8s.io/role-hash"
PODSET_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
#: Labels on a ModelDeployment's Pods: the deployment's uid, the role, the replica ordinal, the render hash.
MODEL_DEPLOYMENT_UID: Final = "modeldeployment.gpustack.ai/uid"
MODEL_DEPLOYMENT_ROLE: Final = "modeldeployment.gpustack.ai/role"
POD_ORDINAL: Final = "modeldeployment.gpustack.ai/pod-ordinal"
RENDER_HASH: Final = "modeldeployment.gpustack.ai/render-hash"
#: The model-store CSI driver a node's CSINode lists while the node can mount stored models.
MODEL_CSI_DRIVER: Final = "model.csi.gpustack.ai"
#: Annotation on a ModelDeployment: an admin asks the joint check to retry a parked set by giving it a
#: value it has not acted on yet (any new value; the check records the one it consumed in status.hold).
JOINT_RETRY: Final = "modeldeployment.gpustack.ai/retry"


# --- builders ---------------------------------------------------------------------------------------
#: The longest name part of a label key or extended-resource name, and the longest label value.
NAME_PART_MAX: Final = 63
#: Hex digits of the FNV-1a 64 tag a shortened name part ends its head with.
SHORT_TAG_LEN: Final = 8
_SEPARATOR_CHARS: Final = "-_."


def _tag(variable: str) -> str:
    """The hash tag of a variable name part: the first :data:`SHORT_TAG_LEN` hex digits of FNV-1a 64 over
    it. One mechanism for the two rewrites that must keep identities apart: :func:`shortened` (a part cut
    to fit) and :func:`name_part` (a key an object name cannot spell as it is)."""
    return fnv64a_hex(variable)[:SHORT_TAG_LEN]


def shortened(variable: str, *, before: str = "", after: str = "", limit: int = NAME_PART_MAX) -> str:
    """``before + variable + after`` when it fits ``limit``; else ``variable`` is cut and tagged.

    The one shortening rule for every name part, label value and object name the worker builds from an
    unbounded identity (docs/chain.md "Shortened keys"): the fixed parts (``before``, e.g.
    ``gpu.partitioned.``, and ``after``, e.g. ``.capacity``) are kept whole so a reader still sees what
    the key is, and the variable part (an ``aKey``, a ``gKey``, a profile) becomes its head cut to fit,
    trailing separators dropped, plus ``-`` and the first :data:`SHORT_TAG_LEN` hex digits of FNV-1a 64
    over the whole variable part. Deterministic, so the agent, the Device Manager, the chain and ``plan``
    that all call this build the same key; the tag keeps two long identities sharing a head apart; and
    a key that fits is left exactly as GPUStack spells it."""
    whole = f"{before}{variable}{after}"
    if len(whole.encode()) <= limit:
        return whole
    tag = _tag(variable)
    room = limit - len(before.encode()) - len(after.encode()) - len(tag) - 1
    if room < 1:
        raise ValueError(f"{before!r} and {after!r} leave no room for a variable part within {limit}")
    head = variable.encode()[:room].decode(errors="ignore").rstrip(_SEPARATOR_CHARS)
    return f"{before}{head}-{tag}{after}" if head else f"{before}{tag}{after}"


def _suffixed(feature_key: str, suffix: str) -> str:
    """``<prefix>/<name><suffix>`` with the name part kept within 63 (:func:`shortened`)."""
    prefix, slash, name = feature_key.rpartition("/")
    return f"{prefix}{slash}" + shortened(name, after=suffix)


def general_key(g_key: str) -> str:
    """``general.feature.gpustack.ai/<gKey>`` (also used with the bare CPU manufacturer)."""
    return f"{GENERAL_PREFIX}{shortened(g_key)}"


def accelerator_key(a_key: str) -> str:
    """``acceleratable.feature.gpustack.ai/<aKey>``."""
    return f"{ACCELERATABLE_PREFIX}{shortened(a_key)}"


def count_key(feature_key: str) -> str:
    """``<feature key>.count``: per-node CPU cores or accelerator cards."""
    return _suffixed(feature_key, ".count")


def capacity_key(feature_key: str) -> str:
    """``<feature key>.capacity``: a flavor's contributing nodes × per-node count."""
    return _suffixed(feature_key, ".capacity")


def descriptor_key(feature_key: str, descriptor: str) -> str:
    """``<feature key>.<descriptor>``: the Device Manager's ``.product``, ``.memory``, ``.cores``,
    ``.family``, ``.comcap``, ``.driver-version``, ``.runtime-version`` labels."""
    return _suffixed(feature_key, f".{descriptor}")


#: The suffix of the label a Node whose CPU key is the bare manufacturer carries (see :func:`cpu_key_label`).
BARE_CPU_SUFFIX: Final = ".bare"


def is_bare_cpu_key(g_key: str, cpu_manufacturer: str) -> bool:
    """The CPU key is the bare manufacturer (no CPU name, family or id): ``amd``, ``intel``, ``generic``.

    Its ``general.feature.gpustack.ai/<gKey>`` label is the manufacturer label every Node of that
    manufacturer carries, so it cannot tell these Nodes from their named siblings."""
    return g_key == cpu_manufacturer


def cpu_key_label(g_key: str, cpu_manufacturer: str) -> str:
    """The label that is ``true`` on exactly the Nodes whose CPU key is ``g_key``: what a flavor's
    ``spec.nodeLabels`` pin and what the agent publishes.

    ``general.feature.gpustack.ai/<gKey>`` for a named CPU; for a bare-manufacturer CPU key, which that
    label cannot tell apart (every AMD Node carries ``general.…/amd=true``),
    ``general.feature.gpustack.ai/<gKey>.bare`` — a label only those Nodes carry."""
    if is_bare_cpu_key(g_key, cpu_manufacturer):
        return _suffixed(general_key(g_key), BARE_CPU_SUFFIX)
    return general_key(g_key)


SLICED_FIT_PREFIX: Final = "sliced-max-free-units.fit.gpustack.ai/"
SHARED_FIT_PREFIX: Final = "shared-free-cards.fit.gpustack.ai/"
FIT_LABEL_DOMAINS: Final = (SLICED_FIT_PREFIX, SHARED_FIT_PREFIX)


def sliced_max_free_units_key(a_key: str) -> str:
    """Per-card fit label: the largest free slice units on any one card of the model."""
    return f"{SLICED_FIT_PREFIX}{shortened(a_key)}"


def shared_free_cards_key(a_key: str) -> str:
    """Per-card fit label: how many cards of the model can still grant an ownership share."""
    return f"{SHARED_FIT_PREFIX}{shortened(a_key)}"


def credits_resource(manufacturer: str) -> str:
    """``credits.gpustack.ai/<mfr>``: the queue-side resource one accelerator is worth M of."""
    return f"{CREDITS_PREFIX}{manufacturer}"


# Extended resources: the device plugin's pools and the worker's counting keys (docs/agent.md, "Counting
# capacities").
SHARED_SUFFIX: Final = ".shared"
SLICED_SUFFIX: Final = ".sliced"
PARTITIONED_SUFFIX: Final = ".partitioned"
SLICED_COUNTING_SUFFIXES: Final = ("units", "cores-percentage", "memory-percentage", "memory-mib")


def _family_resource(base: str, family: str, suffix: str | None) -> str:
    if not suffix:
        return f"{base}{family}"
    prefix, slash, name = base.rpartition("/")
    return f"{prefix}{slash}" + shortened(suffix, before=f"{name}{family}.")


def sliced_resource(base: str, suffix: str | None = None) -> str:
    """``<base>.sliced`` or ``<base>.sliced.<suffix>``."""
    return _family_resource(base, SLICED_SUFFIX, suffix)


def partitioned_resource(base: str, suffix: str | None = None) -> str:
    """``<base>.partitioned`` or ``<base>.partitioned.<suffix>`` (``units`` or ``<kind>-<profile>``; a
    long profile is shortened, :func:`shortened`)."""
    return _family_resource(base, PARTITIONED_SUFFIX, suffix)


def worker_nodefeature_name(node: str) -> str:
    """The worker's per-node NodeFeature."""
    return f"{node}-gpustack-worker"


def device_manager_nodefeature_name(node: str) -> str:
    """The Device Manager's per-node NodeFeature (stage 2)."""
    return f"{node}-gpustack-device-manager"


def topology_profile(levels: list[str] | tuple[str, ...]) -> str:
    """``fnv64-<16hex>`` of the ordered level keys joined with NUL (docs/topology.md, "The profile rule")."""
    return _profile_of_joined("\x00".join(levels))


@functools.lru_cache(maxsize=1024)
def _profile_of_joined(joined: str) -> str:
    # A fleet has a handful of hierarchies and every Node's profile is hashed on each assignment.
    return "fnv64-" + fnv64a_hex(joined)


def topology_source_nodefeature_name(source_uid: str, node: str) -> str:
    """``gpustack-topology-<16hex>``: FNV-1a 64 over ``uid`` + NUL + node name, one per source and node."""
    return "gpustack-topology-" + fnv64a_hex(f"{source_uid}\x00{node}")


def topology_name(profile: str) -> str:
    """The generated Kueue Topology for a profile."""
    return f"gpustack-{profile}"


def local_queue_name(cluster_queue: str) -> str:
    """LocalQueue name: always 31 characters, so it fits the 63-char queue-name label."""
    return LOCAL_QUEUE_PREFIX + fnv64a_hex(cluster_queue)


#: Longest label value (a pod group's name is the value of ``kueue.x-k8s.io/pod-group-name``).
_LABEL_VALUE_MAX: Final = 63
_GROUP_SUFFIX_LEN: Final = 10


def pod_group_name(deployment: str, deployment_uid: str, role: str, replica: int, render_hash: str) -> str:
    """``<deployment>-<role>-<replica>-<10hex>``: one replica of a role at one render (also the name of
    the group's Workload, which Kueue names after the group). The head is cut to keep the name a label
    value (63); the suffix, FNV-1a 64 over uid, role, replica and render hash, keeps cut names distinct
    and gives a re-rendered replica (or a re-created deployment) a new group."""
    suffix = fnv64a_hex(f"{deployment_uid}\x00{role}\x00{replica}\x00{render_hash}")[:_GROUP_SUFFIX_LEN]
    head = f"{deployment}-{role}-{replica}"[: _LABEL_VALUE_MAX - 1 - _GROUP_SUFFIX_LEN].rstrip("-.")
    return f"{head}-{suffix}"


#: A key an object name can spell as it is: lowercase letters and digits in runs joined by one ``-`` or
#: ``.`` (so it never holds the ``--`` that joins a gKey to an aKey, nor a ``.`` a DNS label cannot hold).
_PLAIN_NAME_PART: Final = re.compile(r"[a-z0-9]+(?:[-.][a-z0-9]+)*")
_NOT_NAME_CHARS: Final = re.compile(r"[^a-z0-9]+")


def name_part(key: str) -> str:
    """A key (gKey, aKey, os, arch, profile) as it appears in an object name (docs/chain.md "Object names
    from keys").

    A plain key (:data:`_PLAIN_NAME_PART`: every key the name normaliser builds without ``_``) is kept
    exactly as it is, so those names never change. Any other key (``hygon-k100_ai``, an uppercase or
    ``--`` vendor, a trailing separator) becomes its readable form, runs of other characters turned into
    one ``-`` and lowercased, then ``-`` and the :func:`_tag` of the whole key, the same tag
    :func:`shortened` appends: ``hygon-k100_ai`` → ``hygon-k100-ai-<8 hex>``, while ``hygon-k100-ai`` stays
    ``hygon-k100-ai``. Stateless (a name never depends on which other keys exist) and injective but for
    a tag collision: two keys that differ only by ``_``/``-``/``.``/case get different names. The output is
    itself plain, so a name joined from parts with ``-`` and ``--`` is a DNS-1123 subdomain and splits
    back into its parts one way."""
    if _PLAIN_NAME_PART.fullmatch(key):
        return key
    readable = _NOT_NAME_CHARS.sub("-", key.lower()).strip("-")
    tag = _tag(key)
    return f"{readable}-{tag}" if readable else tag


#: The longest object name the worker builds (a DNS-1123 subdomain and Kueue's reference types allow 253).
OBJECT_NAME_MAX: Final = 253


def _object(head: str, variable: str, tail: str) -> str:
    """``head + variable + tail`` within :data:`OBJECT_NAME_MAX` (:func:`shortened`); every key in
    ``variable`` and ``tail`` already went through :func:`name_part`."""
    return shortened(variable, before=head, after=tail, limit=OBJECT_NAME_MAX)


def cpu_flavor_name(g_key: str, os: str, arch: str, cores: int, profile: str) -> str:
    """``gpustack--<gKey>-<os>-<arch>-<cores>c-<profile>``."""
    return _object("gpustack--", _parts(g_key, os, arch), f"-{cores}c-{name_part(profile)}")


def device_flavor_name(g_key: str, a_key: str, os: str, arch: str, cards: int, profile: str) -> str:
    """``gpustack--<gKey>--<aKey>-<os>-<arch>-<cards>d-<profile>``."""
    head = f"{name_part(g_key)}--{_parts(a_key, os, arch)}"
    return _object("gpustack--", head, f"-{cards}d-{name_part(profile)}")


#: The CPU key of a collapsed (awareness off) pool, and the catalog's collapsed CPU entry.
GENERIC_POOL: Final = "generic"


def _parts(*parts: str) -> str:
    """Keys joined with ``-``, each as :func:`name_part` spells it."""
    return "-".join(name_part(p) for p in parts)


def _group_head(a_key: str, g_key: str, *, aware: bool) -> str:
    if aware:
        return f"{name_part(g_key)}--{name_part(a_key)}" if a_key else name_part(g_key)
    return name_part(a_key) if a_key else GENERIC_POOL


def pool_name(os: str, arch: str, a_key: str = "", g_key: str = "", *, aware: bool = False) -> str:
    """ClusterQueue / InstanceType name for a pool, decided by the grouping setting (never by the
    gKey's value): aware ``gpustack--<gKey>[--<aKey>]-<os>-<arch>`` whatever the gKey (``generic``
    included), collapsed ``gpustack--generic-<os>-<arch>`` / ``gpustack--<aKey>-<os>-<arch>``."""
    head = _group_head(a_key, g_key, aware=aware)
    return _object("gpustack--", f"{head}-{_parts(os, arch)}", "")


def catalog_name(a_key: str = "", g_key: str = "", *, aware: bool) -> str:
    """InstanceTypeFlavor catalog entry name: the pool name without os/arch (same grouping rule)."""
    head = _group_head(a_key, g_key, aware=aware)
    return _object("gpustack--", head, "")


#: The annotation ``gpustack-worker kueue-config --merge`` writes on the Kueue ConfigMap it rewrote: a JSON
#: record of the team's values it replaced and the keys it added (``api/kueue_merge_record.py``);
#: ``cleanup --kueue-config`` restores them from it and removes it.
KUEUE_CONFIG_MERGE_ANNOTATION: Final = "worker.gpustack.ai/kueue-config-merge"
