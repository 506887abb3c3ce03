"""Kueue in the local control plane runs as the chain relies on: its webhooks really validate and default
what we write, and the credits transformations of api/kueue_config.py decide what a queue is charged.

Objects are written with the harness' own admin client (no operator code involved).
"""

from __future__ import annotations

import base64
import ssl
import time
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

from gpustack_worker.api import keys, kueue_config
from gpustack_worker.api.crds.common import parse_quantity
from gpustack_worker.devcluster import kueue_webhooks
from tests.kit import kueue
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CREDITS = keys.credits_resource("nvidia")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def api(devcluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = devcluster.bootstrap()
    yield client
    client.close()


def _get(api: ApiBootstrap, path: str) -> dict[str, Any]:
    resp = api.request("GET", path)
    return resp.json() if resp.is_success else {}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def _amounts(resources: dict[str, str]) -> dict[str, int]:
    """Quantities as numbers (the server writes them canonically: ``3200k``)."""
    return {name: int(parse_quantity(value)) for name, value in resources.items()}


def _created(api: ApiBootstrap, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = api.request("POST", path, body)
    assert resp.status_code == 201, f"POST {path}: HTTP {resp.status_code}: {resp.text[:800]}"
    created: dict[str, Any] = resp.json()
    return created


def _gpu_node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {
        "cpu": "16",
        "memory": "64Gi",
        "pods": "110",
        "nvidia.com/gpu": str(gpus),
        "nvidia.com/gpu.shared": str(gpus * 10),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "pool": pool},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def _cluster_queue(
    name: str, flavor: str, quotas: dict[str, str], *, covered: list[str] | None = None
) -> dict[str, Any]:
    return kueue.cluster_queue(name, kueue.queue_spec(kueue.resource_group(flavor, quotas, covered=covered)))


def _workload(ns: str, name: str, requests: dict[str, str], count: int = 1) -> dict[str, Any]:
    spec = kueue.pod_spec(kueue.container(requests))
    return kueue.workload(name, ns, "lq", kueue.pod_set(spec, count=count))


def _pod(ns: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "registry.invalid/x", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


# --- registration ----------------------------------------------------------------------------------------
def test_kueue_webhooks_are_registered_by_url_with_the_cluster_ca(
    api: ApiBootstrap, devcluster: DevCluster
) -> None:
    assert devcluster.pki is not None
    ca = devcluster.pki.ca_cert.read_bytes()
    base = f"https://127.0.0.1:{devcluster.kueue_webhook_port}/"
    seen: dict[str, dict[str, Any]] = {}
    for kind, name in (
        ("mutatingwebhookconfigurations", "kueue-mutating-webhook-configuration"),
        ("validatingwebhookconfigurations", "kueue-validating-webhook-configuration"),
    ):
        config = _get(api, f"{ADMISSION}/{kind}/{name}")
        assert config, f"{kind}/{name} is not registered"
        for webhook in config["webhooks"]:
            seen[webhook["name"]] = webhook
            client = webhook["clientConfig"]
            assert "service" not in client
            assert client["url"].startswith(base)
            assert client["caBundle"] == base64.b64encode(ca).decode()
    # Kueue's own kinds and the enabled integrations, by upstream's webhook names.
    for name in (
        "mclusterqueue",
        "vclusterqueue",
        "mresourceflavor",
        "vresourceflavor",
        "mworkload",
        "vworkload",
        "vcohort",
        "mpod",
        "vpod",
        "mjob",
        "vjob",
    ):
        assert f"{name}.kb.io" in seen
    assert seen["vpod.kb.io"]["failurePolicy"] == "Fail"
    assert seen["vpod.kb.io"]["namespaceSelector"] == kueue_config.managed_jobs_namespace_selector()
    assert seen["vclusterqueue.kb.io"]["namespaceSelector"] == {}  # the API server's default: everything
    # None of the chain's future names.
    names = {
        item["metadata"]["name"]
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for item in _get(api, f"{ADMISSION}/{kind}")["items"]
        if item["metadata"]["name"].startswith("kueue-")
    }
    assert names == {"kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"}


# --- validation ------------------------------------------------------------------------------------------
def test_cluster_queue_only_kueue_rejects_is_refused_with_its_message(api: ApiBootstrap) -> None:
    # The CRD checks only that each flavor lists as many quotas as coveredResources; that the names match
    # (in order) is checked by Kueue's validating webhook alone.
    body = _cluster_queue("kq-bad-names", "rf-bad", {"nvidia.com/gpu": "16000000"}, covered=[CREDITS])
    resp = api.request("POST", f"{KUEUE}/clusterqueues", body)
    assert resp.status_code == 403, resp.text
    message = resp.json()["message"]
    assert 'admission webhook "vclusterqueue.kb.io" denied the request' in message
    assert "must match the name in coveredResources" in message
    assert api.request("GET", f"{KUEUE}/clusterqueues/kq-bad-names").status_code == 404


def test_workload_only_kueue_rejects_is_refused_with_its_message(api: ApiBootstrap) -> None:
    ns = "kueue-wh-validate"
    api.ensure_namespace(ns)
    resp = api.request(
        "POST", f"{KUEUE}/namespaces/{ns}/workloads", _workload(ns, "wl-pods-key", {"cpu": "1", "pods": "1"})
    )
    assert resp.status_code == 403, resp.text
    message = resp.json()["message"]
    assert 'admission webhook "vworkload.kb.io" denied the request' in message
    assert "the key is reserved for internal kueue use" in message


# --- defaulting ------------------------------------------------------------------------------------------
def test_flavor_and_queue_are_defaulted_by_kueue_on_create(api: ApiBootstrap) -> None:
    # Kueue's mutating webhooks add the in-use finalizer in the create request itself (before any
    # controller could see the object), so the create response already carries it.
    rf = _created(api, f"{KUEUE}/resourceflavors", kueue.resource_flavor("rf-defaulted"))
    assert kueue_webhooks.KUEUE_FINALIZER in rf["metadata"]["finalizers"]
    cq = _created(
        api, f"{KUEUE}/clusterqueues", _cluster_queue("cq-defaulted", "rf-defaulted", {CREDITS: "1600000"})
    )
    assert kueue_webhooks.KUEUE_FINALIZER in cq["metadata"]["finalizers"]
    # The webhook decodes and re-encodes the whole object, so a created queue's quantities come back in
    # canonical form (as in any cluster): a writer comparing quantity strings must parse them.
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "1600k"


def test_workload_create_goes_through_kueues_mutating_webhook(
    api: ApiBootstrap, devcluster: DevCluster
) -> None:
    # With PartialAdmission on (Kueue's default) the Workload defaulter changes nothing visible, so the
    # API server's own record shows the call: the audit event of the create names the webhook it invoked.
    ns = "kueue-wh-default"
    api.ensure_namespace(ns)
    _created(api, f"{KUEUE}/namespaces/{ns}/workloads", _workload(ns, "wl-defaulted", {"cpu": "1"}))
    assert devcluster.audit_log is not None
    calls = []
    for line in devcluster.audit_log.read_bytes().splitlines():
        event = orjson.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("verb") == "create"
            and ref.get("resource") == "workloads"
            and ref.get("name") == "wl-defaulted"
        ):
            calls.extend(
                orjson.loads(value)
                for key, value in (event.get("annotations") or {}).items()
                if key.startswith("mutation.webhook.admission.k8s.io/")
            )
    assert any(
        c.get("configuration") == "kueue-mutating-webhook-configuration"
        and c.get("webhook") == "mworkload.kb.io"
        for c in calls
    ), calls


def test_pod_with_a_queue_name_is_gated_and_others_are_untouched(api: ApiBootstrap) -> None:
    ns = "kueue-wh-pods"
    api.ensure_namespace(ns)
    managed = _created(api, f"/api/v1/namespaces/{ns}/pods", _pod(ns, "with-queue", {QUEUE_LABEL: "lq"}))
    assert {"name": "kueue.x-k8s.io/admission"} in managed["spec"].get("schedulingGates", [])
    assert managed["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"

    plain = _created(api, f"/api/v1/namespaces/{ns}/pods", _pod(ns, "without-queue", {"app": "x"}))
    assert "schedulingGates" not in plain["spec"]
    assert plain["metadata"]["labels"] == {"app": "x"}
    assert not plain["metadata"].get("finalizers")

    # Kueue's own namespace is outside the managed-jobs selector: even a queue name is left alone.
    system = _created(
        api, "/api/v1/namespaces/kueue-system/pods", _pod("kueue-system", "in-system", {QUEUE_LABEL: "lq"})
    )
    assert "schedulingGates" not in system["spec"]
    assert "kueue.x-k8s.io/managed" not in system["metadata"]["labels"]


# --- transformations -------------------------------------------------------------------------------------
def test_device_requests_are_charged_in_credits(api: ApiBootstrap) -> None:
    pool, ns = "credits", "kueue-credits"
    for name in ("credits-a", "credits-b"):
        api.create_node(_gpu_node(name, pool, gpus=8))
    # As the chain does: every flavor topology-aware (hostname-only profile).
    api.create(
        f"{KUEUE}/topologies",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "credits-hosts"},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
        },
    )
    _created(
        api,
        f"{KUEUE}/resourceflavors",
        kueue.resource_flavor("rf-credits", {"nodeLabels": {"pool": pool}, "topologyName": "credits-hosts"}),
    )
    # 16,000,000 credits = 10 whole cards, although the nodes hold 16.
    _created(api, f"{KUEUE}/clusterqueues", _cluster_queue("cq-credits", "rf-credits", {CREDITS: "16000000"}))
    api.ensure_namespace(ns)
    _created(api, f"{KUEUE}/namespaces/{ns}/localqueues", kueue.local_queue("lq", "cq-credits", ns))
    eventually_sync(
        lambda: _get(api, f"{KUEUE}/clusterqueues/cq-credits"),
        lambda o: _condition(o, "Active").get("status") == "True",
    )

    # cpu is not covered by the queue: IgnoreUndeclared lets it through uncharged.
    _created(
        api,
        f"{KUEUE}/namespaces/{ns}/workloads",
        _workload(ns, "two-cards", {"nvidia.com/gpu": "2", "cpu": "1"}),
    )
    wl = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/two-cards"),
        lambda o: _condition(o, "Admitted").get("status") == "True",
    )
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {CREDITS: "rf-credits"}
    assert _amounts(assignment["resourceUsage"]) == {CREDITS: 3_200_000}

    def charged(o: dict[str, Any], field: str) -> dict[str, int]:
        return {
            r["name"]: int(parse_quantity(r["total"]))
            for f in (o.get("status") or {}).get(field) or []
            if f["name"] == "rf-credits"
            for r in f["resources"]
        }

    cq = eventually_sync(
        lambda: _get(api, f"{KUEUE}/clusterqueues/cq-credits"),
        lambda o: charged(o, "flavorsUsage") == {CREDITS: 3_200_000},
    )
    assert charged(cq, "flavorsReservation") == {CREDITS: 3_200_000}

    # Three ownership shares: 3 × 160,000 more.
    _created(
        api,
        f"{KUEUE}/namespaces/{ns}/workloads",
        _workload(ns, "three-shares", {"nvidia.com/gpu.shared": "3"}),
    )
    eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/three-shares"),
        lambda o: _condition(o, "Admitted").get("status") == "True",
    )
    eventually_sync(
        lambda: _get(api, f"{KUEUE}/clusterqueues/cq-credits"),
        lambda o: charged(o, "flavorsReservation") == {CREDITS: 3_680_000},
    )

    # Ten more cards fit the nodes (16 cards) but not the 16,000,000 credits left after 3,680,000.
    _created(
        api,
        f"{KUEUE}/namespaces/{ns}/workloads",
        _workload(ns, "ten-cards", {"nvidia.com/gpu": "2"}, count=5),
    )
    pending = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/ten-cards"),
        lambda o: _condition(o, "QuotaReserved").get("reason") == "Pending",
    )
    message = _condition(pending, "QuotaReserved")["message"]
    assert CREDITS in message, message
    assert "insufficient unused quota" in message, message
    assert _condition(pending, "Admitted").get("status") != "True"


