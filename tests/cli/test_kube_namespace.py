"""The default namespace of ``explain`` (issue 29 item 8: ``explain md NAME -n``), chosen as kubectl
chooses it: the selected context's namespace, else — no kubeconfig, in a Pod — the service account's, else
``default``. Table over kubeconfig shapes, ``--context`` and ``$KUBECONFIG`` lists."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.cli.kube_namespace import _of_context, context_namespace

if TYPE_CHECKING:
    from pathlib import Path


def _config(current: str, contexts: dict[str, str | None]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts.items()
        ],
    }


def _write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


#: (current-context, {context: namespace}, --context, expected)
CASES = [
    ("a", {"a": "team-a"}, None, "team-a"),
    ("a", {"a": None}, None, "default"),
    ("a", {"a": "team-a", "b": "team-b"}, "b", "team-b"),
    ("a", {"a": "team-a", "b": None}, "b", "default"),  # the context chosen decides, not current-context's
    ("a", {"a": "team-a"}, "missing", "default"),  # connecting fails on it with its own error
    ("", {"a": "team-a"}, None, "default"),
]


@pytest.mark.parametrize(("current", "contexts", "context", "expected"), CASES)
def test_the_context_namespace(
    tmp_path: Path, current: str, contexts: dict[str, str | None], context: str | None, expected: str
) -> None:
    path = _write(tmp_path, "kc", _config(current, contexts))
    assert context_namespace(path, context, env={}) == expected
    # the same file through $KUBECONFIG, and as ~/.kube/config is not involved
    assert context_namespace(None, context, env={"KUBECONFIG": path}) == expected


def test_a_kubeconfig_list_merges_as_kubectl(tmp_path: Path) -> None:
    """The first file to set current-context wins; a context is the first file's that defines it."""
    first = _write(tmp_path, "one", _config("b", {"a": "from-one"}))
    second = _write(tmp_path, "two", _config("a", {"b": "team-b", "a": "from-two"}))
    env = {"KUBECONFIG": f"{first}:{second}"}
    assert context_namespace(None, None, env=env) == "team-b"
    assert context_namespace(None, "a", env=env) == "from-one"


def test_no_kubeconfig_in_a_pod_reads_the_service_account_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    sa = _write(tmp_path, "namespace", "gpustack-system\n")
    assert context_namespace(None, None, env={}, service_account_namespace=sa) == "gpustack-system"
    missing = str(tmp_path / "nowhere")
    assert context_namespace(None, None, env={}, service_account_namespace=missing) == "default"


@pytest.mark.parametrize("content", ["{not: [valid", "- a list\n", "contexts: 3\ncurrent-context: a\n"])
def test_an_unreadable_kubeconfig_gives_default(tmp_path: Path, content: str) -> None:
    assert context_namespace(_write(tmp_path, "bad", content), None, env={}) == "default"


def test_a_missing_kubeconfig_flag_gives_default(tmp_path: Path) -> None:
    assert context_namespace(str(tmp_path / "absent"), None, env={}) == "default"


_YAMLISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@given(doc=_YAMLISH | st.fixed_dictionaries({"contexts": _YAMLISH, "current-context": _YAMLISH}))
def test_any_document_gives_a_namespace_never_a_crash(doc: Any) -> None:
    got = _of_context(doc, None)
    assert isinstance(got, str) and got
