"""The chart's configuration proven by running it: its rendered Pods, run as processes, converge the chain.

``helm template`` renders ``chart/`` into the dev cluster's namespace four ways (:data:`MODES`, each on a
control plane of its own): the default values (the chart generates the webhook certificate), cert-manager
enabled, ``values-production.yaml``, and an admin's existing Secret (``webhook.existingSecret``; the test
makes that Secret first, as the admin would, and passes its CA as ``webhook.caBundle``). The
non-workload objects are applied for real (server-side apply, ``fieldValidation=Strict``, no
``Warning``): the ServiceAccounts and RBAC, the settings and Kueue ConfigMaps, the webhook certificate
Secret, the Services, the PodDisruptionBudget and both webhook configurations (their ``caBundle`` as
rendered). Not applied:

- the CRDs (``--include-crds`` is not passed; the dev cluster installed the same files, which
  ``test_chart_cluster.py`` compares byte for byte);
- the Deployment and DaemonSet (no kube-controller-manager and no kubelet here): their Pods run as
  processes instead;
- cert-manager's Certificate and Issuer (``cert-manager.io`` is not installed): the test plays
  cert-manager — the self-signed Issuer's certificate written into the Certificate's ``secretName`` in
  the shape cert-manager writes (``tls.crt``, ``tls.key``, ``ca.crt``), and the CA injector's
  ``caBundle`` put into the configurations annotated ``cert-manager.io/inject-ca-from``;
- ServiceMonitor and PrometheusRule (production; no Prometheus Operator here; :data:`NOT_SERVED`).

The fleet's accelerated Nodes carry what an admin labels (:data:`GPU_NODE_LABELS`): production's agent
nodeSelector and its manual node management select them.

For each Pod the controllers would make — ``replicas`` of the Deployment, one DaemonSet Pod per Node the
DaemonSet's nodeSelector and tolerations admit, over a small fleet written by ``gpustack-worker simulate
apply`` (plus the dev cluster's own nfd-master Node, which the default tolerations admit) — the container
is mapped onto a local process by :mod:`tests.chart.rendered_pods`: the image's ENTRYPOINT (read from the
Containerfile) and the rendered ``args``, the rendered ``env`` resolved (``fieldRef`` from the Pod,
``configMapKeyRef``/``secretKeyRef`` from the applied objects) plus the namespace's Service links, the
webhook certificate Secret's keys written as files where ``--webhook-cert-dir`` points, every declared
port moved to a free local one. A local process has no in-cluster config, so the projected
ServiceAccount token is replaced by a token of the rendered ServiceAccount minted through the TokenRequest
API, in a kubeconfig given as ``KUBECONFIG``. The processes then hold exactly the chart's RBAC.

The dev cluster has no Service network (no kube-proxy, no endpoints controller): the API server reaches
a webhook Service at its ClusterIP, which routes nowhere. So, after the rendered Service was applied (and
its ClusterIP went into the Pods' Service-link environment), it is replaced by an ``ExternalName`` Service
of the same name pointing at 127.0.0.1 (the API server's resolver dials an ExternalName at the webhook's
``service.port``), and each webhook configuration's ``service.port`` is set to the first controller
replica's local webhook port. Nothing else of the configurations changes: the API server still verifies
the served certificate against the rendered ``caBundle`` under the name
``gpustack-worker-webhook.<namespace>.svc``.

Asserted: every process passes its rendered readiness and liveness probes; the chain converges to what
its own pure functions plan for the fleet under the rendered settings (ResourceFlavors, the Topology,
InstanceTypes, ClusterQueues Active and TopologyReady with the planned quotas, a LocalQueue in every
namespace the settings select; ``bench/chain_bench.py``'s ``expected_chain``/``missing``); the rendered
validating webhook, served from the rendered Secret's certificate, refuses an invalid TopologySource and
admits a valid one; no process exited, and each exits 0 on SIGTERM within its
``terminationGracePeriodSeconds`` (all at once, as in a rollout).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from bench import chain_bench
from gpustack_worker.api import kinds, webhooks
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster import build, versions, worker_webhooks
from gpustack_worker.devcluster.pki import self_signed
from gpustack_worker.devcluster.procs import ManagedProcess, free_port
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import env_name, settings_from
from gpustack_worker.simulate.load import load_scenario, packaged_scenario
from tests.chain.controller_procs import lease_holder
from tests.chart import rendered_pods as rp
from tests.kit.waiting import eventually
from tests.stack import module_cluster
from tests.test_containerfile import parse_containerfile

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
RELEASE = "gpustack-worker"
NAMESPACE = kinds.SYSTEM_NAMESPACE
#: The simulated fleet: a CPU-only node and two single-GPU nodes of chain-4 (docs/chain.md).
FLEET = ("cpu-a", "a10g-a", "t4-a")
#: Kinds applied for real (everything rendered but the workloads, which run as processes).
APPLIED = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "PodDisruptionBudget",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}
RUN = {"Deployment", "DaemonSet"}
#: Generous bounds for waits (never asserted as durations).
READY_S = 120.0
CONVERGE_S = 240.0

Doc = dict[str, Any]


#: The values each run renders with: the defaults (a generated webhook certificate), cert-manager issuing
#: it, and the production values file.
MODES: dict[str, tuple[str, ...]] = {
    "generated": (),
    "cert-manager": ("--set", "webhook.certManager.enabled=true"),
    "production": ("--values", str(CHART / "values-production.yaml")),
    "existing-secret": ("--set", "webhook.existingSecret=webhook-tls-by-admin"),
}
#: The Secret an admin made before installing with ``webhook.existingSecret`` (its CA passed as
#: ``webhook.caBundle``: ``helm template`` reads no cluster).
ADMIN_SECRET = "webhook-tls-by-admin"
#: Rendered kinds the dev cluster cannot serve (no cert-manager installed): the test plays their part.
CERT_MANAGER = {"Certificate", "Issuer"}
#: Rendered kinds the dev cluster cannot serve and nothing here stands in for, and why.
NOT_SERVED = {
    "ServiceMonitor": "the Prometheus Operator's (monitoring.coreos.com) — no Prometheus scrapes here",
    "PrometheusRule": "the Prometheus Operator's (monitoring.coreos.com) — no Prometheus evaluates here",
}
#: Labels an admin puts on the accelerated Nodes: production's agent nodeSelector, and its manual node
#: management (only Nodes labelled managed count). The defaults run on them just the same.
GPU_NODE_LABELS = {"node-role.kubernetes.io/gpu": "", "gpustack.ai/managed": "true"}


def _render(*values: str) -> list[Doc]:
    binary = build.ensure_optional("helm")
    home = Path(os.environ.get("TMPDIR", "/tmp")) / f"helm-home-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env.update(
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_DATA_HOME=str(home / "data"),
    )
    proc = subprocess.run(
        [str(binary), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
         "--kube-version", versions.KUBERNETES, *values],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _image() -> rp.Image:
    final = parse_containerfile((REPO / "Containerfile").read_text())[-1]
    return rp.image_from_stages([(i.keyword, i.args) for i in final.instructions])


class _Api:
    """Admin access: collection paths from the server's discovery, server-side apply for real."""

    def __init__(self, cluster: DevCluster) -> None:
        assert cluster.pki is not None
        ctx = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
        self.http = httpx.Client(
            base_url=cluster.server,
            verify=ctx,
            headers={"Authorization": f"Bearer {cluster.pki.admin_token}"},
            timeout=60.0,
        )
        self._served: dict[str, dict[str, tuple[str, bool]]] = {}

    def path(self, doc: Doc) -> str:
        api_version, kind = doc["apiVersion"], doc["kind"]
        if api_version not in self._served:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resp = self.http.get(prefix)
            assert resp.status_code == 200, f"discovery {prefix}: HTTP {resp.status_code}"
            self._served[api_version] = {
                r["kind"]: (f"{prefix}/{r['name']}", r["namespaced"])
                for r in resp.json()["resources"]
                if "/" not in r["name"]
            }
        assert kind in self._served[api_version], f"{api_version} {kind} is not served"
        collection, namespaced = self._served[api_version][kind]
        meta = doc["metadata"]
        if namespaced:
            prefix, plural = collection.rsplit("/", 1)
            return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        return f"{collection}/{meta['name']}"

    def apply(self, doc: Doc) -> Doc:
        resp = self.http.patch(
            self.path(doc),
            params={"fieldManager": "helm", "force": "true", "fieldValidation": "Strict"},
            content=json.dumps(doc).encode(),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert resp.status_code in (200, 201), f"{doc['kind']} {doc['metadata']['name']}: {resp.text[:600]}"
        assert not resp.headers.get("Warning"), f"{doc['kind']}: the API server warned: {resp.headers}"
        answered: Doc = resp.json()
        return answered


def _one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} rendered"
    return found[0]