def test_server_side_apply_does_not_own_what_kueue_defaults(devcluster: DevCluster) -> None:
    # The chain applies its ClusterQueues; the finalizer Kueue's webhook adds on create must not become a
    # field of the chain's apply (a later apply without it would then remove it), and applying the same
    # body again must end up a no-op — after one real write that puts back the quantity text the webhook
    # canonicalized on create.
    assert devcluster.pki is not None
    body = _cluster_queue("cq-applied", "rf-applied", {CREDITS: "1600000"})
    ctx = ssl.create_default_context(cafile=str(devcluster.pki.ca_cert))
    with httpx.Client(
        base_url=devcluster.server,
        verify=ctx,
        headers={
            "Authorization": f"Bearer {devcluster.pki.admin_token}",
            "Content-Type": "application/apply-patch+yaml",
        },
    ) as http:

        def apply() -> dict[str, Any]:
            resp = http.patch(
                f"{KUEUE}/clusterqueues/cq-applied",
                params={"fieldManager": "chain-test", "force": "true"},
                content=orjson.dumps(body),
            )
            assert resp.status_code in (200, 201), resp.text
            applied: dict[str, Any] = resp.json()
            return applied

        first = apply()
        assert kueue_webhooks.KUEUE_FINALIZER in first["metadata"]["finalizers"]
        ours = [m for m in first["metadata"]["managedFields"] if m["manager"] == "chain-test"]
        assert ours
        assert all("f:finalizers" not in orjson.dumps(m["fieldsV1"]).decode() for m in ours)

        def nominal(obj: dict[str, Any]) -> str:
            return str(obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"])

        assert nominal(first) == "1600k"  # canonicalized by mclusterqueue.kb.io on create
        second = apply()  # the webhook does not run on update: our text is stored, a real write
        assert nominal(second) == "1600000"
        assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])

        def reapply_is_noop() -> bool:
            # Kueue writes the queue's status meanwhile; an apply that changed anything would always
            # move the resourceVersion past the one read just before it.
            before = http.get(f"{KUEUE}/clusterqueues/cq-applied").json()["metadata"]["resourceVersion"]
            again = apply()
            assert kueue_webhooks.KUEUE_FINALIZER in again["metadata"]["finalizers"]
            return bool(again["metadata"]["resourceVersion"] == before)

        eventually_sync(reapply_is_noop)
