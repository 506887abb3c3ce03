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
