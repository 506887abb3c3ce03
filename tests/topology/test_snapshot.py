"""Snapshot decoding and validation (reference §2.1.1, §2.1.3, §6.4, Appendix A.8)."""

from __future__ import annotations

import json

import pytest

from gpustack_worker.api import keys
from gpustack_worker.topology.snapshot import (
    MAX_SNAPSHOT_BYTES,
    Snapshot,
    SnapshotError,
    decode,
    is_writable,
    validate,
)

API = keys.SNAPSHOT_API_VERSION
R, Z, K = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
SR, SZ = keys.STANDARD_REGION, keys.STANDARD_ZONE
EXTRA = "topology.example.com/"
PRIVATE = (R, Z, K)

VALID_YAML = f"""\
apiVersion: {API}
revision: inventory-42
nodes:
  worker-a:
    {R}: region-a
    {Z}: zone-a
    {K}: rack-01
  worker-b:
    {R}: region-a
    {Z}: zone-a
    {K}: rack-02
"""
VALID_NODES = {
    "worker-a": {R: "region-a", Z: "zone-a", K: "rack-01"},
    "worker-b": {R: "region-a", Z: "zone-a", K: "rack-02"},
}


def doc(nodes: str = "nodes: {}", head: str = f"apiVersion: {API}\nrevision: r1\n") -> str:
    return head + nodes + "\n"


# --- decode: accepted --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(VALID_YAML, id="yaml-str"),
        pytest.param(VALID_YAML.encode(), id="yaml-bytes"),
        pytest.param(
            json.dumps({"apiVersion": API, "revision": "inventory-42", "nodes": VALID_NODES}), id="json"
        ),
        pytest.param(
            json.dumps({"apiVersion": API, "revision": "inventory-42", "nodes": VALID_NODES}, indent="\t"),
            id="json-tab-indented",
        ),
        pytest.param("---\n" + VALID_YAML + "...\n", id="explicit-document-markers"),
        pytest.param("# inventory\n" + VALID_YAML + "# end\n", id="comments"),
        pytest.param("\ufeff" + VALID_YAML, id="utf8-bom"),
    ],
)
def test_decode_valid(raw: str | bytes) -> None:
    snap = decode(raw)
    assert snap == Snapshot(revision="inventory-42", nodes=VALID_NODES)


@pytest.mark.parametrize(
    ("raw", "nodes"),
    [
        pytest.param(doc("nodes: {}"), {}, id="empty-nodes"),
        pytest.param(doc("nodes:\n  a: {}"), {"a": {}}, id="node-without-levels"),
        pytest.param(doc(f'nodes:\n  a: {{{K}: "01"}}'), {"a": {K: "01"}}, id="quoted-number"),
        pytest.param(doc(f"nodes:\n  a: {{{K}: ''}}"), {"a": {K: ""}}, id="empty-string-left-to-validate"),
    ],
)
def test_decode_nodes(raw: str, nodes: dict[str, dict[str, str]]) -> None:
    assert decode(raw).nodes == nodes


def test_decode_keeps_revision_opaque() -> None:
    assert decode(doc(head=f"apiVersion: {API}\nrevision: ' 2024-01-01 build #7 '\n")).revision == (
        " 2024-01-01 build #7 "
    )


def test_decode_accepts_exactly_the_size_cap() -> None:
    raw = doc().encode()
    padded = raw + b"#" * (MAX_SNAPSHOT_BYTES - len(raw))
    assert len(padded) == MAX_SNAPSHOT_BYTES
    assert decode(padded).revision == "r1"


