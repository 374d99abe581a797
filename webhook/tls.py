"""Certificates: a self-signed CA and a serving certificate for trying the webhook locally.

The kube-apiserver only calls webhooks over TLS and checks the serving certificate against the
`caBundle` it is given, including the host: a webhook registered by URL at `https://127.0.0.1:8443`
needs a certificate with the IP SAN 127.0.0.1. Production clusters use a real issuer
(cert-manager); this is for `gate webhook serve --self-signed`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertPair:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_ca(name: str = "prune-gate self-signed CA", days: int = 365) -> CertPair:
    """A CA certificate that can sign serving certificates."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_serving_cert(
    ca: CertPair, hosts: list[str], days: int = 90, not_before: dt.datetime | None = None
) -> CertPair:
    """A serving certificate for `hosts` (IP addresses or DNS names), signed by `ca`, valid
    `days` from `not_before` (default: five minutes ago)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_client_cert(ca: CertPair, name: str, days: int = 90) -> CertPair:
    """A client certificate (clientAuth) with common name `name`, signed by `ca`: what an API
    server presents to a webhook that requires one (`--client-ca`); for tests and trying it out."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_pair(pair: CertPair, cert_file: Path, key_file: Path) -> None:
    """Write a pair so that a reader never sees a half-written file (rename into place)."""
    for path, data, mode in ((key_file, pair.key_pem, 0o600), (cert_file, pair.cert_pem, 0o644)):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(mode)
        tmp.replace(path)


class CertificateError(ValueError):
    """A certificate or key file cannot serve; the message names the file and the fix."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CertificateError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def load_certificate(path: str, what: str = "serving certificate") -> x509.Certificate:
    """The first certificate of a PEM file (the leaf of a chain)."""
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CertificateError(
            f"the {what} {path} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)"
        ) from None
    return certs[0]


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def validity_problem(cert: x509.Certificate, path: str, now: dt.datetime) -> str | None:
    """Why `cert` cannot serve at `now` (expired, not yet valid), or None."""
    if now > cert.not_valid_after_utc:
        return (
            f"the serving certificate {path} expired: notAfter {_stamp(cert.not_valid_after_utc)}, "
            f"now {_stamp(now)}; renew it (cert-manager: cmctl renew; --self-signed: restart)"
        )
    if now < cert.not_valid_before_utc:
        return (
            f"the serving certificate {path} is not valid yet: notBefore "
            f"{_stamp(cert.not_valid_before_utc)}, now {_stamp(now)}; check the issuer's clock"
        )
    return None


def check_pair(cert_file: str, key_file: str, now: dt.datetime | None = None) -> x509.Certificate:
    """Read a serving certificate and its key; the certificate, or CertificateError naming the
    file that is missing, unreadable, not PEM, not the other's match, or not valid at `now`
    (default: the wall clock): an expired certificate must not load silently."""
    cert = load_certificate(cert_file)
    problem = validity_problem(cert, cert_file, now or dt.datetime.now(dt.UTC))
    if problem is not None:
        raise CertificateError(problem)
    data = _read(key_file, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise CertificateError(
            f"the private key {key_file} is not an unencrypted PEM private key"
        ) from None
    ours = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    theirs = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if ours != theirs:
        raise CertificateError(
            f"the private key {key_file} does not belong to the certificate {cert_file}"
        )
    return cert


def check_client_ca(path: str) -> list[x509.Certificate]:
    """Read the CA that signs the API server's client certificate (`--client-ca`); its
    certificates, or CertificateError naming the file that is missing, not PEM, or holds no CA
    certificate (a leaf given by mistake would make every call from the API server fail)."""
    data = _read(path, "client CA")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CertificateError(
            f"the client CA {path} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)"
        ) from None
    for cert in certs:
        try:
            if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
                return certs
        except x509.ExtensionNotFound:
            continue
    raise CertificateError(
        f"the client CA {path} holds no CA certificate (basicConstraints CA:TRUE): give the CA "
        "that signed the API server's webhook client certificate, not the certificate itself"
    )