def _routed(config: Doc, port: int) -> Doc:
    """The rendered webhook configuration with each Service reference's port set to ``port`` (the dev
    cluster's stand-in for the Service's port → targetPort translation); nothing else changes."""
    out = json.loads(json.dumps(config))
    for hook in out["webhooks"]:
        service = hook["clientConfig"]["service"]
        assert (service["name"], service["namespace"]) == (webhooks.SERVICE_NAME, NAMESPACE), service
        service["port"] = port
    routed: Doc = out
    return routed


def _external_name(service: Doc) -> Doc:
    """The rendered Service as an ExternalName to 127.0.0.1 (no Service network in the dev cluster)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"]},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1", "ports": service["spec"]["ports"]},
    }


def _self_signed(common_name: str, dns_names: list[str], hours: int) -> tuple[bytes, bytes]:
    """A self-signed serving certificate (its own CA) and its key, PEM."""
    return self_signed(common_name, dns_names, validity=datetime.timedelta(hours=hours))


def _tls_secret(name: str, crt: bytes, key: bytes, annotations: dict[str, str] | None = None) -> Doc:
    meta: Doc = {"name": name, "namespace": NAMESPACE}
    if annotations:
        meta["annotations"] = annotations
    data = {"tls.crt": crt, "tls.key": key, "ca.crt": crt}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": meta,
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _as_cert_manager_would(docs: list[Doc]) -> list[Doc]:
    """The rendered objects once cert-manager did its part (the dev cluster has none): each Certificate
    issued by the self-signed Issuer the chart renders into its ``secretName`` (``tls.crt``, ``tls.key``,
    ``ca.crt`` — a self-signed certificate is its own CA), and each webhook configuration annotated
    ``cert-manager.io/inject-ca-from: <ns>/<certificate>`` given that CA as ``caBundle`` (the CA
    injector). The Certificate and Issuer themselves are left out: ``cert-manager.io`` is not served."""
    issuers = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Issuer"}
    cas: dict[str, bytes] = {}
    out = [d for d in docs if d["kind"] not in CERT_MANAGER]
    for cert in (d for d in docs if d["kind"] == "Certificate"):
        meta, spec = cert["metadata"], cert["spec"]
        ref = spec["issuerRef"]
        issuer = issuers.get((meta["namespace"], ref.get("name")))
        assert ref.get("kind", "Issuer") == "Issuer" and issuer is not None, (
            f"Certificate {meta['name']}: issuer {ref} is not rendered; only the chart's own is played here"
        )
        assert issuer["spec"] == {"selfSigned": {}}, f"Issuer {issuer['metadata']['name']}: {issuer['spec']}"
        hours = int(str(spec["duration"]).removesuffix("h"))
        pem, key_pem = _self_signed(spec["commonName"], spec["dnsNames"], hours)
        cas[f"{meta['namespace']}/{meta['name']}"] = pem
        out.append(
            _tls_secret(spec["secretName"], pem, key_pem, {"cert-manager.io/certificate-name": meta["name"]})
        )
    for doc in out:
        source = (doc["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        if source is None:
            continue
        assert source in cas, f"{doc['kind']} {doc['metadata']['name']}: injects from {source}, not rendered"
        for hook in doc["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(cas[source]).decode()
    return out


def _installed(mode: str) -> list[Doc]:
    """What the API server is given in ``mode``: the render, with what cert-manager or the admin provides
    (module docstring), less the kinds nothing here serves."""
    values = MODES[mode]
    admin_secret = None
    if mode == "existing-secret":
        svc = webhooks.SERVICE_NAME
        names = [svc, f"{svc}.{NAMESPACE}", f"{svc}.{NAMESPACE}.svc", f"{svc}.{NAMESPACE}.svc.cluster.local"]
        crt, key = _self_signed(f"{svc}.{NAMESPACE}.svc", names, 24)
        admin_secret = _tls_secret(ADMIN_SECRET, crt, key)
        values = (*values, "--set", f"webhook.caBundle={base64.b64encode(crt).decode()}")
    docs = _render(*values)
    rendered_kinds = {d["kind"] for d in docs}
    unrun = rendered_kinds - APPLIED - RUN - CERT_MANAGER - set(NOT_SERVED)
    assert not unrun, f"rendered kinds this test neither applies nor runs: {unrun}"
    docs = [d for d in docs if d["kind"] not in NOT_SERVED]
    if mode in ("cert-manager", "existing-secret"):
        assert not [d for d in docs if d["kind"] == "Secret"], f"{mode}: the chart renders a Secret"
    if mode == "cert-manager":
        assert rendered_kinds >= CERT_MANAGER, rendered_kinds
        docs = _as_cert_manager_would(docs)
    if admin_secret is not None:
        docs = [admin_secret, *docs]
    return docs


def _cert_secret(docs: list[Doc]) -> str:
    """The Secret the controller Pods mount."""
    volumes = rp.pod_spec(_one(docs, "Deployment"))["volumes"]
    (name,) = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    return str(name)


def _http_ok(probe: rp.HttpProbe) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe.port}{probe.path}", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class _Pods:
    """The local processes of the rendered Pods, started with their mapped argv/env/files."""

    def __init__(self, cluster: DevCluster, image: rp.Image, refs: rp.Referenced) -> None:
        self.cluster = cluster
        self.image = image
        self.refs = refs
        self.specs: dict[str, rp.LocalProcess] = {}
        self.procs: dict[str, ManagedProcess] = {}

    def run(self, workload: Doc, pod_name: str, node_name: str | None) -> rp.LocalProcess:
        root = self.cluster.dir / "pods" / pod_name
        kubeconfig = self.cluster.service_account_kubeconfig(rp.service_account(workload), NAMESPACE)
        spec = rp.local_process(
            workload,
            pod=rp.PodContext(pod_name, NAMESPACE, str(uuid.uuid4()), node_name),
            image=self.image,
            refs=self.refs,
            root=str(root),
            kubeconfig=str(kubeconfig),
            local_ports={p: free_port() for p in rp.container_ports(workload)},
        )
        for path, content in spec.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(content)
        proc = ManagedProcess(
            pod_name,
            [sys.executable, *spec.argv],
            self.cluster.dir / "logs" / f"pod-{pod_name}.log",
            {**spec.env, "PATH": os.environ.get("PATH", "")},
        )
        proc.start()
        self.cluster.procs[f"pod-{pod_name}"] = proc  # stopped with the cluster whatever happens
        self.specs[pod_name], self.procs[pod_name] = spec, proc
        return spec

    async def stop(self) -> dict[str, int | None]:
        """SIGTERM every Pod's process at once (as a rollout or drain would), SIGKILL after its grace;
        the exit codes."""

        def one(name: str) -> int | None:
            began = time.monotonic()
            proc = self.procs[name]
            proc.stop(grace=self.specs[name].grace_seconds)
            print(f"[chart-run] {name} exited {time.monotonic() - began:.1f}s after SIGTERM")
            self.cluster.procs.pop(f"pod-{name}", None)
            return proc.popen.returncode if proc.popen else None

        names = list(self.procs)
        codes = await asyncio.gather(*(asyncio.to_thread(one, n) for n in names))
        return dict(zip(names, codes, strict=True))

    def dead(self) -> dict[str, str]:
        return {n: p.log_tail(40) for n, p in self.procs.items() if not p.alive()}


async def _ready(pods: _Pods, kind: str) -> None:
    """Wait until every Pod's ``kind`` probe answers OK (failing at once when a process exits)."""

    async def answering() -> bool:
        assert not pods.dead(), f"a process exited: {pods.dead()}"
        probes = [s.probes[kind] for s in pods.specs.values()]
        return all(await asyncio.gather(*(asyncio.to_thread(_http_ok, p) for p in probes)))

    await eventually(answering, within=READY_S, every=0.3)


