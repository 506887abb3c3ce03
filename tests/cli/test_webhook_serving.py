"""The controller's webhook wiring: served with the certificate of --webhook-cert-dir, skipped without one
or with --webhook-bind=, and the TopologySource review answered at its path."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import ssl
from typing import TYPE_CHECKING

import orjson
import pytest

from gpustack_worker.api import webhooks
from gpustack_worker.cli.webhook_serving import admission_webhooks
from gpustack_worker.devcluster.pki import make_pki

if TYPE_CHECKING:
    from pathlib import Path


def _args(bind: str, cert_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(webhook_bind=bind, webhook_cert_dir=str(cert_dir))


async def test_without_a_certificate_nothing_is_served(tmp_path: Path) -> None:
    async with admission_webhooks(_args("127.0.0.1:0", tmp_path), namespace="gpustack-system") as server:
        assert server is None


async def test_an_empty_bind_disables_the_server(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    shutil.copyfile(pki.serving_cert, tmp_path / "tls.crt")
    shutil.copyfile(pki.serving_key, tmp_path / "tls.key")
    async with admission_webhooks(_args("", tmp_path), namespace="gpustack-system") as server:
        assert server is None


@pytest.mark.parametrize(("namespace", "allowed"), [("gpustack-system", True), ("other-ns", False)])
async def test_the_topologysource_review_is_served(tmp_path: Path, namespace: str, allowed: bool) -> None:
    pki = make_pki(tmp_path / "pki")
    shutil.copyfile(pki.serving_cert, tmp_path / "tls.crt")
    shutil.copyfile(pki.serving_key, tmp_path / "tls.key")
    body = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "operation": "CREATE",
                "object": {
                    "metadata": {"name": "s"},
                    "spec": {
                        "nodeSelector": {},
                        "levels": ["topology.gpustack.ai/zone"],
                        "configMap": {
                            "configMapRef": {"namespace": "gpustack-system", "name": "inv"},
                            "key": "snapshot.yaml",
                            "maxStaleness": "10m",
                        },
                    },
                },
            },
        }
    )
    async with admission_webhooks(_args("127.0.0.1:0", tmp_path), namespace=namespace) as server:
        assert server is not None
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)
        try:
            writer.write(
                f"POST {webhooks.TOPOLOGY_SOURCE_PATH}?timeout=10s HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                        b":"
                    )[1]
                )
                answer = orjson.loads(await reader.readexactly(length))
        finally:
            writer.close()
            await writer.wait_closed()
    assert head.startswith(b"HTTP/1.1 200 ")
    assert answer["response"]["uid"] == "u1"
    assert answer["response"]["allowed"] is allowed
    if not allowed:
        assert "spec.configMap.configMapRef.namespace" in answer["response"]["status"]["message"]
