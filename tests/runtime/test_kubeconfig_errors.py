"""A kubeconfig the client cannot use is one line naming the file, the context and what is missing.

Each row writes a kubeconfig under ``tmp_path`` and runs what :meth:`Client.connect` runs before the
network (:func:`kubeconfig_source`, :func:`check_kubeconfig`); the good rows are also read by kr8s, so "no
problem found" means kr8s can use the file. The property at the end breaks a good kubeconfig at random
places: the check never crashes, and whatever it lets through kr8s loads without an error.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import stat
from typing import TYPE_CHECKING, Any, cast

import kr8s
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustack_worker.cli.errors import describe
from gpustack_worker.devcluster.pki import self_signed
from gpustack_worker.runtime.client import KubeconfigError, _authenticate, check_kubeconfig, kubeconfig_source
from gpustack_worker.runtime.kubeconfig_check import document_problem, kubeconfig_problem
from tests.kit.properties import examples

if TYPE_CHECKING:
    from pathlib import Path

SERVER = "https://127.0.0.1:6443"


def _pem_pair() -> tuple[bytes, bytes]:
    return self_signed("kubeconfig-errors-test", hosts=())


CERT, KEY = _pem_pair()
CERT_B64 = base64.b64encode(CERT).decode()
KEY_B64 = base64.b64encode(KEY).decode()


def good() -> dict[str, Any]:
    """A kubeconfig kr8s can use: two contexts, token and certificate users, CA data."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "a",
        "clusters": [
            {"name": "c", "cluster": {"server": SERVER, "certificate-authority-data": CERT_B64}},
            {"name": "d", "cluster": {"server": SERVER, "insecure-skip-tls-verify": True}},
        ],
        "users": [
            {"name": "u", "user": {"token": "secret"}},
            {"name": "v", "user": {"client-certificate-data": CERT_B64, "client-key-data": KEY_B64}},
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "u"}},
            {"name": "b", "context": {"cluster": "d", "user": "v"}},
        ],
    }


def _entry(doc: dict[str, Any], list_key: str, name: str) -> dict[str, Any]:
    item_key = list_key[:-1]
    body: dict[str, Any] = next(e[item_key] for e in doc[list_key] if e["name"] == name)
    return body


def _with(edit: Any) -> dict[str, Any]:
    doc = good()
    edit(doc)
    return doc