# --- decode: rejected --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        pytest.param(b"", ["empty"], id="empty-input"),
        pytest.param("# only a comment\n", ["empty"], id="only-comment"),
        pytest.param(b"\xff\xfe" + doc().encode(), ["not UTF-8", "offset 0"], id="non-utf8"),
        pytest.param(doc().encode("utf-16"), ["not UTF-8"], id="utf16"),
        pytest.param(
            b"a" * (MAX_SNAPSHOT_BYTES + 1),
            [str(MAX_SNAPSHOT_BYTES + 1), str(MAX_SNAPSHOT_BYTES)],
            id="oversize",
        ),
        pytest.param("é" * (MAX_SNAPSHOT_BYTES // 2 + 1), ["bytes", "more than"], id="oversize-str-in-bytes"),
        pytest.param(doc() + "---\n" + doc(), ["exactly one YAML document", "line 4"], id="multi-document"),
        pytest.param("---\n---\n", ["exactly one YAML document"], id="two-empty-documents"),
        pytest.param("- a\n- b\n", ["must be a mapping", "a list"], id="top-level-list"),
        pytest.param("just text\n", ["must be a mapping"], id="top-level-scalar"),
        pytest.param("---\n", ["must be a mapping", "null"], id="top-level-null"),
        pytest.param(doc() + "kind: Snapshot\n", ["unknown field(s) kind"], id="unknown-top-level-field"),
        pytest.param("revision: r\nnodes: {}\n", ["missing field(s) apiVersion"], id="missing-apiversion"),
        pytest.param(
            f"apiVersion: {API}\nnodes: {{}}\n", ["missing field(s) revision"], id="missing-revision"
        ),
        pytest.param(f"apiVersion: {API}\nrevision: r\n", ["missing field(s) nodes"], id="missing-nodes"),
        pytest.param(
            doc(head="apiVersion: topology.gpustack.ai/v1\nrevision: r\n"),
            ["apiVersion is 'topology.gpustack.ai/v1'", API],
            id="wrong-apiversion",
        ),
        pytest.param(
            doc(head="apiVersion: 1\nrevision: r\n"), ["apiVersion is 1"], id="apiversion-not-string"
        ),
        pytest.param(
            doc(head=f"apiVersion: {API}\nrevision: '  '\n"), ["revision must not be blank"], id="blank"
        ),
        pytest.param(
            doc(head=f"apiVersion: {API}\nrevision: ''\n"), ["revision must not be blank"], id="empty-rev"
        ),
        pytest.param(
            doc(head=f"apiVersion: {API}\nrevision:\n"), ["revision must be a string", "null"], id="null-rev"
        ),
        pytest.param(
            doc(head=f"apiVersion: {API}\nrevision: 42\n"),
            ["revision must be a string", "42", "quote"],
            id="int-rev",
        ),
        pytest.param(
            doc(head=f"apiVersion: {API}\nrevision: {'x' * 1025}\n"),
            ["revision is 1025 characters"],
            id="long-rev",
        ),
        pytest.param(doc("nodes:"), ["nodes is null", "nodes: {}"], id="nodes-null"),
        pytest.param(doc("nodes: [a, b]"), ["nodes must be a mapping", "a list"], id="nodes-list"),
        pytest.param(doc("nodes:\n  worker-a:"), ["node worker-a", "null"], id="node-entry-null"),
        pytest.param(doc("nodes:\n  worker-a: [x]"), ["node worker-a", "a list"], id="node-entry-list"),
        pytest.param(
            doc(f"nodes:\n  worker-a: {{{K}: 01}}"),
            ["node worker-a", K, "a number (1)", "quote it"],
            id="unquoted-number-value",
        ),
        pytest.param(
            doc(f"nodes:\n  worker-a: {{{K}: true}}"),
            ["node worker-a", K, "a boolean (true)"],
            id="bool-value",
        ),
        pytest.param(
            doc(f"nodes:\n  worker-a: {{{K}: 1.5}}"), ["node worker-a", K, "a number (1.5)"], id="float-value"
        ),
        pytest.param(
            doc(f"nodes:\n  worker-a: {{{K}: 2024-01-02}}"),
            ["node worker-a", K, "a date (2024-01-02)"],
            id="date",
        ),
        pytest.param(doc(f"nodes:\n  worker-a: {{{K}: }}"), ["node worker-a", K, "null"], id="null-value"),
        pytest.param(
            doc(f"nodes:\n  worker-a: {{{K}: {{x: y}}}}"),
            ["node worker-a", K, "a mapping"],
            id="nested-unknown-field-under-a-key",
        ),
        pytest.param(doc("nodes:\n  worker-a: {1: x}"), ["node worker-a", "key 1", "a number"], id="int-key"),
        pytest.param(doc("nodes:\n  42: {}"), ["node name 42", "a number"], id="int-node-name"),
        pytest.param(doc("nodes:\n  '': {}"), ["node name ''"], id="empty-node-name"),
        pytest.param(doc(f"nodes:\n  a: {{{K}: x, {K}: y}}"), [f"key '{K}' is repeated"], id="repeated-key"),
        pytest.param(doc("nodes:\n  a: {}\n  a: {}"), ["key 'a' is repeated"], id="repeated-node"),
        pytest.param(doc() + "revision: r2\n", ["key 'revision' is repeated"], id="repeated-top-level"),
        pytest.param(doc(f"nodes:\n  a: &x {{{K}: k}}\n  b: *x"), ["anchors and aliases"], id="alias"),
        pytest.param(
            "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
            ["anchors and aliases"],
            id="alias-bomb",
        ),
        pytest.param(doc("base: {}\nnodes:\n  a:\n    <<: {x: y}"), ["merge keys"], id="merge-key"),
        pytest.param(
            "a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 20)), ["nests deeper"], id="deep"
        ),
        pytest.param("[" * 100_000, ["not valid YAML"], id="deep-flow"),
        pytest.param("{a: b", ["not valid YAML", "line"], id="syntax-error"),
        pytest.param("a: b\n\tc: d\n", ["not valid YAML"], id="tab-indent"),
        pytest.param("a: \x00\n", ["not valid YAML"], id="control-character"),
        pytest.param("? [a]\n: b\n", ["not valid YAML", "unhashable"], id="complex-key"),
        pytest.param(
            "a: !!python/object:os.system x\n", ["not valid YAML", "python/object"], id="python-tag"
        ),
        pytest.param(
            doc(f"nodes:\n  a: {{{K}: !!binary aGk=}}"), ["node a", K, "a bytes"], id="binary-value"
        ),
        pytest.param("a: 2024-02-30\n", ["YAML cannot read"], id="impossible-date"),
    ],
)
def test_decode_rejects(raw: str | bytes, fragments: list[str]) -> None:
    with pytest.raises(SnapshotError) as caught:
        decode(raw)
    message = str(caught.value)
    assert "\n" not in message  # goes into a condition message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_decode_reports_first_error_and_how_many_more() -> None:
    raw = doc(f"nodes:\n  a: {{{K}: 1}}\n  b: {{{K}: 2}}\n  c: {{{K}: 3}}", head="revision: ''\nextra: 1\n")
    with pytest.raises(SnapshotError) as caught:
        decode(raw)
    assert str(caught.value).startswith("unknown field(s) extra")
    assert "(and 5 more problems)" in str(caught.value)
    assert len(caught.value.errors) == 6


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(bytes(range(256)), id="all-bytes"),
        pytest.param(b"\x00" * 64, id="nul-bytes"),
        pytest.param("{" * 50 + "}" * 50, id="balanced-flow"),
        pytest.param("&a a: *a\n", id="self-alias"),
        pytest.param("%YAML 9.9\n---\na: b\n", id="bad-directive"),
        pytest.param("a: 1" + "0" * 5000 + "\n", id="huge-int"),
        pytest.param("a: !!set {x, y}\n", id="set"),
        pytest.param("\ud800", id="lone-surrogate"),
    ],
)
def test_decode_never_crashes(raw: str | bytes) -> None:
    with pytest.raises(SnapshotError):
        decode(raw)


