"""Every TopologySource rule of reference §2.1 / §6.4 / §6.5, one rejection per row with the field path
in the message; the reference's examples accepted; malformed shapes give errors, never exceptions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.api.crds.topology_source import FORBIDDEN_WRITE_PREFIXES, TopologySourceSpec
from gpustack_worker.topology.spec_check import (
    FieldError,
    format_errors,
    parse_duration,
    parse_duration_ns,
    spec_errors,
)

NS = "gpustack-system"


def ref(name: str, namespace: str = NS) -> dict[str, str]:
    return {"namespace": namespace, "name": name}


# The reference's examples.
NODE_LABELS = {  # §6.3
    "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
    "levels": ["topology.kubernetes.io/region", "topology.kubernetes.io/zone"],
    "nodeLabels": {},
}
CONFIG_MAP = {  # §6.4
    "nodeSelector": {},
    "levels": ["topology.gpustack.ai/region", "topology.gpustack.ai/zone", "topology.gpustack.ai/rack"],
    "configMap": {"configMapRef": ref("topology-inventory"), "key": "snapshot.yaml", "maxStaleness": "10m"},
}
WEBHOOK = {  # §6.5
    "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
    "levels": ["topology.gpustack.ai/zone", "topology.gpustack.ai/rack"],
    "webhook": {
        "url": "https://topology-inventory.gpustack-system.svc/snapshot",
        "pollInterval": "1m",
        "timeout": "10s",
        "maxStaleness": "5m",
        "caBundleConfigMapRef": ref("topology-inventory-ca"),
        "bearerTokenSecretRef": ref("topology-inventory-token"),
    },
}
TOPOGRAPH = {  # §6.2
    "nodeSelector": {},
    "levels": [
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "fabric.topograph.run/tier-2",
        "fabric.topograph.run/tier-1",
    ],
    "nodeLabels": {},
}


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``base`` with the dotted ``path`` set (``...`` deletes it)."""
    spec = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = spec
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return spec


@pytest.mark.parametrize(
    "spec",
    [
        NODE_LABELS,
        CONFIG_MAP,
        WEBHOOK,
        TOPOGRAPH,
        with_(CONFIG_MAP, "additionalWritePrefix", "topology.example.com/"),
        with_(WEBHOOK, "webhook.timeout", "1m"),  # timeout == pollInterval
        with_(
            with_(WEBHOOK, "webhook.bearerTokenSecretRef", ...),
            "webhook.tlsClientCertificateSecretRef",
            ref("mtls"),
        ),
        with_(WEBHOOK, "webhook.caBundleConfigMapRef", ...),
        with_(WEBHOOK, "webhook.url", "https://10.0.0.7:8443/v1/snapshot?cluster=a&x=1"),
        with_(WEBHOOK, "webhook.url", "https://[fd00::1]/snapshot"),
        with_(WEBHOOK, "webhook.url", "https://inventory.example.com"),
        with_(NODE_LABELS, "levels", [f"example.com/l{i}" for i in range(15)]),  # 15 + hostname = Kueue's 16
        with_(NODE_LABELS, "levels", ["rack"]),  # an unprefixed key is a qualified name too
        with_(CONFIG_MAP, "configMap.maxStaleness", "1h30m"),
        with_(CONFIG_MAP, "configMap.maxStaleness", "500ms"),
        with_(CONFIG_MAP, "configMap.key", "inventory_v2.JSON"),
        with_(CONFIG_MAP, "additionalWritePrefix", "kubernetes.io.example.com/"),  # not a subdomain of it
        with_(CONFIG_MAP, "additionalWritePrefix", "mytopology.gpustack.ai.example/"),
        with_(
            NODE_LABELS,
            "nodeSelector",
            {
                "matchLabels": {"a": "b"},
                "matchExpressions": [
                    {"key": "x", "operator": "In", "values": ["1", "2"]},
                    {"key": "example.com/y", "operator": "NotIn", "values": [""]},
                    {"key": "z", "operator": "DoesNotExist", "values": []},
                ],
            },
        ),
    ],
    ids=lambda s: next(k for k in ("nodeLabels", "configMap", "webhook") if k in s),
)
def test_valid_specs_pass(spec: dict[str, Any]) -> None:
    assert spec_errors(spec, namespace=NS) == []
    TopologySourceSpec.model_validate(spec)  # and the model (what the CRD schema says) agrees


