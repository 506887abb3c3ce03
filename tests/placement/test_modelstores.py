"""Node-store preference terms: which nodes count, in which order, and when there is no term."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.placement import modelstores

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def store(
    node: str,
    *models: dict[str, Any],
    ready: str = "True",
) -> dict[str, Any]:
    return {
        "metadata": {"name": node},
        "status": {"models": list(models), "conditions": [{"type": "Ready", "status": ready}]},
    }


def model(
    digest: str = D1, state: str = "Ready", *, referenced: bool = False, used: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"digest": digest, "state": state, "referenced": referenced}
    if used:
        out["lastUsedTime"] = used
    return out


def csinode(node: str, *drivers: str) -> dict[str, Any]:
    return {"metadata": {"name": node}, "spec": {"drivers": [{"name": d, "nodeID": node} for d in drivers]}}


def live(*nodes: str) -> list[dict[str, Any]]:
    return [csinode(n, "other.csi", keys.MODEL_CSI_DRIVER) for n in nodes]


def values(terms: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for term in terms:
        assert term["weight"] == modelstores.TERM_WEIGHT
        (expr,) = term["preference"]["matchExpressions"]
        assert expr["key"] == keys.HOSTNAME and expr["operator"] == "In"
        out.append(expr["values"])
    return out


def test_at_most_16_nodes_mounting_first_then_most_recent_then_by_name() -> None:
    stores = [store(f"n{i:02d}", model(used="2026-01-01T00:00:00Z")) for i in range(20)]
    stores.append(store("z-mounting", model(referenced=True)))
    stores.append(store("y-recent", model(used="2026-06-01T10:00:00Z")))
    stores.append(store("x-older", model(used="2026-03-01T10:00:00Z")))
    stores.append(store("w-never", model()))
    nodes = [str(s["metadata"]["name"]) for s in stores]
    (got,) = values(modelstores.store_terms([D1], stores, live(*nodes)))
    assert len(got) == modelstores.MAX_NODES_PER_TERM == 16
    assert got[:3] == ["z-mounting", "y-recent", "x-older"]
    assert got[3:] == [f"n{i:02d}" for i in range(13)]


@pytest.mark.parametrize(
    ("stores", "csinodes", "expected"),
    [
        pytest.param([store("a", model())], live("a"), [["a"]], id="ready-holder"),
        pytest.param([store("a", model(), ready="False")], live("a"), [], id="store-not-ready"),
        pytest.param([store("a", model(), ready="Unknown")], live("a"), [], id="store-ready-unknown"),
        pytest.param(
            [{"metadata": {"name": "a"}, "status": {"models": [model()]}}], live("a"), [], id="no-ready"
        ),
        pytest.param([store("a", model())], [csinode("a", "other.csi")], [], id="csinode-without-driver"),
        pytest.param([store("a", model())], [], [], id="no-csinode"),
        pytest.param([store("a", model(state="Downloading"))], live("a"), [], id="downloading"),
        pytest.param([store("a", model(state="Failed"))], live("a"), [], id="failed"),
        pytest.param([store("a", model(D2))], live("a"), [], id="other-digest-only"),
        pytest.param([], live("a"), [], id="no-holder"),
        pytest.param(
            [store("a", model()), store("b", model(), ready="False"), store("c", model(state="Downloading"))],
            live("a", "b", "c"),
            [["a"]],
            id="only-the-counting-node",
        ),
    ],
)
def test_which_nodes_count(
    stores: list[dict[str, Any]], csinodes: list[dict[str, Any]], expected: list[list[str]]
) -> None:
    assert values(modelstores.store_terms([D1], stores, csinodes)) == expected


def test_one_term_per_held_digest_and_none_for_a_digest_nobody_holds() -> None:
    stores = [store("a", model(D1)), store("b", model(D1), model(D2))]
    assert values(modelstores.store_terms([D1, D2], stores, live("a", "b"))) == [["a", "b"], ["b"]]
    d3 = "sha256:" + "3" * 64
    assert values(modelstores.store_terms([d3, D2], stores, live("a", "b"))) == [["b"]]


def test_preferred_topology_annotation_means_no_term() -> None:
    got = modelstores.store_terms(
        [D1],
        [store("a", model())],
        live("a"),
        pod_annotations={keys.PODSET_PREFERRED_TOPOLOGY: keys.PRIVATE_RACK},
    )
    assert got == []


def test_terms_name_nodes_by_hostname_label() -> None:
    got = modelstores.store_terms([D1], [store("a", model())], live("a"), hostnames={"a": "a.example"})
    assert values(got) == [["a.example"]]


@pytest.mark.parametrize(
    ("model_spec", "setting", "expected"),
    [
        pytest.param({"artifacts": [{"digest": D1}]}, "Engine", (), id="engine-default"),
        pytest.param({"artifacts": [{"digest": D1}]}, "Node", (D1,), id="node-setting"),
        pytest.param({"artifacts": [{"digest": D1}], "delivery": "Engine"}, "Node", (), id="engine-override"),
        pytest.param(
            {"artifacts": [{"digest": D1}], "delivery": "Node"}, "Engine", (D1,), id="node-override"
        ),
        pytest.param(
            {"artifacts": [{"digest": D1, "source": "Claim"}, {"digest": D2}], "delivery": "Node"},
            "Engine",
            (D2,),
            id="claim-artifacts-excluded",
        ),
        pytest.param({"artifacts": [{"digest": D1}, {"digest": D1}]}, "Node", (D1,), id="no-repeats"),
        pytest.param(None, "Node", (), id="no-model"),
    ],
)
def test_delivered_digests(
    model_spec: dict[str, Any] | None, setting: str, expected: tuple[str, ...]
) -> None:
    assert modelstores.delivered_digests(model_spec, setting) == expected


def test_engine_delivery_gives_no_term() -> None:
    digests = modelstores.delivered_digests({"artifacts": [{"digest": D1}]}, "Engine")
    assert modelstores.store_terms(digests, [store("a", model())], live("a")) == []