# --- validate ----------------------------------------------------------------------------------------
SELECTED = {
    "worker-a": {SR: "us-east-1", SZ: "us-east-1a", keys.HOSTNAME: "worker-a"},
    "worker-b": {SR: "us-east-1", SZ: "us-east-1b", keys.HOSTNAME: "worker-b"},
    "worker-c": {keys.HOSTNAME: "worker-c"},
}


def snap(nodes: dict[str, dict[str, str]]) -> Snapshot:
    return Snapshot(revision="r1", nodes=nodes)


@pytest.mark.parametrize(
    ("levels", "write_prefix", "nodes", "expected"),
    [
        pytest.param(PRIVATE, None, {}, {}, id="empty-snapshot"),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r", Z: "z", K: "k1"}, "worker-b": {R: "r", Z: "z", K: "k2"}},
            {"worker-a": {R: "r", Z: "z", K: "k1"}, "worker-b": {R: "r", Z: "z", K: "k2"}},
            id="full-private-hierarchy",
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r", Z: "z"}, "worker-b": {R: "r", Z: "z", K: "k"}},
            {"worker-a": {R: "r", Z: "z"}, "worker-b": {R: "r", Z: "z", K: "k"}},
            id="partial-suffix-region-zone-only",
        ),
        pytest.param(PRIVATE, None, {"worker-a": {}}, {}, id="node-without-labels-omitted"),
        pytest.param(
            (SR, SZ, K),
            None,
            {
                "worker-a": {SR: "us-east-1", SZ: "us-east-1a", K: "k1"},
                "worker-b": {SR: "us-east-1", SZ: "us-east-1b"},
            },
            {"worker-a": {K: "k1"}},
            id="standard-parents-match-and-are-removed",
        ),
        pytest.param(
            (SZ, K),
            None,
            {"worker-a": {SZ: "us-east-1a", K: "k1"}},
            {"worker-a": {K: "k1"}},
            id="standard-zone-as-read-only-parent",
        ),
        pytest.param(
            (R, f"{EXTRA}pod", f"{EXTRA}rack"),
            EXTRA,
            {"worker-a": {R: "r", f"{EXTRA}pod": "p", f"{EXTRA}rack": "k"}},
            {"worker-a": {R: "r", f"{EXTRA}pod": "p", f"{EXTRA}rack": "k"}},
            id="additional-write-prefix",
        ),
        pytest.param(
            (R, "sub.topology.example.com/rack"),
            "topology.example.com/",
            {"worker-a": {R: "r"}},
            {"worker-a": {R: "r"}},
            id="prefix-declared-but-unused",
        ),
        pytest.param(
            (R, "topology.gpustack.ai/pod"),
            None,
            {"worker-a": {R: "r", "topology.gpustack.ai/pod": "p-1.a_b"}},
            {"worker-a": {R: "r", "topology.gpustack.ai/pod": "p-1.a_b"}},
            id="any-topology-gpustack-key",
        ),
        pytest.param(
            (R, f"{keys.TOPOGRAPH_TIER_PREFIX}1", f"{keys.TOPOGRAPH_TIER_PREFIX}2", Z),
            None,
            {"worker-a": {R: "r"}},
            {"worker-a": {R: "r"}},
            id="tier-levels-declared-not-written",
        ),
        pytest.param(
            PRIVATE, None, {"worker-a": {R: "r" * 63}}, {"worker-a": {R: "r" * 63}}, id="63-char-value"
        ),
    ],
)
def test_validate_accepts(
    levels: tuple[str, ...],
    write_prefix: str | None,
    nodes: dict[str, dict[str, str]],
    expected: dict[str, dict[str, str]],
) -> None:
    assert validate(snap(nodes), levels=levels, selected=SELECTED, write_prefix=write_prefix) == expected