# (id, spec, expected path, fragment of the message)
REJECTED: list[tuple[str, Any, str, str]] = [
    # nodeSelector
    ("selector-missing", with_(NODE_LABELS, "nodeSelector", ...), "spec.nodeSelector", "required"),
    ("selector-null", with_(NODE_LABELS, "nodeSelector", None), "spec.nodeSelector", "required"),
    (
        "selector-string",
        with_(NODE_LABELS, "nodeSelector", "gpu=true"),
        "spec.nodeSelector",
        "label selector object",
    ),
    (
        "selector-bad-key",
        with_(NODE_LABELS, "nodeSelector", {"matchLabels": {"bad key": "x"}}),
        "spec.nodeSelector.matchLabels[bad key]",
        "not a valid label key",
    ),
    (
        "selector-bad-value",
        with_(NODE_LABELS, "nodeSelector", {"matchLabels": {"k": "-x"}}),
        "spec.nodeSelector.matchLabels[k]",
        "not a valid label value",
    ),
    (
        "selector-value-not-string",
        with_(NODE_LABELS, "nodeSelector", {"matchLabels": {"k": 1}}),
        "spec.nodeSelector.matchLabels[k]",
        "must be a string",
    ),
    (
        "selector-bad-operator",
        with_(
            NODE_LABELS,
            "nodeSelector",
            {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]},
        ),
        "spec.nodeSelector.matchExpressions[0].operator",
        "'Gt' is not a valid operator",
    ),
    (
        "selector-in-without-values",
        with_(NODE_LABELS, "nodeSelector", {"matchExpressions": [{"key": "k", "operator": "In"}]}),
        "spec.nodeSelector.matchExpressions[0].values",
        "at least one value",
    ),
    (
        "selector-exists-with-values",
        with_(
            NODE_LABELS,
            "nodeSelector",
            {"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["a"]}]},
        ),
        "spec.nodeSelector.matchExpressions[0].values",
        "must be empty",
    ),
    (
        "selector-expression-key-missing",
        with_(NODE_LABELS, "nodeSelector", {"matchExpressions": [{"operator": "Exists"}]}),
        "spec.nodeSelector.matchExpressions[0].key",
        "required",
    ),
    (
        "selector-expression-bad-value",
        with_(
            NODE_LABELS,
            "nodeSelector",
            {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a b"]}]},
        ),
        "spec.nodeSelector.matchExpressions[0].values[0]",
        "not a valid label value",
    ),
    (
        "selector-unknown-field",
        with_(NODE_LABELS, "nodeSelector", {"matchLabel": {"a": "b"}}),
        "spec.nodeSelector",
        "unknown field(s): matchLabel",
    ),
    # levels
    ("levels-missing", with_(NODE_LABELS, "levels", ...), "spec.levels", "required"),
    ("levels-empty", with_(NODE_LABELS, "levels", []), "spec.levels", "at least one level"),
    (
        "levels-16",
        with_(NODE_LABELS, "levels", [f"example.com/l{i}" for i in range(16)]),
        "spec.levels",
        "at most 15 levels (lists 16): kubernetes.io/hostname is always appended",
    ),
    (
        "levels-string",
        with_(NODE_LABELS, "levels", "topology.kubernetes.io/zone"),
        "spec.levels",
        "must be a list",
    ),
    ("levels-item-int", with_(NODE_LABELS, "levels.1", 7), "spec.levels[1]", "must be a label key string"),
    (
        "levels-bad-key",
        with_(NODE_LABELS, "levels.1", "Zone Name"),
        "spec.levels[1]",
        "not a valid label key",
    ),
    (
        "levels-bad-prefix",
        with_(NODE_LABELS, "levels.0", "Example.com/zone"),
        "spec.levels[0]",
        "prefix part",
    ),
    ("levels-two-slashes", with_(NODE_LABELS, "levels.0", "a/b/c"), "spec.levels[0]", "one '/'"),
    (
        "levels-long-name",
        with_(NODE_LABELS, "levels.0", "example.com/" + "n" * 64),
        "spec.levels[0]",
        "no more than 63",
    ),
    (
        "levels-long-prefix",
        with_(NODE_LABELS, "levels.0", "a" * 254 + "/zone"),
        "spec.levels[0]",
        "no more than 253",
    ),
    (
        "levels-duplicate",
        with_(NODE_LABELS, "levels", ["a.io/x", "a.io/y", "a.io/x"]),
        "spec.levels[2]",
        "a.io/x repeats spec.levels[0]",
    ),
    (
        "levels-hostname",
        with_(NODE_LABELS, "levels", ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]),
        "spec.levels[1]",
        "kubernetes.io/hostname is always appended implicitly",
    ),
    # additionalWritePrefix
    (
        "prefix-with-node-labels",
        with_(NODE_LABELS, "additionalWritePrefix", "topology.example.com/"),
        "spec.additionalWritePrefix",
        "forbidden with nodeLabels",
    ),
    (
        "prefix-no-slash",
        with_(CONFIG_MAP, "additionalWritePrefix", "topology.example.com"),
        "spec.additionalWritePrefix",
        "single '/'",
    ),
    (
        "prefix-two-slashes",
        with_(CONFIG_MAP, "additionalWritePrefix", "topology.example.com//"),
        "spec.additionalWritePrefix",
        "single '/'",
    ),
    (
        "prefix-with-name",
        with_(CONFIG_MAP, "additionalWritePrefix", "topology.example.com/rack"),
        "spec.additionalWritePrefix",
        "single '/'",
    ),
    (
        "prefix-empty",
        with_(CONFIG_MAP, "additionalWritePrefix", ""),
        "spec.additionalWritePrefix",
        "single '/'",
    ),
    (
        "prefix-only-slash",
        with_(CONFIG_MAP, "additionalWritePrefix", "/"),
        "spec.additionalWritePrefix",
        "domain",
    ),
    (
        "prefix-uppercase",
        with_(CONFIG_MAP, "additionalWritePrefix", "Topology.example.com/"),
        "spec.additionalWritePrefix",
        "domain must be lowercase",
    ),
    (
        "prefix-int",
        with_(CONFIG_MAP, "additionalWritePrefix", 5),
        "spec.additionalWritePrefix",
        "must be a string",
    ),
    *[
        (
            f"prefix-forbidden-{domain}",
            with_(CONFIG_MAP, "additionalWritePrefix", f"{domain}/"),
            "spec.additionalWritePrefix",
            f"{domain} and its subdomains are forbidden",
        )
        for domain in FORBIDDEN_WRITE_PREFIXES
    ],
    *[
        (
            f"prefix-forbidden-sub-{domain}",
            with_(CONFIG_MAP, "additionalWritePrefix", f"a.b.{domain}/"),
            "spec.additionalWritePrefix",
            f"{domain} and its subdomains are forbidden",
        )
        for domain in FORBIDDEN_WRITE_PREFIXES
    ],
    # arms
    (
        "no-arm",
        with_(NODE_LABELS, "nodeLabels", ...),
        "spec",
        "exactly one of nodeLabels, configMap and webhook",
    ),
    ("no-arm-null", with_(NODE_LABELS, "nodeLabels", None), "spec", "none is set"),
    (
        "two-arms",
        {**NODE_LABELS, "configMap": CONFIG_MAP["configMap"]},
        "spec",
        "found nodeLabels, configMap",
    ),
    (
        "three-arms",
        {**CONFIG_MAP, "nodeLabels": {}, "webhook": WEBHOOK["webhook"]},
        "spec",
        "found nodeLabels, configMap, webhook",
    ),
    (
        "node-labels-not-empty",
        with_(NODE_LABELS, "nodeLabels", {"read": True}),
        "spec.nodeLabels",
        "must be empty",
    ),
    ("node-labels-list", with_(NODE_LABELS, "nodeLabels", []), "spec.nodeLabels", "must be an object"),
    # configMap
    (
        "cm-string",
        with_(CONFIG_MAP, "configMap", "topology-inventory"),
        "spec.configMap",
        "must be an object",
    ),
    (
        "cm-ref-missing",
        with_(CONFIG_MAP, "configMap.configMapRef", ...),
        "spec.configMap.configMapRef",
        "required",
    ),
    (
        "cm-ref-string",
        with_(CONFIG_MAP, "configMap.configMapRef", "x"),
        "spec.configMap.configMapRef",
        "must be an object",
    ),
    (
        "cm-ref-other-namespace",
        with_(CONFIG_MAP, "configMap.configMapRef.namespace", "default"),
        "spec.configMap.configMapRef.namespace",
        "must be the worker namespace gpustack-system (is default)",
    ),
    (
        "cm-ref-namespace-missing",
        with_(CONFIG_MAP, "configMap.configMapRef.namespace", ...),
        "spec.configMap.configMapRef.namespace",
        "required",
    ),
    (
        "cm-ref-bad-name",
        with_(CONFIG_MAP, "configMap.configMapRef.name", "Topology_Inventory"),
        "spec.configMap.configMapRef.name",
        "DNS-1123 subdomain",
    ),
    (
        "cm-ref-name-missing",
        with_(CONFIG_MAP, "configMap.configMapRef.name", ""),
        "spec.configMap.configMapRef.name",
        "required",
    ),
    ("cm-key-missing", with_(CONFIG_MAP, "configMap.key", ...), "spec.configMap.key", "required"),
    ("cm-key-blank", with_(CONFIG_MAP, "configMap.key", "   "), "spec.configMap.key", "non-blank"),
    (
        "cm-key-slash",
        with_(CONFIG_MAP, "configMap.key", "a/b"),
        "spec.configMap.key",
        "not a valid ConfigMap key",
    ),
    ("cm-key-dotdot", with_(CONFIG_MAP, "configMap.key", "..data"), "spec.configMap.key", "start with '..'"),
    ("cm-key-long", with_(CONFIG_MAP, "configMap.key", "k" * 254), "spec.configMap.key", "no more than 253"),
    (
        "cm-staleness-missing",
        with_(CONFIG_MAP, "configMap.maxStaleness", ...),
        "spec.configMap.maxStaleness",
        "required",
    ),
    (
        "cm-staleness-zero",
        with_(CONFIG_MAP, "configMap.maxStaleness", "0s"),
        "spec.configMap.maxStaleness",
        "greater than zero",
    ),
    (
        "cm-staleness-bare-zero",
        with_(CONFIG_MAP, "configMap.maxStaleness", "0"),
        "spec.configMap.maxStaleness",
        "greater than zero",
    ),
    (
        "cm-staleness-negative",
        with_(CONFIG_MAP, "configMap.maxStaleness", "-5m"),
        "spec.configMap.maxStaleness",
        "greater than zero",
    ),
    (
        "cm-staleness-no-unit",
        with_(CONFIG_MAP, "configMap.maxStaleness", "600"),
        "spec.configMap.maxStaleness",
        "missing unit",
    ),
    (
        "cm-staleness-unit",
        with_(CONFIG_MAP, "configMap.maxStaleness", "10min"),
        "spec.configMap.maxStaleness",
        'unknown unit "min"',
    ),
    (
        "cm-staleness-days",
        with_(CONFIG_MAP, "configMap.maxStaleness", "1d"),
        "spec.configMap.maxStaleness",
        'unknown unit "d"',
    ),
    (
        "cm-staleness-int",
        with_(CONFIG_MAP, "configMap.maxStaleness", 600),
        "spec.configMap.maxStaleness",
        "duration string",
    ),
    # webhook
    ("wh-list", with_(WEBHOOK, "webhook", []), "spec.webhook", "must be an object"),
    ("wh-url-missing", with_(WEBHOOK, "webhook.url", ...), "spec.webhook.url", "required"),
    (
        "wh-url-http",
        with_(WEBHOOK, "webhook.url", "http://inventory/snapshot"),
        "spec.webhook.url",
        "absolute https:// URL",
    ),
    (
        "wh-url-relative",
        with_(WEBHOOK, "webhook.url", "/snapshot"),
        "spec.webhook.url",
        "absolute https:// URL",
    ),
    (
        "wh-url-scheme-only",
        with_(WEBHOOK, "webhook.url", "https:inventory"),
        "spec.webhook.url",
        "absolute https:// URL",
    ),
    (
        "wh-url-no-host",
        with_(WEBHOOK, "webhook.url", "https:///snapshot"),
        "spec.webhook.url",
        "must name a host",
    ),
    (
        "wh-url-port-only",
        with_(WEBHOOK, "webhook.url", "https://:443/snapshot"),
        "spec.webhook.url",
        "must name a host",
    ),
    (
        "wh-url-userinfo",
        with_(WEBHOOK, "webhook.url", "https://user:pw@inventory/x"),
        "spec.webhook.url",
        "userinfo",
    ),
    (
        "wh-url-user",
        with_(WEBHOOK, "webhook.url", "https://token@inventory/x"),
        "spec.webhook.url",
        "userinfo",
    ),
    (
        "wh-url-fragment",
        with_(WEBHOOK, "webhook.url", "https://inventory/x#part"),
        "spec.webhook.url",
        "fragment",
    ),
    (
        "wh-url-empty-fragment",
        with_(WEBHOOK, "webhook.url", "https://inventory/x#"),
        "spec.webhook.url",
        "fragment",
    ),
    (
        "wh-url-space",
        with_(WEBHOOK, "webhook.url", "https://inventory/a b"),
        "spec.webhook.url",
        "whitespace",
    ),
    (
        "wh-url-bad-port",
        with_(WEBHOOK, "webhook.url", "https://inventory:99999/x"),
        "spec.webhook.url",
        "not a valid URL",
    ),
    ("wh-url-port-zero", with_(WEBHOOK, "webhook.url", "https://inventory:0/x"), "spec.webhook.url", "port"),
    (
        "wh-url-long",
        with_(WEBHOOK, "webhook.url", "https://i/" + "x" * 2048),
        "spec.webhook.url",
        "no more than 2048",
    ),
    ("wh-url-int", with_(WEBHOOK, "webhook.url", 443), "spec.webhook.url", "must be a string"),
    ("wh-poll-missing", with_(WEBHOOK, "webhook.pollInterval", ...), "spec.webhook.pollInterval", "required"),
    (
        "wh-poll-zero",
        with_(WEBHOOK, "webhook.pollInterval", "0s"),
        "spec.webhook.pollInterval",
        "greater than zero",
    ),
    ("wh-timeout-missing", with_(WEBHOOK, "webhook.timeout", ...), "spec.webhook.timeout", "required"),
    (
        "wh-timeout-zero",
        with_(WEBHOOK, "webhook.timeout", "0ms"),
        "spec.webhook.timeout",
        "greater than zero",
    ),
    (
        "wh-timeout-garbage",
        with_(WEBHOOK, "webhook.timeout", "soon"),
        "spec.webhook.timeout",
        "invalid duration",
    ),
    (
        "wh-timeout-over-poll",
        with_(WEBHOOK, "webhook.timeout", "1m0.001s"),
        "spec.webhook.timeout",
        "must not exceed spec.webhook.pollInterval (1m0.001s > 1m)",
    ),
    (
        "wh-staleness-missing",
        with_(WEBHOOK, "webhook.maxStaleness", ...),
        "spec.webhook.maxStaleness",
        "required",
    ),
    (
        "wh-staleness-zero",
        with_(WEBHOOK, "webhook.maxStaleness", "0h"),
        "spec.webhook.maxStaleness",
        "greater than zero",
    ),
    (
        "wh-no-credential",
        with_(WEBHOOK, "webhook.bearerTokenSecretRef", ...),
        "spec.webhook",
        "exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef must be set (none is set)",
    ),
    (
        "wh-both-credentials",
        with_(WEBHOOK, "webhook.tlsClientCertificateSecretRef", ref("mtls")),
        "spec.webhook",
        "(both are set)",
    ),
    (
        "wh-token-other-namespace",
        with_(WEBHOOK, "webhook.bearerTokenSecretRef.namespace", "default"),
        "spec.webhook.bearerTokenSecretRef.namespace",
        "must be the worker namespace gpustack-system (is default)",
    ),
    (
        "wh-cert-other-namespace",
        with_(
            with_(WEBHOOK, "webhook.bearerTokenSecretRef", ...),
            "webhook.tlsClientCertificateSecretRef",
            ref("mtls", "kube-system"),
        ),
        "spec.webhook.tlsClientCertificateSecretRef.namespace",
        "(is kube-system)",
    ),
    (
        "wh-ca-other-namespace",
        with_(WEBHOOK, "webhook.caBundleConfigMapRef.namespace", "default"),
        "spec.webhook.caBundleConfigMapRef.namespace",
        "must be the worker namespace",
    ),
    (
        "wh-ca-bad-name",
        with_(WEBHOOK, "webhook.caBundleConfigMapRef.name", "-ca"),
        "spec.webhook.caBundleConfigMapRef.name",
        "DNS-1123 subdomain",
    ),
    (
        "wh-token-ref-string",
        with_(WEBHOOK, "webhook.bearerTokenSecretRef", "token"),
        "spec.webhook.bearerTokenSecretRef",
        "must be an object",
    ),
    # the spec itself
    ("spec-null", None, "spec", "required"),
    ("spec-list", [], "spec", "required"),
]


