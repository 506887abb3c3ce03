"""Kubernetes' syntax rules for names, label keys, label values and annotations, as the API server and
nfd-master apply them.

Each function returns the problems as short messages (empty when the value is valid), so a caller can
say *why* something would be refused instead of only that it would be; the ``is_*`` forms are the
boolean shortcuts. The rules follow apimachinery's ``IsDNS1123Label``, ``IsDNS1123Subdomain``,
``IsQualifiedName`` (label keys, and annotation keys after lowercasing), ``IsValidLabelValue`` and
``ValidateAnnotationsSize``, plus nfd-master's namespace rule for feature labels (``validate.Label``):

* a **DNS-1123 label** — at most 63 characters of ``[a-z0-9-]``, alphanumeric at both ends (namespaces);
* a **DNS-1123 subdomain** — at most 253 characters, dot-separated DNS-1123 labels (object names such as
  Node, NodeFeature and Devices names, and the prefix of a label key);
* a **qualified name** (label key) — an optional DNS-subdomain prefix and ``/``, then a name part of 1 to
  63 characters of ``[A-Za-z0-9-_.]``, alphanumeric at both ends;
* a **label value** — empty, or at most 63 characters of the name-part alphabet, alphanumeric at both
  ends;
* **annotations** — qualified keys (case ignored); keys plus values at most 256 KiB in total, in bytes;
* an **NFD feature label** — a prefixed qualified key in a namespace nfd-master accepts (any but
  ``kubernetes.io`` / ``*.kubernetes.io`` unless it is ``feature.node.kubernetes.io``,
  ``profile.node.kubernetes.io`` or a subdomain of those), with a valid label value. nfd-master drops
  a label that breaks this rule, not the whole NodeFeature, and says so only in its own log.

Lengths are counted in bytes of UTF-8 as Go does (only annotation values can hold non-ASCII text;
every other rule's alphabet is ASCII). The patterns are matched with :func:`re.fullmatch`, so a trailing
newline does not slip through as ``$`` would let it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from gpustack_worker.api.crds.instance_type import InstanceTypeSpec
from gpustack_worker.api.topology_limits import KUEUE_LEVEL_LABEL_MAX, KUEUE_TOPOLOGY_LEVELS_MAX

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = (
    "ANNOTATIONS_MAX_BYTES",
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "LABEL_NAME_MAX",
    "LABEL_VALUE_MAX",
    "dns1123_label",
    "dns1123_subdomain",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_label_value",
    "is_qualified_name",
    "label_value",
    "nfd_feature_label",
    "object_annotations",
    "object_problems",
    "qualified_name",
    "quantity",
)

#: A DNS-1123 label (namespace names, the parts of a subdomain).
DNS1123_LABEL_MAX: Final = 63
#: A DNS-1123 subdomain (most object names, label-key prefixes).
DNS1123_SUBDOMAIN_MAX: Final = 253
#: The name part of a label key.
LABEL_NAME_MAX: Final = 63
#: A label value.
LABEL_VALUE_MAX: Final = 63
#: All annotation keys and values of one object together (apimachinery ``TotalAnnotationSizeLimitB``).
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

_DNS_LABEL_RULE: Final = (
    "must be lowercase letters, digits and '-', starting and ending with a letter or digit"
)
_DNS_SUBDOMAIN_RULE: Final = (
    "must be lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a "
    "letter or digit"
)
_NAME_RULE: Final = "must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit"

#: nfd-master: ``kubernetes.io`` namespaces are refused except these and their subdomains.
_NFD_OPEN_KUBE_NAMESPACES: Final = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _too_long(limit: int, text: str) -> str:
    return f"must be no more than {limit} characters (is {_size(text)})"


def dns1123_label(value: str) -> list[str]:
    """Problems of ``value`` as a DNS-1123 label (``IsDNS1123Label``)."""
    errors: list[str] = []
    if _size(value) > DNS1123_LABEL_MAX:
        errors.append(_too_long(DNS1123_LABEL_MAX, value))
    if not _DNS_LABEL.fullmatch(value):
        errors.append("must not contain dots" if _DNS_SUBDOMAIN.fullmatch(value) else _DNS_LABEL_RULE)
    return errors


def dns1123_subdomain(value: str) -> list[str]:
    """Problems of ``value`` as a DNS-1123 subdomain (``IsDNS1123Subdomain``): most object names."""
    errors: list[str] = []
    if _size(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_too_long(DNS1123_SUBDOMAIN_MAX, value))
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errors.append(_DNS_SUBDOMAIN_RULE)
    return errors


def qualified_name(key: str) -> list[str]:
    """Problems of ``key`` as a label key (``IsQualifiedName``): ``[prefix/]name``."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["must be a name with an optional DNS-subdomain prefix and one '/' (e.g. example.com/MyName)"]
    errors: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must not be empty")
        else:
            errors.extend(f"prefix part {msg}" for msg in dns1123_subdomain(prefix))
    name = parts[-1]
    if not name:
        errors.append("name part must not be empty")
        return errors
    if _size(name) > LABEL_NAME_MAX:
        errors.append(f"name part {_too_long(LABEL_NAME_MAX, name)}")
    if not _NAME_PART.fullmatch(name):
        errors.append(f"name part {_NAME_RULE}")
    return errors