@pytest.mark.parametrize(
    ("levels", "write_prefix", "nodes", "fragments"),
    [
        pytest.param(
            PRIVATE, None, {"worker-x": {R: "r"}}, ["node worker-x", "not selected"], id="unknown-node"
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r"}, "ghost": {}},
            ["node ghost", "not selected"],
            id="unselected-empty",
        ),
        pytest.param(
            (R, Z),
            None,
            {"worker-a": {R: "r", K: "k"}},
            ["node worker-a", f"{K}=k", "not one of the source's levels"],
            id="undeclared-level",
        ),
        pytest.param(
            (R, keys.TOPOLOGY_PROFILE),
            None,
            {"worker-a": {R: "r", keys.TOPOLOGY_PROFILE: "fnv64-0000000000000000"}},
            ["node worker-a", keys.TOPOLOGY_PROFILE, "generated by the worker"],
            id="profile-key",
        ),
        pytest.param(
            (R,),
            None,
            {"worker-a": {keys.TOPOLOGY_PROFILE: "x"}},
            ["node worker-a", keys.TOPOLOGY_PROFILE, "generated by the worker"],
            id="profile-key-undeclared",
        ),
        pytest.param(
            (f"{keys.TOPOGRAPH_TIER_PREFIX}2",),
            None,
            {"worker-a": {f"{keys.TOPOGRAPH_TIER_PREFIX}2": "spine"}},
            ["node worker-a", f"{keys.TOPOGRAPH_TIER_PREFIX}2=spine", "may not publish"],
            id="topograph-tier",
        ),
        pytest.param(
            ("accelerator.topograph.run/nvlink",),
            None,
            {"worker-a": {"accelerator.topograph.run/nvlink": "nvl"}},
            ["node worker-a", "accelerator.topograph.run/nvlink", "may not publish"],
            id="topograph-accelerator",
        ),
        pytest.param(
            (R, keys.HOSTNAME),
            None,
            {"worker-a": {R: "r", keys.HOSTNAME: "worker-a"}},
            ["node worker-a", keys.HOSTNAME, "may not publish"],
            id="hostname",
        ),
        pytest.param(
            (keys.ACCELERATABLE,),
            None,
            {"worker-a": {keys.ACCELERATABLE: "true"}},
            ["node worker-a", keys.ACCELERATABLE, "may not publish"],
            id="feature-gpustack",
        ),
        pytest.param(
            ("other.example.com/rack",),
            EXTRA,
            {"worker-a": {"other.example.com/rack": "k"}},
            ["node worker-a", "other.example.com/rack", "may not publish", f"{EXTRA}*"],
            id="other-prefix",
        ),
        pytest.param(
            ("example.com/rack",),
            None,
            {"worker-a": {"example.com/rack": "k"}},
            ["node worker-a", "example.com/rack", "may not publish"],
            id="third-party-without-write-prefix",
        ),
        pytest.param(
            ("kubernetes.io/rack",),
            "kubernetes.io/",
            {"worker-a": {"kubernetes.io/rack": "k"}},
            ["node worker-a", "kubernetes.io/rack", "may not publish"],
            id="reserved-write-prefix-is-ignored",
        ),
        pytest.param(
            ("rack",),
            None,
            {"worker-a": {"rack": "k"}},
            ["node worker-a", "rack=k", "may not publish"],
            id="unprefixed-key",
        ),
        pytest.param(
            ("topology.gpustack.ai/bad key",),
            None,
            {"worker-a": {"topology.gpustack.ai/bad key": "k"}},
            ["node worker-a", "topology.gpustack.ai/bad key", "not a valid label key"],
            id="invalid-key",
        ),
        pytest.param(
            PRIVATE, None, {"worker-a": {R: ""}}, ["node worker-a", R, "empty value"], id="empty-value"
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "region a"}},
            ["node worker-a", f"{R}=region a", "not a valid label value"],
            id="invalid-value",
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r" * 64}},
            ["node worker-a", R, "no more than 63"],
            id="value-too-long",
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "-r"}},
            ["node worker-a", f"{R}=-r", "not a valid label value"],
            id="dash",
        ),
        pytest.param(
            (SR, SZ, K),
            None,
            {"worker-a": {SR: "us-east-1", SZ: "us-east-1b", K: "k"}},
            ["node worker-a", f"{SZ}=us-east-1b", f"has {SZ}=us-east-1a", "already carries"],
            id="standard-zone-mismatch",
        ),
        pytest.param(
            (SR, SZ, K),
            None,
            {"worker-c": {SR: "us-east-1", SZ: "us-east-1a", K: "k"}},
            ["node worker-c", f"{SR}=us-east-1", f"has no {SR} label"],
            id="standard-region-missing-on-node",
        ),
        pytest.param(
            (R, K),
            None,
            {"worker-a": {R: "r", SZ: "us-east-1a", K: "k"}},
            ["node worker-a", f"{SZ}=us-east-1a", "not one of the source's levels"],
            id="standard-key-undeclared",
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r", K: "k"}},
            ["node worker-a", f"{K}=k", f"no parent {Z}", "child without parent"],
            id="broken-parent-chain",
        ),
        pytest.param(
            (SR, SZ, K),
            None,
            {"worker-a": {K: "k"}},
            ["node worker-a", f"{K}=k", f"no parent {SR}, {SZ}"],
            id="standard-parents-omitted",
        ),
        pytest.param(
            PRIVATE,
            None,
            {"worker-a": {R: "r", Z: "z1", K: "k"}, "worker-b": {R: "r", Z: "z2", K: "k"}},
            ["node worker-b", f"{K}=k", f"({R}=r, {Z}=z2)", "node worker-a", f"({R}=r, {Z}=z1)"],
            id="child-under-two-parents",
        ),
        pytest.param(
            (SR, SZ, K),
            None,
            {
                "worker-a": {SR: "us-east-1", SZ: "us-east-1a", K: "k"},
                "worker-b": {SR: "us-east-1", SZ: "us-east-1b", K: "k"},
            },
            ["node worker-b", f"{K}=k", f"{SZ}=us-east-1b", "node worker-a"],
            id="rack-under-two-standard-zones",
        ),
    ],
)
def test_validate_rejects(
    levels: tuple[str, ...], write_prefix: str | None, nodes: dict[str, dict[str, str]], fragments: list[str]
) -> None:
    with pytest.raises(SnapshotError) as caught:
        validate(snap(nodes), levels=levels, selected=SELECTED, write_prefix=write_prefix)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_validate_reports_the_first_error_by_node_name_and_counts_the_rest() -> None:
    nodes = {
        "worker-b": {R: "r", K: "k"},  # child without parent
        "worker-a": {R: "", Z: "z"},  # empty value
        "zz-unknown": {},
    }
    with pytest.raises(SnapshotError) as caught:
        validate(snap(nodes), levels=PRIVATE, selected=SELECTED, write_prefix=None)
    assert str(caught.value).startswith(f"node worker-a: {R} has an empty value")
    assert str(caught.value).endswith("(and 2 more problems)")
    assert len(caught.value.errors) == 3
    assert "node zz-unknown" in caught.value.errors[1]
    assert "node worker-b" in caught.value.errors[2]