@pytest.mark.parametrize(
    ("spec", "path", "fragment"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_each_rule_is_rejected_naming_the_field(spec: Any, path: str, fragment: str) -> None:
    errors = spec_errors(spec, namespace=NS)
    assert errors, "accepted"
    assert [e.path for e in errors] == [path], format_errors(errors)
    (error,) = errors
    assert fragment in error.message
    assert str(error) == f"{path}: {error.message}"


def test_ids_are_unique() -> None:
    ids = [r[0] for r in REJECTED]
    assert len(ids) == len(set(ids))


def test_every_problem_of_a_spec_is_listed_in_field_order() -> None:
    spec = {
        "nodeSelector": {"matchLabels": {"bad key": "x"}},
        "levels": ["a.io/x", "kubernetes.io/hostname", "a.io/x"],
        "additionalWritePrefix": "k8s.io/",
        "configMap": {"configMapRef": ref("inv", "default"), "key": "", "maxStaleness": "0s"},
        "webhook": {"url": "http://x", "pollInterval": "5s", "timeout": "10s", "maxStaleness": "1m"},
    }
    paths = [e.path for e in spec_errors(spec, namespace=NS)]
    assert paths == [
        "spec.nodeSelector.matchLabels[bad key]",
        "spec.levels[1]",
        "spec.levels[2]",
        "spec.additionalWritePrefix",
        "spec",
        "spec.configMap.configMapRef.namespace",
        "spec.configMap.key",
        "spec.configMap.maxStaleness",
        "spec.webhook.url",
        "spec.webhook.timeout",
        "spec.webhook",
    ]


def test_field_error_string() -> None:
    error = FieldError("spec.webhook.timeout", "must not exceed spec.webhook.pollInterval (10s > 5s)")
    assert str(error) == "spec.webhook.timeout: must not exceed spec.webhook.pollInterval (10s > 5s)"
    assert format_errors([error, FieldError("spec", "x")]) == f"{error}; spec: x"


def test_the_namespace_is_the_callers() -> None:
    assert spec_errors(CONFIG_MAP, namespace="gpustack-system") == []
    (error,) = spec_errors(CONFIG_MAP, namespace="worker-ns")
    assert error.path == "spec.configMap.configMapRef.namespace"
    assert "worker-ns" in error.message


MALFORMED: list[Any] = [
    {},
    {"nodeSelector": [], "levels": {}, "nodeLabels": "yes"},
    {"nodeSelector": {"matchLabels": [], "matchExpressions": {}}, "levels": [None, [], {}], "webhook": {}},
    {
        "nodeSelector": {"matchExpressions": [None, "x", {"key": 1, "operator": 2, "values": "v"}]},
        "levels": [1],
    },
    {
        "nodeSelector": {"matchLabels": {1: 2}},
        "levels": ["a"],
        "configMap": {"configMapRef": {"namespace": 1, "name": 2}},
    },
    {"nodeSelector": {}, "levels": ["a"], "configMap": {"configMapRef": [], "key": 3, "maxStaleness": []}},
    {
        "nodeSelector": {},
        "levels": ["a"],
        "webhook": {
            "url": ["https://x"],
            "pollInterval": None,
            "timeout": {},
            "maxStaleness": "1h",
            "caBundleConfigMapRef": 1,
            "bearerTokenSecretRef": [],
            "tlsClientCertificateSecretRef": {"namespace": None},
        },
    },
    {"nodeSelector": {}, "levels": "abc", "additionalWritePrefix": ["x/"], "webhook": "https://x"},
    "spec",
    42,
    {"levels": ["a"] * 1000, "nodeSelector": {"matchExpressions": [{}] * 3}},
]


@pytest.mark.parametrize("spec", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_shapes_give_errors_not_exceptions(spec: Any) -> None:
    errors = spec_errors(spec, namespace=NS)
    assert errors
    assert all(isinstance(e, FieldError) and e.path.startswith("spec") and e.message for e in errors)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("0s", 0),
        ("-0", 0),
        ("10m", 600 * 10**9),
        ("1h30m", 5400 * 10**9),
        ("1h30m15s", 5415 * 10**9),
        ("500ms", 500 * 10**6),
        ("1.5h", 5400 * 10**9),
        (".5s", 500 * 10**6),
        ("5.s", 5 * 10**9),
        ("1.000000001s", 1_000_000_001),
        ("1us", 1000),
        ("1µs", 1000),
        ("1μs", 1000),
        ("3ns", 3),
        ("+3s", 3 * 10**9),
        ("-1m", -60 * 10**9),
        ("1m1m", 120 * 10**9),  # Go sums repeated units
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("-2562047h47m16.854775808s", -(2**63)),
    ],
)
def test_parse_duration_accepts_go_syntax(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns
    assert parse_duration(text) == pytest.approx(ns / 1e9)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid duration"),
        ("-", "invalid duration"),
        ("+", "invalid duration"),
        ("s", "invalid duration"),
        (".s", "invalid duration"),
        ("1", "missing unit"),
        ("1.5", "missing unit"),
        ("10min", 'unknown unit "min"'),
        ("1 s", 'unknown unit " s"'),
        (" 1s", "invalid duration"),
        ("1s ", 'unknown unit "s "'),
        ("1H", 'unknown unit "H"'),
        ("1h-30m", 'unknown unit "h-"'),
        ("2562047h47m16.854775808s", "out of range"),
        ("9223372036854775808ns", "out of range"),
        ("99999999999999999999h", "out of range"),
    ],
)
def test_parse_duration_refuses_what_go_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration_ns(text)
