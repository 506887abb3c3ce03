"""Every rule of a ``TopologySource`` spec (the table in docs/topology.md, "Admission webhook"), on the
raw JSON object.

Used twice: by the validating admission webhook (:mod:`gpustack_worker.topology.admission`), which
refuses an invalid source at CREATE/UPDATE, and again by the reconciler, which must not act on a source
that predates a rule or reached the API server while the webhook was not registered. The CRD's CEL
rules state some of these too; this module checks all of them itself, including the ones CEL cannot
(references in the worker namespace, URL structure, selector parsing, qualified label keys).

:func:`spec_errors` takes the API server's camelCase ``spec`` (a plain mapping, *not* the pydantic
model), so a malformed object — ``levels`` not a list, an arm that is a string — yields errors, never an
exception. Each :class:`FieldError` names the exact field path (``spec.levels[2]``,
``spec.webhook.url``); ``str(error)`` is ``"<path>: <message>"``.

:func:`parse_duration` parses ``metav1.Duration`` text with Go's ``time.ParseDuration`` grammar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from gpustack_worker.api import keys, validation
from gpustack_worker.api.crds.topology_source import FORBIDDEN_WRITE_PREFIXES, LEVELS_LIMIT_REASON
from gpustack_worker.api.topology_limits import KUEUE_LEVEL_LABEL_MAX, SOURCE_LEVELS_MAX
from gpustack_worker.topology.field_error import FieldError, child, index
from gpustack_worker.topology.selector import selector_errors

__all__ = (
    "ARMS",
    "MAX_LEVELS",
    "FieldError",
    "format_errors",
    "level_limit_errors",
    "parse_duration",
    "parse_duration_ns",
    "spec_errors",
)

#: The inventory arms; exactly one must be set.
ARMS: Final = ("nodeLabels", "configMap", "webhook")
#: ``spec.levels`` holds 1..15 keys: Kueue's 16 less the implicit hostname (api/topology_limits.py).
MAX_LEVELS: Final = SOURCE_LEVELS_MAX
#: The CRD's bound on ``webhook.url``.
URL_MAX: Final = 2048
#: apimachinery ``IsConfigMapKey``: at most 253 characters of this alphabet.
_CONFIGMAP_KEY_MAX: Final = 253
_CONFIGMAP_KEY_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._")

# --- Go durations -----------------------------------------------------------------------------------

_NS: Final = 1
_UNITS: Final[dict[bytes, int]] = {
    b"ns": _NS,
    b"us": 1_000,
    "µs".encode(): 1_000,  # U+00B5 micro sign
    "μs".encode(): 1_000,  # U+03BC Greek mu
    b"ms": 1_000_000,
    b"s": 1_000_000_000,
    b"m": 60_000_000_000,
    b"h": 3_600_000_000_000,
}
_MAX_NS: Final = 1 << 63
_DIGITS: Final = frozenset(b"0123456789")
_DOT: Final = ord(".")


def parse_duration_ns(text: str) -> int:
    """Go's ``time.ParseDuration`` (what ``metav1.Duration`` decodes with), in integer nanoseconds.

    Grammar ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` with units ns, us (µs, μs), ms, s, m, h, or a bare
    ``0``; ``1h30m``, ``1.5h``, ``.5s``, ``500ms``. Raises :class:`ValueError` with Go's wording for
    anything else (empty, a missing or unknown unit, spaces, overflow beyond ±2^63-1 ns).
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: not a string")
    s = text.encode("utf-8", "surrogatepass")
    neg = False
    if s[:1] in (b"-", b"+"):
        neg = s[:1] == b"-"
        s = s[1:]
    if s == b"0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    while s:
        if s[0] != _DOT and s[0] not in _DIGITS:
            raise ValueError(f"invalid duration {text!r}")
        i = 0
        while i < len(s) and s[i] in _DIGITS:
            i += 1
        whole = int(s[:i]) if i else 0
        pre = i > 0
        s = s[i:]
        frac, scale, post = 0, 1, False
        if s and s[0] == _DOT:
            s = s[1:]
            j = 0
            while j < len(s) and s[j] in _DIGITS:
                j += 1
            post = j > 0
            if post:
                digits = s[:j]
                frac, scale = int(digits), 10 ** len(digits)
            s = s[j:]
        if not pre and not post:
            raise ValueError(f"invalid duration {text!r}")
        u = 0
        while u < len(s) and s[u] != _DOT and s[u] not in _DIGITS:
            u += 1
        if u == 0:
            raise ValueError(f"missing unit in duration {text!r}")
        unit = s[:u]
        s = s[u:]
        if unit not in _UNITS:
            shown = unit.decode("utf-8", "replace")
            raise ValueError(f'unknown unit "{shown}" in duration {text!r}')
        scale_ns = _UNITS[unit]
        value = whole * scale_ns + (frac * scale_ns) // scale
        total += value
        if whole > _MAX_NS // scale_ns or total > _MAX_NS:
            raise ValueError(f"invalid duration {text!r}: out of range")
    if not neg and total > _MAX_NS - 1:
        raise ValueError(f"invalid duration {text!r}: out of range")
    return -total if neg else total


def parse_duration(text: str) -> float:
    """:func:`parse_duration_ns` in seconds."""
    return parse_duration_ns(text) / 1e9


# --- helpers ----------------------------------------------------------------------------------------


def _present(spec: Mapping[str, Any], name: str) -> bool:
    return spec.get(name) is not None


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _duration(obj: Mapping[str, Any], name: str, path: str, errors: list[FieldError]) -> int | None:
    """A required positive duration; its nanoseconds when valid."""
    at = child(path, name)
    value = obj.get(name)
    if value is None or value == "":
        errors.append(FieldError(at, "required: a duration such as 30s, 10m or 1h30m"))
        return None
    if not isinstance(value, str):
        errors.append(FieldError(at, f"must be a duration string such as 30s, 10m or 1h30m (is {value!r})"))
        return None
    try:
        ns = parse_duration_ns(value)
    except ValueError as exc:
        errors.append(FieldError(at, f"{exc} (use e.g. 30s, 10m or 1h30m)"))
        return None
    if ns <= 0:
        errors.append(FieldError(at, f"must be greater than zero (is {value})"))
        return None
    return ns


def _ref(
    obj: Mapping[str, Any], name: str, path: str, namespace: str, errors: list[FieldError], *, required: bool
) -> None:
    """A ``{namespace, name}`` reference that must point into the worker namespace."""
    at = child(path, name)
    ref = obj.get(name)
    if ref is None:
        if required:
            errors.append(FieldError(at, f"required: {{namespace: {namespace}, name: ...}}"))
        return
    if not isinstance(ref, Mapping):
        errors.append(FieldError(at, f"must be an object {{namespace: {namespace}, name: ...}}"))
        return
    ns = ref.get("namespace")
    ns_at = child(at, "namespace")
    if ns is None or ns == "":
        errors.append(FieldError(ns_at, f"required: must be the worker namespace {namespace}"))
    elif not isinstance(ns, str):
        errors.append(FieldError(ns_at, f"must be a string: the worker namespace {namespace}"))
    elif ns != namespace:
        errors.append(FieldError(ns_at, f"must be the worker namespace {namespace} (is {ns})"))
    ref_name = ref.get("name")
    name_at = child(at, "name")
    if ref_name is None or ref_name == "":
        errors.append(FieldError(name_at, "required"))
    elif not isinstance(ref_name, str):
        errors.append(FieldError(name_at, "must be a string"))
    else:
        errors.extend(
            FieldError(name_at, f"{ref_name!r} is not a valid object name (DNS-1123 subdomain): {m}")
            for m in validation.dns1123_subdomain(ref_name)
        )


def _object(
    spec: Mapping[str, Any], name: str, path: str, errors: list[FieldError]
) -> Mapping[str, Any] | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.append(FieldError(child(path, name), f"must be an object (is {type(value).__name__})"))
        return None
    return value


# --- the rules --------------------------------------------------------------------------------------


def _node_selector(spec: Mapping[str, Any], errors: list[FieldError]) -> None:
    path = "spec.nodeSelector"
    sel = spec.get("nodeSelector")
    if sel is None:
        errors.append(FieldError(path, "required: a label selector; {} selects every Node"))
        return
    errors.extend(selector_errors(sel, path))


def _too_many(levels: Sequence[Any]) -> FieldError | None:
    if len(levels) <= MAX_LEVELS:
        return None
    return FieldError(
        "spec.levels", f"must list at most {MAX_LEVELS} levels (lists {len(levels)}): {LEVELS_LIMIT_REASON}"
    )


def _too_long(level: str, at: str) -> FieldError | None:
    if len(level) <= KUEUE_LEVEL_LABEL_MAX:
        return None
    return FieldError(
        at,
        f"{level[:40]}... is {len(level)} characters: a Kueue Topology level's nodeLabel holds at most "
        f"{KUEUE_LEVEL_LABEL_MAX}",
    )


def level_limit_errors(spec: Mapping[str, Any] | None) -> list[FieldError]:
    """The problems of ``spec.levels`` that no Kueue Topology could hold: more levels than
    :data:`MAX_LEVELS` (the hostname is appended), a key longer than Kueue's ``nodeLabel`` allows. A
    subset of :func:`spec_errors`; the reconciler reports them as their own reason."""
    levels = spec.get("levels") if isinstance(spec, Mapping) else None
    if levels is None or not _is_list(levels):
        return []
    found = [_too_many(levels)]
    found += [
        _too_long(level, index("spec.levels", i))
        for i, level in enumerate(levels)
        if isinstance(level, str) and not validation.qualified_name(level)
    ]
    return [e for e in found if e is not None]


def _levels(spec: Mapping[str, Any], errors: list[FieldError]) -> None:
    path = "spec.levels"
    levels = spec.get("levels")
    if levels is None:
        errors.append(FieldError(path, f"required: 1 to {MAX_LEVELS} label keys, coarsest first"))
        return
    if not _is_list(levels):
        errors.append(FieldError(path, f"must be a list of 1 to {MAX_LEVELS} label keys, coarsest first"))
        return
    if not levels:
        errors.append(FieldError(path, "must list at least one level"))
    elif (too_many := _too_many(levels)) is not None:
        errors.append(too_many)
    first: dict[str, int] = {}
    for i, level in enumerate(levels):
        at = index(path, i)
        if not isinstance(level, str):
            errors.append(FieldError(at, f"must be a label key string (is {level!r})"))
            continue
        problems = validation.qualified_name(level)
        errors.extend(FieldError(at, f"{level!r} is not a valid label key: {m}") for m in problems)
        if not problems and (too_long := _too_long(level, at)) is not None:
            errors.append(too_long)
        if level == keys.HOSTNAME:
            errors.append(
                FieldError(
                    at, f"{keys.HOSTNAME} is always appended implicitly as the finest level; do not list it"
                )
            )
        elif level in first:
            errors.append(FieldError(at, f"{level} repeats {index(path, first[level])}"))
        else:
            first[level] = i


def _write_prefix(spec: Mapping[str, Any], errors: list[FieldError]) -> None:
    path = "spec.additionalWritePrefix"
    prefix = spec.get("additionalWritePrefix")
    if prefix is None:
        return
    if _present(spec, "nodeLabels"):
        errors.append(FieldError(path, "forbidden with nodeLabels (that arm never writes labels)"))
    if not isinstance(prefix, str):
        errors.append(FieldError(path, f"must be a string such as topology.example.com/ (is {prefix!r})"))
        return
    domain, slash, rest = prefix.partition("/")
    if not slash or rest:
        errors.append(
            FieldError(
                path,
                f"{prefix!r} must be one DNS-1123 subdomain followed by a single '/' (topology.example.com/)",
            )
        )
        return
    problems = validation.dns1123_subdomain(domain)
    if problems:
        errors.extend(FieldError(path, f"{prefix!r}: the domain {m}") for m in problems)
        return
    for reserved in FORBIDDEN_WRITE_PREFIXES:
        if domain == reserved or domain.endswith("." + reserved):
            errors.append(
                FieldError(
                    path,
                    f"{prefix} is reserved: {reserved} and its subdomains are forbidden "
                    f"({', '.join(FORBIDDEN_WRITE_PREFIXES)})",
                )
            )
            return


def _arms(spec: Mapping[str, Any], errors: list[FieldError]) -> None:
    set_arms = [a for a in ARMS if _present(spec, a)]
    if len(set_arms) != 1:
        found = f"found {', '.join(set_arms)}" if set_arms else "none is set"
        errors.append(
            FieldError("spec", f"exactly one of nodeLabels, configMap and webhook must be set ({found})")
        )


def _node_labels(spec: Mapping[str, Any], errors: list[FieldError]) -> None:
    arm = _object(spec, "nodeLabels", "spec", errors)
    if arm:
        errors.append(
            FieldError(
                "spec.nodeLabels",
                f"must be empty ({{}}); unknown field(s): {', '.join(sorted(map(str, arm)))}",
            )
        )


def _configmap_key(value: Any, path: str, errors: list[FieldError]) -> None:
    if value is None or (isinstance(value, str) and not value.strip()):
        errors.append(FieldError(path, "required: the data key holding the snapshot (non-blank)"))
        return
    if not isinstance(value, str):
        errors.append(FieldError(path, f"must be a string (is {value!r})"))
        return
    if len(value) > _CONFIGMAP_KEY_MAX:
        errors.append(
            FieldError(path, f"must be no more than {_CONFIGMAP_KEY_MAX} characters (is {len(value)})")
        )
    if not set(value) <= _CONFIGMAP_KEY_CHARS:
        errors.append(
            FieldError(
                path, f"{value!r} is not a valid ConfigMap key: letters, digits, '-', '_' and '.' only"
            )
        )
    elif value in (".", "..") or value.startswith(".."):
        errors.append(
            FieldError(path, f"{value!r} is not a valid ConfigMap key: must not be '.' or start with '..'")
        )


def _config_map(spec: Mapping[str, Any], namespace: str, errors: list[FieldError]) -> None:
    path = "spec.configMap"
    arm = _object(spec, "configMap", "spec", errors)
    if arm is None:
        return
    _ref(arm, "configMapRef", path, namespace, errors, required=True)
    _configmap_key(arm.get("key"), child(path, "key"), errors)
    _duration(arm, "maxStaleness", path, errors)


def _url(value: Any, path: str, errors: list[FieldError]) -> None:
    if value is None or value == "":
        errors.append(FieldError(path, "required: an absolute https:// URL"))
        return
    if not isinstance(value, str):
        errors.append(FieldError(path, f"must be a string (is {value!r})"))
        return
    if len(value) > URL_MAX:
        errors.append(FieldError(path, f"must be no more than {URL_MAX} characters (is {len(value)})"))
        return
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        errors.append(FieldError(path, "must not contain whitespace or control characters"))
        return
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        errors.append(FieldError(path, f"{value!r} is not a valid URL: {exc}"))
        return
    if parts.scheme != "https" or not value.startswith("https://"):
        errors.append(FieldError(path, f"must be an absolute https:// URL (is {value!r})"))
        return
    if "@" in parts.netloc:
        errors.append(
            FieldError(
                path,
                "must not contain userinfo (user:password@): put credentials in bearerTokenSecretRef or "
                "tlsClientCertificateSecretRef",
            )
        )
    if not parts.hostname:
        errors.append(FieldError(path, f"must name a host (is {value!r})"))
    elif port == 0:
        errors.append(FieldError(path, "port must be between 1 and 65535"))
    if "#" in value:
        errors.append(FieldError(path, "must not contain a fragment (#...)"))


def _webhook(spec: Mapping[str, Any], namespace: str, errors: list[FieldError]) -> None:
    path = "spec.webhook"
    arm = _object(spec, "webhook", "spec", errors)
    if arm is None:
        return
    _url(arm.get("url"), child(path, "url"), errors)
    poll = _duration(arm, "pollInterval", path, errors)
    timeout = _duration(arm, "timeout", path, errors)
    _duration(arm, "maxStaleness", path, errors)
    if poll is not None and timeout is not None and timeout > poll:
        errors.append(
            FieldError(
                child(path, "timeout"),
                f"must not exceed {child(path, 'pollInterval')} ({arm['timeout']} > {arm['pollInterval']})",
            )
        )
    _ref(arm, "caBundleConfigMapRef", path, namespace, errors, required=False)
    credentials = [c for c in ("bearerTokenSecretRef", "tlsClientCertificateSecretRef") if _present(arm, c)]
    if len(credentials) != 1:
        state = "both are set" if credentials else "none is set"
        errors.append(
            FieldError(
                path,
                "exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef must be set "
                f"({state})",
            )
        )
    for credential in ("bearerTokenSecretRef", "tlsClientCertificateSecretRef"):
        _ref(arm, credential, path, namespace, errors, required=False)


def spec_errors(spec: Mapping[str, Any] | None, *, namespace: str) -> list[FieldError]:
    """Every rule of a TopologySource spec broken by ``spec`` (empty when valid), in field order.

    ``namespace`` is the worker (system) namespace every ConfigMap / Secret reference must point into.
    Never raises, whatever the shape of ``spec``.
    """
    if not isinstance(spec, Mapping):
        return [FieldError("spec", "required: an object with nodeSelector, levels and one inventory arm")]
    errors: list[FieldError] = []
    _node_selector(spec, errors)
    _levels(spec, errors)
    _write_prefix(spec, errors)
    _arms(spec, errors)
    _node_labels(spec, errors)
    _config_map(spec, namespace, errors)
    _webhook(spec, namespace, errors)
    return errors


def format_errors(errors: Sequence[FieldError]) -> str:
    """One line listing every error (``spec.levels[1]: ...; spec.webhook.url: ...``)."""
    return "; ".join(str(e) for e in errors)
