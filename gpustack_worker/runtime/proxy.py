"""Which proxy a request to the API server goes through: client-go's rules, decided without I/O.

kubectl (client-go) picks the proxy of a cluster this way, and so do both processes here:

- the kubeconfig cluster's ``proxy-url`` (kr8s: ``api.auth.proxy``), when set, is used for every request
  to that server, loopback included (client-go sets ``http.ProxyURL``); its scheme must be ``http``,
  ``https`` or ``socks5`` (client-go's kubeconfig validation);
- otherwise Go's ``http.ProxyFromEnvironment`` (``golang.org/x/net/http/httpproxy``): ``https_proxy`` /
  ``HTTPS_PROXY`` for an ``https://`` server, ``http_proxy`` / ``HTTP_PROXY`` for ``http://``, the
  lower-case variable winning when both are set and not empty; a value without a scheme means
  ``http://``; ``localhost`` and loopback addresses are never proxied; ``no_proxy`` / ``NO_PROXY`` is a
  comma-separated list of ``*`` (nothing is proxied), IPs and CIDRs, and domain names that match the
  name and its subdomains (``.example.com`` and ``*.example.com``: subdomains only), each optionally with
  a ``:port``; client-go also skips the proxy for an IP in a CIDR of ``NO_PROXY`` (read before
  ``no_proxy``), apimachinery's ``NewProxierWithNoProxyCIDR``;
- in a CGI environment (``REQUEST_METHOD`` set) an ``http://`` server's environment proxy is refused, as
  Go refuses it.

Where Go silently drops an environment proxy it cannot parse (and connects directly), this module refuses
it with :class:`ProxyError` naming the variable and the value: a proxy that is meant to be used and is not
is a start-up error, not a surprise later. Schemes the session can speak: ``http`` and ``https`` (an
``https`` proxy is TLS to the proxy, then TLS to the API server inside the CONNECT tunnel); ``socks5``
(and ``socks5h`` from the environment) only when ``socksio`` is installed (``pip install httpx[socks]``).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("ProxyError", "Route", "route_for", "socks_available", "split_credentials")

#: Schemes a kubeconfig ``proxy-url`` may have (client-go's ``parseProxyURL``).
KUBECONFIG_SCHEMES: Final = ("http", "https", "socks5")
#: Schemes the session speaks without extra packages.
PLAIN_SCHEMES: Final = ("http", "https")
#: Schemes that need ``socksio``.
SOCKS_SCHEMES: Final = ("socks5", "socks5h")
#: Default ports by scheme (Go's ``portMap``).
_PORTS: Final = {"http": "80", "https": "443", "socks5": "1080"}

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_Net = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxyError(ValueError):
    """A proxy setting that cannot be used; ``str()`` is one line naming the setting and its value."""

    def __init__(self, source: str, value: str, reason: str) -> None:
        super().__init__(f"{source}={value!r}: {reason}")
        self.source = source
        self.value = value
        self.reason = reason


@dataclass(frozen=True)
class Route:
    """Go through the proxy at ``url``, chosen by ``source`` (``"kubeconfig proxy-url"``, ``"$HTTPS_PROXY"``,
    ``"$https_proxy"``, ...)."""

    url: str
    source: str

    @property
    def display(self) -> str:
        """``url`` without a password, for log lines and messages."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = f"{parts.username}:***@{parts.netloc.rpartition('@')[2]}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def __str__(self) -> str:
        return f"via proxy {self.display} ({self.source})"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user and password, and them (percent-decoded), for the proxy's
    ``Proxy-Authorization: Basic`` (or SOCKS) credentials, as Go's transport sends a proxy URL's userinfo.
    httpcore drops a proxy URL's userinfo silently: they must be passed as ``proxy_auth``."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    address = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    user = urllib.parse.unquote(parts.username)
    return address, (user, urllib.parse.unquote(parts.password or ""))


def socks_available() -> bool:
    """Whether httpcore can speak SOCKS here (it needs ``socksio``)."""
    return importlib.util.find_spec("socksio") is not None


def route_for(
    server: str, *, proxy_url: str | None, env: Mapping[str, str], socks: bool | None = None
) -> Route | None:
    """The proxy for requests to ``server`` (the kubeconfig's ``https://host:port[/path]``), or ``None``
    to connect directly. ``proxy_url`` is the kubeconfig cluster's ``proxy-url``; ``env`` the process
    environment; ``socks`` whether SOCKS is available (default: :func:`socks_available`). Raises
    :class:`ProxyError` for a proxy setting that applies and cannot be used."""
    if proxy_url:
        return _checked(proxy_url, "kubeconfig proxy-url", KUBECONFIG_SCHEMES, socks)
    target = urllib.parse.urlsplit(server)
    scheme = target.scheme.lower()
    if scheme == "https":
        names = ("https_proxy", "HTTPS_PROXY")
    elif scheme == "http":
        names = ("http_proxy", "HTTP_PROXY")
    else:
        return None
    found = _first(env, names)
    if found is None:
        return None
    name, value = found
    if scheme == "http" and env.get("REQUEST_METHOD"):
        raise ProxyError(
            f"${name}", value, "refusing to use HTTP_PROXY value in CGI environment (REQUEST_METHOD is set)"
        )
    url = _env_proxy(value, f"${name}")
    host, port = _canonical(target)
    if not _use_proxy(host, port, env):
        return None
    return _checked(url, f"${name}", PLAIN_SCHEMES + SOCKS_SCHEMES, socks, given=value)


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name)
        if value:
            return name, value
    return None


