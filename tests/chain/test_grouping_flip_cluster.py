"""An admin-authored InstanceType across a flip of the grouping, on the real control plane (issue 27 class 2).

Under ``instance-type-aware-cpu-manufacturer=true`` an admin authors
``gpustack--amd-epyc-7763--nvidia-h100-80gb-hbm3-linux-amd64`` (no ``derived-from-node`` label) for a fleet of
an AMD and an Intel node with eight H100 each. The older rule served an admin's type by its identity
whatever its name, so after the flip to ``false`` that type and the derived collapsed
``gpustack--nvidia-h100-80gb-hbm3-linux-amd64`` both took both H100 flavors: 16 cards promised twice, and the
AMD-named type served the Intel node. Now the name is the identity (docs/chain.md "Types of the other
grouping"): under each setting, the nominal quota over every queue whose resource groups hold a flavor adds up
to that flavor's capacity, the AMD-named type's queue ends with no flavor and its InstanceType says why
(naming the collapsed pool), and flipping back restores it.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate.load import parse_scenario
from tests.stack import condition, eventually, module_cluster, running_stack, write_settings

pytestmark = pytest.mark.cluster

TEAM = "team-flip"
#: A generous bound for the chain to converge on a loaded machine (never a measurement).
CONVERGE_S = 300.0
AWARE = "instance-type-aware-cpu-manufacturer"
H100 = {"manufacturer": "nvidia", "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "cores": 16896}
FLEET = {
    "nodes": [
        {
            "name": "amd-h100",
            "cpu": {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 64},
            "memory": "512Gi",
            "accelerators": [{**H100, "count": 8}],
        },
        {
            "name": "intel-h100",
            "cpu": {"vendor": "Intel", "model": "Intel(R) Xeon(R) Platinum 8480+", "cores": 56},
            "memory": "512Gi",
            "accelerators": [{**H100, "count": 8}],
        },
    ]
}
A_KEY = "nvidia-h100-80gb-hbm3"
AMD_TYPE = f"gpustack--amd-epyc-7763--{A_KEY}-linux-amd64"
INTEL_TYPE = f"gpustack--intel-xeon-platinum-8480--{A_KEY}-linux-amd64"
COLLAPSED_TYPE = f"gpustack--{A_KEY}-linux-amd64"
ADMIN_TYPE = {
    "apiVersion": kinds.INSTANCE_TYPE.api_version,
    "kind": kinds.INSTANCE_TYPE.kind,
    "metadata": {"name": AMD_TYPE},
    "spec": {
        "displayName": "H100 on EPYC 7763 (admin)",
        "acceleratable": True,
        "acceleratorGroup": A_KEY,
        "generalGroup": "amd-epyc-7763",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "12", "ram": "192Gi"},
        "localStorage": "100Gi",
    },
}


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _capacity(flavor: dict[str, Any]) -> int:
    """A flavor's capacity in its queue's units: cards × M for an accelerated flavor, cores for a CPU one."""
    labels = flavor["metadata"].get("labels") or {}
    count = next(int(v) for k, v in labels.items() if k.endswith(".capacity"))
    return count * keys.UNITS_PER_ACCELERATOR if labels.get(keys.ACCELERATABLE) == "true" else count


async def _chain(admin: Client) -> dict[str, Any]:
    """The live chain: every operator flavor's capacity, and per chain queue its flavors' nominal quota,
    its labels and its TopologyReady condition."""
    by_type = keys.RESOURCE_TYPE + "={}"
    flavors, _ = await admin.list(kinds.RESOURCE_FLAVOR, label_selector=by_type.format(keys.TYPE_NODES))
    queues, _ = await admin.list(kinds.CLUSTER_QUEUE, label_selector=by_type.format(keys.TYPE_INSTANCE_TYPES))
    quota: dict[str, dict[str, int]] = {}
    for q in queues:
        held = quota.setdefault(_name(q), {})
        for group in (q.get("spec") or {}).get("resourceGroups") or ():
            for f in group.get("flavors") or ():
                held[f["name"]] = held.get(f["name"], 0) + sum(
                    int(parse(r["nominalQuota"]) or 0) for r in f.get("resources") or ()
                )
    return {
        "capacity": {_name(f): _capacity(f) for f in flavors if not f["metadata"].get("deletionTimestamp")},
        "quota": quota,
        "labels": {_name(q): q["metadata"].get("labels") or {} for q in queues},
        "ready": {_name(q): condition(q, keys.TOPOLOGY_READY) for q in queues},
    }


def _promised(chain: dict[str, Any]) -> dict[str, int]:
    """flavor → the nominal quota of every queue whose resource groups hold it, added up."""
    out: dict[str, int] = {}
    for held in chain["quota"].values():
        for flavor, nominal in held.items():
            out[flavor] = out.get(flavor, 0) + nominal
    return out


def _h100(chain: dict[str, Any], cpu: str) -> str:
    return next(f for f in chain["capacity"] if f.startswith(f"gpustack--{cpu}--{A_KEY}-"))


async def _phase_message(admin: Client, name: str) -> str:
    it = await admin.get(kinds.INSTANCE_TYPE, name)
    return str(((it or {}).get("status") or {}).get("phaseMessage") or "")


async def _converged(admin: Client, served: dict[str, str], empty: set[str]) -> dict[str, Any] | None:
    """The chain once every flavor's capacity is promised exactly once (the quota of all the queues that
    hold it adds up to its capacity), ``served`` maps the named queues to the CPU of the one H100 flavor
    each holds (TopologyReady=True), and the queues ``empty`` hold nothing and carry the out-of-scope
    mark; else None."""
    chain = await _chain(admin)
    if len(chain["capacity"]) != 4:  # an H100 and a CPU flavor per node
        return None
    if _promised(chain) != chain["capacity"]:
        return None
    for queue, cpu in served.items():
        if chain["quota"].get(queue) != {_h100(chain, cpu): chain["capacity"][_h100(chain, cpu)]}:
            return None
        if chain["ready"][queue].get("status") != "True" or keys.OTHER_GROUPING in chain["labels"][queue]:
            return None
    for queue in empty:
        if chain["quota"].get(queue) != {} or chain["labels"][queue].get(keys.OTHER_GROUPING) != "true":
            return None
    return chain


async def test_an_admin_type_of_the_other_grouping_takes_no_flavor_across_a_flip() -> None:
    scenario = parse_scenario(FLEET)
    with module_cluster("grouping-flip-admin") as cluster:
        admin = await Client.connect(str(cluster.kubeconfig))
        try:
            # The admin's type and the setting exist before any controller runs: the type is the admin's.
            await write_settings(admin, {AWARE: "true"})
            await admin.create(kinds.INSTANCE_TYPE, ADMIN_TYPE)
        finally:
            await admin.close()
        async with running_stack(cluster, scenario, namespaces=(TEAM,)) as stack:
            admin = stack.admin
            it = await admin.get(kinds.INSTANCE_TYPE, AMD_TYPE)
            assert it is not None and keys.DERIVED_FROM_NODE not in (it["metadata"].get("labels") or {})

            # aware=true: the admin's type is the AMD pool's (its name is that pool's), Intel's is derived.
            aware = {AMD_TYPE: "amd-epyc-7763", INTEL_TYPE: "intel-xeon-platinum-8480"}
            await eventually(lambda: _converged(admin, aware, set()), within=CONVERGE_S)
            assert "selects no flavor" not in await _phase_message(admin, AMD_TYPE)

            # The flip: the collapsed type is derived and takes both H100 flavors; the admin's AMD-named type
            # (and the derived Intel one) are the other grouping's: no flavor, and the type says why.
            await write_settings(admin, {AWARE: "false"})

            async def collapsed() -> dict[str, Any] | None:
                chain = await _converged(admin, {}, {AMD_TYPE, INTEL_TYPE})
                if chain is None:
                    return None
                both = {_h100(chain, "amd-epyc-7763"), _h100(chain, "intel-xeon-platinum-8480")}
                held = chain["quota"].get(COLLAPSED_TYPE) or {}
                ready = chain["ready"].get(COLLAPSED_TYPE, {}).get("status") == "True"
                message = await _phase_message(admin, AMD_TYPE)
                return chain if set(held) == both and ready and COLLAPSED_TYPE in message else None

            chain = await eventually(collapsed, within=CONVERGE_S)
            # 16 cards, promised once: the collapsed queue's quota is the two flavors' capacity, no more.
            assert sum(chain["quota"][COLLAPSED_TYPE].values()) == 16 * keys.UNITS_PER_ACCELERATOR
            message = await _phase_message(admin, AMD_TYPE)
            assert AMD_TYPE in message and "selects no flavor" in message, message

            # Flipping back restores the admin's type on the AMD flavor; the collapsed type holds nothing.
            await write_settings(admin, {AWARE: "true"})
            await eventually(lambda: _converged(admin, aware, {COLLAPSED_TYPE}), within=CONVERGE_S)

            async def restored() -> bool:
                return "selects no flavor" not in await _phase_message(admin, AMD_TYPE)

            await eventually(restored, within=CONVERGE_S)

            async def collapsed_says_why() -> bool:
                # The collapsed type's identity is generalGroup generic: under awareness that pool's name.
                return f"gpustack--generic--{A_KEY}-linux-amd64" in await _phase_message(
                    admin, COLLAPSED_TYPE
                )

            await eventually(collapsed_says_why, within=CONVERGE_S)
