"""A rendered Pod template mapped onto the local process a kubelet would have started from it.

Pure: no I/O. Given a rendered workload (Deployment or DaemonSet), the Pod a controller would make of it
(:class:`PodContext`: its name, namespace, Node), the objects it references as the API server holds them
(:class:`Referenced`: ConfigMaps, Secrets, the namespace's Services) and the image's process contract
(:class:`Image`, read from the Containerfile), :func:`local_process` returns what to run —

- **argv**: the container's ``command`` (else the image's ENTRYPOINT) and ``args`` (else the image's
  CMD), ``$(VAR)`` expanded like the kubelet does; the entrypoint mapped onto this checkout's interpreter
  (:data:`ENTRYPOINTS`: the console script ``gpustack-worker`` is ``python -m gpustack_worker``);
- **env**: the image's ENV, ``HOSTNAME`` (the Pod's name, as the kubelet sets it), the namespace's
  Service links (``enableServiceLinks``, on by default), ``envFrom``, then ``env`` — literal values,
  ``fieldRef`` from the Pod, ``configMapKeyRef``/``secretKeyRef`` from the referenced objects;
- **files**: each mounted Secret/ConfigMap volume's keys, written under the Pod's local root; a mount is
  reached through the argument (or env value) that names its ``mountPath``, rewritten to the local
  directory — a mount no argument points at fails (a local process could not see it);
- **ports**: every declared ``containerPort`` given a free local port, the ``host:port`` bind arguments
  rewritten to ``127.0.0.1:<local>`` (each Pod has its own network namespace; local processes share one);
  a bind of an undeclared port, or a declared port nothing binds, fails;
- **probes**: the ``httpGet`` probes, against the local port (the caller runs them);
- **credentials**: the ServiceAccount the projected token is for. A local process has no in-cluster
  config (no ``/var/run/secrets/kubernetes.io/serviceaccount``, no ``KUBERNETES_SERVICE_HOST`` route), so
  the caller mints a token for it (TokenRequest) and passes a kubeconfig, set as ``KUBECONFIG``.

Every rendered field is either mapped above or listed in :data:`NO_PROCESS_EQUIVALENT` with why it has
none; anything else is collected and raised as :class:`Unmapped`, so the chart cannot grow an option the
test does not run.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

Doc = dict[str, Any]

__all__ = (
    "ENTRYPOINTS",
    "NO_PROCESS_EQUIVALENT",
    "HttpProbe",
    "Image",
    "LocalProcess",
    "PodContext",
    "Referenced",
    "Unmapped",
    "container_ports",
    "daemonset_nodes",
    "image_from_stages",
    "local_process",
    "pod_spec",
    "service_account",
    "service_links",
)

#: The image's console scripts as this checkout runs them (pyproject ``[project.scripts]``:
#: ``gpustack-worker = gpustack_worker.cli.main:main``, which ``gpustack_worker/__main__.py`` calls too).
ENTRYPOINTS: Final[Mapping[str, tuple[str, ...]]] = {"gpustack-worker": ("-m", "gpustack_worker")}

#: Rendered fields a local process has no equivalent of, by path (``[]`` for any list index), and why.
NO_PROCESS_EQUIVALENT: Final[Mapping[str, str]] = {
    # the workload controllers' rollout machinery (no kube-controller-manager runs here)
    "Deployment.spec.strategy": "rollout pacing of the Deployment controller",
    "Deployment.spec.revisionHistoryLimit": "ReplicaSet history of the Deployment controller",
    "Deployment.spec.progressDeadlineSeconds": "rollout progress reporting",
    "Deployment.spec.minReadySeconds": "rollout pacing",
    "DaemonSet.spec.updateStrategy": "rollout pacing of the DaemonSet controller",
    "DaemonSet.spec.revisionHistoryLimit": "ControllerRevision history",
    "DaemonSet.spec.minReadySeconds": "rollout pacing",
    "template.metadata.annotations": "read only through fieldRef (mapped there)",
    # where the scheduler puts a controller Pod: a local process runs on this machine
    "Deployment.pod.nodeSelector": "scheduling of the controller Pods",
    "Deployment.pod.tolerations": "scheduling of the controller Pods",
    "Deployment.pod.affinity": "scheduling of the controller Pods",
    "Deployment.pod.topologySpreadConstraints": "scheduling of the controller Pods",
    "pod.priorityClassName": "scheduling/preemption priority",
    "pod.imagePullSecrets": "image pulls (the process runs this checkout's source, not the image)",
    "pod.securityContext": "kernel confinement by the container runtime (runAsNonRoot, seccomp, fsGroup); "
    "the local process runs as the test's user",
    "pod.dnsPolicy": "the Pod's resolver (nothing here resolves Service names)",
    "pod.restartPolicy": "the kubelet's restarts (a process that exits fails the test instead)",
    "container.name": "a label",
    "container.image": "the process runs this checkout's source (the Containerfile builds the image from it)",
    "container.imagePullPolicy": "image pulls",
    "container.resources": "cgroup requests/limits (no cgroup per process here)",
    "container.securityContext": "kernel confinement by the container runtime (capabilities, read-only root, "
    "no privilege escalation); the local process runs as the test's user",
    "container.terminationMessagePath": "kubelet status reporting",
    "container.terminationMessagePolicy": "kubelet status reporting",
    "probe.initialDelaySeconds": "the kubelet's probe timing (the test runs each probe until it passes)",
    "probe.periodSeconds": "the kubelet's probe timing",
    "probe.timeoutSeconds": "the kubelet's probe timing",
    "probe.failureThreshold": "the kubelet's probe timing",
    "probe.successThreshold": "the kubelet's probe timing",
    "port.protocol": "TCP only (checked)",
    "volumeMount.readOnly": "the files are written once and never changed by the test",
    "volume.defaultMode": "file modes (the test's user owns the files)",
}

#: The taints every DaemonSet Pod tolerates (the DaemonSet controller adds these tolerations).
DAEMONSET_TOLERATED: Final = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    }
)
#: Where the kubelet projects the ServiceAccount token (implicitly, or through a projected volume).
SA_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
_BIND: Final = re.compile(r"^(?P<flag>--[\w-]+=)(?P<host>\[[0-9a-fA-F:]*\]|[\w.-]*):(?P<port>\d+)$")
_VAR: Final = re.compile(r"\$\$|\$\(([A-Za-z_][\w.-]*)\)")


class Unmapped(AssertionError):
    """Rendered fields the mapping does not understand (one line each)."""


@dataclass(frozen=True)
class Image:
    """The image's process contract (its final stage): ENTRYPOINT, CMD, ENV."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodContext:
    """What the Pod made from the template would carry."""

    name: str
    namespace: str
    uid: str
    node_name: str | None = None
    ip: str = "127.0.0.1"


