"""A kubeconfig checked before kr8s reads it: what is missing, named in one line.

kr8s reads a kubeconfig by indexing into it, so a document it cannot use fails with whatever Python raised
on the way (``TypeError("'NoneType' object is not subscriptable")`` for an empty file, ``KeyError('server')``,
an ``FileNotFoundError`` with no file name when the TLS context is built from a missing certificate). This
module looks at the document the way kubectl's ``clientcmd`` validation does, for the context the client
will use, and returns the first problem as text naming the context and the missing thing (the caller,
:func:`gpustack_worker.runtime.client.kubeconfig_source`, prefixes the file and raises ``KubeconfigError``):

* the document: empty, not YAML, not a mapping, ``clusters``/``users``/``contexts`` not lists of named
  entries;
* the context: no ``--context`` and no ``current-context``, a context that is not in the file, a context
  without a cluster or user, or naming a cluster or user that is not in the file;
* the cluster: no ``server`` (or one that is not an ``https://``/``http://`` URL), a
  ``certificate-authority`` file that does not exist, ``certificate-authority-data`` that is not base64
  of a PEM block;
* the user: a ``client-certificate``/``client-key``/``token-file`` file that does not exist, one of the
  certificate and key without the other, ``*-data`` that is not base64 of a PEM block, an ``exec`` plugin
  without a command or whose command is not found, a ``token-file`` (kr8s would ignore it and send no
  credentials), an ``auth-provider`` other than ``oidc``, ``username``/``password``.

A relative file is looked up against the kubeconfig's own directory, as kubectl does (kr8s also tries the
working directory first: a file found there is accepted too).

Nothing here decides what the client does with a valid document: a ``None`` answer hands the file to kr8s
unchanged.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import yaml

__all__ = ("document_problem", "kubeconfig_problem", "load_kubeconfig")

_LISTS: Final = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))
#: ``*-data`` fields: base64 of PEM (kr8s also takes the PEM text itself).
_PEM_DATA: Final = {
    "clusters": ("certificate-authority-data",),
    "users": ("client-certificate-data", "client-key-data"),
}
_SERVER_SCHEMES: Final = ("https://", "http://")
#: The body of an entry written as ``cluster: null`` (``user:``, ``context:``).
_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


def load_kubeconfig(path: str) -> tuple[Any, str | None]:
    """``(the parsed document, None)``, or ``(None, the problem)`` when the file cannot be read or parsed."""
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            return yaml.safe_load(handle), None
    except OSError as exc:
        return None, f"cannot read it: {exc.strerror or exc}"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return None, " ".join(f"not valid YAML: {what}{where}".split())


def _named(
    doc: Mapping[str, Any], list_key: str, item_key: str
) -> tuple[dict[str, Mapping[str, Any]], str | None]:
    entries = doc.get(list_key)
    if entries is None:
        return {}, None
    if not isinstance(entries, list):
        return {}, f"{list_key} is a {_kind(entries)}, not a list"
    found: dict[str, Mapping[str, Any]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not entry.get("name"):
            return {}, f"{list_key}[{index}] has no name"
        if not isinstance(entry["name"], str):
            return {}, f"{list_key}[{index}]: its name is a {_kind(entry['name'])}, not a string"
        if item_key not in entry:  # kr8s indexes every entry's body, used or not
            return {}, f'{item_key} "{entry["name"]}" in {list_key} has no {item_key} field'
        body = entry.get(item_key)
        if body is None:
            body = _EMPTY  # kr8s indexes into it when it is used
        if not isinstance(body, Mapping):
            return {}, f'{item_key} "{entry["name"]}": its {item_key} is a {_kind(body)}, not a mapping'
        found.setdefault(str(entry["name"]), body)  # the first definition of a name wins (kubectl)
    return found, None


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return type(value).__name__


def _file_problem(field: str, value: object, base_dir: str | None) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{field} is not a file name"
    path = os.path.expanduser(value)
    candidates = [path]
    if not os.path.isabs(path) and base_dir is not None:
        candidates.insert(0, os.path.join(base_dir, path))
    if any(os.path.isfile(candidate) for candidate in candidates):
        return None
    return f"{field} {candidates[0]}: no such file"


def _pem_problem(field: str, value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"{field} is empty"
    if "-----" in value:
        return None  # PEM text itself (kr8s takes it as is)
    try:
        decoded = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        return f"{field} is not valid base64 ({exc})"
    if b"-----BEGIN " not in decoded:
        return f"{field} is base64 but not of a PEM block"
    return None


def _cluster_problem(name: str, cluster: Mapping[str, Any], base_dir: str | None) -> str | None:
    server = cluster.get("server")
    if not server:
        return f'cluster "{name}" has no server'
    if not isinstance(server, str) or not server.startswith(_SERVER_SCHEMES):
        return f'cluster "{name}": server {server!r} is not an https:// or http:// URL'
    for field in ("tls-server-name", "proxy-url"):
        if field in cluster and not isinstance(cluster[field], str):
            return f'cluster "{name}": {field} is a {_kind(cluster[field])}, not a string'
    if cluster.get("certificate-authority"):
        found = _file_problem("certificate-authority", cluster["certificate-authority"], base_dir)
        if found:
            return f'cluster "{name}": {found}'
    for field in _PEM_DATA["clusters"]:
        if field in cluster:
            found = _pem_problem(field, cluster[field])
            if found:
                return f'cluster "{name}": {found}'
    return None


def _exec_problem(plugin: object) -> str | None:
    if not isinstance(plugin, Mapping):
        return "exec is not a mapping"
    command = plugin.get("command")
    if not command or not isinstance(command, str):
        return "exec has no command"
    api_version = plugin.get("apiVersion")
    if not api_version:
        return f'exec plugin "{command}" has no apiVersion'
    if api_version == "client.authentication.k8s.io/v1alpha1":
        return f'exec plugin "{command}": apiVersion {api_version} is not supported (use v1 or v1beta1)'
    args = plugin.get("args")
    if args is not None and not (isinstance(args, list) and all(isinstance(arg, str) for arg in args)):
        return f'exec plugin "{command}": args is not a list of strings'
    env = plugin.get("env")
    if env is not None and not (
        isinstance(env, list)
        and all(isinstance(item, Mapping) and {"name", "value"} <= item.keys() for item in env)
    ):
        return f'exec plugin "{command}": env is not a list of name/value pairs'
    if os.sep in command:  # kr8s runs it as given: relative to the working directory
        if os.path.isfile(os.path.expanduser(command)):
            return None
        return f'exec plugin "{command}" not found (looked for from the working directory)'
    if shutil.which(command) is None:
        return f'exec plugin "{command}" not found in $PATH'
    return None


def _user_problem(name: str, user: Mapping[str, Any], base_dir: str | None) -> str | None:
    def where(found: str) -> str:
        return f'user "{name}": {found}'

    cert = "client-certificate" in user or "client-certificate-data" in user
    key = "client-key" in user or "client-key-data" in user
    if cert != key:
        return where(
            "a client certificate without its key" if cert else "a client key without its certificate"
        )
    for field in ("client-certificate", "client-key"):
        if field in user:
            found = _file_problem(field, user[field], base_dir)
            if found:
                return where(found)
    for field in _PEM_DATA["users"]:
        if field in user:
            found = _pem_problem(field, user[field])
            if found:
                return where(found)
    if "token-file" in user:
        found = _file_problem("token-file", user["token-file"], base_dir)
        if found:
            return where(found)
        if not user.get("token"):  # kr8s reads no token-file: the requests would go out anonymous
            return where("token-file is not supported by this client (set token, or use an exec plugin)")
    if "exec" in user:
        found = _exec_problem(user["exec"])
        if found:
            return where(found)
    if "username" in user or "password" in user:
        return where("username/password authentication is not supported (removed in Kubernetes 1.19)")
    provider = user.get("auth-provider")
    if provider is not None:
        provider_name = provider.get("name") if isinstance(provider, Mapping) else None
        if provider_name != "oidc":
            return where(
                f"auth-provider {provider_name!r} is not supported (only oidc; or use an exec plugin)"
            )
        config = provider.get("config") if isinstance(provider, Mapping) else None
        if not isinstance(config, Mapping) or not config.get("id-token"):
            return where("auth-provider oidc has no config.id-token")
    return None


def _entries(doc: object) -> tuple[dict[str, dict[str, Mapping[str, Any]]], str | None]:
    if not isinstance(doc, Mapping):
        return {}, f"not a kubeconfig: the document is a {_kind(doc)}, not a mapping"
    named: dict[str, dict[str, Mapping[str, Any]]] = {}
    for list_key, item_key in _LISTS:
        entries, found = _named(doc, list_key, item_key)
        if found:
            return {}, found
        named[list_key] = entries
    return named, None


def document_problem(doc: object) -> str | None:
    """What makes ``doc`` no kubeconfig document at all (not a mapping; ``clusters``, ``users``,
    ``contexts`` not lists of named entries with mapping bodies), or None. An empty document is one (an
    empty file in a ``$KUBECONFIG`` list adds nothing, as for kubectl)."""
    return None if doc is None else _entries(doc)[1]


def kubeconfig_problem(doc: object, *, context: str | None, base_dir: str | None) -> str | None:
    """The first thing ``doc`` (a parsed kubeconfig) lacks for ``context`` (``--context``; None: its
    ``current-context``), as one line naming the context and what is missing, or None when kr8s can use
    it. ``base_dir`` is the directory relative file names are read from (None: the document was merged
    from several files and its names are absolute already)."""
    if doc is None:
        return "the file is empty (no clusters, users or contexts)"
    named, found = _entries(doc)
    if found is not None or not isinstance(doc, Mapping):
        return found
    contexts = named["contexts"]
    if not contexts:
        return "it has no contexts"
    if context is None:
        current = doc.get("current-context")
        if not current or not isinstance(current, str):
            return f"no current-context is set and no --context was given (contexts: {', '.join(contexts)})"
        if str(current) not in contexts:
            return f'current-context "{current}" is not a context in the file'
        context = str(current)
    elif context not in contexts:
        return None  # the client's own text: context "x" does not exist in <where>
    body = contexts[context]
    if body is _EMPTY:
        return f'context "{context}" is empty (context: null)'
    for list_key, item_key in (("clusters", "cluster"), ("users", "user")):
        ref = body.get(item_key)
        if not ref:
            return f'context "{context}" names no {item_key}'
        if not isinstance(ref, str):
            return f'context "{context}": its {item_key} is a {_kind(ref)}, not a name'
        if ref not in named[list_key]:
            return f'context "{context}" names {item_key} "{ref}", which is not in the file'
        if named[list_key][ref] is _EMPTY:
            return f'context "{context}": {item_key} "{ref}" is empty ({item_key}: null)'
    cluster_name, user_name = str(body["cluster"]), str(body["user"])
    found = _cluster_problem(cluster_name, named["clusters"][cluster_name], base_dir)
    user = _user_problem(user_name, named["users"][user_name], base_dir) if found is None else found
    return None if user is None else f'context "{context}": {user}'