def _env_proxy(value: str, source: str) -> str:
    """Go's ``parseProxy``: a value without a scheme (``host``, ``host:port``) means ``http://``."""
    return value if "://" in value else "http://" + value


def _checked(
    url: str, source: str, schemes: tuple[str, ...], socks: bool | None, given: str | None = None
) -> Route:
    """``url`` as a :class:`Route`, or :class:`ProxyError` naming ``source`` and the value as it was
    ``given``."""
    value = url if given is None else given
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018
    except ValueError as exc:
        raise ProxyError(source, value, f"not a proxy URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        allowed = ", ".join(schemes)
        raise ProxyError(source, value, f"unsupported proxy scheme {scheme!r} (supported: {allowed})")
    if not parts.hostname:
        raise ProxyError(source, value, "no proxy host")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ProxyError(source, value, "not a proxy URL (a blank or control character)")
    if scheme in SOCKS_SCHEMES and not (socks_available() if socks is None else socks):
        raise ProxyError(
            source, value, "a SOCKS proxy needs the 'socksio' package (pip install 'httpx[socks]')"
        )
    return Route(url=url, source=source)


def _canonical(target: urllib.parse.SplitResult) -> tuple[str, str]:
    """Go's ``canonicalAddr``: the host (IDNA-encoded, IPv6 without brackets, a zone unescaped) and the
    port, the scheme's default when none is given."""
    host = urllib.parse.unquote(target.hostname or "")
    hostport = target.netloc.rpartition("@")[2]
    after_host = hostport.rpartition("]")[2] if hostport.startswith("[") else hostport
    port = after_host.rpartition(":")[2] if ":" in after_host else ""
    return _ascii(host), port or _PORTS.get(target.scheme.lower(), "")


def _ascii(host: str) -> str:
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _ip(text: str) -> _IP | None:
    """An IP address (IPv4-mapped IPv6 read as IPv4, like Go's ``net.IP``), or ``None``."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _cidr(text: str) -> _Net | None:
    """``addr/bits`` (Go's ``net.ParseCIDR``: host bits may be set), or ``None``."""
    addr, slash, bits = text.partition("/")
    if not slash or not bits.isdigit() or "%" in addr:
        return None
    try:
        return ipaddress.ip_network(f"{addr}/{bits}", strict=False)
    except ValueError:
        return None


def _split_host_port(text: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort``: ``None`` where it returns an error."""
    colon = text.rfind(":")
    if colon < 0:
        return None
    start, after = 0, 0
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or end + 1 != colon:
            return None
        host = text[1:end]
        start, after = 1, end + 1
    else:
        host = text[:colon]
        if ":" in host:
            return None
    if "[" in text[start:] or "]" in text[after:]:
        return None
    return host, text[colon + 1 :]


def _use_proxy(host: str, port: str, env: Mapping[str, str]) -> bool:
    """Go's ``useProxy`` over the ``no_proxy`` list, plus client-go's ``NO_PROXY`` CIDRs."""
    if host == "localhost":
        return False
    ip = _ip(host)
    if ip is not None and ip.is_loopback:
        return False
    host = host.strip().lower()
    if ip is not None and any(ip in net for net in _client_go_cidrs(env) if ip.version == net.version):
        return False
    _, found = _first(env, ("no_proxy", "NO_PROXY")) or ("", "")
    return not any(_excludes(entry, host, port, ip) for entry in found.split(","))


def _client_go_cidrs(env: Mapping[str, str]) -> list[_Net]:
    """apimachinery's ``NewProxierWithNoProxyCIDR``: the CIDRs of ``NO_PROXY`` (``no_proxy`` when it is
    empty), entries not trimmed."""
    text = env.get("NO_PROXY") or env.get("no_proxy") or ""
    return [net for net in map(_cidr, text.split(",")) if net is not None]


def _excludes(entry: str, host: str, port: str, ip: _IP | None) -> bool:
    """Whether one ``no_proxy`` entry keeps ``host:port`` off the proxy (Go's ``config.init`` and its
    matchers)."""
    entry = entry.strip().lower()
    if not entry:
        return False
    if entry == "*":
        return True
    net = _cidr(entry)
    if net is not None:
        return ip is not None and ip.version == net.version and ip in net
    split = _split_host_port(entry)
    if split is not None:
        entry_host, entry_port = split
        if not entry_host:
            return False
        if entry_host.startswith("[") and entry_host.endswith("]"):
            entry_host = entry_host[1:-1]
    else:
        entry_host, entry_port = entry, ""
    entry_ip = None if "%" in entry_host else _ip(entry_host)
    if entry_ip is not None:
        return ip is not None and entry_ip == ip and entry_port in ("", port)
    if not entry_host or ip is not None:
        return False
    if entry_host.startswith("*."):
        entry_host = entry_host[1:]
    exact = not entry_host.startswith(".")
    suffix = "." + _ascii(entry_host.lstrip("."))
    matches = host.endswith(suffix) or (exact and host == suffix[1:])
    return matches and entry_port in ("", port)
