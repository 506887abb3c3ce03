"""``gpustack-worker demo``: the whole product, end to end on a real local control plane.

1. start etcd, kube-apiserver, kube-scheduler, Kueue, nfd-master and Jaeger on 127.0.0.1 (built from their
   Go modules on first use, with a live progress line); the agent and the controller send their spans to
   Jaeger, whose UI/API address is printed after the summary;
2. publish the simulated cluster of the packaged ``demo`` scenario — sliced H100s, MIG-partitioned A100s,
   Ascend 910B2s, T4s and CPU-only nodes (what NFD and the Device Manager would, stages 1–2);
3. run the node agent (``--all-nodes``) and the leader-elected controller as real processes, each as its
   own ServiceAccount (so with exactly the RBAC the chart grants), the controller serving its admission
   webhooks, registered in the API server as the chart registers them; wait until every node carries what
   stage 3 publishes;
4. as a platform engineer would, describe the racks: a snapshot ConfigMap and a configMap TopologySource
   placing the nodes into 2 zones × 2 racks; wait until every queue of the chain is Active and
   ``TopologyReady`` on that hierarchy, with its admission checks referenced;
5. create two ModelDeployments (:mod:`gpustack_worker.cli.demo.scene`): ``chat`` fits and is admitted,
   ``disagg`` (prefill + decode, each within one rack) waits for capacity — decode reserved and held by
   the joint check (``1 of 2``), prefill with Kueue's own message;
6. print the summary: topology, nodes, pools with their four-view, flavors per profile, queues with their
   stop policy and ``TopologyReady``, deployments, and every Workload admitted or pending with its reason.

With ``--kubelet`` the product is installed with helm onto a real node instead of running as local
processes (:mod:`gpustack_worker.cli.demo.install`): a kubelet stands in for the demo node ``t4-4``, the
image built here runs there as the agent DaemonSet's Pod and two controller replicas, and the other nodes'
agents run locally; every later step and the summary are the same.

With ``--keep`` everything stays up until Ctrl-C, and the demo prints how to explore it with kubectl. With
another ``--scenario`` the demo stops after the chain (the racks and the deployments are the demo
scenario's).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpustack_worker.api import keys, kinds, node_class, rbac
from gpustack_worker.cli.demo import install as demo_install
from gpustack_worker.cli.demo import scene as demo_scene
from gpustack_worker.cli.simulate import command as simulate_cmd
from gpustack_worker.devcluster import worker_webhooks
from gpustack_worker.devcluster.cluster import NFD_MASTER_NODE, DevCluster
from gpustack_worker.devcluster.helm import RELEASE
from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.simulate.load import packaged_scenario

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.runtime.resources import Resource

__all__ = ("run", "stage3_done")

#: How long each step may take to converge before the demo gives up and points at the logs: generous,
#: a loaded two-core machine is slow (never a measurement).
CONVERGE_TIMEOUT_SECONDS = 300
_T = TypeVar("_T")
#: The profile every demo node gets from the TopologySource: region > zone > rack > hostname.
PROFILE = keys.topology_profile([*demo_scene.LEVELS, keys.HOSTNAME])


class DemoError(RuntimeError):
    """A step did not converge or a process died; the message says which and where the logs are."""


def stage3_done(node: dict[str, Any]) -> bool:
    """Whether ``node`` carries what stage 3 publishes: the general labels, every pool counted, the fit
    labels of the shared and sliced families."""
    labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    if not node_class.is_managed(labels) or not any(k.startswith(keys.GENERAL_PREFIX) for k in labels):
        return False
    pools = [k for k in capacity if k.endswith((keys.SLICED_SUFFIX, keys.PARTITIONED_SUFFIX))]
    counted = all(any(k.startswith(pool + ".") for k in capacity) for pool in pools)
    # Cards that serve the shared or sliced family also get their per-card fit label (after the 3 s window).
    fit_domains = {
        keys.SHARED_SUFFIX: keys.SHARED_FIT_PREFIX,
        keys.SLICED_SUFFIX: keys.SLICED_FIT_PREFIX,
    }
    fitted = all(
        any(label.startswith(domain) for label in labels)
        for suffix, domain in fit_domains.items()
        if any(k.endswith(suffix) for k in capacity)
    )
    return counted and fitted


class _Demo:
    """The running demo: the cluster, an admin client, and the clock the step lines are measured on."""

    def __init__(self, cluster: DevCluster, api: ApiBootstrap) -> None:
        self.cluster = cluster
        self.api = api
        self.started = time.monotonic()
        #: The processes a step fails on when they die (the agents and the controller the demo started).
        self.watched: list[str] = []

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)

    def items(
        self, resource: Resource, namespace: str | None = None, selector: str = ""
    ) -> list[dict[str, Any]]:
        path = resource.collection_path(namespace)
        if selector:
            path += f"?labelSelector={selector}"
        resp = self.api.request("GET", path)
        return list(resp.json().get("items") or ()) if resp.is_success else []

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.items(kinds.NODE) if n["metadata"]["name"] != NFD_MASTER_NODE]

    def queues(self) -> list[dict[str, Any]]:
        return self.items(kinds.CLUSTER_QUEUE, selector=f"{keys.RESOURCE_TYPE}%3D{keys.TYPE_INSTANCE_TYPES}")

    def flavors(self) -> list[dict[str, Any]]:
        return self.items(kinds.RESOURCE_FLAVOR, selector=f"{keys.RESOURCE_TYPE}%3D{keys.TYPE_NODES}")

    def wait(self, what: str, check: Callable[[], _T | None]) -> _T:
        """Poll ``check`` until it returns a value (not ``None``/``False``); fail if a process dies or it
        takes longer than :data:`CONVERGE_TIMEOUT_SECONDS`."""
        deadline = time.monotonic() + CONVERGE_TIMEOUT_SECONDS
        while True:
            got = check()
            if got is not None and got is not False:
                return got
            for name in self.watched:
                proc = self.cluster.procs.get(name)
                if proc is not None and not proc.alive():
                    raise DemoError(f"{name} exited while waiting for {what}:\n{proc.log_tail()}")
            if time.monotonic() > deadline:
                raise DemoError(
                    f"{what}: not within {CONVERGE_TIMEOUT_SECONDS}s; logs in {self.cluster.dir / 'logs'}"
                )
            time.sleep(1)

    def observe(self) -> demo_scene.Observed:
        ns = demo_scene.NAMESPACE
        return demo_scene.Observed(
            nodes=self.nodes(),
            sources=self.items(kinds.TOPOLOGY_SOURCE),
            topologies=self.items(kinds.TOPOLOGY),
            instance_types=self.items(kinds.INSTANCE_TYPE),
            flavors=self.flavors(),
            queues=self.queues(),
            deployments=self.items(kinds.MODEL_DEPLOYMENT, ns),
            workloads=self.items(kinds.WORKLOAD, ns),
            pods=self.items(kinds.POD, ns),
        )


def _stage3(demo: _Demo) -> None:
    def done() -> list[dict[str, Any]] | None:
        nodes = demo.nodes()
        return nodes if nodes and all(stage3_done(n) for n in nodes) else None

    nodes = demo.wait("stage 3 (every node labelled and counted by the agent)", done)
    demo.step(f"stage 3: the agent labelled and counted all {len(nodes)} nodes")


def _racks(demo: _Demo) -> None:
    """The snapshot ConfigMap and the TopologySource; wait until every demo node is placed."""
    demo.api.create(
        kinds.CONFIG_MAP.collection_path(kinds.SYSTEM_NAMESPACE), demo_scene.snapshot_config_map()
    )
    demo.api.create(kinds.TOPOLOGY_SOURCE.collection_path(), demo_scene.topology_source())
    demo.step(
        f"TopologySource {demo_scene.SOURCE_NAME}: 2 zones x 2 racks from ConfigMap {demo_scene.SOURCE_NAME}"
    )

    def placed() -> bool:
        for node in demo.nodes():
            labels = node["metadata"].get("labels") or {}
            zone, rack = demo_scene.RACK_OF.get(node["metadata"]["name"], ("", ""))
            wanted = (zone, rack, PROFILE)
            if (
                labels.get(keys.PRIVATE_ZONE),
                labels.get(keys.PRIVATE_RACK),
                labels.get(keys.TOPOLOGY_PROFILE),
            ) != wanted:
                return False
        return True

    demo.wait("every node placed in its zone and rack", placed)
    demo.step("every node carries its zone, rack and topology profile")


def _chain(demo: _Demo, *, racks: bool) -> None:
    """Every queue Active and TopologyReady (on the racks' Topology when ``racks``), the joint check
    referenced from every queue."""
    topology = keys.topology_name(PROFILE)

    def ready() -> list[dict[str, Any]] | None:
        queues = demo.queues()
        if not queues:
            return None
        for q in queues:
            if demo_scene.condition(q, "Active").get("status") != "True":
                return None
            if demo_scene.condition(q, keys.TOPOLOGY_READY).get("status") != "True":
                return None
            checks = ((q["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks")) or ()
            if racks and keys.JOINT_CHECK not in {c.get("name") for c in checks}:
                return None
        if racks and any((f.get("spec") or {}).get("topologyName") != topology for f in demo.flavors()):
            return None
        return queues

    queues = demo.wait("every queue Active and TopologyReady", ready)
    on = f" on Topology {topology}" if racks else ""
    demo.step(f"stage 4: {len(queues)} queues Active and TopologyReady{on}")


def _deployments(demo: _Demo) -> None:
    its = demo.items(kinds.INSTANCE_TYPE)
    h100 = demo_scene.instance_type_for(demo_scene.H100, its)
    t4 = demo_scene.instance_type_for(demo_scene.T4, its)
    if h100 is None or t4 is None:
        names = ", ".join(sorted(t["metadata"]["name"] for t in its))
        raise DemoError(f"no H100 or T4 InstanceType among: {names}")
    demo.api.ensure_namespace(demo_scene.NAMESPACE)
    for md in demo_scene.deployments(h100, t4):
        demo.api.create(kinds.MODEL_DEPLOYMENT.collection_path(demo_scene.NAMESPACE), md)
    demo.step(f"ModelDeployments chat ({h100}) and disagg ({t4}) created in namespace {demo_scene.NAMESPACE}")

    def settled() -> bool:
        return demo_scene.deployments_settled(demo.observe())

    demo.wait("chat admitted and bound, disagg held with its reasons", settled)
    demo.step("chat admitted and bound; disagg waits for capacity (decode held 1 of 2, prefill fits no rack)")


def _print_jaeger(url: str) -> None:
    print(
        f"\ntraces in Jaeger: UI {url} (services gpustack-worker-agent, gpustack-worker-controller)\n"
        f"  API: {url}/api/traces?service=gpustack-worker-controller&limit=20"
    )


def _webhook_certs(cluster: DevCluster) -> Path:
    """The controller's webhook serving certificate: the local control plane's (its CA signs it for
    127.0.0.1), under the names the chart's mounted Secret uses."""
    assert cluster.pki is not None
    directory = cluster.dir / "webhook-certs"
    directory.mkdir(exist_ok=True)
    shutil.copyfile(cluster.pki.serving_cert, directory / "tls.crt")
    shutil.copyfile(cluster.pki.serving_key, directory / "tls.key")
    return directory


def _run_locally(demo: _Demo) -> None:
    """The agent (every node) and the controller as local processes, each as its own ServiceAccount (so
    with exactly the RBAC manifests/rbac and the chart grant), the webhooks registered as the chart does."""
    cluster = demo.cluster
    demo_install.start_process(
        cluster,
        "agent",
        cluster.service_account_kubeconfig(rbac.AGENT.name),
        "agent",
        "--all-nodes",
        "--metrics-bind=127.0.0.1:0",
    )
    certs = _webhook_certs(cluster)
    port = free_port()
    demo_install.start_process(
        cluster,
        "controller",
        cluster.service_account_kubeconfig(rbac.CONTROLLER.name),
        "controller",
        "--metrics-bind=127.0.0.1:0",
        "--identity=demo",
        f"--webhook-bind=127.0.0.1:{port}",
        f"--webhook-cert-dir={certs}",
    )
    demo.watched = ["agent", "controller"]
    demo.step(f"agent and controller running as ServiceAccounts {rbac.AGENT.name}, {rbac.CONTROLLER.name}")
    # As the chart does: TopologySources are validated by the controller's webhook (failurePolicy Fail).
    assert cluster.pki is not None
    worker_webhooks.register(demo.api, f"https://127.0.0.1:{port}", cluster.pki.ca_cert.read_bytes())


def _install_on_real_node(demo: _Demo) -> None:
    """``helm install`` onto the real node; the simulated nodes' agents as local processes."""
    cluster = demo.cluster
    try:
        # the image's and helm's builds as they happen (a first run makes them: minutes, not silence)
        built = demo_install.install(cluster, lambda line: print(f"  {line}", flush=True))
    except demo_install.InstallFailed as exc:
        raise DemoError(str(exc)) from exc
    demo.step(f"helm install {RELEASE}: {built.name} on real node {demo_install.REAL_NODE}, Pods Ready")
    nodes = packaged_scenario(demo_scene.DEMO_SCENARIO).nodes
    simulated = [node.name for node in nodes if node.name != demo_install.REAL_NODE]
    demo.watched = [p.name for p in demo_install.local_agents(cluster, simulated)]
    demo.step(f"agents of the {len(simulated)} simulated nodes running as ServiceAccount {rbac.AGENT.name}")


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    if threading.current_thread() is threading.main_thread():
        # `kill` stops the demo as Ctrl-C does: every process it started is stopped on the way out (and
        # Ctrl-C works even when the demo was started in the background, where SIGINT is ignored).
        signal.signal(signal.SIGTERM, _interrupted)
        signal.signal(signal.SIGINT, _interrupted)
    kubelet = bool(getattr(args, "kubelet", False))
    if kubelet and args.scenario not in (None, demo_scene.DEMO_SCENARIO):
        stand_in = f"its node {demo_install.REAL_NODE} is the real one"
        print(f"demo: --kubelet runs the packaged demo scenario ({stand_in})", file=sys.stderr)
        return 2
    # With --kubelet the chart installs our RBAC (helm adopts nothing it did not create).
    cluster = DevCluster(
        Path(args.dir),
        with_jaeger=True,
        with_worker_rbac=not kubelet,
        kubelets=1 if kubelet else 0,
        real_node_names=(demo_install.REAL_NODE,) if kubelet else (),
    )
    api: ApiBootstrap | None = None
    try:
        cluster.start()
        scenario = args.scenario or demo_scene.DEMO_SCENARIO
        full = scenario == demo_scene.DEMO_SCENARIO
        sim = argparse.Namespace(file=scenario, kubeconfig=str(cluster.kubeconfig))
        if asyncio.run(simulate_cmd.run(sim)) != 0:
            return 1
        api = cluster.bootstrap()
        demo = _Demo(cluster, api)
        if kubelet:
            _install_on_real_node(demo)
        else:
            _run_locally(demo)
        worker_webhooks.wait_served(api, timeout=CONVERGE_TIMEOUT_SECONDS)
        demo.step("the controller serves its admission webhooks")
        _stage3(demo)
        if full:
            _racks(demo)
        _chain(demo, racks=full)
        if full:
            _deployments(demo)
        observed = demo.observe()
        lease = api.request(
            "GET", "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases/worker.gpustack.ai"
        )
        leader = lease.json()["spec"].get("holderIdentity") if lease.is_success else None
        extra = {"controller leader": str(leader)} if leader else {}
        if kubelet:
            extra["real node"] = f"{demo_install.REAL_NODE} (helm release {RELEASE}, image built here)"
        print()
        print(demo_scene.summary(dataclasses.replace(observed, extra=extra)))
        if cluster.jaeger is not None:
            _print_jaeger(cluster.jaeger.ui_url)
        demo.step("summary printed")
        if args.keep:
            print("\nrunning — explore it (Ctrl-C stops everything):")
            print("\n".join(f"  {line}" for line in demo_scene.explore_commands(str(cluster.kubeconfig))))
            print(f"  logs: {cluster.dir / 'logs'}", flush=True)
            while all(p.alive() for p in cluster.procs.values()):
                time.sleep(1)
        return 0
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if api is not None:
            api.close()
        cluster.stop()
