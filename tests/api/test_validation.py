"""The Kubernetes syntax rules in one place: each as apimachinery (and nfd-master) applies it."""

from __future__ import annotations

import pytest

from gpustack_worker.api import validation


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ("gpu-a100", []),
        ("a" * 63, []),
        ("a" * 64, ["must be no more than 63 characters (is 64)"]),
        ("gpu.a100", ["must not contain dots"]),
        ("GPU", ["must be lowercase letters, digits and '-', starting and ending with a letter or digit"]),
        ("-a", ["must be lowercase letters, digits and '-', starting and ending with a letter or digit"]),
        ("", ["must be lowercase letters, digits and '-', starting and ending with a letter or digit"]),
    ],
)
def test_dns1123_label(value: str, problems: list[str]) -> None:
    assert validation.dns1123_label(value) == problems
    assert validation.is_dns1123_label(value) is (not problems)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("gpu-a100", True),
        ("gpu.a100.example", True),
        (".".join(["a" * 63] * 4)[:253], True),
        ("a" * 254, False),
        ("a..b", False),
        ("a.", False),
        ("Gpu", False),
        ("gpu_a", False),
        ("gpu-a\n", False),  # re.match's "$" would let a trailing newline through
        ("", False),
    ],
)
def test_dns1123_subdomain(value: str, valid: bool) -> None:
    assert validation.is_dns1123_subdomain(value) is valid


@pytest.mark.parametrize(
    ("key", "problems"),
    [
        ("kubernetes.io/hostname", []),
        ("MyName", []),
        ("my.name_x-1", []),
        ("example.com/" + "n" * 63, []),
        ("example.com/" + "n" * 64, ["name part must be no more than 63 characters (is 64)"]),
        ("/name", ["prefix part must not be empty"]),
        ("example.com/", ["name part must not be empty"]),
        (
            "a/b/c",
            ["must be a name with an optional DNS-subdomain prefix and one '/' (e.g. example.com/MyName)"],
        ),
        (
            "Example.com/x",
            [
                "prefix part must be lowercase letters, digits, '-' and '.', each dot-separated "
                "part starting and ending with a letter or digit"
            ],
        ),
        (
            "example.com/-x",
            [
                "name part must be letters, digits, '-', '_' and '.', starting and ending with a "
                "letter or digit"
            ],
        ),
        ("x" * 254 + "/y", ["prefix part must be no more than 253 characters (is 254)"]),
    ],
)
def test_qualified_name(key: str, problems: list[str]) -> None:
    assert validation.qualified_name(key) == problems
    assert validation.is_qualified_name(key) is (not problems)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("NVIDIA-A10G", True),
        ("v" * 63, True),
        ("v" * 64, False),
        ("a b", False),
        ("é", False),
        ("-x", False),
        ("x.", False),
        ("x\n", False),
    ],
)
def test_label_value(value: str, valid: bool) -> None:
    assert validation.is_label_value(value) is valid


