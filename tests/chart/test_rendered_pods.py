"""The mapping of a rendered Pod template onto a local process (tests/chart/rendered_pods.py), by case."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chart import rendered_pods as rp
from tests.kit.properties import examples
from tests.test_containerfile import parse_containerfile

REPO = Path(__file__).resolve().parents[2]
IMAGE = rp.Image(entrypoint=("gpustack-worker",), env={"PYTHONUNBUFFERED": "1"})
POD = rp.PodContext("ctl-0", "sys", "uid-1", node_name="node-a")
REFS = rp.Referenced(
    config_maps={("sys", "settings"): {"log-level": "debug"}},
    secrets={("sys", "certs"): {"tls.crt": b"CERT", "tls.key": b"KEY"}},
    services=(
        {
            "metadata": {"name": "my-svc", "namespace": "sys"},
            "spec": {"clusterIP": "10.0.0.7", "ports": [{"name": "web-hook", "port": 443}]},
        },
        {"metadata": {"name": "other-ns", "namespace": "x"}, "spec": {"clusterIP": "10.0.0.8", "ports": []}},
    ),
)
PORTS = {8080: 18080, 9443: 19443}

Doc = dict[str, Any]


def workload(kind: str = "Deployment", **container: Any) -> Doc:
    """A controller-like workload; ``container`` keys replace the container's (None removes one)."""
    c: Doc = {
        "name": "ctl",
        "image": "example/img:1",
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "controller",
            "--metrics-bind=0.0.0.0:8080",
            "--webhook-bind=:9443",
            "--webhook-cert-dir=/etc/certs",
        ],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LITERAL", "value": "x"},
        ],
        "ports": [{"name": "metrics", "containerPort": 8080}, {"name": "webhook", "containerPort": 9443}],
        "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}},
        "resources": {"limits": {"memory": "1Gi"}},
        "securityContext": {"runAsNonRoot": True},
    }
    for key, value in container.items():
        if value is None:
            c.pop(key, None)
        else:
            c[key] = value
    spec: Doc = {
        "selector": {"matchLabels": {"app": "w"}},
        "template": {
            "metadata": {"labels": {"app": "w", "tier": "ctl"}},
            "spec": {
                "serviceAccountName": "ctl-sa",
                "terminationGracePeriodSeconds": 12,
                "containers": [c],
                "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}],
            },
        },
    }
    if kind == "Deployment":
        spec["replicas"] = 2
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}, "spec": spec}


def mapped(doc: Doc, refs: rp.Referenced = REFS, pod: rp.PodContext = POD) -> rp.LocalProcess:
    return rp.local_process(
        doc, pod=pod, image=IMAGE, refs=refs, root="/pods/ctl-0", kubeconfig="/kc", local_ports=PORTS
    )


def unmapped(doc: Doc, pod: rp.PodContext = POD) -> str:
    with pytest.raises(rp.Unmapped) as exc:
        mapped(doc, pod=pod)
    return str(exc.value)


# --- what is mapped -------------------------------------------------------------------------------------
def test_the_container_becomes_the_images_entrypoint_with_local_binds_and_mounts() -> None:
    proc = mapped(workload())
    assert proc.argv == (
        "-m",
        "gpustack_worker",
        "controller",
        "--metrics-bind=127.0.0.1:18080",
        "--webhook-bind=127.0.0.1:19443",
        "--webhook-cert-dir=/pods/ctl-0/volumes/certs",
    )
    certs = "/pods/ctl-0/volumes/certs"
    assert proc.files == {f"{certs}/tls.crt": b"CERT", f"{certs}/tls.key": b"KEY"}
    assert proc.probes == {
        "livenessProbe": rp.HttpProbe("/healthz", 18080),
        "readinessProbe": rp.HttpProbe("/readyz", 18080),
    }
    assert proc.ports == {"metrics": 18080, "8080": 18080, "webhook": 19443, "9443": 19443}
    assert (proc.grace_seconds, proc.service_account) == (12.0, "ctl-sa")


def test_env_is_the_images_then_service_links_then_the_rendered_env_and_the_kubeconfig() -> None:
    env = mapped(workload()).env
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "HOSTNAME": "ctl-0",
        "MY_SVC_SERVICE_HOST": "10.0.0.7",
        "MY_SVC_SERVICE_PORT": "443",
        "MY_SVC_SERVICE_PORT_WEB_HOOK": "443",
        "MY_SVC_PORT": "tcp://10.0.0.7:443",
        "MY_SVC_PORT_443_TCP": "tcp://10.0.0.7:443",
        "MY_SVC_PORT_443_TCP_PROTO": "tcp",
        "MY_SVC_PORT_443_TCP_PORT": "443",
        "MY_SVC_PORT_443_TCP_ADDR": "10.0.0.7",
        "POD_NAME": "ctl-0",
        "LITERAL": "x",
        "KUBECONFIG": "/kc",
    }
    doc = workload()
    doc["spec"]["template"]["spec"]["enableServiceLinks"] = False
    assert not any(k.startswith("MY_SVC") for k in mapped(doc).env)