def label_value(value: str) -> list[str]:
    """Problems of ``value`` as a label value (``IsValidLabelValue``); the empty string is valid."""
    errors: list[str] = []
    if _size(value) > LABEL_VALUE_MAX:
        errors.append(_too_long(LABEL_VALUE_MAX, value))
    if value and not _NAME_PART.fullmatch(value):
        errors.append(f"{_NAME_RULE} (or be empty)")
    return errors


def object_annotations(notes: Mapping[str, str]) -> list[str]:
    """Problems of an object's annotations: each key a qualified name (any case), total size ≤ 256 KiB."""
    errors = [f"key {key!r}: {msg}" for key in notes for msg in qualified_name(key.lower())]
    total = sum(_size(k) + _size(v) for k, v in notes.items())
    if total > ANNOTATIONS_MAX_BYTES:
        errors.append(
            f"keys and values together must be no more than {ANNOTATIONS_MAX_BYTES} bytes (are {total})"
        )
    return errors


def nfd_feature_label(key: str, value: str) -> list[str]:
    """Problems nfd-master finds in one feature label of a NodeFeature (it then drops that label)."""
    errors = [f"key: {msg}" for msg in qualified_name(key)]
    if errors:
        return errors
    namespace = key.rpartition("/")[0]
    if not namespace:
        errors.append("key: must have a namespace prefix (nfd-master refuses unprefixed keys)")
    elif (namespace == "kubernetes.io" or namespace.endswith(".kubernetes.io")) and not any(
        namespace == ns or namespace.endswith(f".{ns}") for ns in _NFD_OPEN_KUBE_NAMESPACES
    ):
        errors.append(f"key: namespace {namespace} is not allowed by nfd-master")
    errors.extend(f"value: {msg}" for msg in label_value(value))
    return errors


def is_dns1123_label(value: str) -> bool:
    """``value`` is a valid DNS-1123 label."""
    return not dns1123_label(value)


def is_dns1123_subdomain(value: str) -> bool:
    """``value`` is a valid DNS-1123 subdomain."""
    return not dns1123_subdomain(value)


def is_qualified_name(key: str) -> bool:
    """``key`` is a valid label key."""
    return not qualified_name(key)


def is_label_value(value: str) -> bool:
    """``value`` is a valid label value."""
    return not label_value(value)


# --- whole objects, as the API server and Kueue's CRD schemas check them ------------------------------
#: Kueue v1beta2 kubebuilder limits (apis/kueue/v1beta2): ResourceFlavor ``spec.nodeLabels``
#: MaxProperties=8, ``nodeTaints`` / ``tolerations`` MaxItems=8; ClusterQueue ``resourceGroups``
#: MaxItems=16, a group's ``coveredResources`` and ``flavors`` 1..64, a flavor's ``resources`` 1..64 and
#: as many as the group covers; Topology ``levels`` 1..16 with ``nodeLabel`` a qualified name ≤ 316;
#: every reference (flavor, topology, cluster queue) a DNS-1123 subdomain ≤ 253.
KUEUE_NODE_LABELS_MAX: Final = 8
KUEUE_TOLERATIONS_MAX: Final = 8
KUEUE_RESOURCE_GROUPS_MAX: Final = 16
KUEUE_GROUP_ITEMS_MAX: Final = 64
#: InstanceType ``spec.displayName`` (runes).
DISPLAY_NAME_MAX: Final = 64

_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?")


def quantity(value: object) -> list[str]:
    """Problems of ``value`` as a resource quantity (``resource.ParseQuantity``'s grammar)."""
    text = str(value)
    return [] if _QUANTITY.fullmatch(text) else [f"{text!r} is not a quantity"]


def _meta_problems(body: Mapping[str, object]) -> list[tuple[str, str]]:
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    out = [("metadata.name", m) for m in dns1123_subdomain(str(meta.get("name", "")))]
    for key, value in (meta.get("labels") or {}).items():
        out += [(f"metadata.labels[{key}]", f"key {m}") for m in qualified_name(key)]
        out += [(f"metadata.labels[{key}]", f"value {m}") for m in label_value(str(value))]
    out += [("metadata.annotations", m) for m in object_annotations(meta.get("annotations") or {})]
    return out


