"""The generated CRDs: committed files are fresh, schemas are structural, names follow reference §2.0."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import crdgen

if TYPE_CHECKING:
    from collections.abc import Iterator

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "crds"
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crdgen.all_crds()}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(kind: str, path: str) -> dict[str, Any]:
    """The schema node at a dotted path; ``[]`` steps into list items."""
    node = _schema(kind)
    for step in path.split("."):
        node = node["items"] if step == "[]" else node["properties"][step]
    return node


# --- staleness --------------------------------------------------------------------------------------
def test_committed_manifests_are_fresh(tmp_path: Path) -> None:
    written = crdgen.write(tmp_path)
    committed = sorted(p.name for p in MANIFESTS.glob("*.yaml"))
    assert sorted(p.name for p in written) == committed, "regenerate: python -m gpustack_worker.api.crdgen"
    for path in written:
        assert path.read_bytes() == (MANIFESTS / path.name).read_bytes(), (
            f"{path.name} is stale: python -m gpustack_worker.api.crdgen manifests/crds"
        )
    assert crdgen.check(MANIFESTS) == []


def test_generation_is_deterministic() -> None:
    assert [crdgen.render(c) for c in crdgen.all_crds()] == [crdgen.render(c) for c in crdgen.all_crds()]


def test_check_reports_stale_missing_and_unexpected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crdgen.write(tmp_path)
    stale = tmp_path / "worker.gpustack.ai_devices.yaml"
    stale.write_text(stale.read_text() + "# edited\n")
    (tmp_path / "worker.gpustack.ai_topologysources.yaml").unlink()
    (tmp_path / "worker.gpustack.ai_retired.yaml").write_text("{}\n")
    problems = crdgen.check(tmp_path)
    assert sorted(p.split(":")[0] for p in problems) == ["missing", "stale", "unexpected"]
    assert crdgen.main(["--check", str(tmp_path)]) == 1
    assert "worker.gpustack.ai_devices.yaml" in capsys.readouterr().err
    assert crdgen.main([str(tmp_path)]) == 0
    (tmp_path / "worker.gpustack.ai_retired.yaml").unlink()
    assert crdgen.main(["--check", str(tmp_path)]) == 0


def test_files_parse_back_to_the_generated_objects() -> None:
    for crd in crdgen.all_crds():
        assert yaml.safe_load((MANIFESTS / crdgen.file_name(crd)).read_text()) == crd


# --- structural schema rules ------------------------------------------------------------------------
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
_ALLOWED_KEYS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "default",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "anyOf",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _all_nodes() -> list[tuple[str, str, dict[str, Any]]]:
    return [(kind, path, node) for kind in CRDS for path, node in _walk(_schema(kind))]


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    problems = []
    for path, node in _walk(_schema(kind)):
        where = f"{kind}{path or '<root>'}"
        if unknown := set(node) - _ALLOWED_KEYS:
            problems.append(f"{where}: keys not allowed in a CRD schema: {sorted(unknown)}")
        if node.get("x-kubernetes-int-or-string"):
            if node.get("anyOf") != _INT_OR_STRING or "type" in node:
                problems.append(f"{where}: int-or-string must be exactly anyOf integer|string without type")
        elif "anyOf" in node:
            problems.append(f"{where}: anyOf outside int-or-string")
        elif "type" not in node:
            problems.append(f"{where}: no type")
        extra = node.get("additionalProperties")
        if extra is not None and (not isinstance(extra, dict) or "properties" in node):
            problems.append(f"{where}: additionalProperties must be a map value schema, alone")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array without items")
        problems.extend(
            f"{where}: required {req!r} is not a property"
            for req in node.get("required", [])
            if req not in node.get("properties", {})
        )
        if "default" in node and node["default"] in (None, False, 0, "", [], {}):
            problems.append(f"{where}: zero-value default {node['default']!r}")
        if path.endswith(".metadata") and path != ".metadata":
            problems.append(f"{where}: metadata schema below the root")
    assert problems == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_root_metadata_is_opaque_and_spec_status_present(kind: str) -> None:
    props = _schema(kind)["properties"]
    assert props["metadata"] == {"type": "object"}
    assert set(props) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert props["apiVersion"]["type"] == props["kind"]["type"] == "string"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_list_map_keys_exist_and_are_required(kind: str) -> None:
    seen = 0
    for path, node in _walk(_schema(kind)):
        if node.get("x-kubernetes-list-type") != "map":
            continue
        seen += 1
        items = node["items"]
        assert items["type"] == "object", path
        for key in node["x-kubernetes-list-map-keys"]:
            assert key in items["properties"], f"{kind}{path}: map key {key} missing"
            assert key in items.get("required", []) or "default" in items["properties"][key], (
                f"{kind}{path}: map key {key} must be required or defaulted"
            )
    assert seen > 0


@pytest.mark.parametrize(
    ("kind", "path", "keys"),
    [
        ("Devices", "spec.groups", ["id", "manufacturer"]),
        ("Devices", "spec.groups.[].accelerators", ["id"]),
        ("Devices", "spec.groups.[].accelerators.[].status.physicalSliced.profiles", ["name"]),
        ("Devices", "spec.groups.[].acceleratorSlicedDetail.physical.profiles", ["name"]),
        ("Devices", "spec.interfaces", ["name"]),
        ("Devices", "status.groups", ["id", "manufacturer"]),
        ("Devices", "status.groups.[].accelerators", ["id"]),
        ("Devices", "status.groups.[].accelerators.[].allocatedProfiles", ["name"]),
        ("Devices", "status.groups.[].accelerators.[].remainingProfiles", ["name"]),
        ("TopologySource", "status.conditions", ["type"]),
        ("InstanceType", "status.acceleratorPartitioned.allocatedProfiles", ["name"]),
        ("NodeModelStore", "status.models", ["digest"]),
        ("NodeModelStore", "status.conditions", ["type"]),
        ("ModelDeployment", "spec.roles", ["name"]),
        ("ModelDeployment", "status.conditions", ["type"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(v),
)
def test_list_maps_of_the_reference(kind: str, path: str, keys: list[str]) -> None:
    node = _at(kind, path)
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == keys


def test_topology_source_levels_are_atomic_and_bounded() -> None:
    levels = _at("TopologySource", "spec.levels")
    assert (levels["x-kubernetes-list-type"], levels["minItems"], levels["maxItems"]) == ("atomic", 1, 15)


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [
        ("ModelDeployment", "spec.roles.[].replicas", {"default": 1, "minimum": 1, "maximum": 1024}),
        ("ModelDeployment", "spec.roles.[].size", {"default": 1, "minimum": 1, "maximum": 64}),
        (
            "ModelDeployment",
            "spec.roles.[].kind",
            {"default": "Server", "enum": ["Server", "Prefill", "Decode"]},
        ),
        ("ModelDeployment", "spec.roles.[].name", {"minLength": 1, "maxLength": 63}),
        ("ModelDeployment", "spec.roles.[].instanceType", {"minLength": 1, "maxLength": 253}),
        ("ModelDeployment", "spec.roles.[].template", {"x-kubernetes-preserve-unknown-fields": True}),
        ("Devices", "status.groups.[].accelerators.[].mode", {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}),
        ("Devices", "spec.groups.[].memory", {"type": "integer", "format": "int64", "minimum": 0}),
        ("Devices", "spec.interfaces.[].state", {"enum": ["Active", "Down", "Init", "Armed", "Unknown"]}),
        ("Devices", "spec.interfaces.[].linkLayer", {"enum": ["InfiniBand", "Ethernet"]}),
        ("Devices", "spec.interfaces.[].distance", {"enum": ["PIX", "PXB", "PHB", "NODE", "SYS"]}),
        ("Devices", "spec.interfaces.[].rdma", {"type": "boolean"}),
        ("InstanceType", "spec.displayName", {"maxLength": 64}),
        ("InstanceType", "spec.description", {"maxLength": 1024}),
        ("InstanceType", "spec.generalGroup", {"default": "generic"}),
        ("InstanceType", "status.accelerator.capacity", {"x-kubernetes-int-or-string": True}),
        ("NodeModelStore", "spec.watermarks.highPercent", {"minimum": 2, "maximum": 95}),
        ("NodeModelStore", "spec.watermarks.lowPercent", {"minimum": 1, "maximum": 94}),
        ("NodeModelStore", "spec.download.concurrency", {"minimum": 1, "maximum": 64}),
        ("NodeModelStore", "spec.kubelet.imageGCHighThresholdPercent", {"type": "integer"}),
        ("NodeModelStore", "status.capacity.usedPercent", {"multipleOf": 5}),
        ("NodeModelStore", "status.models", {"maxItems": 256}),
        ("NodeModelStore", "status.models.[].state", {"enum": ["Downloading", "Ready", "Failed"]}),
        ("TopologySource", "spec.webhook.timeout", {"type": "string"}),
        ("TopologySource", "status.lastSuccessfulRefreshTime", {"format": "date-time"}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_field_bounds_of_the_reference(kind: str, path: str, expected: dict[str, Any]) -> None:
    node = _at(kind, path)
    assert {k: node.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    ("kind", "path", "required"),
    [
        ("TopologySource", "spec", ["nodeSelector", "levels"]),
        ("TopologySource", "spec.configMap", ["configMapRef", "key", "maxStaleness"]),
        ("TopologySource", "spec.configMap.configMapRef", ["namespace", "name"]),
        ("TopologySource", "spec.webhook", ["url", "pollInterval", "timeout", "maxStaleness"]),
        ("InstanceType", "spec", ["acceleratable", "os", "arch", "unitResources", "localStorage"]),
        ("ModelDeployment", "spec.roles.[]", ["name", "template"]),
        ("Devices", "spec.groups.[]", ["id", "manufacturer", "name", "memory"]),
        ("TopologySource", "status.conditions.[]", ["type", "status", "lastTransitionTime"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_required_fields(kind: str, path: str, required: list[str]) -> None:
    assert sorted(_at(kind, path)["required"]) == sorted(required)


def test_quantity_is_int_or_string_with_the_quantity_pattern() -> None:
    node = _at("ModelDeployment", "spec.roles.[].resources.accelerator")
    assert node["x-kubernetes-int-or-string"] is True
    assert node["anyOf"] == _INT_OR_STRING
    assert node["pattern"].startswith("^(\\+|-)?")


# --- CRD-level settings (reference §2.0) --------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "plural", "scope", "short_names"),
    [
        ("TopologySource", "topologysources", "Cluster", ["toposrc"]),
        ("Devices", "devices", "Cluster", ["devs"]),
        ("InstanceType", "instancetypes", "Cluster", ["instype"]),
        ("NodeModelStore", "nodemodelstores", "Cluster", ["nms"]),
        ("ModelDeployment", "modeldeployments", "Namespaced", ["md"]),
    ],
    ids=["toposrc", "devices", "instancetype", "nodemodelstore", "modeldeployment"],
)
def test_names_and_scope(kind: str, plural: str, scope: str, short_names: list[str] | None) -> None:
    crd = CRDS[kind]
    assert crd["metadata"]["name"] == f"{plural}.worker.gpustack.ai"
    assert crd["spec"]["group"] == "worker.gpustack.ai"
    assert crd["spec"]["scope"] == scope
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["names"].get("shortNames") == short_names
    assert "gpustack" in crd["spec"]["names"]["categories"]
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert crdgen.file_name(crd) == f"worker.gpustack.ai_{plural}.yaml"


_READY = '.status.conditions[?(@.type=="Ready")].status'


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "TopologySource",
            [
                ("Kind", ".status.sourceKind"),
                ("Revision", ".status.lastSuccessfulRevision"),
                ("Ready", _READY),
                ("Age", ".metadata.creationTimestamp"),
            ],
        ),
        (
            "NodeModelStore",
            [
                ("Ready", _READY),
                ("Used", ".status.capacity.usedPercent"),
                ("Age", ".metadata.creationTimestamp"),
            ],
        ),
        (
            "ModelDeployment",
            [
                ("Roles", ".spec.roles[*].name"),
                ("Ready", ".status.roles[*].readyReplicas"),
                ("Rendered", '.status.conditions[?(@.type=="Rendered")].reason'),  # e.g. InstanceTypeNotFound
                ("InstanceTypes", ".spec.roles[*].instanceType"),
                ("Quota", '.status.conditions[?(@.type=="QuotaReserved")].reason'),
                ("Parked", ".status.hold.parkedAt"),
                ("Age", ".metadata.creationTimestamp"),
            ],
        ),
    ],
    ids=["toposrc", "nms", "modeldeployment"],
)
def test_printer_columns_of_the_reference(kind: str, columns: list[tuple[str, str]]) -> None:
    got = [(c["name"], c["jsonPath"]) for c in CRDS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert got == columns


def test_topology_source_cel_rules_are_present() -> None:
    spec_rules = [v["rule"] for v in _at("TopologySource", "spec")["x-kubernetes-validations"]]
    assert any("has(self.nodeLabels), has(self.configMap), has(self.webhook)" in r for r in spec_rules)
    assert any("additionalWritePrefix" in r for r in spec_rules)
    webhook_rules = [v["rule"] for v in _at("TopologySource", "spec.webhook")["x-kubernetes-validations"]]
    assert any("bearerTokenSecretRef" in r and "tlsClientCertificateSecretRef" in r for r in webhook_rules)