@pytest.mark.parametrize(
    ("value_from", "want"),
    [
        ({"fieldRef": {"fieldPath": "spec.nodeName"}}, "node-a"),
        ({"fieldRef": {"fieldPath": "metadata.namespace"}}, "sys"),
        ({"fieldRef": {"fieldPath": "metadata.uid"}}, "uid-1"),
        ({"fieldRef": {"fieldPath": "spec.serviceAccountName"}}, "ctl-sa"),
        ({"fieldRef": {"fieldPath": "status.podIP"}}, "127.0.0.1"),
        ({"fieldRef": {"fieldPath": "metadata.labels['tier']"}}, "ctl"),
        ({"configMapKeyRef": {"name": "settings", "key": "log-level"}}, "debug"),
        ({"secretKeyRef": {"name": "certs", "key": "tls.key"}}, "KEY"),
    ],
)
def test_value_from_is_resolved_from_the_pod_and_the_referenced_objects(value_from: Doc, want: str) -> None:
    env = mapped(workload(env=[{"name": "V", "valueFrom": value_from}])).env
    assert env["V"] == want


def test_optional_missing_keys_leave_the_variable_unset() -> None:
    ref = {"configMapKeyRef": {"name": "settings", "key": "nope", "optional": True}}
    assert "V" not in mapped(workload(env=[{"name": "V", "valueFrom": ref}])).env


def test_env_from_and_dollar_expansion() -> None:
    doc = workload(
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "S_"}],
        env=[{"name": "A", "value": "one"}, {"name": "B", "value": "$(A)-$(S_log-level)-$$(A)-$(UNSET)"}],
        args=["controller", "--metrics-bind=0.0.0.0:8080", "--webhook-bind=:9443",
              "--webhook-cert-dir=/etc/certs", "--x=$(A)"],
    )  # fmt: skip
    proc = mapped(doc)
    assert proc.env["S_log-level"] == "debug"
    assert proc.env["B"] == "one-debug-$(A)-$(UNSET)"
    assert proc.argv[-1] == "--x=one"


def test_an_explicit_command_replaces_the_entrypoint_and_a_mount_may_be_reached_through_env() -> None:
    doc = workload(
        command=["gpustack-worker", "controller"],
        args=["--metrics-bind=0.0.0.0:8080", "--webhook-bind=:9443"],
        env=[{"name": "CERTS", "value": "/etc/certs/tls.crt"}],
    )
    proc = mapped(doc)
    assert proc.argv[:3] == ("-m", "gpustack_worker", "controller")
    assert proc.env["CERTS"] == "/pods/ctl-0/volumes/certs/tls.crt"


def test_a_projected_token_volume_stands_for_the_service_account() -> None:
    doc = workload()
    ps = doc["spec"]["template"]["spec"]
    ps["automountServiceAccountToken"] = False
    ps["volumes"].append(
        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    )
    ps["containers"][0]["volumeMounts"].append({"name": "token", "mountPath": rp.SA_MOUNT})
    assert mapped(doc).env["KUBECONFIG"] == "/kc"


# --- what fails, loudly --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(lifecycle={}), "[0].lifecycle"),
        (lambda d: d["spec"]["template"]["spec"].update(hostNetwork=True), "spec.template.spec.hostNetwork"),
        (lambda d: d["spec"].update(paused=True), "spec.paused"),
        (lambda d: d["spec"]["template"]["spec"].update(initContainers=[]), "initContainers"),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"].update(
                httpGet=None, exec={"command": ["true"]}
            ),
            "livenessProbe.exec",
        ),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(workingDir="/x"), "workingDir"),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0].update(subPath="x"),
            "volumeMounts[0].subPath",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "R", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}
            ),
            "resourceFieldRef",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "R", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}
            ),
            "has no value for this Pod",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "R", "valueFrom": {"secretKeyRef": {"name": "certs", "key": "nope"}}}
            ),
            "certs/nope does not exist",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["volumes"].__setitem__(
                0, {"name": "certs", "secret": {"secretName": "gone"}}
            ),
            "Secret sys/gone does not exist",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}}),
            "volumes[scratch]",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["args"].append("--extra=0.0.0.0:7000"),
            "binds port 7000, which the container does not declare",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["args"].remove("--webhook-bind=:9443"),
            "port 9443 is declared but no argument binds it",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["args"].remove(
                "--webhook-cert-dir=/etc/certs"
            ),
            "no argument or env value names this path",
        ),
        (
            lambda d: d["spec"]["template"]["spec"].update(automountServiceAccountToken=False),
            "the process has no credentials",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0].update(command=["/bin/sh", "-c"]),
            "is not an image entrypoint",
        ),
        (lambda d: d["spec"]["selector"]["matchLabels"].update(app="other"), "does not select"),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(protocol="UDP"),
            "only TCP",
        ),
    ],
)
def test_a_field_the_mapping_does_not_understand_fails_naming_it(edit: Any, says: str) -> None:
    doc = workload()
    edit(doc)
    probe = doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    if probe.get("httpGet", True) is None:
        del probe["httpGet"]
    assert says in unmapped(doc)


