"""Certificates and credentials for a loopback control plane.

One CA signs a serving certificate valid for 127.0.0.1/localhost, used by kube-apiserver and by Kueue's
webhook and metrics servers. Service-account tokens are signed with a separate RSA key. Clients
authenticate with a static bearer token in ``system:masters`` (simpler than client certificates and
enough for a single-user local cluster).
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
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("Pki", "make_pki")

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


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA, serving cert, SA key pair and token file into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpustack-devcluster-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = secrets.token_hex(24)
    return Pki(
        ca_cert=_write(directory / "ca.crt", ca.public_bytes(serialization.Encoding.PEM), 0o644),
        serving_cert=_write(directory / "serving.crt", srv.public_bytes(serialization.Encoding.PEM), 0o644),
        serving_key=_write(directory / "serving.key", _pem_key(srv_key)),
        sa_key=_write(directory / "sa.key", _pem_key(sa_key)),
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
    )