@dataclass(frozen=True)
class Referenced:
    """The objects a Pod can reference, as the API server holds them."""

    #: (namespace, name) → data
    config_maps: Mapping[tuple[str, str], Mapping[str, str]] = field(default_factory=dict)
    #: (namespace, name) → data, decoded
    secrets: Mapping[tuple[str, str], Mapping[str, bytes]] = field(default_factory=dict)
    #: Services as served (with their ClusterIP), for the Service-link environment
    services: tuple[Doc, ...] = ()


@dataclass(frozen=True)
class HttpProbe:
    path: str
    port: int


@dataclass(frozen=True)
class LocalProcess:
    pod: str
    #: arguments of this checkout's interpreter (``-m gpustack_worker controller …``)
    argv: tuple[str, ...]
    env: Mapping[str, str]
    #: absolute local path → content (the mounted volumes)
    files: Mapping[str, bytes]
    #: container port name (or number) → local port
    ports: Mapping[str, int]
    #: ``livenessProbe`` / ``readinessProbe`` / ``startupProbe`` → the probe against the local port
    probes: Mapping[str, HttpProbe]
    #: SIGTERM → SIGKILL (``terminationGracePeriodSeconds``; Kubernetes' default 30)
    grace_seconds: float
    service_account: str


class _Problems:
    def __init__(self, where: str) -> None:
        self.where = where
        self.lines: list[str] = []

    def add(self, path: str, why: str) -> None:
        self.lines.append(f"{self.where}: {path}: {why}")

    def unknown(self, path: str, keys: object) -> None:
        self.add(
            f"{path}.{keys}",
            "not mapped onto a local process — map it in tests/chart/rendered_pods.py, or list it in "
            "NO_PROCESS_EQUIVALENT with why it has none",
        )

    def check(
        self, obj: Mapping[str, Any], path: str, known: set[str], allow_prefixes: tuple[str, ...]
    ) -> None:
        """Every key of ``obj`` is ``known`` or allow-listed under one of ``allow_prefixes``."""
        for key in obj:
            if key in known:
                continue
            if any(f"{p}.{key}" in NO_PROCESS_EQUIVALENT for p in allow_prefixes):
                continue
            self.unknown(path, key)

    def raise_if_any(self) -> None:
        if self.lines:
            raise Unmapped("\n".join(self.lines))