def test_node_name_is_unmapped_for_a_pod_without_a_node() -> None:
    doc = workload(env=[{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])
    assert "has no value for this Pod" in unmapped(doc, pod=rp.PodContext("ctl-0", "sys", "u"))


def test_every_problem_is_reported_at_once() -> None:
    doc = workload(lifecycle={}, workingDir="/x")
    lines = unmapped(doc).splitlines()
    assert len(lines) == 2, lines


def test_placement_fields_are_allow_listed_for_the_deployment_only() -> None:
    doc = workload()
    doc["spec"]["template"]["spec"].update(nodeSelector={"a": "b"}, tolerations=[], affinity={"x": {}})
    mapped(doc)  # the controller Pods' scheduling has no process equivalent
    ds = workload("DaemonSet")
    ds["spec"]["template"]["spec"].update(affinity={"x": {}})
    assert "spec.template.spec.affinity" in unmapped(ds)


def test_allow_listed_entries_name_a_reason() -> None:
    assert all(why.strip() for why in rp.NO_PROCESS_EQUIVALENT.values())


# --- DaemonSet placement --------------------------------------------------------------------------------
def _node(name: str, labels: dict[str, str] | None = None, taints: list[Doc] | None = None) -> Doc:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


NODES = [
    _node("plain"),
    _node("gpu", {"gpu": "yes"}),
    _node("tainted", {"gpu": "yes"}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    _node("cordoned", {}, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    _node("prefer", {}, [{"key": "soft", "effect": "PreferNoSchedule"}]),
]


GPU_TAINT = "nvidia.com/gpu"
UNTAINTED = ["cordoned", "gpu", "plain", "prefer"]


@pytest.mark.parametrize(
    ("selector", "tolerations", "want"),
    [
        ({}, [], UNTAINTED),
        ({}, [{"operator": "Exists"}], [*UNTAINTED, "tainted"]),
        ({"gpu": "yes"}, [], ["gpu"]),
        (
            {"gpu": "yes"},
            [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            ["gpu", "tainted"],
        ),
        ({}, [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoExecute"}], UNTAINTED),
        ({}, [{"key": GPU_TAINT, "value": "", "operator": "Equal"}], [*UNTAINTED, "tainted"]),
    ],
)
def test_daemonset_nodes(selector: dict[str, str], tolerations: list[Doc], want: list[str]) -> None:
    ds = workload("DaemonSet")
    ds["spec"]["template"]["spec"].update(nodeSelector=selector, tolerations=tolerations)
    assert rp.daemonset_nodes(ds, NODES) == want


# --- the image -------------------------------------------------------------------------------------------
def test_the_containerfile_entrypoint_is_the_console_script_the_mapping_runs() -> None:
    final = parse_containerfile((REPO / "Containerfile").read_text())[-1]
    image = rp.image_from_stages([(i.keyword, i.args) for i in final.instructions])
    assert image.entrypoint == ("gpustack-worker",)
    assert image.env["PYTHONUNBUFFERED"] == "1"
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpustack-worker"] == "gpustack_worker.cli.main:main"
    module_main = (REPO / "gpustack_worker" / "__main__.py").read_text()
    assert "from gpustack_worker.cli.main import main" in module_main
    assert rp.ENTRYPOINTS["gpustack-worker"] == ("-m", "gpustack_worker")


def test_image_instructions() -> None:
    image = rp.image_from_stages(
        [("CMD", '["x"]'), ("ENTRYPOINT", '["a", "b"]'), ("CMD", '["c"]'), ("ENV", "K=1 L='two words'")]
    )
    assert image == rp.Image(("a", "b"), ("c",), {"K": "1", "L": "two words"})
    with pytest.raises(rp.Unmapped):
        rp.image_from_stages([("ENTRYPOINT", "gpustack-worker agent")])


def test_image_cmd_is_the_args_when_none_are_rendered() -> None:
    image = rp.Image(("gpustack-worker",), ("controller", "--metrics-bind=:8080", "--webhook-bind=:9443",
                                          "--webhook-cert-dir=/etc/certs"))  # fmt: skip
    proc = rp.local_process(
        workload(args=None), pod=POD, image=image, refs=REFS, root="/r", kubeconfig="/kc", local_ports=PORTS
    )
    assert proc.argv[2:4] == ("controller", "--metrics-bind=127.0.0.1:18080")


# --- properties ------------------------------------------------------------------------------------------
_PLAIN = st.text(st.sampled_from("abcxyz-=_/.0123456789"), min_size=1, max_size=20).filter(
    lambda a: ":" not in a and "/etc/certs" not in a and "$" not in a
)


@settings(max_examples=examples(200))
@given(st.lists(_PLAIN, max_size=6))
def test_arguments_that_neither_bind_nor_name_a_mount_pass_through_verbatim(extra: list[str]) -> None:
    doc = workload()
    rendered = list(doc["spec"]["template"]["spec"]["containers"][0]["args"])
    doc["spec"]["template"]["spec"]["containers"][0]["args"] = [*rendered, *extra]
    argv = mapped(doc).argv
    assert argv[2 + len(rendered) :] == tuple(extra)
