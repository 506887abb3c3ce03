"""Secure metrics on the real control plane: the process reviews each scrape with the API server under
exactly the chart's RBAC.

The chart is rendered with ``metrics.secure.enabled`` into a namespace of the test's own (its
``systemNamespace``) with ``readerSubjects`` naming a ``scraper`` ServiceAccount; the rendered
``<fullname>-metrics-auth`` and ``<fullname>-metrics-reader`` ClusterRoles and their bindings are created
as rendered. The server runs in-process as the rendered controller ServiceAccount (a TokenRequest token in
a kubeconfig), its reviews through the real client. Then: the scraper's token gets 200 and the
exposition; another ServiceAccount's token (no binding) 403; no token and a token the API server does not
know 401; plain HTTP is refused; a server running as a ServiceAccount without the review RBAC answers
500 (the API server forbade its TokenReview) — the chart's rules are the ones that make it work.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.metrics_auth import DelegatedAuth
from gpustack_worker.runtime.metrics_serving import SecureMetricsServer
from gpustack_worker.runtime.resources import Resource
from tests.chart.test_chart_metrics_serving import CHART, RELEASE, helm_in, run_helm
from tests.runtime.test_metrics_serving import get, own_cert, trusting

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
CLUSTER_ROLE = Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)


def token_request(name: str) -> Resource:
    return Resource("", "v1", "TokenRequest", f"serviceaccounts/{name}/token", namespaced=True)


async def sa_token(admin: Client, ns: str, name: str) -> str:
    answer = await admin.create(
        token_request(name),
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
        namespace=ns,
    )
    return str(answer["status"]["token"])


def kubeconfig_for(devcluster: DevCluster, token: str, name: str) -> Path:
    config = yaml.safe_load(devcluster.kubeconfig.read_text())
    config["users"] = [{"name": name, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = name
    path = devcluster.dir / f"kubeconfig-metrics-{name}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture
async def rendered_rbac(devcluster: DevCluster, tmp_path: Path) -> AsyncIterator[tuple[Client, str, str]]:
    """(admin client, namespace, fullname) with the chart's secure-metrics RBAC created as rendered."""
    tag = uuid.uuid4().hex[:6]
    ns, fullname = f"metrics-{tag}", f"gwm-{tag}"
    proc = run_helm(
        helm_in(tmp_path),
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"systemNamespace={ns}",
        "--set",
        f"fullnameOverride={fullname}",
        "--set",
        "metrics.secure.enabled=true",
        "--set",
        "metrics.secure.readerSubjects[0].kind=ServiceAccount",
        "--set",
        "metrics.secure.readerSubjects[0].name=scraper",
        "--show-only",
        "templates/metrics-auth-rbac.yaml",
    )
    assert proc.returncode == 0, proc.stderr
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ClusterRole", f"{fullname}-metrics-auth"),
        ("ClusterRole", f"{fullname}-metrics-reader"),
        ("ClusterRoleBinding", f"{fullname}-metrics-auth"),
        ("ClusterRoleBinding", f"{fullname}-metrics-reader"),
    ]
    admin = await Client.connect(str(devcluster.kubeconfig))
    await admin.create(kinds.NAMESPACE, {"metadata": {"name": ns}})
    for name in (f"{fullname}-controller", "scraper", "outsider", "bare"):
        await admin.create(SERVICE_ACCOUNT, {"metadata": {"name": name, "namespace": ns}}, namespace=ns)
    for doc in docs:
        await admin.create(CLUSTER_ROLE if doc["kind"] == "ClusterRole" else CLUSTER_ROLE_BINDING, doc)
    try:
        yield admin, ns, fullname
    finally:
        for doc in docs:
            with contextlib.suppress(Exception):
                resource = CLUSTER_ROLE if doc["kind"] == "ClusterRole" else CLUSTER_ROLE_BINDING
                await admin.delete(resource, doc["metadata"]["name"])
        with contextlib.suppress(Exception):
            await admin.delete(kinds.NAMESPACE, ns)
        await admin.close()


@contextlib.asynccontextmanager
async def serving_as(devcluster: DevCluster, token: str, name: str) -> AsyncIterator[SecureMetricsServer]:
    client = await Client.connect(str(kubeconfig_for(devcluster, token, name)))
    server = SecureMetricsServer("127.0.0.1:0", DelegatedAuth(client.with_fence(None)))
    await server.start()
    try:
        yield server
    finally:
        await server.close()
        await client.close()


async def test_rbac_decides_who_reads_metrics(
    devcluster: DevCluster, rendered_rbac: tuple[Client, str, str]
) -> None:
    admin, ns, fullname = rendered_rbac
    scraper, outsider = await sa_token(admin, ns, "scraper"), await sa_token(admin, ns, "outsider")
    async with serving_as(
        devcluster, await sa_token(admin, ns, f"{fullname}-controller"), "controller"
    ) as server:
        ctx = trusting(own_cert(server))
        status, body = await get(server.port, ctx, token=scraper)
        assert status == 200, body
        assert b"# TYPE rest_client_requests_total counter" in body
        assert await get(server.port, ctx, token=outsider) == (
            403,
            f"Authorization denied for user system:serviceaccount:{ns}:outsider\n".encode(),
        )
        assert await get(server.port, ctx) == (401, b"Unauthorized\n")
        assert await get(server.port, ctx, token=f"{scraper[:-4]}AAAA") == (401, b"Unauthorized\n")
        # cached: a second scrape by the same reader asks the API server nothing more
        reviews = dict(server.auth.reviews)
        assert (await get(server.port, ctx, token=scraper))[0] == 200
        assert server.auth.reviews == reviews
        # plain HTTP to the same port: no HTTP answer at all
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(
                f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {scraper}\r\n\r\n".encode()
            )
            await writer.drain()
            async with asyncio.timeout(30):
                answer = await reader.read()
        except ConnectionError:
            answer = b""
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
        assert not answer.startswith(b"HTTP/"), answer[:60]


async def test_without_the_review_rbac_a_scrape_is_500(
    devcluster: DevCluster, rendered_rbac: tuple[Client, str, str]
) -> None:
    admin, ns, _ = rendered_rbac
    scraper = await sa_token(admin, ns, "scraper")
    async with serving_as(devcluster, await sa_token(admin, ns, "bare"), "bare") as server:
        ctx = trusting(own_cert(server))
        assert await get(server.port, ctx, token=scraper) == (500, b"Authentication failed\n")