def _plugin(tmp_path: Path) -> str:
    """An exec plugin that prints a token (for the rows where the plugin exists)."""
    script = tmp_path / "bin" / "token-plugin"
    script.parent.mkdir(exist_ok=True)
    status = '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}'
    script.write_text(f"#!/bin/sh\necho '{status}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


# (id, the kubeconfig's text or document, --context, the expected line after "kubeconfig <file>: ")
ROWS: list[tuple[str, Any, str | None, str]] = [
    ("empty file", "", None, "the file is empty (no clusters, users or contexts)"),
    ("only a comment", "# nothing here\n", None, "the file is empty (no clusters, users or contexts)"),
    (
        "YAML syntax error",
        "apiVersion: v1\nclusters: [\n",
        None,
        "not valid YAML: expected the node content, but found '<stream end>' at line 3, column 1",
    ),
    ("a list, not a mapping", "- a\n- b\n", None, "not a kubeconfig: the document is a list, not a mapping"),
    ("a string, not a mapping", "hello\n", None, "not a kubeconfig: the document is a string, not a mapping"),
    ("no contexts", _with(lambda d: d.pop("contexts")), None, "it has no contexts"),
    (
        "contexts not a list",
        _with(lambda d: d.update(contexts={"a": 1})),
        None,
        "contexts is a dict, not a list",
    ),
    (
        "a context without a name",
        _with(lambda d: d["contexts"].append({"context": {}})),
        None,
        "contexts[2] has no name",
    ),
    (
        "no current-context and no --context",
        _with(lambda d: d.pop("current-context")),
        None,
        "no current-context is set and no --context was given (contexts: a, b)",
    ),
    (
        "current-context names a missing context",
        _with(lambda d: d.update({"current-context": "gone"})),
        None,
        'current-context "gone" is not a context in the file',
    ),
    (
        "context names a missing cluster",
        _with(lambda d: _entry(d, "contexts", "a").update(cluster="b")),
        None,
        'context "a" names cluster "b", which is not in the file',
    ),
    (
        "context names a missing user",
        _with(lambda d: _entry(d, "contexts", "b").update(user="nobody")),
        "b",
        'context "b" names user "nobody", which is not in the file',
    ),
    (
        "context without a cluster",
        _with(lambda d: _entry(d, "contexts", "a").pop("cluster")),
        None,
        'context "a" names no cluster',
    ),
    (
        "context entry with no body",
        _with(lambda d: d["contexts"][1].pop("context")),
        None,
        'context "b" in contexts has no context field',
    ),
    (
        "cluster without server",
        _with(lambda d: _entry(d, "clusters", "c").pop("server")),
        None,
        'context "a": cluster "c" has no server',
    ),
    (
        "server without a scheme",
        _with(lambda d: _entry(d, "clusters", "c").update(server="127.0.0.1:6443")),
        None,
        'context "a": cluster "c": server \'127.0.0.1:6443\' is not an https:// or http:// URL',
    ),
    (
        "certificate-authority file missing",
        _with(lambda d: _entry(d, "clusters", "c").update({"certificate-authority": "/no/such/ca.crt"})),
        None,
        'context "a": cluster "c": certificate-authority /no/such/ca.crt: no such file',
    ),
    (
        "relative certificate-authority missing next to the kubeconfig",
        _with(lambda d: _entry(d, "clusters", "c").update({"certificate-authority": "ca.crt"})),
        None,
        'context "a": cluster "c": certificate-authority {dir}/ca.crt: no such file',
    ),
    (
        "certificate-authority-data not base64",
        _with(lambda d: _entry(d, "clusters", "c").update({"certificate-authority-data": "@@not base64!"})),
        None,
        'context "a": cluster "c": certificate-authority-data is not valid base64 '
        "(Only base64 data is allowed)",
    ),
    (
        "certificate-authority-data base64 of no PEM",
        _with(
            lambda d: _entry(d, "clusters", "c").update(
                {"certificate-authority-data": base64.b64encode(b"hello").decode()}
            )
        ),
        None,
        'context "a": cluster "c": certificate-authority-data is base64 but not of a PEM block',
    ),
    (
        "client-certificate file missing",
        _with(
            lambda d: (
                _entry(d, "users", "v").update({"client-certificate": "/no/c.crt", "client-key": "/no/c.key"})
                or _entry(d, "users", "v").pop("client-certificate-data")
                or _entry(d, "users", "v").pop("client-key-data")
            )
        ),
        "b",
        'context "b": user "v": client-certificate /no/c.crt: no such file',
    ),
    (
        "client-key file missing",
        _with(
            lambda d: (
                _entry(d, "users", "v").update({"client-key": "/no/c.key"})
                or _entry(d, "users", "v").pop("client-key-data")
            )
        ),
        "b",
        'context "b": user "v": client-key /no/c.key: no such file',
    ),
    (
        "a client certificate without its key",
        _with(lambda d: _entry(d, "users", "v").pop("client-key-data")),
        "b",
        'context "b": user "v": a client certificate without its key',
    ),
    (
        "client-key-data not base64",
        _with(lambda d: _entry(d, "users", "v").update({"client-key-data": "%%%"})),
        "b",
        'context "b": user "v": client-key-data is not valid base64 (Only base64 data is allowed)',
    ),
    (
        "token-file missing",
        _with(
            lambda d: (
                _entry(d, "users", "u").update({"token-file": "/no/token"})
                or _entry(d, "users", "u").pop("token")
            )
        ),
        None,
        'context "a": user "u": token-file /no/token: no such file',
    ),
    (
        "token-file present (kr8s would send no token)",
        _with(
            lambda d: (
                _entry(d, "users", "u").update({"token-file": "{dir}/kubeconfig"})
                or _entry(d, "users", "u").pop("token")
            )
        ),
        None,
        'context "a": user "u": token-file is not supported by this client '
        "(set token, or use an exec plugin)",
    ),
    (
        "exec plugin not found",
        _with(
            lambda d: _entry(d, "users", "u").update(
                exec={"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "no-such-plugin-h3"}
            )
        ),
        None,
        'context "a": user "u": exec plugin "no-such-plugin-h3" not found in $PATH',
    ),
    (
        "exec plugin path not found",
        _with(
            lambda d: _entry(d, "users", "u").update(
                exec={"apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/missing"}
            )
        ),
        None,
        'context "a": user "u": exec plugin "./bin/missing" not found '
        "(looked for from the working directory)",
    ),
    (
        "exec without command",
        _with(
            lambda d: _entry(d, "users", "u").update(exec={"apiVersion": "client.authentication.k8s.io/v1"})
        ),
        None,
        'context "a": user "u": exec has no command',
    ),
    (
        "exec v1alpha1",
        _with(
            lambda d: _entry(d, "users", "u").update(
                exec={"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "sh"}
            )
        ),
        None,
        'context "a": user "u": exec plugin "sh": apiVersion client.authentication.k8s.io/v1alpha1 is not '
        "supported (use v1 or v1beta1)",
    ),
    (
        "auth-provider gcp",
        _with(lambda d: _entry(d, "users", "u").update({"auth-provider": {"name": "gcp"}})),
        None,
        'context "a": user "u": auth-provider \'gcp\' is not supported (only oidc; or use an exec plugin)',
    ),
    (
        "username and password",
        _with(lambda d: _entry(d, "users", "u").update(username="admin", password="pw")),
        None,
        'context "a": user "u": username/password authentication is not supported '
        "(removed in Kubernetes 1.19)",
    ),
    (
        "the context's user is null",
        _with(lambda d: d["users"][0].update(user=None)),
        None,
        'context "a": user "u" is empty (user: null)',
    ),
    (
        "the context is null",
        _with(lambda d: d["contexts"][0].update(context=None)),
        None,
        'context "a" is empty (context: null)',
    ),
    (
        "users entry body not a mapping",
        _with(lambda d: d["users"][0].update(user="token")),
        None,
        'user "u": its user is a string, not a mapping',
    ),
]


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "kubeconfig"
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    path.write_text(text.replace("{dir}", str(tmp_path)))
    return path


def _refusal(path: Path, context: str | None, env: dict[str, str] | None = None) -> KubeconfigError:
    with pytest.raises(KubeconfigError) as caught:
        source, where = kubeconfig_source(str(path) if env is None else None, env or {})
        check_kubeconfig(source, where, context)
    return caught.value


@pytest.mark.parametrize(("text", "context", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_an_unusable_kubeconfig_is_one_line_naming_the_file_the_context_and_what_is_missing(
    tmp_path: Path, text: Any, context: str | None, expected: str
) -> None:
    path = _write(tmp_path, text)
    err = _refusal(path, context)
    assert str(err) == f"kubeconfig {path}: " + expected.replace("{dir}", str(tmp_path))
    assert err.source == str(path)
    assert describe(err) == str(err)  # what the CLI prints after "gpustack-worker: error: "


#: Rows whose problem the merge removes: it reads a ``null`` body as an empty one (kubectl's merge too).
_NOT_MERGED = {"the context's user is null", "the context is null"}
_MERGED = [r for r in ROWS if not isinstance(r[1], str) and r[0] not in _NOT_MERGED]


@pytest.mark.parametrize(
    ("text", "context", "expected"), [r[1:] for r in _MERGED], ids=[r[0] for r in _MERGED]
)
def test_the_same_problem_in_a_merged_kubeconfig_names_the_merged_list(
    tmp_path: Path, text: Any, context: str | None, expected: str
) -> None:
    """$KUBECONFIG with two files: the merged document is checked (the second file adds nothing used)."""
    first = _write(tmp_path, text)
    second = tmp_path / "other"
    second.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config"}))
    listed = f"{first}{os.pathsep}{second}"
    err = _refusal(first, context, {"KUBECONFIG": listed})
    # a file that is no kubeconfig document is named itself; the rest is a problem of the merged config
    where = str(first) if document_problem(yaml.safe_load(first.read_text())) else f"$KUBECONFIG ({listed})"
    assert str(err) == f"kubeconfig {where}: " + expected.replace("{dir}", str(tmp_path))


def _usable(tmp_path: Path) -> list[tuple[str, dict[str, Any], str | None]]:
    (tmp_path / "ca.crt").write_bytes(CERT)
    (tmp_path / "client.crt").write_bytes(CERT)
    (tmp_path / "client.key").write_bytes(KEY)
    plugin = _plugin(tmp_path)
    return [
        ("token user", good(), None),
        ("certificate-data user by --context", good(), "b"),
        (
            "files relative to the kubeconfig's directory",
            _with(
                lambda d: (
                    _entry(d, "clusters", "c").update({"certificate-authority": "ca.crt"})
                    or _entry(d, "users", "u").update(
                        {"client-certificate": "client.crt", "client-key": "client.key"}
                    )
                )
            ),
            None,
        ),
        (
            "PEM text in the data fields",
            _with(lambda d: _entry(d, "clusters", "c").update({"certificate-authority-data": CERT.decode()})),
            None,
        ),
        (
            "an exec plugin that exists",
            _with(
                lambda d: (
                    _entry(d, "users", "u").update(
                        exec={"apiVersion": "client.authentication.k8s.io/v1", "command": plugin}
                    )
                    or _entry(d, "users", "u").pop("token")
                )
            ),
            None,
        ),
        (
            "token and token-file (kubectl and kr8s use the token)",
            _with(lambda d: _entry(d, "users", "u").update({"token-file": str(tmp_path / "ca.crt")})),
            None,
        ),
    ]


async def _kr8s_loads(source: str, context: str | None) -> Any:
    """What the client does with a kubeconfig: kr8s' auth loaded by ``_authenticate``, then its TLS
    context built (:class:`~gpustack_worker.runtime.client._Api`)."""
    api = kr8s.asyncio.Api(bypass_factory=True, kubeconfig=source, context=context)
    await _authenticate(cast("Any", api), source, context)
    await api.auth.ssl_context()
    return api.auth


async def test_a_usable_kubeconfig_passes_and_kr8s_reads_it(tmp_path: Path) -> None:
    for name, doc, context in _usable(tmp_path):
        path = _write(tmp_path, doc)
        source, where = kubeconfig_source(str(path), {})
        check_kubeconfig(source, where, context)
        auth = await _kr8s_loads(str(path), context)
        assert auth.server == SERVER, name
        assert auth.active_context == (context or "a"), name


def test_a_missing_context_keeps_its_own_line(tmp_path: Path) -> None:
    """``--context`` naming a context the file lacks: the check leaves it to the client's line
    (``context "x" does not exist in <file>``, tests/cli/test_main.py)."""
    path = _write(tmp_path, good())
    source, where = kubeconfig_source(str(path), {})
    check_kubeconfig(source, where, "zz")  # no error here: _authenticate names it


def test_no_kubeconfig_anywhere_is_left_to_the_in_cluster_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    source, where = kubeconfig_source(None, {})
    check_kubeconfig(source, where, None)  # ~/.kube/config absent: in-cluster or "no credentials" next
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("")
    with pytest.raises(KubeconfigError, match=r"^kubeconfig ~/.kube/config: the file is empty"):
        check_kubeconfig(source, where, None)


# --- property: broken anywhere, the check answers in words, and what it passes kr8s can use -------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["", "x", "a", "c", "u", SERVER, "%%", "-----"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["name", "server", "token", "cluster", "user", "context"]), inner, max_size=3
        ),
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@settings(
    max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), context=st.sampled_from([None, "a", "b"]))
def test_a_kubeconfig_broken_anywhere_is_named_or_usable(
    tmp_path: Path, data: st.DataObject, context: str | None
) -> None:
    base = good()
    edits = data.draw(st.integers(1, 3))
    doc: Any = base
    for _ in range(edits):
        paths = _paths(doc)
        path = data.draw(st.sampled_from(paths))
        delete = bool(path) and data.draw(st.booleans())
        doc = _replace(doc, path, data.draw(_VALUES), delete)
    found = kubeconfig_problem(doc, context=context, base_dir=str(tmp_path))
    if found is not None:
        assert found and "\n" not in found
        return
    path_ = _write(tmp_path, doc)
    try:
        asyncio.run(_kr8s_loads(str(path_), context))
    except KubeconfigError as exc:  # the client's line for a --context the file lacks
        assert context is not None and str(exc) == f'context "{context}" does not exist in {path_}', exc
