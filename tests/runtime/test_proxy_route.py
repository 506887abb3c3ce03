"""Which proxy a request to the API server takes (``runtime/proxy.route_for``): client-go's rules.

The tables are Go's own cases (``golang.org/x/net/http/httpproxy/proxy_test.go``: ``proxyForURLTests``,
``UseProxyTests`` with its ``noProxy`` list, ``TestFromEnvironment*``), translated to environments; plus
client-go's kubeconfig ``proxy-url`` (used for every request, its scheme one of http/https/socks5) and
apimachinery's ``NO_PROXY`` CIDR rule. Where Go silently ignores a proxy it cannot parse, we refuse it
with a one-line :class:`ProxyError`.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpustack_worker.runtime.proxy import ProxyError, Route, route_for, split_credentials

NONE = "<nil>"


def env_route(server: str, socks: bool = True, **env: str) -> str:
    route = route_for(server, proxy_url=None, env=env, socks=socks)
    return NONE if route is None else route.url


# Go's proxyForURLTests (the CGI case is below): (http_proxy, https_proxy, no_proxy, request, want).
GO_PROXY_FOR_URL = [
    ("127.0.0.1:8080", "", "", "", "http://127.0.0.1:8080"),
    ("cache.corp.example.com:1234", "", "", "", "http://cache.corp.example.com:1234"),
    ("cache.corp.example.com", "", "", "", "http://cache.corp.example.com"),
    ("localhost", "", "", "", "http://localhost"),
    ("https://cache.corp.example.com", "", "", "", "https://cache.corp.example.com"),
    ("http://127.0.0.1:8080", "", "", "", "http://127.0.0.1:8080"),
    ("https://127.0.0.1:8080", "", "", "", "https://127.0.0.1:8080"),
    ("socks5://127.0.0.1", "", "", "", "socks5://127.0.0.1"),
    ("http.proxy.tld", "secure.proxy.tld", "", "http://insecure.tld/", "http://http.proxy.tld"),
    ("http.proxy.tld", "secure.proxy.tld", "", "https://secure.tld/", "http://secure.proxy.tld"),
    ("http.proxy.tld", "https://secure.proxy.tld", "", "https://secure.tld/", "https://secure.proxy.tld"),
    ("http.proxy.tld", "", "", "https://secure.tld/", NONE),
    ("http.proxy.tld", "", "", "ftp://insecure.tld/", NONE),
    ("", "", "", "", NONE),
    ("proxy", "", "example.com", "http://example.com/", NONE),
    ("proxy", "", ".example.com", "http://example.com/", "http://proxy"),
    ("proxy", "", "ample.com", "http://example.com/", "http://proxy"),
    ("proxy", "", "example.com", "http://foo.example.com/", NONE),
    ("proxy", "", ".foo.com", "http://example.com/", "http://proxy"),
    ("proxy", "", ".示例.com", "http://www.示例.com", NONE),
    ("proxy", "", "xn--fsq092h.com", "http://www.示例.com", NONE),
    ("proxy", "", "示例.com", "http://www.xn--fsq092h.com", NONE),
    ("proxy", "", "example.com", "http://[1000::%25.example.com]:123", "http://proxy"),
]


@pytest.mark.parametrize(("http", "https", "no_proxy", "request_url", "want"), GO_PROXY_FOR_URL)
def test_go_proxy_for_url_cases(http: str, https: str, no_proxy: str, request_url: str, want: str) -> None:
    env = {"http_proxy": http, "https_proxy": https, "no_proxy": no_proxy}
    assert env_route(request_url or "http://example.com", **env) == want


def test_go_refuses_http_proxy_in_a_cgi_environment_but_not_https_proxy() -> None:
    with pytest.raises(ProxyError, match=r"^\$HTTP_PROXY='http://10.1.2.3:8080': refusing .* CGI"):
        env_route("http://example.com", HTTP_PROXY="http://10.1.2.3:8080", REQUEST_METHOD="GET")
    got = env_route("https://secure.tld/", HTTPS_PROXY="https://secure.proxy.tld", REQUEST_METHOD="GET")
    assert got == "https://secure.proxy.tld"


# Go's UseProxyTests against its noProxy list: (host, proxied).
GO_NO_PROXY = (
    "foobar.com, .barbaz.net, *.wildcard.io, 192.168.1.1, 192.168.1.2:81, 192.168.1.3:80, 10.0.0.0/30, "
    "2001:db8::52:0:1, [2001:db8::52:0:2]:443, [2001:db8::52:0:3]:80, 2002:db8:a::45/64"
)
GO_USE_PROXY = [
    ("localhost", False),
    ("127.0.0.1", False),
    ("127.0.0.2", False),
    ("[::1]", False),
    ("[::2]", True),
    ("192.168.1.1", False),
    ("192.168.1.2", True),
    ("192.168.1.3", False),
    ("192.168.1.4", True),
    ("10.0.0.2", False),
    ("[2001:db8::52:0:1]", False),
    ("[2001:db8::52:0:2]", True),
    ("[2001:db8::52:0:3]", False),
    ("[2002:db8:a::123]", False),
    ("[fe80::424b:c8be:1643:a1b6]", True),
    ("barbaz.net", True),
    ("www.barbaz.net", False),
    ("foobar.com", False),
    ("www.foobar.com", False),
    ("foofoobar.com", True),
    ("baz.com", True),
    ("localhost.net", True),
    ("local.localhost", True),
    ("barbarbaz.net", True),
    ("wildcard.io", True),
    ("nested.wildcard.io", False),
    ("awildcard.io", True),
]


@pytest.mark.parametrize(("host", "proxied"), GO_USE_PROXY)
@pytest.mark.parametrize("variable", ["NO_PROXY", "no_proxy"])
def test_go_use_proxy_cases(host: str, proxied: bool, variable: str) -> None:
    got = env_route(f"http://{host}:80", HTTP_PROXY="proxy:3128", **{variable: GO_NO_PROXY})
    assert got == ("http://proxy:3128" if proxied else NONE)


@pytest.mark.parametrize(("host", "proxied"), GO_USE_PROXY)
def test_go_all_no_proxy(host: str, proxied: bool) -> None:
    assert env_route(f"https://{host}:80", HTTPS_PROXY="proxy", NO_PROXY="*") == NONE


def test_go_invalid_no_proxy_entry_is_ignored() -> None:
    assert env_route("http://example.com:80", HTTP_PROXY="proxy", NO_PROXY=":1") == "http://proxy"


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"HTTPS_PROXY": "upper"}, ("http://upper", "$HTTPS_PROXY")),
        ({"https_proxy": "lower"}, ("http://lower", "$https_proxy")),
        # Go's TestFromEnvironmentUpperAndLowerCase: the lower-case variable wins.
        ({"HTTPS_PROXY": "upper", "https_proxy": "lower"}, ("http://lower", "$https_proxy")),
        # An empty variable counts as unset.
        ({"HTTPS_PROXY": "upper", "https_proxy": ""}, ("http://upper", "$HTTPS_PROXY")),
        ({"HTTPS_PROXY": "p", "no_proxy": "api.example.com", "NO_PROXY": "other"}, None),
        ({"HTTPS_PROXY": "p", "no_proxy": "", "NO_PROXY": "api.example.com"}, None),
        # the http variable is not used for an https server
        ({"HTTP_PROXY": "p"}, None),
    ],
)
def test_variable_precedence(env: dict[str, str], want: tuple[str, str] | None) -> None:
    route = route_for("https://api.example.com:6443", proxy_url=None, env=env)
    assert (None if route is None else (route.url, route.source)) == want


@pytest.mark.parametrize(
    ("no_proxy", "proxied"),
    [
        ("10.0.0.0/8", False),  # CIDR
        ("10.1.2.3", False),  # IP
        ("10.1.2.3:6443", False),  # IP and the server's port
        ("10.1.2.3:443", True),  # another port
        ("10.1.2.4,10.1.3.0/24", True),
        ("api.example.com", True),  # a name never matches an IP server
        ("::ffff:10.1.2.3", False),  # IPv4-mapped IPv6 is the same address (Go's net.IP.Equal)
    ],
)
def test_no_proxy_for_an_ip_server(no_proxy: str, proxied: bool) -> None:
    got = env_route("https://10.1.2.3:6443", HTTPS_PROXY="http://proxy:3128", NO_PROXY=no_proxy)
    assert got == ("http://proxy:3128" if proxied else NONE)


def test_no_proxy_port_is_compared_with_the_default_port_of_the_server_scheme() -> None:
    assert env_route("https://api.example.com", HTTPS_PROXY="p", NO_PROXY="api.example.com:443") == NONE
    assert env_route("https://api.example.com", HTTPS_PROXY="p", NO_PROXY="api.example.com:80") == "http://p"


def test_client_go_also_skips_the_proxy_for_a_cidr_of_upper_case_no_proxy() -> None:
    """apimachinery's NewProxierWithNoProxyCIDR reads NO_PROXY first; Go's own rule reads no_proxy first."""
    env = {"HTTPS_PROXY": "p", "no_proxy": "example.org", "NO_PROXY": "10.0.0.0/8"}
    assert env_route("https://10.1.2.3:6443", **env) == NONE
    assert env_route("https://11.1.2.3:6443", **env) == "http://p"


@pytest.mark.parametrize("server", ["https://localhost:6443", "https://127.0.0.1:6443", "https://[::1]:6443"])
def test_loopback_is_never_proxied_from_the_environment(server: str) -> None:
    assert env_route(server, HTTPS_PROXY="http://proxy:3128") == NONE


@pytest.mark.parametrize("server", ["https://127.0.0.1:6443", "https://api.example.com", "http://10.0.0.1"])
def test_a_kubeconfig_proxy_url_is_used_for_every_request(server: str) -> None:
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    route = route_for(server, proxy_url="https://kube-proxy.corp:8443", env=env)
    assert route == Route("https://kube-proxy.corp:8443", "kubeconfig proxy-url")


@pytest.mark.parametrize(
    ("proxy_url", "message"),
    [
        ("proxy.corp:3128", r"unsupported proxy scheme 'proxy.corp' \(supported: http, https, socks5\)"),
        ("ftp://proxy.corp", "unsupported proxy scheme 'ftp'"),
        ("socks5h://proxy.corp", "unsupported proxy scheme 'socks5h'"),  # client-go refuses it too
        ("http://proxy.corp:99999", "not a proxy URL"),
        ("http://proxy.corp:abc", "not a proxy URL"),
        ("http://", "no proxy host"),
        ("http://pro xy:80", "a blank or control character"),
    ],
)
def test_a_bad_kubeconfig_proxy_url_is_one_line_naming_it(proxy_url: str, message: str) -> None:
    with pytest.raises(ProxyError, match=message) as caught:
        route_for("https://10.0.0.1:6443", proxy_url=proxy_url, env={})
    assert str(caught.value).startswith(f"kubeconfig proxy-url={proxy_url!r}: ")
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://proxy:abc", "not a proxy URL"),
        ("proxy:99999", "not a proxy URL"),
        ("foo://host", "unsupported proxy scheme 'foo'"),
        ("http://[::1", "not a proxy URL"),
    ],
)
def test_a_bad_environment_proxy_that_applies_is_one_line_naming_the_variable(
    value: str, message: str
) -> None:
    with pytest.raises(ProxyError, match=message) as caught:
        route_for("https://api.example.com", proxy_url=None, env={"https_proxy": value})
    assert str(caught.value).startswith(f"$https_proxy={value!r}: ")
    assert "\n" not in str(caught.value)
    # Covered by no_proxy, it is not used, so it is no error (as in Go).
    covered = {"https_proxy": value, "no_proxy": "*"}
    assert route_for("https://api.example.com", proxy_url=None, env=covered) is None


def test_socks5_needs_socksio() -> None:
    with pytest.raises(ProxyError, match="needs the 'socksio' package"):
        route_for("https://10.0.0.1", proxy_url="socks5://p:1080", env={}, socks=False)
    with pytest.raises(ProxyError, match=r"^\$HTTPS_PROXY='socks5h://p': .*socksio"):
        route_for("https://10.0.0.1", proxy_url=None, env={"HTTPS_PROXY": "socks5h://p"}, socks=False)
    assert route_for("https://10.0.0.1", proxy_url="socks5://p:1080", env={}, socks=True) == Route(
        "socks5://p:1080", "kubeconfig proxy-url"
    )


def test_the_password_of_a_proxy_is_not_displayed() -> None:
    route = route_for("https://10.0.0.1", proxy_url="http://me:s3cret@proxy:3128", env={})
    assert route is not None
    assert route.url == "http://me:s3cret@proxy:3128"
    assert "s3cret" not in str(route)
    assert str(route) == "via proxy http://me:***@proxy:3128 (kubeconfig proxy-url)"


# -- properties ----------------------------------------------------------------------------------------

labels = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=6)
names = st.lists(labels, min_size=1, max_size=4).map(".".join)


def model_excludes(entry: str, host: str) -> bool:
    """NO_PROXY domain semantics as Go documents them: ``foo.com`` matches foo.com and its subdomains;
    ``.y.com`` and ``*.y.com`` only the subdomains of y.com."""
    if entry.startswith("*."):
        entry = entry[1:]
    if entry.startswith("."):
        return host.endswith(entry)
    return host == entry or host.endswith("." + entry)


@example(host="example.com", entry="ample.com", form="")
@example(host="example.com", entry="example.com", form=".")
@example(host="a.example.com", entry="example.com", form="*.")
@given(host=names, entry=names, form=st.sampled_from(["", ".", "*."]))
def test_no_proxy_domain_entries_match_as_go_documents(host: str, entry: str, form: str) -> None:
    entry_text = form + entry
    proxied = env_route(f"https://{host}:6443", HTTPS_PROXY="p", NO_PROXY=f"other.invalid, {entry_text}")
    assert (proxied == NONE) == model_excludes(entry_text, host)


octets = st.integers(0, 255)


@example(a=10, b=20, c=255, d=1, bits=16, env_case="no_proxy")
@example(a=10, b=21, c=0, d=1, bits=16, env_case="NO_PROXY")
@example(a=10, b=20, c=0, d=1, bits=16, env_case="no_proxy over NO_PROXY")
@example(a=10, b=20, c=0, d=1, bits=16, env_case="NO_PROXY over no_proxy")
@given(
    a=octets,
    b=octets,
    c=octets,
    d=octets,
    bits=st.integers(0, 32),
    env_case=st.sampled_from(["NO_PROXY", "no_proxy", "no_proxy over NO_PROXY", "NO_PROXY over no_proxy"]),
)
def test_an_ip_server_in_a_no_proxy_cidr_is_direct_and_outside_it_proxied(
    a: int, b: int, c: int, d: int, bits: int, env_case: str
) -> None:
    """Go's rule (``no_proxy`` read first) and client-go's CIDR rule (``NO_PROXY`` first) each alone."""
    server_ip = (a << 24) | (b << 16) | (c << 8) | d
    base = (10 << 24) | (20 << 16)
    mask = ((1 << 32) - 1) ^ ((1 << (32 - bits)) - 1)
    inside = (server_ip & mask) == (base & mask)
    dotted = ".".join(str((server_ip >> s) & 255) for s in (24, 16, 8, 0))
    cidr = f"10.20.0.0/{bits}"
    env = {"HTTPS_PROXY": "p"}
    if env_case == "no_proxy over NO_PROXY":
        env |= {"no_proxy": cidr, "NO_PROXY": "example.org"}
    elif env_case == "NO_PROXY over no_proxy":
        env |= {"NO_PROXY": cidr, "no_proxy": "example.org"}
    else:
        env[env_case] = cidr
    got = env_route(f"https://{dotted}:6443", **env)
    assert (got == NONE) == (inside or a == 127)


@given(
    server=st.sampled_from(
        ["https://127.0.0.1:6443", "https://localhost", "https://[::1]:443", "https://127.9.9.9"]
    ),
    env=st.dictionaries(
        st.sampled_from(["HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "HTTP_PROXY"]),
        st.sampled_from(["", "proxy:3128", "https://p", "example.com", "10.0.0.0/8", "*"]),
    ),
)
def test_loopback_servers_never_take_an_environment_proxy(server: str, env: dict[str, str]) -> None:
    assert route_for(server, proxy_url=None, env=env) is None


@pytest.mark.parametrize(
    ("url", "address", "credentials"),
    [
        ("http://proxy:3128", "http://proxy:3128", None),
        ("http://kube@proxy:3128", "http://proxy:3128", ("kube", "")),
        ("https://kube:p%40ss%3Aw%25rd@proxy:3128", "https://proxy:3128", ("kube", "p@ss:w%rd")),
        ("http://a%20b:c@[2001:db8::1]:8080/", "http://[2001:db8::1]:8080/", ("a b", "c")),
    ],
)
def test_split_credentials(url: str, address: str, credentials: tuple[str, str] | None) -> None:
    assert split_credentials(url) == (address, credentials)