def _ref(path: str, value: object) -> list[tuple[str, str]]:
    return [(path, m) for m in dns1123_subdomain(str(value))]


def _flavor(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    node_labels: Mapping[str, Any] = spec.get("nodeLabels") or {}
    if len(node_labels) > KUEUE_NODE_LABELS_MAX:
        too_many = f"must have at most {KUEUE_NODE_LABELS_MAX} entries (has {len(node_labels)})"
        out.append(("spec.nodeLabels", too_many))
    for key, value in node_labels.items():
        out += [(f"spec.nodeLabels[{key}]", f"key {m}") for m in qualified_name(key)]
        out += [(f"spec.nodeLabels[{key}]", f"value {m}") for m in label_value(str(value))]
    if spec.get("topologyName") is not None:
        out += _ref("spec.topologyName", spec["topologyName"])
        if not node_labels:
            out.append(("spec.nodeLabels", "at least one nodeLabel is required when topology is set"))
    if len(spec.get("tolerations") or ()) > KUEUE_TOLERATIONS_MAX:
        out.append(("spec.tolerations", f"must have at most {KUEUE_TOLERATIONS_MAX} items"))
    return out


def _cluster_queue(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    groups = spec.get("resourceGroups") or ()
    if len(groups) > KUEUE_RESOURCE_GROUPS_MAX:
        out.append(("spec.resourceGroups", f"must have at most {KUEUE_RESOURCE_GROUPS_MAX} items"))
    for g, group in enumerate(groups):
        path = f"spec.resourceGroups[{g}]"
        covered = group.get("coveredResources") or ()
        flavors = group.get("flavors") or ()
        for field, items in (("coveredResources", covered), ("flavors", flavors)):
            if not 1 <= len(items) <= KUEUE_GROUP_ITEMS_MAX:
                count = f"must have 1 to {KUEUE_GROUP_ITEMS_MAX} items (has {len(items)})"
                out.append((f"{path}.{field}", count))
        out += [
            (f"{path}.coveredResources[{i}]", m) for i, r in enumerate(covered) for m in qualified_name(r)
        ]
        for f, flavor in enumerate(flavors):
            fpath = f"{path}.flavors[{f}]"
            out += _ref(f"{fpath}.name", flavor.get("name", ""))
            resources = flavor.get("resources") or ()
            if len(resources) != len(covered):
                same = "flavors must have the same number of resources as the coveredResources"
                out.append((f"{fpath}.resources", same))
            for r, res in enumerate(resources):
                quota = res.get("nominalQuota")
                out += [(f"{fpath}.resources[{r}].nominalQuota", m) for m in quantity(quota)]
    return out


def _topology(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    levels = spec.get("levels") or ()
    out: list[tuple[str, str]] = []
    if not 1 <= len(levels) <= KUEUE_TOPOLOGY_LEVELS_MAX:
        out.append(("spec.levels", f"must have 1 to {KUEUE_TOPOLOGY_LEVELS_MAX} items"))
    for i, level in enumerate(levels):
        label = str(level.get("nodeLabel", ""))
        if len(label) > KUEUE_LEVEL_LABEL_MAX:
            longest = f"must be no more than {KUEUE_LEVEL_LABEL_MAX} characters"
            out.append((f"spec.levels[{i}].nodeLabel", longest))
        out += [(f"spec.levels[{i}].nodeLabel", m) for m in qualified_name(label)]
    return out


def _instance_type(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The InstanceType CRD's schema: the model the installed CRD is generated from."""
    try:
        InstanceTypeSpec.model_validate(dict(spec))
    except ValidationError as exc:
        return [("spec." + ".".join(str(p) for p in err["loc"]), str(err["msg"])) for err in exc.errors()]
    return []


def _local_queue(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    return _ref("spec.clusterQueue", spec.get("clusterQueue", ""))


_SPEC_RULES: Final = {
    "ResourceFlavor": _flavor,
    "ClusterQueue": _cluster_queue,
    "Topology": _topology,
    "InstanceType": _instance_type,
    "LocalQueue": _local_queue,
}


def object_problems(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What the API server (apimachinery's metadata rules, and the kind's CRD schema for Kueue's kinds
    and InstanceType) would refuse in ``body``, as ``(field path, rule)`` pairs; empty when accepted."""
    out = _meta_problems(body)
    rule = _SPEC_RULES.get(str(body.get("kind", "")))
    spec = body.get("spec")
    if rule is not None and isinstance(spec, dict):
        out += rule(spec)
    return out