# --- the image ------------------------------------------------------------------------------------------
def image_from_stages(instructions: list[tuple[str, str]]) -> Image:
    """The process contract of the final stage's ``(KEYWORD, args)`` instructions (``ENTRYPOINT`` and
    ``CMD`` in exec form, ``ENV k=v …``)."""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = {}
    for keyword, args in instructions:
        if keyword in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(args)
            except json.JSONDecodeError:
                value = None
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise Unmapped(f"Containerfile {keyword} {args}: only the exec form (a JSON list) is mapped")
            if keyword == "ENTRYPOINT":
                entrypoint, cmd = tuple(value), ()  # a new ENTRYPOINT resets CMD
            else:
                cmd = tuple(value)
        elif keyword == "ENV":
            for word in shlex.split(args):
                name, sep, val = word.partition("=")
                if not sep:
                    raise Unmapped(f"Containerfile ENV {args}: only the NAME=value form is mapped")
                env[name] = val
    return Image(entrypoint, cmd, env)


# --- the workload ---------------------------------------------------------------------------------------
def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def service_account(workload: Doc) -> str:
    """The ServiceAccount whose token the Pod gets (``default`` when none is named)."""
    return str(pod_spec(workload).get("serviceAccountName") or "default")


def container_ports(workload: Doc) -> list[int]:
    """Every declared ``containerPort`` (the caller gives each a free local port)."""
    return [int(p["containerPort"]) for c in pod_spec(workload)["containers"] for p in c.get("ports") or ()]


def _tolerates(tolerations: list[Doc], taint: Doc) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def daemonset_nodes(workload: Doc, nodes: list[Doc]) -> list[str]:
    """The Nodes the DaemonSet controller would place a Pod on: ``nodeSelector`` matched, every
    NoSchedule/NoExecute taint tolerated (with the DaemonSet's automatic tolerations; unschedulable Nodes
    included, as for any DaemonSet). Node affinity is not mapped (raises)."""
    spec = pod_spec(workload)
    if spec.get("affinity"):
        raise Unmapped(f"DaemonSet {workload['metadata']['name']}: affinity: placement not mapped")
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    tolerations: list[Doc] = spec.get("tolerations") or []
    out = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or ()
            if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") not in DAEMONSET_TOLERATED
        ]
        if all(_tolerates(tolerations, t) for t in taints):
            out.append(str(node["metadata"]["name"]))
    return sorted(out)


