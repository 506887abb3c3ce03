"""``docs/examples/`` without a cluster: every file is listed in its README and parses; each object
validates against our model with no field the model does not know (a typo would be ignored by the
model and refused by the API server); each TopologySource passes the admission webhook's rules; each
writing source's snapshot validates against the source; the settings validate; and the examples fit
together (the ModelDeployments name the example InstanceType and a level of the rack hierarchy).
``test_examples_cluster.py`` applies the same files to a real API server."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.api.crds import InstanceType, ModelDeployment, TopologySource
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from gpustack_worker.runtime.settings import settings_from
from gpustack_worker.topology import snapshot
from gpustack_worker.topology.spec_check import spec_errors
from tests.docs.examples import SNAPSHOT_FILES, documents, example_files, listed_files, objects, snapshot_of

MODELS = {
    kinds.TOPOLOGY_SOURCE.kind: TopologySource,
    kinds.INSTANCE_TYPE.kind: InstanceType,
    kinds.MODEL_DEPLOYMENT.kind: ModelDeployment,
}


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in objects() if doc["kind"] == kind]


def _unknown(original: Any, known: Any, path: str = "") -> list[str]:
    """Paths present in ``original`` but not in ``known`` (the model's dump of it)."""
    if isinstance(original, dict):
        if not isinstance(known, dict):
            return [path or "."]
        out: list[str] = []
        for key, value in original.items():
            where = f"{path}.{key}" if path else key
            out += _unknown(value, known[key], where) if key in known else [where]
        return out
    if isinstance(original, list):
        if not isinstance(known, list) or len(known) != len(original):
            return [path]
        return [p for i, item in enumerate(original) for p in _unknown(item, known[i], f"{path}[{i}]")]
    return []


def test_every_file_is_listed_in_the_readme_and_every_listed_file_exists() -> None:
    names = {p.name for p in example_files()}
    assert names, "docs/examples holds no example"
    assert listed_files() == names


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_file_parses(path: Any) -> None:
    docs = documents(path)
    assert docs, f"{path.name} holds no document"
    if path.name in SNAPSHOT_FILES:
        return
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        assert doc["metadata"].get("name"), doc


@pytest.mark.parametrize(
    ("file", "obj"),
    [(f, o) for f, o in objects() if o["kind"] in MODELS],
    ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"],
)
def test_our_objects_validate_with_no_unknown_field(file: str, obj: dict[str, Any]) -> None:
    model = MODELS[obj["kind"]].model_validate(obj)
    assert obj["apiVersion"] == model.CRD.resource.api_version, file
    assert _unknown(obj["spec"], model.dump()["spec"], "spec") == []


@pytest.mark.parametrize("source", _of_kind(kinds.TOPOLOGY_SOURCE.kind), ids=lambda s: s["metadata"]["name"])
def test_topology_sources_pass_the_admission_rules(source: dict[str, Any]) -> None:
    assert spec_errors(source["spec"], namespace=kinds.SYSTEM_NAMESPACE) == []


def test_there_is_a_topology_source_of_each_arm() -> None:
    sources = _of_kind(kinds.TOPOLOGY_SOURCE.kind)
    arms = sorted(a for s in sources for a in ("nodeLabels", "configMap", "webhook") if a in s["spec"])
    assert arms == ["configMap", "nodeLabels", "webhook"]


@pytest.mark.parametrize(
    "source",
    [s for s in _of_kind(kinds.TOPOLOGY_SOURCE.kind) if "nodeLabels" not in s["spec"]],
    ids=lambda s: s["metadata"]["name"],
)
def test_each_snapshot_validates_against_its_source(source: dict[str, Any]) -> None:
    spec = source["spec"]
    decoded = snapshot.decode(snapshot_of(source))
    assert decoded.nodes, "the snapshot places no Node"
    # every Node the snapshot names carries the source's selector labels (the test cluster's Nodes do)
    selected = {node: dict(spec["nodeSelector"]["matchLabels"]) for node in decoded.nodes}
    published = snapshot.validate(
        decoded, levels=spec["levels"], selected=selected, write_prefix=spec.get("additionalWritePrefix")
    )
    assert set(published) == set(decoded.nodes)
    assert all(set(labels) == set(spec["levels"]) for labels in published.values())


def test_settings_validate() -> None:
    (cm,) = [doc for doc in _of_kind(kinds.CONFIG_MAP.kind) if doc["metadata"]["name"] == DEFAULT_CONFIGMAP]
    assert cm["metadata"]["namespace"] == DEFAULT_NAMESPACE
    settings = settings_from(WorkerSettings, cm["data"], env={})
    assert settings.model_artifact_delivery_mode == "Node"


def test_the_deployments_name_the_example_instance_type_and_a_level_of_its_hierarchy() -> None:
    (instance_type,) = _of_kind(kinds.INSTANCE_TYPE.kind)
    sources = _of_kind(kinds.TOPOLOGY_SOURCE.kind)
    levels = {lvl for s in sources if "configMap" in s["spec"] for lvl in s["spec"]["levels"]}
    roles = [r for md in _of_kind(kinds.MODEL_DEPLOYMENT.kind) for r in md["spec"]["roles"]]
    assert {r["instanceType"] for r in roles} == {instance_type["metadata"]["name"]}
    required = {r["topology"]["requiredLevel"] for r in roles if "topology" in r}
    assert required, "no role asks for a required level"
    assert required <= levels
    assert sorted(len(md["spec"]["roles"]) for md in _of_kind(kinds.MODEL_DEPLOYMENT.kind)) == [1, 2]
