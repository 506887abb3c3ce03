"""A two-node world for the bad-input suite: a good baseline, its published outputs, and the reconcilers
driven against a recording client, so each case can say what was published and which Events were posted.

Node ``n1`` gets the bad input (plus a good change of its hygon model, so "the rest converges" is seen),
node ``n2`` is never touched. Both start converged: the cache holds the baseline's published outputs
with the field managers' managedFields, so a reconcile that changes nothing issues no request.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gpustack_worker.agent import capacity, fit, nodefeature
from gpustack_worker.agent.facts import devices_facts, node_facts
from gpustack_worker.agent.settings import AgentSettings
from gpustack_worker.agent.steps import FIELD_MANAGERS, Steps
from gpustack_worker.api import keys, kinds
from gpustack_worker.api.devices_check import matches
from gpustack_worker.runtime.client import ApiError
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.store import Store
from gpustack_worker.runtime.transform import make_transform

from .builders import card, group, ledger, ledger_group, managed_entry, profile

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

M = keys.UNITS_PER_ACCELERATOR
NV = "nvidia.com/gpu"
DCU = "hygon.com/dcu"
NODES = ("n1", "n2")
CPU_NAME = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
G_KEY = "intel-xeon-platinum-8259cl"
MIG = [profile("1g.10gb", 7, 9856), profile("3g.40gb", 2, 40192), profile("7g.80gb", 1, 80896)]


def base_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {keys.NFD_CPU_VENDOR: "Intel", keys.HOSTNAME: name},
            "annotations": {keys.CPU_NAME_ANNOTATION: CPU_NAME},
        },
        "status": {
            "capacity": {
                "cpu": "96",
                "memory": "768Gi",
                f"{NV}.sliced": "256",
                f"{NV}.partitioned": "14",
                f"{DCU}.sliced": "8",
            },
        },
    }


def base_devices(name: str) -> dict[str, Any]:
    nv_cards = [card(f"c{i}", logical=128, overcommit=True) for i in (0, 1)]
    nv_cards += [card(f"c{i}", profiles=copy.deepcopy(MIG)) for i in (2, 3)]
    return {
        "apiVersion": kinds.DEVICES.api_version,
        "kind": "Devices",
        "metadata": {"name": name, "uid": f"dev-uid-{name}"},
        "spec": {
            "groups": [
                group("a100", "nvidia", 81920, nv_cards, name="NVIDIA A100-SXM4-80GB"),
                group("k100_ai", "hygon", 65536, [card(f"h{i}", logical=4) for i in (0, 1)], name="K100_AI"),
            ],
            "interfaces": [
                {
                    "name": "ib0",
                    "rdma": True,
                    "state": "Active",
                    "linkLayer": "InfiniBand",
                    "numaAffinity": "0",
                    "distance": "PIX",
                },
                {
                    "name": "ib1",
                    "rdma": True,
                    "state": "Active",
                    "linkLayer": "InfiniBand",
                    "numaAffinity": "1",
                    "distance": "PXB",
                },
            ],
        },
        "status": {
            "groups": [
                ledger_group(
                    "a100",
                    "nvidia",
                    [
                        ledger("c0"),
                        ledger("c1", mode=3, allocated=16_000, remaining=M - 16_000, slices=1),
                        ledger(
                            "c2",
                            mode=4,
                            allocated=M,
                            remaining=0,
                            allocated_profiles={"3g.40gb": 1},
                            remaining_profiles={"3g.40gb": 1, "1g.10gb": 3},
                        ),
                        ledger("c3", remaining_profiles={"1g.10gb": 7, "3g.40gb": 2, "7g.80gb": 1}),
                    ],
                ),
                ledger_group(
                    "k100_ai",
                    "hygon",
                    [ledger("h0", mode=3, allocated=64_000, remaining=M - 64_000, slices=4), ledger("h1")],
                ),
            ]
        },
    }


def companion_change(devices: dict[str, Any]) -> None:
    """The good change made in the same edit as every bad value: a third hygon card, free."""
    devices["spec"]["groups"][1]["accelerators"].append(card("h2", logical=4))
    devices["status"]["groups"][1]["accelerators"].append(ledger("h2"))


Outputs = dict[str, str]


def pure_outputs(node: Mapping[str, Any], devices: Mapping[str, Any]) -> Outputs:
    """What the three ``desired`` functions give for good inputs, flattened (``nf:``/``cap:``/``fit:``)."""
    nf, dev = node_facts(node), devices_facts(devices)
    out: Outputs = {}
    for key, value in nodefeature.desired_labels(nf, dev, manual=False, mixed_on_node=True).items():
        out[f"nf:{key}"] = value
    for key, number in capacity.desired(nf, dev, manual=False).items():
        out[f"cap:{key}"] = str(number)
    for key, value in fit.desired(nf, dev, manual=False).items():
        out[f"fit:{key}"] = value
    return out


BASELINE = pure_outputs(base_node("n1"), base_devices("n1"))


def _good_after() -> Outputs:
    devices = base_devices("n1")
    companion_change(devices)
    return pure_outputs(base_node("n1"), devices)


GOOD_AFTER = _good_after()


def published_node(name: str, outputs: Outputs) -> dict[str, Any]:
    """The Node as the cache holds it once the baseline was published (with our managedFields)."""
    node = base_node(name)
    counting = {k[4:]: v for k, v in outputs.items() if k.startswith("cap:")}
    fits = {k[4:]: v for k, v in outputs.items() if k.startswith("fit:")}
    node["status"]["capacity"].update(counting)
    node["status"]["allocatable"] = dict(node["status"]["capacity"])
    node["metadata"]["labels"].update(fits)
    node["metadata"]["managedFields"] = [
        managed_entry(
            capacity.FIELD_MANAGER,
            capacity.apply_body(name, {k: int(v) for k, v in counting.items()}),
            "status",
        ),
        managed_entry(fit.FIELD_MANAGER, fit.apply_body(name, fits)),
    ]
    return node


def published_feature(name: str, outputs: Outputs) -> dict[str, Any]:
    labels = {k[3:]: v for k, v in outputs.items() if k.startswith("nf:")}
    body = nodefeature.desired(node_facts(base_node(name)), None, manual=False, mixed_on_node=True)
    body["spec"]["labels"] = labels
    obj = copy.deepcopy(body)
    obj["metadata"]["uid"] = f"nf-uid-{name}"
    obj["metadata"]["managedFields"] = [managed_entry(nodefeature.FIELD_MANAGER, body)]
    return obj


@dataclass
class Call:
    verb: str
    kind: str
    name: str
    subresource: str
    body: dict[str, Any]


@dataclass
class FakeClient:
    """Records writes; ``reject`` makes applies of one field manager fail with 422 (as the API server
    answers a body it finds invalid)."""

    calls: list[Call] = field(default_factory=list)
    reject: str | None = None

    async def apply(
        self,
        resource: Resource,
        body: dict[str, Any],
        *,
        field_manager: str = "",
        subresource: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(Call("apply", resource.kind, name, subresource or "", copy.deepcopy(body)))
        if self.reject is not None and field_manager == self.reject:
            status = {
                "reason": "Invalid",
                "message": f'Node "{name}" is invalid: quantity must be an integer',
            }
            raise ApiError(422, "Invalid", status, status["message"])
        return copy.deepcopy(body)

    async def patch(
        self, resource: Resource, name: str, body: dict[str, Any], *, subresource: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append(Call("patch", resource.kind, name, subresource or "", copy.deepcopy(body)))
        return copy.deepcopy(body)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> bool:
        self.calls.append(Call("delete", resource.kind, name, "", {}))
        return True


@dataclass
class FakeEvents:
    """Records what the agent asks the EventRecorder to post."""

    posted: list[dict[str, Any]] = field(default_factory=list)

    def warning(self, regarding: Mapping[str, Any], *, reason: str, action: str, note: str) -> None:
        meta = regarding.get("metadata") or {}
        self.posted.append(
            {
                "kind": regarding.get("kind"),
                "name": meta.get("name"),
                "reason": reason,
                "action": action,
                "note": note,
            }
        )


@dataclass
class World:
    """Two nodes, their caches, the reconcilers, the recorded writes and Events."""

    nodes: dict[str, dict[str, Any]]
    devices: dict[str, dict[str, Any]]
    features: dict[str, dict[str, Any]]
    manual: bool = False
    client: FakeClient = field(default_factory=FakeClient)
    events: FakeEvents = field(default_factory=FakeEvents)
    steps: Steps = field(init=False)

    def __post_init__(self) -> None:
        stores = Store(), Store(), Store()
        for store, objs in zip(stores, (self.nodes, self.devices, self.features), strict=True):
            for obj in objs.values():
                store.upsert(freeze(obj))
        settings = AgentSettings(node_management_manual=self.manual)
        self.steps = Steps(
            cast("Client", self.client),
            *stores,
            settings=lambda: settings,
            caches=(make_transform(FIELD_MANAGERS),),
            events=self.events,
        )

    async def reconcile(self, name: str) -> None:
        """All three reconcilers of one node; each must end (``Result.done()``), never raise."""
        for step in (self.steps.nodefeature, self.steps.capacity, self.steps.fit):
            result = await step(name)
            assert result.requeue_after is None

    def outputs(self, name: str) -> Outputs:
        """What is published for ``name`` after the recorded writes (the cache's value when nothing was
        written), flattened like :func:`pure_outputs`."""
        feature = self.features[name]
        labels = dict(feature["spec"]["labels"])
        node = self.nodes[name]
        counting = {k: v for k, v in node["status"]["capacity"].items() if capacity.is_counting_key(k)}
        fits = fit.observed(node_facts(node))
        for call in self.client.calls:
            if call.name == keys.worker_nodefeature_name(name) and call.verb == "apply":
                labels = dict(call.body["spec"]["labels"])
            if call.name != name or call.kind != "Node":
                continue
            if call.verb == "apply" and call.subresource == "status":
                counting = dict((call.body.get("status") or {}).get("capacity") or {})
            elif call.verb == "apply":
                fits = dict(call.body["metadata"].get("labels") or {})
            elif call.subresource == "status":
                for key in call.body["status"]["capacity"]:
                    counting.pop(key, None)
            else:
                for key in call.body["metadata"]["labels"]:
                    fits.pop(key, None)
        out = {f"nf:{k}": v for k, v in labels.items()}
        out.update({f"cap:{k}": str(int(parse(v) or 0)) for k, v in counting.items()})
        out.update({f"fit:{k}": v for k, v in fits.items()})
        return out

    def writes_for(self, name: str) -> list[Call]:
        feature = keys.worker_nodefeature_name(name)
        return [c for c in self.client.calls if c.name in (name, feature)]

    def events_for(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events.posted if e["name"] == name]


def world(
    node_change: Callable[[dict[str, Any]], None] | None = None,
    devices_change: Callable[[dict[str, Any]], None] | None = None,
    *,
    companion: bool = True,
    manual: bool = False,
) -> World:
    """Both nodes published at the baseline; then ``n1``'s inputs changed (bad value + companion)."""
    nodes = {n: published_node(n, BASELINE) for n in NODES}
    devices = {n: base_devices(n) for n in NODES}
    features = {n: published_feature(n, BASELINE) for n in NODES}
    if companion:
        companion_change(devices["n1"])
    if node_change is not None:
        node_change(nodes["n1"])
    if devices_change is not None:
        devices_change(devices["n1"])
    return World(nodes, devices, features, manual=manual)


def expected(
    holds: tuple[str, ...] = (),
    drops: tuple[str, ...] = (),
    extra: Mapping[str, str] | None = None,
    good: Outputs = GOOD_AFTER,
) -> Outputs:
    """``good`` with held keys at their baseline (last published) value and dropped keys gone."""
    out: Outputs = {}
    for key in {*good, *BASELINE}:
        if any(matches(s, key) for s in holds):
            if key in BASELINE:
                out[key] = BASELINE[key]
        elif any(matches(s, key) for s in drops):
            continue
        elif key in good:
            out[key] = good[key]
    out.update(extra or {})
    return out
