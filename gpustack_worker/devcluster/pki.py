"""Certificates and credentials for a loopback control plane, and throw-away certificates for tests.

One CA signs a serving certificate valid for 127.0.0.1/localhost, used by kube-apiserver and by Kueue's
webhook and metrics servers. Service-account tokens are signed with a separate RSA key. Clients
authenticate with a static bearer token in ``system:masters`` (simpler than client certificates and
enough for a single-user local cluster).

:class:`Authority` (a CA that issues server and client certificates) and :func:`self_signed` (a certificate
that is its own CA) are the one place certificates are made: the dev cluster's and every test server's
(a proxy, an inventory endpoint, a server that never answers). The CA carries key usage and a subject key
identifier, every leaf an authority key identifier, so a strict verifier (Python 3.13's
``VERIFY_X509_STRICT``, Go's crypto/x509) accepts the chain.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ("Authority", "Pki", "make_pki", "pem_key", "self_signed")

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of everything :func:`make_pki` wrote, plus the admin token."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    admin_token: str
    #: The API server's client certificate towards kubelets (``logs``, ``exec``): CN
    #: ``kube-apiserver-kubelet-client`` in ``system:masters``, as kubeadm issues it.
    kubelet_client_cert: Path
    kubelet_client_key: Path


def pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Subject alternative names: an IP address where ``host`` is one, else a DNS name."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _start() -> datetime.datetime:
    """Validity starts a little in the past: clocks of the processes checking it may lag ours."""
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Authority:
    """A certificate authority (EC P-256): ``cert_pem`` is the bundle a client trusts."""

    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @classmethod
    def create(
        cls,
        name: str = "gpustack-worker test CA",
        *,
        path_length: int | None = None,
        validity: datetime.timedelta = _VALIDITY,
    ) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _start()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(name, key, cert)

    def issue(
        self,
        common_name: str,
        *,
        server: bool = True,
        client: bool = False,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
        validity: datetime.timedelta = _VALIDITY,
        organization: str | None = None,
    ) -> tuple[bytes, bytes]:
        """``(cert_pem, key_pem)`` of a leaf for a server (``hosts`` as its names), a client
        (``server=False``), or both (``client=True``); a client's groups are its ``organization``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _start()
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * (
            client or not server
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        *(
                            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]
                            if organization
                            else []
                        ),
                        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                    ]
                )
            )
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server and hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)


def self_signed(
    common_name: str,
    hosts: Sequence[str] = ("127.0.0.1",),
    *,
    validity: datetime.timedelta = _VALIDITY,
) -> tuple[bytes, bytes]:
    """``(cert_pem, key_pem)`` of a serving certificate that is its own CA (a client trusts the certificate
    itself), valid for ``hosts``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _start()
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def make_pki(directory: Path, extra_hosts: Sequence[str] = ()) -> Pki:
    """Write a fresh CA, serving cert, SA key pair and token file into ``directory``; the serving
    certificate names localhost and ``extra_hosts`` (addresses or DNS names)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority.create("gpustack-devcluster-ca")
    serving_cert, serving_key = ca.issue(
        "localhost", server=True, client=True, hosts=("localhost", "127.0.0.1", *extra_hosts)
    )
    kubelet_client_cert, kubelet_client_key = ca.issue(
        "kube-apiserver-kubelet-client", server=False, organization="system:masters"
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = secrets.token_hex(24)
    return Pki(
        ca_cert=_write(directory / "ca.crt", ca.cert_pem, 0o644),
        serving_cert=_write(directory / "serving.crt", serving_cert, 0o644),
        serving_key=_write(directory / "serving.key", serving_key),
        sa_key=_write(directory / "sa.key", pem_key(sa_key)),
        sa_pub=_write(
            directory / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        ),
        token_file=_write(
            directory / "tokens.csv", f'{token},devcluster-admin,uid-admin,"system:masters"\n'.encode()
        ),
        admin_token=token,
        kubelet_client_cert=_write(directory / "kubelet-client.crt", kubelet_client_cert, 0o644),
        kubelet_client_key=_write(directory / "kubelet-client.key", kubelet_client_key),
    )