def _field_ref(path: str, pod: PodContext, template_meta: Doc, sa: str) -> str | None:
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "spec.nodeName": pod.node_name,
        "spec.serviceAccountName": sa,
        "status.podIP": pod.ip,
        "status.podIPs": pod.ip,
        "status.hostIP": pod.ip,
        "status.hostIPs": pod.ip,
    }
    if path in simple:
        return simple[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((template_meta.get(match.group(1)) or {}).get(match.group(2), ""))
    return None


def service_links(services: tuple[Doc, ...], namespace: str) -> dict[str, str]:
    """The kubelet's docker-link variables for each Service with a ClusterIP in the Pod's namespace."""
    env: dict[str, str] = {}
    for svc in services:
        if svc["metadata"].get("namespace") != namespace:
            continue
        ip = (svc.get("spec") or {}).get("clusterIP")
        ports = (svc.get("spec") or {}).get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for i, p in enumerate(ports):
            proto = str(p.get("protocol", "TCP"))
            if p.get("name"):
                env[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
            url = f"{proto.lower()}://{ip}:{p['port']}"
            if i == 0:
                env[f"{name}_PORT"] = url
            prefix = f"{name}_PORT_{p['port']}_{proto.upper()}"
            env[prefix] = url
            env[f"{prefix}_PROTO"] = proto.lower()
            env[f"{prefix}_PORT"] = str(p["port"])
            env[f"{prefix}_ADDR"] = ip
    return env


def _expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (``$$`` escapes; an undefined reference stays as written)."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(one, text)


def _volume_files(
    vol: Doc, path: str, refs: Referenced, namespace: str, problems: _Problems
) -> dict[str, bytes] | None:
    """File name → content of a Secret/ConfigMap volume; None (and a problem) for anything else."""
    kinds = [k for k in vol if k != "name"]
    if kinds == ["secret"]:
        src = vol["secret"]
        problems.check(src, f"{path}.secret", {"secretName", "optional"}, ("volume",))
        data = refs.secrets.get((namespace, src["secretName"]))
        if data is None:
            problems.add(f"{path}.secret", f"Secret {namespace}/{src['secretName']} does not exist")
            return None
        return dict(data)
    if kinds == ["configMap"]:
        src = vol["configMap"]
        problems.check(src, f"{path}.configMap", {"name", "optional"}, ("volume",))
        cm = refs.config_maps.get((namespace, src["name"]))
        if cm is None:
            problems.add(f"{path}.configMap", f"ConfigMap {namespace}/{src['name']} does not exist")
            return None
        return {k: v.encode() for k, v in cm.items()}
    problems.unknown(path, kinds)
    return None


def _is_token_volume(vol: Doc) -> bool:
    sources = (vol.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in s for s in sources)


def local_process(
    workload: Doc,
    *,
    pod: PodContext,
    image: Image,
    refs: Referenced,
    root: str,
    kubeconfig: str,
    local_ports: Mapping[int, int],
) -> LocalProcess:
    """The process a kubelet would run for ``pod`` (module docstring); :class:`Unmapped` lists every field
    it does not understand. ``root`` is the Pod's local directory (volumes under ``root/volumes/<name>``),
    ``kubeconfig`` the ServiceAccount's, ``local_ports`` containerPort → free local port."""
    kind = str(workload["kind"])
    problems = _Problems(f"{kind} {workload['metadata']['name']}")
    spec = workload["spec"]
    known_spec = {"Deployment": {"replicas", "selector", "template"}, "DaemonSet": {"selector", "template"}}
    if kind not in known_spec:
        problems.add("kind", "only Deployments and DaemonSets are run")
        problems.raise_if_any()
    problems.check(spec, "spec", known_spec[kind], (f"{kind}.spec",))
    template = spec["template"]
    problems.check(template, "spec.template", {"metadata", "spec"}, ())
    meta = template.get("metadata") or {}
    problems.check(meta, "spec.template.metadata", {"labels"}, ("template.metadata",))
    selector = spec.get("selector") or {}
    problems.check(selector, "spec.selector", {"matchLabels"}, ())
    labels = meta.get("labels") or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            problems.add("spec.selector.matchLabels", f"{k}={v} does not select the template's labels")
    ps = template["spec"]
    pod_known = {
        "containers",
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "volumes",
        "terminationGracePeriodSeconds",
    }
    if kind == "DaemonSet":  # placement: daemonset_nodes
        pod_known |= {"nodeSelector", "tolerations"}
    problems.check(ps, "spec.template.spec", pod_known, ("pod", f"{kind}.pod"))
    containers = ps.get("containers") or []
    if len(containers) != 1:
        problems.add("spec.template.spec.containers", f"{len(containers)} containers; one is mapped")
        problems.raise_if_any()
    c = containers[0]
    cpath = "spec.template.spec.containers[0]"
    problems.check(
        c,
        cpath,
        {
            "command",
            "args",
            "env",
            "envFrom",
            "ports",
            "volumeMounts",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        },
        ("container",),
    )
    sa = service_account(workload)

    # --- volumes and mounts: container path → local directory ---------------------------------------
    volumes = {v["name"]: v for v in ps.get("volumes") or ()}
    files: dict[str, bytes] = {}
    mounts: dict[str, str] = {}  # container mountPath → local directory
    token_mounted = False
    for i, m in enumerate(c.get("volumeMounts") or ()):
        mpath = f"{cpath}.volumeMounts[{i}]"
        problems.check(m, mpath, {"name", "mountPath"}, ("volumeMount",))
        vol = volumes.get(m["name"])
        if vol is None:
            problems.add(mpath, f"volume {m['name']} is not declared")
            continue
        if _is_token_volume(vol):
            if m["mountPath"] != SA_MOUNT:
                problems.add(mpath, f"the ServiceAccount token is read from {SA_MOUNT} only")
            token_mounted = True
            continue
        data = _volume_files(vol, f"spec.template.spec.volumes[{m['name']}]", refs, pod.namespace, problems)
        if data is None:
            continue
        local = f"{root}/volumes/{m['name']}"
        mounts[m["mountPath"].rstrip("/")] = local
        for key, content in data.items():
            files[f"{local}/{key}"] = content
    mounted = {m["name"] for m in c.get("volumeMounts") or ()}
    for name in volumes:
        if name not in mounted:
            problems.add(f"spec.template.spec.volumes[{name}]", "declared but mounted by no container")
    if ps.get("automountServiceAccountToken") is False and not token_mounted:
        problems.add(
            "spec.template.spec.automountServiceAccountToken",
            "false and no projected serviceAccountToken volume: the process has no credentials",
        )
    used_mounts: set[str] = set()

    def relocate(value: str) -> str:
        """``value`` with a mounted path (the whole value, or after ``=``) moved to its local directory."""
        for cont in sorted(mounts, key=len, reverse=True):
            pattern = re.compile(r"(^|=)" + re.escape(cont) + r"(?=/|$)")
            new, n = pattern.subn(lambda m: m.group(1) + mounts[cont], value, count=1)  # noqa: B023
            if n:
                used_mounts.add(cont)
                return new
        return value

    # --- environment (kubelet order: Service links, envFrom, env; then the image's ENV underneath) ----
    env: dict[str, str] = {}
    if ps.get("enableServiceLinks", True):
        env.update(service_links(refs.services, pod.namespace))
    for i, src in enumerate(c.get("envFrom") or ()):
        epath = f"{cpath}.envFrom[{i}]"
        problems.check(src, epath, {"configMapRef", "secretRef", "prefix"}, ())
        prefix = str(src.get("prefix", ""))
        if "configMapRef" in src:
            cm = refs.config_maps.get((pod.namespace, src["configMapRef"]["name"]))
            if cm is None and not src["configMapRef"].get("optional"):
                problems.add(epath, f"ConfigMap {src['configMapRef']['name']} does not exist")
            env.update({prefix + k: v for k, v in (cm or {}).items()})
        if "secretRef" in src:
            sec = refs.secrets.get((pod.namespace, src["secretRef"]["name"]))
            if sec is None and not src["secretRef"].get("optional"):
                problems.add(epath, f"Secret {src['secretRef']['name']} does not exist")
            env.update({prefix + k: v.decode() for k, v in (sec or {}).items()})
    for i, e in enumerate(c.get("env") or ()):
        epath = f"{cpath}.env[{i}]({e.get('name')})"
        problems.check(e, epath, {"name", "value", "valueFrom"}, ())
        if "valueFrom" not in e:
            env[e["name"]] = _expand(str(e.get("value", "")), env)
            continue
        vf = e["valueFrom"]
        (how,) = vf if len(vf) == 1 else (None,)
        value: str | None = None
        if how == "fieldRef":
            value = _field_ref(vf["fieldRef"].get("fieldPath", ""), pod, meta, sa)
            if value is None:
                problems.add(epath, f"fieldRef {vf['fieldRef']} has no value for this Pod")
        elif how in ("configMapKeyRef", "secretKeyRef"):
            ref = vf[how]
            if how == "configMapKeyRef":
                cm = refs.config_maps.get((pod.namespace, ref["name"])) or {}
                value = cm.get(ref["key"])
            else:
                sec = refs.secrets.get((pod.namespace, ref["name"])) or {}
                raw = sec.get(ref["key"])
                value = None if raw is None else raw.decode()
            if value is None and not ref.get("optional"):
                problems.add(epath, f"{how} {ref['name']}/{ref['key']} does not exist")
        else:
            problems.unknown(f"{epath}.valueFrom", list(vf))
        if value is not None:
            env[e["name"]] = value
    for name, value in list(env.items()):
        env[name] = relocate(value)

    # --- ports ---------------------------------------------------------------------------------------
    ports: dict[str, int] = {}
    declared: dict[int, str] = {}
    for i, p in enumerate(c.get("ports") or ()):
        ppath = f"{cpath}.ports[{i}]"
        problems.check(p, ppath, {"name", "containerPort"}, ("port",))
        if p.get("protocol", "TCP") != "TCP":
            problems.add(ppath, "only TCP ports are mapped")
        number = int(p["containerPort"])
        if number not in local_ports:
            problems.add(ppath, f"no local port given for {number}")
            continue
        declared[number] = str(p.get("name") or number)
        ports[declared[number]] = local_ports[number]
        ports[str(number)] = local_ports[number]
    bound: set[int] = set()

    def rebind(arg: str) -> str:
        m = _BIND.match(arg)
        if m is None:
            return arg
        number = int(m.group("port"))
        if number not in declared:
            problems.add(f"{cpath}.args", f"{arg} binds port {number}, which the container does not declare")
            return arg
        bound.add(number)
        return f"{m.group('flag')}127.0.0.1:{local_ports[number]}"

    # --- argv ----------------------------------------------------------------------------------------
    command = list(c.get("command") or image.entrypoint)
    args = list(c["args"]) if "args" in c else ([] if "command" in c else list(image.cmd))
    words = [_expand(str(w), env) for w in (*command, *args)]
    if not words or words[0] not in ENTRYPOINTS:
        problems.add(f"{cpath}.command", f"{words[:1]} is not an image entrypoint ({sorted(ENTRYPOINTS)})")
        problems.raise_if_any()
    argv = (*ENTRYPOINTS[words[0]], *(rebind(relocate(w)) for w in words[1:]))
    for number, name in declared.items():
        if number not in bound:
            problems.add(f"{cpath}.ports({name})", f"port {number} is declared but no argument binds it")
    for cont in mounts:
        if cont not in used_mounts:
            problems.add(
                f"{cpath}.volumeMounts({cont})",
                "no argument or env value names this path: a local process could not find the files",
            )

    # --- probes --------------------------------------------------------------------------------------
    probes: dict[str, HttpProbe] = {}
    for kind_ in ("livenessProbe", "readinessProbe", "startupProbe"):
        if kind_ not in c:
            continue
        probe = c[kind_]
        ppath = f"{cpath}.{kind_}"
        problems.check(probe, ppath, {"httpGet"}, ("probe",))
        get = probe.get("httpGet")
        if get is None:
            continue
        problems.check(get, f"{ppath}.httpGet", {"path", "port", "scheme"}, ())
        if get.get("scheme", "HTTP") != "HTTP":
            problems.add(f"{ppath}.httpGet.scheme", "only HTTP probes are mapped")
        port = ports.get(str(get["port"]))
        if port is None:
            problems.add(f"{ppath}.httpGet.port", f"{get['port']} is not a declared port")
            continue
        probes[kind_] = HttpProbe(str(get.get("path", "/")), port)

    problems.raise_if_any()
    full_env = {**image.env, "HOSTNAME": pod.name, **env, "KUBECONFIG": kubeconfig}
    return LocalProcess(
        pod=pod.name,
        argv=tuple(argv),
        env=full_env,
        files=files,
        ports=ports,
        probes=probes,
        grace_seconds=float(ps.get("terminationGracePeriodSeconds", 30)),
        service_account=sa,
    )