def test_annotations_count_bytes_and_check_keys_ignoring_case() -> None:
    assert validation.object_annotations({"Example.com/Note": "x"}) == []
    assert validation.object_annotations({"a/b/c": "x"}) == [
        "key 'a/b/c': must be a name with an optional DNS-subdomain prefix and one '/' "
        "(e.g. example.com/MyName)"
    ]
    limit = validation.ANNOTATIONS_MAX_BYTES
    assert validation.object_annotations({"k": "v" * (limit - 1)}) == []
    # "é" is two bytes of UTF-8: one character too many in bytes although not in characters
    assert validation.object_annotations({"k": "é" * ((limit - 1) // 2 + 1)}) == [
        f"keys and values together must be no more than {limit} bytes (are {limit + 1})"
    ]


@pytest.mark.parametrize(
    ("key", "value", "problems"),
    [
        ("acceleratable.feature.gpustack.ai/nvidia-a100", "true", []),
        ("feature.node.kubernetes.io/pci-10de.present", "true", []),
        ("sub.feature.node.kubernetes.io/x", "true", []),
        ("profile.node.kubernetes.io/x", "true", []),
        ("kubernetes.io/hostname", "n", ["key: namespace kubernetes.io is not allowed by nfd-master"]),
        ("node.kubernetes.io/x", "n", ["key: namespace node.kubernetes.io is not allowed by nfd-master"]),
        ("plain", "v", ["key: must have a namespace prefix (nfd-master refuses unprefixed keys)"]),
        (
            "acceleratable.feature.gpustack.ai/" + "k" * 64,
            "v",
            ["key: name part must be no more than 63 characters (is 64)"],
        ),
        (
            "acceleratable.feature.gpustack.ai/k",
            "v" * 64,
            ["value: must be no more than 63 characters (is 64)"],
        ),
    ],
)
def test_nfd_feature_label(key: str, value: str, problems: list[str]) -> None:
    assert validation.nfd_feature_label(key, value) == problems


# --- whole objects (plan's check, issue 16 defect 4) -----------------------------------------------
LONG_KEY = (
    "acceleratable.feature.gpustack.ai/nvidia-rtx-pro-6000-blackwell-max-q-workstation-edition.capacity"
)


def _flavor(**spec: object) -> dict[str, object]:
    return {
        "kind": "ResourceFlavor",
        "metadata": {"name": "gpustack--x-linux-amd64-1d", "labels": {"resource.gpustack.ai/type": "nodes"}},
        "spec": {"nodeLabels": {"gpustack.ai/managed": "true"}, "topologyName": "gpustack-t", **spec},
    }


def test_a_valid_flavor_has_no_problem() -> None:
    assert validation.object_problems(_flavor()) == []


@pytest.mark.parametrize(
    ("body", "path", "rule"),
    [
        (
            {**_flavor(), "metadata": {"name": "f", "labels": {LONG_KEY: "2"}}},
            f"metadata.labels[{LONG_KEY}]",
            "key name part must be no more than 63 characters (is 64)",
        ),
        (
            {**_flavor(), "metadata": {"name": "F_1"}},
            "metadata.name",
            "must be lowercase letters, digits, '-' and '.'",
        ),
        (_flavor(nodeLabels={f"k{i}": "v" for i in range(9)}), "spec.nodeLabels", "at most 8 entries"),
        (_flavor(nodeLabels={}), "spec.nodeLabels", "at least one nodeLabel is required"),
        (_flavor(nodeLabels={"a": "b c"}), "spec.nodeLabels[a]", "value must be letters"),
        (_flavor(tolerations=[{"operator": "Exists"}] * 9), "spec.tolerations", "at most 8 items"),
        (
            {
                "kind": "ClusterQueue",
                "metadata": {"name": "q"},
                "spec": {
                    "resourceGroups": [
                        {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": []}]}
                    ]
                },
            },
            "spec.resourceGroups[0].flavors[0].resources",
            "same number of resources as the coveredResources",
        ),
        (
            {
                "kind": "ClusterQueue",
                "metadata": {"name": "q"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1x"}]}
                            ],
                        }
                    ]
                },
            },
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "is not a quantity",
        ),
        (
            {"kind": "ClusterQueue", "metadata": {"name": "q"}, "spec": {"resourceGroups": [{}] * 17}},
            "spec.resourceGroups",
            "at most 16 items",
        ),
        (
            {"kind": "Topology", "metadata": {"name": "t"}, "spec": {"levels": []}},
            "spec.levels",
            "must have 1 to 16 items",
        ),
        (
            {"kind": "InstanceType", "metadata": {"name": "t"}, "spec": {"displayName": "x" * 65}},
            "spec.displayName",
            "at most 64 characters",
        ),
        (
            {"kind": "LocalQueue", "metadata": {"name": "l"}, "spec": {"clusterQueue": "Q"}},
            "spec.clusterQueue",
            "must be lowercase",
        ),
    ],
    ids=[
        "long-label-key",
        "bad-name",
        "nine-node-labels",
        "topology-without-node-labels",
        "bad-node-label-value",
        "nine-tolerations",
        "resources-vs-covered",
        "bad-quantity",
        "seventeen-groups",
        "no-levels",
        "long-display-name",
        "bad-cluster-queue-ref",
    ],
)
def test_object_problems_name_the_field_and_the_rule(body: dict[str, object], path: str, rule: str) -> None:
    problems = validation.object_problems(body)
    assert any(p == path and rule in r for p, r in problems), problems


@pytest.mark.parametrize(
    ("text", "valid"),
    [("1", True), ("6400k", True), ("1.5Gi", True), ("1e3", True), ("-2", True), ("1x", False), ("", False)],
)
def test_quantity(text: str, valid: bool) -> None:
    assert (validation.quantity(text) == []) == valid
