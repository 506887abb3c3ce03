"""A real HTTP proxy process for tests: proxy.py (PyPI ``proxy.py``), plain ``http://`` or ``https://``.

:func:`running_proxy` starts ``python -m proxy`` on a free 127.0.0.1 port (``--port 0``, the port read
from its ``--port-file``), as a plain CONNECT proxy or, with ``tls=True``, as an https proxy (TLS from the
client to the proxy; its certificate, for 127.0.0.1 and ``localhost``, is signed by a CA made here, whose
PEM is :attr:`RealProxy.ca_pem`), and waits until it accepts. :class:`ConnectLog`, a proxy.py plugin
loaded into the process, appends one line per upstream connection the proxy opens (``CONNECT host:port``
for a tunnel, ``GET host:port`` for a forwarded plain-http request) to a file *before* it connects, so
once a request through a new tunnel has been answered its line is there (:meth:`RealProxy.connects`).
proxy.py's own access log (written when a connection closes) is kept too (:meth:`RealProxy.access_log`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack_worker.devcluster.pki import Authority
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

try:  # only inside the proxy process (and where proxy.py is installed)
    from proxy.http.proxy import HttpProxyBasePlugin
except ImportError:  # pragma: no cover
    HttpProxyBasePlugin = object

#: Environment variable naming the file :class:`ConnectLog` appends to.
LOG_ENV = "GPUSTACK_TEST_PROXY_CONNECT_LOG"
#: How long the proxy may take to start on a loaded machine.
START_DEADLINE_S = 120.0


class ConnectLog(HttpProxyBasePlugin):  # type: ignore[misc,valid-type]
    """proxy.py plugin: one line per upstream connection, written before the proxy connects."""

    def before_upstream_connection(self, request: Any) -> Any:
        method = request.method.decode() if request.method else "?"
        host = request.host.decode() if request.host else "?"
        with open(os.environ[LOG_ENV], "a") as out:
            out.write(f"{method} {host}:{request.port}\n")
        return request

    def handle_client_request(self, request: Any) -> Any:
        return request

    def handle_upstream_chunk(self, chunk: Any) -> Any:
        return chunk

    def on_upstream_connection_close(self) -> None:
        return None


@dataclass
class RealProxy:
    """A running proxy.py process."""

    scheme: str
    port: int
    #: The CA that signed an https proxy's certificate (PEM), None for a plain one.
    ca_pem: bytes | None
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.directory / "proxy-ca.pem"

    def connects(self) -> list[str]:
        """``host:port`` of every CONNECT tunnel the proxy opened so far, in order."""
        return [line.split(" ", 1)[1] for line in self.upstream() if line.startswith("CONNECT ")]

    def upstream(self) -> list[str]:
        """Every upstream connection (``METHOD host:port``) the proxy opened so far, in order."""
        path = self.directory / "connects.log"
        return path.read_text().splitlines() if path.exists() else []

    def access_log(self) -> str:
        """proxy.py's own log (access lines are written when a client connection closes)."""
        path = self.directory / "proxy.log"
        return path.read_text() if path.exists() else ""


def make_ca_and_certificate() -> tuple[bytes, bytes, bytes]:
    """A CA (PEM) and a certificate for 127.0.0.1/localhost it signed, with its key: (ca, cert, key)."""
    ca = Authority.create("gpustack test proxy CA", path_length=0)
    cert, key = ca.issue("127.0.0.1", hosts=("127.0.0.1", "localhost"))
    return ca.cert_pem, cert, key


def _accepting_port(process: subprocess.Popen[bytes], port_file: Path, log: Path) -> int | None:
    """The port proxy.py wrote to its port file, once a connection to it is accepted (None before);
    RuntimeError with its log if it exited."""
    if process.poll() is not None:
        raise RuntimeError(f"proxy.py exited with {process.returncode}: {log.read_text()[-2000:]}")
    text = port_file.read_text().strip() if port_file.exists() else ""
    if not text:
        return None
    port = int(text.split()[0])
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        return port
    return None


@contextlib.contextmanager
def running_proxy(directory: Path, *, tls: bool, basic_auth: str | None = None) -> Iterator[RealProxy]:
    """Run proxy.py in ``directory`` (its logs, port file and certificates) until the block ends;
    ``basic_auth`` (``user:password``): it answers 407 to a request without these credentials."""
    directory.mkdir(parents=True, exist_ok=True)
    port_file = directory / "port"
    log = directory / "proxy.log"
    args = [
        sys.executable,
        "-m",
        "proxy",
        "--hostname",
        "127.0.0.1",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--num-acceptors",
        "1",
        "--num-workers",
        "1",
        "--log-file",
        str(log),
        "--log-level",
        "INFO",
        "--plugins",
        f"{__name__}.ConnectLog",
    ]
    if basic_auth is not None:
        args += ["--basic-auth", basic_auth]
    ca_pem = None
    if tls:
        ca_pem, cert, key = make_ca_and_certificate()
        (directory / "proxy-ca.pem").write_bytes(ca_pem)
        (directory / "proxy-cert.pem").write_bytes(cert + ca_pem)
        (directory / "proxy-key.pem").write_bytes(key)
        args += ["--cert-file", str(directory / "proxy-cert.pem")]
        args += ["--key-file", str(directory / "proxy-key.pem")]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, LOG_ENV: str(directory / "connects.log")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    process = subprocess.Popen(
        args, cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        port = eventually_sync(
            lambda: _accepting_port(process, port_file, log), within=START_DEADLINE_S, every=0.1
        )
        yield RealProxy("https" if tls else "http", port, ca_pem, directory, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