@dataclass
class ChartRun:
    cluster: DevCluster
    #: what was rendered, and what the API server holds for the applied objects
    docs: list[Doc]
    applied: dict[tuple[str, str], Doc]
    pods: _Pods
    admin: Client
    exp: chain_bench.Expected


@pytest.fixture(scope="module", params=list(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    """How the webhook's certificate is made (:data:`MODES`)."""
    return str(request.param)


@pytest.fixture(scope="module")
def devcluster(mode: str) -> Iterator[DevCluster]:
    """A control plane of each mode's own (shadows the session's): the chain reads every Node, so other
    modules' scenarios must not enter its pools, and the webhook configurations are the chart's."""
    with module_cluster(f"chart-run-{mode}") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def chart_run(
    devcluster: DevCluster, mode: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ChartRun]:
    docs = _installed(mode)
    api = _Api(devcluster)
    admin = await Client.connect(str(devcluster.kubeconfig))
    pods: _Pods | None = None
    try:
        # 1. the fleet, as a user writes it
        chain4 = packaged_scenario("chain-4")
        scenario = {"nodes": [_admin_labelled(n.model_dump(mode="json", by_alias=True, exclude_defaults=True))
                              for n in chain4.nodes if n.name in FLEET]}  # fmt: skip
        scenario_file = tmp_path_factory.mktemp("chart-run") / "fleet.yaml"
        scenario_file.write_text(yaml.safe_dump(scenario))
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gpustack_worker", "simulate", "apply", str(scenario_file),
             "--kubeconfig", str(devcluster.kubeconfig)],
            capture_output=True, text=True, check=False, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

        # 2. everything but the workloads, applied for real
        applied: dict[tuple[str, str], Doc] = {}
        for doc in docs:
            if doc["kind"] in APPLIED:
                applied[doc["kind"], doc["metadata"]["name"]] = api.apply(doc)
        refs = rp.Referenced(
            config_maps={
                (d["metadata"]["namespace"], d["metadata"]["name"]): d.get("data") or {}
                for (kind, _), d in applied.items()
                if kind == "ConfigMap"
            },
            secrets={
                (d["metadata"]["namespace"], d["metadata"]["name"]): {
                    k: base64.b64decode(v) for k, v in (d.get("data") or {}).items()
                }
                for (kind, _), d in applied.items()
                if kind == "Secret"
            },
            services=tuple(d for (kind, _), d in applied.items() if kind == "Service"),
        )

        # 3. the Pods, as processes
        pods = _Pods(devcluster, _image(), refs)
        controller = _one(docs, "Deployment")
        for i in range(int(controller["spec"].get("replicas", 1))):
            pods.run(controller, f"{controller['metadata']['name']}-{i}", None)
        agent = _one(docs, "DaemonSet")
        nodes = (await admin.list(kinds.NODE))[0]
        placed = rp.daemonset_nodes(agent, nodes)
        gpu_nodes = {n for n in FLEET if n != "cpu-a"}
        assert gpu_nodes <= set(placed), f"the DaemonSet places no agent on {gpu_nodes - set(placed)}"
        for node in placed:
            pods.run(agent, f"{agent['metadata']['name']}-{node}", node)
        await _ready(pods, "readinessProbe")

        # 4. the webhook Service routed to the first controller replica (module docstring)
        service = _one(docs, "Service", webhooks.SERVICE_NAME)
        assert applied["Service", service["metadata"]["name"]]["spec"].get("clusterIP"), "no ClusterIP"
        api.http.delete(api.path(service)).raise_for_status()
        api.apply(_external_name(service))
        first = pods.specs[f"{controller['metadata']['name']}-0"]
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            api.apply(_routed(_one(docs, kind), first.ports[webhooks.PORT_NAME]))

        # 5. what the chain should converge to, under the rendered settings
        # the Nodes an agent serves (a Node without one never gets the labels the chain reads)
        objs = [chain_bench.stage3(s) for s in load_scenario(scenario_file).nodes if s.name in placed]
        settings = _rendered_settings(docs, pods.specs[f"{controller['metadata']['name']}-0"])
        exp = chain_bench.expected_chain(objs, settings)
        namespaces = (await admin.list(kinds.NAMESPACE))[0]
        exp.namespaces = chain_bench.local_queue_namespaces(namespaces, settings, system_namespace=NAMESPACE)
        for name, spec in pods.specs.items():
            print(f"[chart-run] {name}: {' '.join(spec.argv)}")
        print(f"[chart-run] expected: {len(exp.flavors)} flavors, {sorted(exp.types)}, {exp.namespaces}")
        yield ChartRun(devcluster, docs, applied, pods, admin, exp)
    finally:
        codes = await pods.stop() if pods is not None else {}
        api.http.close()
        await admin.close()
    assert all(code == 0 for code in codes.values()), f"exit codes after SIGTERM: {codes}"


def _admin_labelled(node: Doc) -> Doc:
    if node.get("accelerators"):
        node["labels"] = {**node.get("labels", {}), **GPU_NODE_LABELS}
    return node


def _rendered_settings(docs: list[Doc], controller: rp.LocalProcess) -> WorkerSettings:
    """The settings the processes run under: the rendered ConfigMap the args name, over their env."""
    name = next(a.split("=", 1)[1] for a in controller.argv if a.startswith("--settings-configmap="))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return settings_from(WorkerSettings, cm.get("data") or {}, controller.env)


async def test_the_rendered_pods_converge_the_chain(chart_run: ChartRun) -> None:
    run = chart_run
    assert run.exp.types, "the fleet yields no InstanceType: nothing would be proven"

    async def converged() -> bool:
        assert not run.pods.dead(), f"a process exited: {run.pods.dead()}"
        return not await chain_bench.missing(run.admin, run.exp)

    await eventually(converged, within=CONVERGE_S, every=0.5)
    await _ready(run.pods, "livenessProbe")
    # one controller replica leads (the Lease names it: <hostname>_<pid>), the other stands by
    holder = await lease_holder(run.admin)
    deployment = _one(run.docs, "Deployment")
    name, replicas = deployment["metadata"]["name"], int(deployment["spec"].get("replicas", 1))
    controllers = {str(p.pid) for n, p in run.pods.procs.items() if n.startswith(name)}
    assert len(controllers) == replicas and holder.rsplit("_", 1)[-1] in controllers, holder


def test_service_links_seed_no_setting(chart_run: ChartRun) -> None:
    """The kubelet puts ``<SERVICE>_…`` variables of every Service in the namespace into each Pod
    (``enableServiceLinks`` is on): the chart's Services are named ``gpustack-worker-…``, so those
    variables share the settings' ``GPUSTACK_`` prefix. None may be a setting's environment seed."""
    services = tuple(d for (kind, _), d in chart_run.applied.items() if kind == "Service")
    links = rp.service_links(services, NAMESPACE)
    assert links, "no Service links: the check would prove nothing"
    seeds = {env_name(f) for f in WorkerSettings.model_fields}
    assert set(links) & seeds == set()


def test_the_webhook_serves_the_rendered_certificate(chart_run: ChartRun) -> None:
    secret = _one(chart_run.docs, "Secret", _cert_secret(chart_run.docs))
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in _one(chart_run.docs, kind)["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], kind
    # the controller reads the Secret's certificate and key from where its args point
    controller = next(s for s in chart_run.pods.specs.values() if "--webhook-cert-dir" in " ".join(s.argv))
    cert_dir = next(a.split("=", 1)[1] for a in controller.argv if a.startswith("--webhook-cert-dir="))
    for key in ("tls.crt", "tls.key"):
        assert (Path(cert_dir) / key).read_bytes() == base64.b64decode(secret["data"][key]), key
    api = chart_run.cluster.bootstrap()
    try:
        # refused by the webhook, naming the field: the API server called it and trusted its certificate
        worker_webhooks.wait_served(api, timeout=60)
        valid = worker_webhooks.probe_source()
        valid["metadata"]["name"] = "chart-run-valid"
        valid["spec"]["configMap"]["configMapRef"]["namespace"] = NAMESPACE
        resp = api.request("POST", f"{kinds.TOPOLOGY_SOURCE.collection_path()}?dryRun=All", valid)
        assert resp.status_code == 201, resp.text[:600]
    finally:
        api.close()


def test_a_rendered_field_the_mapping_does_not_know_fails(mode: str) -> None:
    """The rendered workloads map as they are, and the same workload with one more container field is
    refused naming it — so a chart option no process runs cannot slip in."""
    docs = _installed(mode)
    maps = {(NAMESPACE, d["metadata"]["name"]): d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    certs = {(NAMESPACE, _cert_secret(docs)): {"tls.crt": b"", "tls.key": b"", "ca.crt": b""}}
    refs = rp.Referenced(config_maps=maps, secrets=certs)
    for kind in RUN:
        workload = _one(docs, kind)

        def mapped(doc: Doc) -> rp.LocalProcess:
            return rp.local_process(
                doc,
                pod=rp.PodContext("p", NAMESPACE, "u", "node-a"),
                image=_image(),
                refs=refs,
                root="/pod",
                kubeconfig="/kc",
                local_ports={p: 1 for p in rp.container_ports(doc)},
            )

        mapped(workload)
        grown = json.loads(json.dumps(workload))
        container = grown["spec"]["template"]["spec"]["containers"][0]
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": 5}}}
        with pytest.raises(rp.Unmapped, match=r"containers\[0\]\.lifecycle"):
            mapped(grown)
