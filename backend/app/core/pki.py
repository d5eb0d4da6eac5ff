# SPDX-License-Identifier: Apache-2.0
"""The installation's small certificate authority: agent identity and TLS.

On first start the backend creates a CA (an ECDSA P-256 key and a self-signed certificate, ten years)
in `$HOTPATH_DATA_DIR/tls/`, and a server certificate it signs for the names agents and browsers dial
(localhost, 127.0.0.1, ::1, this host's name, 10.0.2.2 for QEMU guests, and HOTPATH_TLS_SERVER_NAMES).
Enrolment signs an agent's certificate signing request for its host id (subject common name) with
client-authentication use only; the agent's private key never leaves its host. The CA key file is
mode 0600 and is the installation's root of trust: whoever holds it can mint host identities.
"""

import contextlib
import datetime as dt
import fcntl
import hashlib
import ipaddress
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_YEARS = 10
SERVER_DAYS = 825
HOST_DAYS = 365
DEFAULT_SERVER_NAMES = ("localhost", "127.0.0.1", "::1", "10.0.2.2")


class CsrError(ValueError):
    """A certificate signing request that cannot be signed; str() says why."""


@dataclass
class Pki:
    folder: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca_cert: x509.Certificate
    server_key_pem: bytes
    server_cert_pem: bytes

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert.public_bytes(serialization.Encoding.PEM)

    @property
    def server_cert_file(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key_file(self) -> Path:
        return self.folder / "server.key"

    def sign_host_csr(self, csr_pem: str, host_id: str) -> tuple[str, str, dt.datetime]:
        """Sign a host's CSR; returns (certificate PEM, SHA-256 fingerprint hex, not-after)."""
        csr = parse_csr(csr_pem, host_id)
        now = dt.datetime.now(dt.UTC)
        not_after = now + dt.timedelta(days=HOST_DAYS)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host_id)]))
            .issuer_name(self.ca_cert.subject)
            .public_key(csr.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        return (cert.public_bytes(serialization.Encoding.PEM).decode(), fingerprint(cert), cert.not_valid_after_utc)


def parse_csr(csr_pem: str, host_id: str) -> x509.CertificateSigningRequest:
    if len(csr_pem) > 16384:
        raise CsrError("the certificate signing request is larger than 16 KiB")
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError:
        raise CsrError("the certificate signing request is not a PEM PKCS#10 request") from None
    if not csr.is_signature_valid:
        raise CsrError("the certificate signing request's signature does not verify")
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1 or names[0].value != host_id:
        raise CsrError("the certificate signing request's common name must be the host id")
    key = csr.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.key_size < 256:
            raise CsrError("the host key's curve is weaker than P-256")
    elif isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise CsrError("the host's RSA key is shorter than 2048 bits")
    else:
        raise CsrError("the host key must be ECDSA (P-256 or stronger) or RSA (2048 bits or more)")
    return csr


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def fingerprint_pem(cert_pem: bytes) -> str | None:
    try:
        return fingerprint(x509.load_pem_x509_certificate(cert_pem))
    except ValueError:
        return None


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _server_names(extra: str) -> list[str]:
    names = list(DEFAULT_SERVER_NAMES)
    for name in [socket.gethostname(), *extra.split(",")]:
        name = name.strip()
        if name and name not in names:
            names.append(name)
    return names


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive flock on `folder/.lock` (replicas sharing the folder start one at a time here)."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Signed by this CA's key (not merely naming an issuer of the same name: every installation's CA
    has the same name)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names_of(san: x509.SubjectAlternativeName) -> list[str]:
    return [str(n.value) for n in san]


def load_or_create(folder: Path, extra_server_names: str = "") -> Pki:
    """Load the CA and server certificate from `folder`, creating what is missing or out of date.

    Replicas behind one address share the folder (one CA, one server certificate for the name agents
    dial): an flock serialises them, so two starting at once load one CA instead of each writing its
    own. A server certificate is kept while it names everything this replica needs (the replicas'
    host names differ); otherwise it is made again for those names plus the ones it had."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    with _folder_lock(folder):
        return _load_or_create(folder, extra_server_names)


def _load_or_create(folder: Path, extra_server_names: str) -> Pki:
    ca_key_file, ca_file = folder / "ca.key", folder / "ca.pem"
    now = dt.datetime.now(dt.UTC)
    if ca_key_file.exists() and ca_file.exists():
        ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(ca_file.read_bytes())
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hotpath installation CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365 * CA_YEARS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    key_encipherment=False,
                    content_commitment=False,
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
        _write_private(ca_key_file, _pem_key(ca_key))
        _write_private(ca_file, ca_cert.public_bytes(serialization.Encoding.PEM))
        os.chmod(ca_file, 0o644)

    names = _server_names(extra_server_names)
    key_file, cert_file = folder / "server.key", folder / "server.pem"
    fresh = False
    if key_file.exists() and cert_file.exists():
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        try:
            have = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            have = None
        ours = _issued_by(cert, ca_cert) and cert.not_valid_after_utc > now + dt.timedelta(days=30)
        had = _names_of(have) if have is not None and ours else []
        fresh = ours and set(names) <= set(had)
        names += [n for n in had if n not in names]
    if not fresh:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hotpath backend")]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_san(names), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(key_file, _pem_key(key))
        _write_private(
            cert_file, cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
        )
    return Pki(
        folder=folder,
        ca_key=ca_key,
        ca_cert=ca_cert,
        server_key_pem=key_file.read_bytes(),
        server_cert_pem=cert_file.read_bytes(),
    )
