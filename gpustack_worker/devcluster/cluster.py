"""A real control plane on 127.0.0.1: etcd, kube-apiserver, kube-scheduler, Kueue and nfd-master.

Used by the test suite (one per session), by the demo and by ``gpustack-worker devcluster up``. Start
order, each step needing what came before it (docs/devcluster.md, "Start-up"): certificates → etcd →
kube-apiserver → CRDs (Kueue, NFD, ours) →
namespaces → our RBAC (``manifests/rbac``: ServiceAccounts, roles, bindings) → the node nfd-master needs →
kube-scheduler → Kueue → Kueue's webhooks (registered by URL once Kueue is ready; :mod:`.kueue_webhooks`)
→ nfd-master. Every port is chosen free at start, so several clusters can run side by side.

kube-scheduler (built from the same ``k8s.io/kubernetes`` release as kube-apiserver) binds every Pod that
has no ``nodeName`` and no scheduling gate to a fitting Node, and Kueue's ``pod`` integration gates Pods
that carry a queue name until their Workload is admitted — so a queued Pod really goes gated → admitted →
ungated → bound. By default there is no kubelet and no kube-controller-manager (``kubelets=N`` adds them,
:mod:`.real_nodes`, and kube-proxy; Pods bound to a real node run): a bound Pod stays ``Pending`` with
``spec.nodeName`` set and never starts (no containers, no ``Running``, no ``PodReady``); Nodes are API
objects whose status we write, namespaces never finish terminating, and owner references are not
garbage-collected.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpustack_worker.api import kueue_config
from gpustack_worker.devcluster import build, kueue_webhooks, versions
from gpustack_worker.devcluster.audit import audit_policy
from gpustack_worker.devcluster.bootstrap import ApiBootstrap, load_yaml_documents
from gpustack_worker.devcluster.jaeger import Jaeger
from gpustack_worker.devcluster.pki import Pki, make_pki
from gpustack_worker.devcluster.procs import ManagedProcess, StartupError, free_port, http_ok, spawn
from gpustack_worker.devcluster.real_nodes import RealNodes, apiserver_flags

__all__ = (
    "NFD_MASTER_NODE",
    "SA_TOKEN_SECONDS",
    "SCHEDULER_ACCOUNT",
    "SYSTEM_NAMESPACES",
    "DevCluster",
    "StartupError",
)

#: The Node nfd-master insists on updating at start-up; marked unmanaged and unschedulable so no chain
#: object ever counts it.
NFD_MASTER_NODE = "devcluster-nfd-master"
SYSTEM_NAMESPACE = "gpustack-system"
SYSTEM_NAMESPACES = ("kueue-system", "node-feature-discovery", SYSTEM_NAMESPACE)
#: Lifetime of the ServiceAccount tokens the harness mints: longer than any test session or demo.
SA_TOKEN_SECONDS = 48 * 3600
#: kube-scheduler runs as this ServiceAccount, bound to the API server's built-in ``system:kube-scheduler``
#: and ``system:volume-scheduler`` ClusterRoles (what kubeadm grants the user ``system:kube-scheduler``), so
#: it holds a scheduler's rights and its requests are told apart from the harness' admin ones.
SCHEDULER_ACCOUNT = ("kube-system", "kube-scheduler")
_SCHEDULER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
#: Kueue's metrics certificate path is hard-coded in cmd/kueue/main.go.
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
MANIFESTS_ENV = "GPUSTACK_WORKER_MANIFESTS"


def _repo_manifests() -> Path:
    env = os.environ.get(MANIFESTS_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "manifests"


#: How many times a start-up is tried when a port chosen free was taken before the component bound it.
_BIND_ATTEMPTS = 3
_ADDRESS_IN_USE = "address already in use"


@dataclass
class DevCluster:
    """One local control plane rooted at ``dir``."""

    dir: Path
    #: Start Kueue and nfd-master too (the runtime's own tests need only the API server).
    with_kueue: bool = True
    with_nfd: bool = True
    #: Start kube-scheduler (binds ungated Pods to Nodes; nothing runs them: there is no kubelet).
    with_scheduler: bool = True
    #: Start Jaeger too (optional component, built on first use): :attr:`otlp_endpoint`, :attr:`jaeger_url`.
    with_jaeger: bool = False
    #: Install our ServiceAccounts and their RBAC (``manifests/rbac``), so the processes can run as them.
    #: Off (``devcluster up --bare``): none of the chart's objects exist, and ``helm install ./chart`` and
    #: ``preflight``'s before-install stage meet the cluster as they would a team's — Helm refuses to adopt
    #: objects it did not create.
    with_worker_rbac: bool = True
    #: Install our CRDs (``manifests/crds``). Off: the API server has never served our group, as before the
    #: chart is installed (the chart installs them) — deleting them after the start instead leaves their
    #: discovery served until kube-apiserver's CRD controllers catch up, once measured at ~5 minutes.
    with_worker_crds: bool = True
    #: Install Kueue's and NFD's CRDs (their components need them: off only without Kueue and nfd-master).
    with_component_crds: bool = True
    log: Any = print
    #: Keep a kube-apiserver audit log here (JSON lines; policy in :mod:`gpustack_worker.devcluster.audit`).
    audit_log: Path | None = None
    #: API groups whose writes the audit log records with their request bodies (``""``: core).
    audit_request_bodies: tuple[str, ...] = ()
    #: nfd-master's ``-nfd-api-parallelism`` (concurrent Node updaters); None leaves NFD's default (10),
    #: which is also the Helm chart's (``master.nfdApiParallelism`` unset). Benchmarks vary it to show
    #: which limit is nfd-master's own: each updater has its own client-go client at the default 5 QPS.
    nfd_api_parallelism: int | None = None
    #: Real nodes beside the simulated ones (:mod:`.real_nodes`): kube-controller-manager, this many
    #: kubelets on containerd + runc with a CNI bridge, and kube-proxy. 0: none (an API-only cluster).
    kubelets: int = 0
    #: The names the first kubelets register as (:attr:`.real_nodes.RealNodes.named`; default
    #: ``devcluster-node-<i>``): a real node standing in for a scenario's node of that name.
    real_node_names: tuple[str, ...] = ()
    etcd_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    kueue_health_port: int = 0
    scheduler_port: int = 0
    kueue_webhook_port: int = 0
    nfd_port: int = 0
    pki: Pki | None = None
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    binaries: dict[str, Path] = field(default_factory=dict)
    jaeger: Jaeger | None = None
    real_nodes: RealNodes | None = None

    # --- public surface ----------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def otlp_endpoint(self) -> str | None:
        """Jaeger's OTLP/HTTP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``), when started ``with_jaeger``."""
        return self.jaeger.otlp_endpoint if self.jaeger else None

    @property
    def jaeger_url(self) -> str | None:
        """Jaeger's UI, with its HTTP API under ``/api``, when started ``with_jaeger``."""
        return self.jaeger.ui_url if self.jaeger else None

    def start(self) -> DevCluster:
        """Build (or reuse) the binaries and start everything; on any failure stop what started and raise."""
        self.dir = self.dir.resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.audit_log is not None:
            self.audit_log = Path(self.audit_log).resolve()
            self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        if not self.with_component_crds and (self.with_kueue or self.with_nfd):
            raise StartupError(
                "Kueue and nfd-master need their CRDs: with_component_crds=False is for neither"
            )
        started = time.monotonic()
        self.binaries = build.ensure_all(self.log)
        if self.with_jaeger:
            self.binaries["jaeger"] = build.ensure_optional("jaeger", self.log)
        built = time.monotonic()
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            try:
                self._start_all()
                break
            except StartupError as exc:
                self.stop()
                # A port is chosen free, then bound by the component a moment later: another process on
                # the machine (a second test session, another cluster) can take it in between. That is
                # not the component's failure: choose new ports and start again.
                if _ADDRESS_IN_USE not in str(exc) or attempt == _BIND_ATTEMPTS:
                    raise
                self.log(f"a port was taken before it was bound (attempt {attempt}): starting on new ports")
            except BaseException:
                self.stop()
                raise
        self.log(
            f"devcluster ready in {time.monotonic() - built:.1f}s "
            f"(build/cache check {built - started:.1f}s): "
            f"{self.server}, kubeconfig {self.kubeconfig}"
        )
        return self

    def all_processes(self) -> dict[str, ManagedProcess]:
        """Every running process of the cluster: the control plane's and the real nodes'."""
        return {**self.procs, **(self.real_nodes.processes() if self.real_nodes else {})}

    def stop(self) -> None:
        """Stop every component, newest first (the real nodes first: their kubelets still reach the API
        server while their Pods stop)."""
        if self.real_nodes is not None:
            self.real_nodes.stop()
        for name in reversed(list(self.procs)):
            self.procs[name].stop()
        self.procs.clear()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port; returns once it is ready."""
        self.procs.pop("kube-apiserver").stop()
        self._start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (physically), so watches from older resourceVersions get 410.

        kube-apiserver serves watches from its watch cache, which keeps recent events after an etcd
        compaction; the cache is disabled for ConfigMaps (``--watch-cache-sizes``), so a ConfigMap watch
        from a compacted resourceVersion is answered 410 Gone by etcd, deterministically.
        """
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        key = base64.b64encode(b"\x00").decode()
        rng = self._etcd_post(f"{base}/kv/range", {"key": key, "range_end": key, "limit": 1})
        revision = int(rng["header"]["revision"])
        self._etcd_post(f"{base}/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def service_account_kubeconfig(self, name: str, namespace: str = SYSTEM_NAMESPACE) -> Path:
        """A kubeconfig authenticating as ServiceAccount ``namespace/name`` (created if missing), with a
        token minted through the TokenRequest API (valid :data:`SA_TOKEN_SECONDS`).

        The agent and the controller run with these in the end-to-end tests, so they hold exactly the
        RBAC that ``manifests/rbac`` (and the chart) grant them: a missing permission is a 403 there.
        Each call mints a fresh token and rewrites ``DIR/kubeconfigs/<namespace>.<name>.kubeconfig``.
        """
        assert self.pki is not None
        api = self.bootstrap()
        try:
            api.create_object(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                }
            )
            token = api.request_token(name, namespace, SA_TOKEN_SECONDS)
        finally:
            api.close()
        path = self.dir / "kubeconfigs" / f"{namespace}.{name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        self._write_kubeconfig(path, f"system:serviceaccount:{namespace}:{name}", token)
        return path

    def bootstrap(self) -> ApiBootstrap:
        """An admin HTTP client for the harness' own calls (caller closes it)."""
        assert self.pki is not None
        return ApiBootstrap(self.server, self.pki.ca_cert, self.pki.admin_token)

    # --- start-up steps ------------------------------------------------------------------------------
    def _start_all(self) -> None:
        if self.kubelets:
            self.real_nodes = RealNodes(self.dir, self.kubelets, self.log, named=self.real_node_names)
            self.real_nodes.prepare()
        self.pki = make_pki(self.dir / "pki", self.real_nodes.pki_hosts() if self.real_nodes else ())
        if self.real_nodes is not None:
            with self.pki.token_file.open("a") as tokens:
                tokens.write(self.real_nodes.token_lines())
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.apiserver_port = free_port()
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig()
        api = self.bootstrap()
        try:
            crds = self._crd_documents(ours=self.with_worker_crds, components=self.with_component_crds)
            if crds:
                api.install_crds(crds)
            for ns in SYSTEM_NAMESPACES:
                api.ensure_namespace(ns)
            for doc in self._rbac_documents() if self.with_worker_rbac else ():
                api.create_object(doc)
            if self.with_nfd:
                api.create_node(_nfd_master_node())
            if self.with_scheduler:
                for doc in _scheduler_rbac():
                    api.create_object(doc)
        finally:
            api.close()
        if self.with_scheduler:
            self._start_scheduler()
        if self.with_kueue:
            self._start_kueue()
        if self.with_nfd:
            self._start_nfd_master()
        if self.with_jaeger:
            # with real nodes, the OTLP receiver listens on the address their Pods reach this machine at
            host = self.real_nodes.host if self.real_nodes is not None else "127.0.0.1"
            self.jaeger = Jaeger(self.dir, log=self.log, otlp_host=host).start(self.binaries["jaeger"])
            assert self.jaeger.proc is not None
            self.procs["jaeger"] = self.jaeger.proc
        if self.real_nodes is not None:
            api = self.bootstrap()
            try:
                self.real_nodes.start(server=self.server, pki=self.pki, api=api)
            finally:
                api.close()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ManagedProcess:
        return spawn(self.procs, name, argv, self.dir / "logs" / f"{name}.log", env)

    def _start_etcd(self) -> None:
        data = self.dir / "etcd-data"
        shutil.rmtree(data, ignore_errors=True)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--name=devcluster",
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=devcluster={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        proc.wait_ready(lambda: http_ok(f"{client}/health"), 30)

    def _audit_flags(self) -> list[str]:
        """Audit-log flags (none unless ``audit_log`` is set): one file, appended across restarts, never
        rotated or truncated, written before each response (``blocking``)."""
        if self.audit_log is None:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(audit_policy(self.audit_request_bodies), sort_keys=True))
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            # lumberjack rotates at 100 MB when this is 0; 1 TB means never.
            "--audit-log-maxsize=1000000",
            "--audit-log-maxbackup=0",
            "--audit-log-truncate-enabled=false",
        ]

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        p = self.pki
        flags = [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.dir / 'pki'}",
            f"--tls-cert-file={p.serving_cert}",
            f"--tls-private-key-file={p.serving_key}",
            f"--token-auth-file={p.token_file}",
            f"--service-account-issuer=https://127.0.0.1:{self.apiserver_port}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # No node lifecycle controller runs here: the not-ready taint would never be removed.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            # ConfigMaps are watched straight from etcd so compact_etcd() gives a deterministic 410.
            "--watch-cache-sizes=configmaps#0",
            *self._audit_flags(),
        ]
        if self.real_nodes is not None:
            flags = apiserver_flags(flags, host=self.real_nodes.host, pki=p)
        proc = self._spawn("kube-apiserver", [str(self.binaries["kube-apiserver"]), *flags])
        ctx = ssl.create_default_context(cafile=str(p.ca_cert))
        proc.wait_ready(lambda: http_ok(f"{self.server}/readyz", ctx), 90)

    def _write_kubeconfig(
        self, path: Path | None = None, user: str = "devcluster-admin", token: str = ""
    ) -> None:
        """Write a kubeconfig for ``user`` (default: the admin kubeconfig at :attr:`kubeconfig`)."""
        assert self.pki is not None
        path = path or self.kubeconfig
        ca = base64.b64encode(self.pki.ca_cert.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "devcluster", "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token or self.pki.admin_token}}],
            "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
            "current-context": "devcluster",
        }
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=True))
        tmp.chmod(0o600)
        tmp.replace(path)

    def _start_scheduler(self) -> None:
        """kube-scheduler with its own ServiceAccount kubeconfig, no leader election, and its secure port
        (health only) on a free loopback port with the dev cluster's serving certificate.

        No ``--authentication-kubeconfig``/``--authorization-kubeconfig``: nothing but the harness talks
        to the scheduler, and ``/healthz``, ``/readyz`` and ``/livez`` are always allowed upstream.
        """
        assert self.pki is not None
        namespace, name = SCHEDULER_ACCOUNT
        kubeconfig = self.service_account_kubeconfig(name, namespace)
        self.scheduler_port = free_port()
        proc = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"]),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
            ],
        )
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        proc.wait_ready(lambda: http_ok(f"https://127.0.0.1:{self.scheduler_port}/healthz", ctx), 60)

    def _rbac_documents(self) -> list[dict[str, Any]]:
        files = sorted((_repo_manifests() / "rbac").glob("*.yaml"))
        if not files:
            raise StartupError(f"no RBAC manifests in {_repo_manifests() / 'rbac'} (run `nox -s rbac`)")
        return load_yaml_documents(files)

    def _crd_documents(self, *, ours: bool = True, components: bool = True) -> list[dict[str, Any]]:
        """Kueue's, NFD's and our CRDs (``components``: the first two; ``ours``: the last)."""
        kueue = build.module_dir("sigs.k8s.io/kueue", versions.KUEUE) / "config/components/crd/bases"
        nfd = build.module_dir("sigs.k8s.io/node-feature-discovery", versions.NFD)
        ours_dir = _repo_manifests() / "crds"
        ours_files = sorted(ours_dir.glob("*.yaml"))
        if not ours_files:
            raise StartupError(f"no CRDs of ours found in {ours_dir} (run `nox -s crds`)")
        files = [
            *(sorted(kueue.glob("*.yaml")) if components else ()),
            *((nfd / "deployment/base/nfd-crds/nfd-api-crds.yaml",) if components else ()),
            *(ours_files if ours else ()),
        ]
        return load_yaml_documents(files)

    def _start_kueue(self) -> None:
        assert self.pki is not None
        self.kueue_health_port, self.kueue_webhook_port = free_port(), free_port()
        certs = self.dir / "kueue-certs"
        certs.mkdir(exist_ok=True)
        for target in (certs, KUEUE_METRICS_CERT_DIR):
            try:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.pki.serving_cert, target / "tls.crt")
                shutil.copyfile(self.pki.serving_key, target / "tls.key")
            except PermissionError as exc:
                raise StartupError(
                    f"Kueue needs its metrics certificate at {KUEUE_METRICS_CERT_DIR} (hard-coded upstream); "
                    f"cannot write it: {exc}. Run as root or make that directory writable."
                ) from exc
        # The chain's configuration (api/kueue_config.py, the same the chart ships) plus what is local here:
        # loopback ports, our certificates, one replica, no aggregated visibility server.
        config = kueue_config.merge(
            kueue_config.kueue_manager_config(),
            {
                "health": {"healthProbeBindAddress": f"127.0.0.1:{self.kueue_health_port}"},
                "metrics": {"bindAddress": "0"},
                "webhook": {"host": "127.0.0.1", "port": self.kueue_webhook_port, "certDir": str(certs)},
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "featureGates": {"VisibilityOnDemand": False},
            },
        )
        path = self.dir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=True))
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = self._spawn("kueue", [str(self.binaries["kueue"]), f"--config={path}"], env)
        # /readyz passes once Kueue's webhook server listens; only then are its webhooks registered.
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.kueue_health_port}/readyz"), 120)
        self._register_kueue_webhooks(config)
        api = self.bootstrap()
        try:
            proc.wait_ready(lambda: kueue_webhooks.served(api), 60)
        finally:
            api.close()

    def _register_kueue_webhooks(self, config: dict[str, Any]) -> None:
        """Kueue's webhook configurations, calling it at its loopback webhook server (kueue_webhooks)."""
        assert self.pki is not None
        docs = kueue_webhooks.webhook_configurations(
            kueue_webhooks.upstream_documents(),
            base_url=f"https://127.0.0.1:{self.kueue_webhook_port}",
            ca_bundle=self.pki.ca_cert.read_bytes(),
            config=config,
        )
        api = self.bootstrap()
        try:
            kueue_webhooks.register(api, docs)
        finally:
            api.close()

    def _start_nfd_master(self) -> None:
        self.nfd_port = free_port()
        env = {**os.environ, "NODE_NAME": NFD_MASTER_NODE, "KUBERNETES_NAMESPACE": "node-feature-discovery"}
        proc = self._spawn(
            "nfd-master",
            [
                str(self.binaries["nfd-master"]),
                f"-kubeconfig={self.kubeconfig}",
                f"-port={self.nfd_port}",
                f"-config={self.dir / 'nfd-master.conf'}",
                *([f"-nfd-api-parallelism={self.nfd_api_parallelism}"] if self.nfd_api_parallelism else []),
            ],
            env,
        )
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.nfd_port}/healthz"), 60)

    @staticmethod
    def _etcd_post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result


def _scheduler_rbac() -> list[dict[str, Any]]:
    """The scheduler's ServiceAccount and its bindings to the built-in scheduler ClusterRoles."""
    namespace, name = SCHEDULER_ACCOUNT
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
    }
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"devcluster:{role.removeprefix('system:')}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        for role in _SCHEDULER_ROLES
    ]
    return [account, *bindings]


def _nfd_master_node() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NFD_MASTER_NODE,
            # A kubelet always sets annotations; nfd-master's JSON patch assumes the map exists.
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NFD_MASTER_NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/control-plane": "",
                # An admin-set value: the node agent never stamps managed=true over it.
                "gpustack.ai/managed": "false",
            },
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "devcluster",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }
