"""Whole requests straight on the session's httpcore pool (``_Api._direct``, issue 28): the server reads
back exactly the path and parameters the client meant, whatever characters they hold, and the answers
(paged, compressed) come back whole — on the real kube-apiserver."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client, request_target
from gpustack_worker.runtime.resources import Resource

if TYPE_CHECKING:
    from gpustack_worker.devcluster.cluster import DevCluster

# Parameter names and values as the client sends them: selectors with sets and negations, base64
# continue tokens (+ / =), anything printable, and non-ASCII text.
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40)
_PATHS = st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789-.:@~", min_size=1, max_size=20), min_size=1)


@given(
    segments=_PATHS,
    params=st.dictionaries(
        st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1), _TEXT
    ),
)
def test_the_server_reads_back_the_path_and_the_parameters(
    segments: list[str], params: dict[str, str]
) -> None:
    path = "/" + "/".join(segments)
    target = request_target(path, params)
    assert target.isascii() and " " not in target
    parts = urlsplit(target)
    assert unquote(parts.path) == path
    # Go's url.ParseQuery reads a query as parse_qs does ('+' is a space, %XX a byte of UTF-8).
    assert parse_qs(parts.query, keep_blank_values=True) == {k: [v] for k, v in params.items()}


@pytest.mark.parametrize(
    ("params", "query"),
    [
        ({"labelSelector": "a in (x,y),!b"}, "labelSelector=a%20in%20%28x%2Cy%29%2C%21b"),
        ({"continue": "eyJ2Ijoi+/=="}, "continue=eyJ2Ijoi%2B%2F%3D%3D"),
        ({"fieldManager": "m", "force": "true"}, "fieldManager=m&force=true"),
    ],
)
def test_selectors_and_continue_tokens_are_encoded_whole(params: dict[str, str], query: str) -> None:
    assert request_target("/api/v1/nodes", params) == f"/api/v1/nodes?{query}"


@pytest.mark.cluster
async def test_selectors_pages_and_a_compressed_list_come_back_whole(devcluster: DevCluster) -> None:
    client = await Client.connect(str(devcluster.kubeconfig), user_agent="client-direct")
    ns = "client-direct"
    try:
        await client.apply(
            kinds.NAMESPACE,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            field_manager="t",
        )
        big = "x" * 12_000  # 16 of these are a list of ~190 KiB: above the server's 128 KiB gzip threshold
        for i in range(16):
            labels = {"tier": "web" if i % 2 else "db", **({"gone": "yes"} if i % 4 == 0 else {})}
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i:02d}", "namespace": ns, "labels": labels},
                "data": {"big": big},
            }
            await client.apply(kinds.CONFIG_MAP, body, field_manager="t")

        # A set-based selector with a negation, next to a field selector: '(' ',' '!' '=' and spaces.
        items, _ = await client.list(
            kinds.CONFIG_MAP,
            namespace=ns,
            label_selector="tier in (web, db),!gone",
            field_selector="metadata.name!=cm-01",
        )
        expected = {f"cm-{i:02d}" for i in range(16) if i % 4 != 0} - {"cm-01"}
        assert {i["metadata"]["name"] for i in items} == expected

        # Paged: every continue token (base64: '+', '/', '=') read back by the server.
        paged, _ = await client.list(kinds.CONFIG_MAP, namespace=ns, limit=3)
        assert sorted(i["metadata"]["name"] for i in paged) == [f"cm-{i:02d}" for i in range(16)]

        # The server does compress this list when asked (the positive signal), and the client's read of
        # it is whole.
        api = client._api
        assert api.session is not None
        raw = await api.session.get(
            f"/api/v1/namespaces/{ns}/configmaps", headers={"Accept-Encoding": "gzip"}
        )
        assert raw.headers.get("Content-Encoding") == "gzip"
        whole, _ = await client.list(kinds.CONFIG_MAP, namespace=ns)
        assert len(whole) == 16
        assert all(i["data"]["big"] == big for i in whole)
    finally:
        await client.close()


@pytest.mark.cluster
async def test_a_name_with_a_colon_round_trips(devcluster: DevCluster) -> None:
    """Names of RBAC objects carry ':' (``system:...``): kept as it is in the path, as kubectl sends it."""
    client = await Client.connect(str(devcluster.kubeconfig), user_agent="client-direct")
    cluster_role = Resource(
        "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False
    )
    try:
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "client-direct:reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        }
        written = await client.apply(cluster_role, body, field_manager="t")
        assert written["metadata"]["name"] == "client-direct:reader"
        read = await client.get(cluster_role, "client-direct:reader")
        assert read is not None and read["rules"][0]["verbs"] == ["get"]
        assert await client.delete(cluster_role, "client-direct:reader")
    finally:
        await client.close()