def test_validate_is_atomic_one_bad_node_rejects_all() -> None:
    good = {"worker-a": {R: "r", Z: "z"}}
    assert validate(snap(good), levels=PRIVATE, selected=SELECTED, write_prefix=None) == good
    with pytest.raises(SnapshotError, match="worker-x"):
        validate(snap({**good, "worker-x": {R: "r"}}), levels=PRIVATE, selected=SELECTED, write_prefix=None)


def test_decode_then_validate_the_reference_example() -> None:
    selected: dict[str, dict[str, str]] = {"worker-a": {}, "worker-b": {}}
    assert validate(decode(VALID_YAML), levels=PRIVATE, selected=selected, write_prefix=None) == VALID_NODES


def test_validate_result_does_not_alias_the_snapshot() -> None:
    entry = {R: "r"}
    result = validate(snap({"worker-a": entry}), levels=PRIVATE, selected=SELECTED, write_prefix=None)
    result["worker-a"]["x"] = "y"
    assert entry == {R: "r"}


@pytest.mark.parametrize(
    ("key", "write_prefix", "expected"),
    [
        pytest.param(R, None, True, id="private"),
        pytest.param(keys.TOPOLOGY_PROFILE, None, False, id="profile"),
        pytest.param(SZ, None, False, id="standard"),
        pytest.param(f"{EXTRA}rack", EXTRA, True, id="extra"),
        pytest.param(f"{EXTRA}rack", "topology.example.com", True, id="extra-without-slash"),
        pytest.param("xtopology.example.com/rack", EXTRA, False, id="prefix-is-a-whole-domain"),
        pytest.param("k8s.io/rack", "k8s.io/", False, id="reserved"),
        pytest.param("a.feature.gpustack.ai/x", "a.feature.gpustack.ai/", False, id="reserved-subdomain"),
    ],
)
def test_is_writable(key: str, write_prefix: str | None, expected: bool) -> None:
    assert is_writable(key, write_prefix) is expected


@pytest.mark.parametrize(
    ("errors", "message"),
    [
        pytest.param("one problem", "one problem", id="a-single-message"),
        pytest.param(["a", "b", "c"], "a (and 2 more problems)", id="several"),
        pytest.param(["a", "b"], "a (and 1 more problem)", id="two"),
        pytest.param([], "invalid snapshot", id="none-given"),
    ],
)
def test_snapshot_error_message(errors: str | list[str], message: str) -> None:
    err = SnapshotError(errors)
    assert str(err) == message
    assert isinstance(err, ValueError)
