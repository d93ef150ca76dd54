"""
The fleet's TLS material: a certificate authority the controller makes once, the server
certificates it issues to hosts, and the operator's own certificate where one is given.

The fleet CA lives beside the secrets file it belongs to (``secrets.env`` ->
``secrets.env.tls/``, mode 0700): ``ca.key`` and ``ca.crt``, and each host's issued pair
under ``issued/``, every file mode 0600, each written with one rename under the folder's
lock. It is made once and reused: a converge issues nothing new while a host's certificate
names the same addresses, comes from this CA and has more than ``RENEW_DAYS`` left, so a
second converge changes nothing.

Keys are EC P-256 in PKCS#8 PEM, which smg 1.13.0 (rustls) and sglang (uvicorn, Python's
``ssl``) both load; a server certificate carries its names as subjectAltNames (rustls reads
no common name), ``serverAuth`` and no CA bit. A private key never appears in a ``repr``,
a message or a diff: ``describe`` shows a certificate by its fingerprint.

**Example:**

.. code:: python

    ca = FleetCA.beside("~/.config/sglfleet/secrets.env")
    ca.ensure()                                   # True the first time: the CA was made
    pair = ca.issue("node1", ["10.0.0.11", "node1"])
    describe(pair.cert)                           # "sha256:1f2e3d4c5b6a7988 node1 (10.0.0.11, node1) until 2027-12-05"
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
CERT_DAYS = 397  # what browsers still take for a server certificate; the fleet renews long before
RENEW_DAYS = 30  # a converge issues a new certificate when the one it has ends sooner
# Loopback too: sglang's own warm-up and the gateway launcher's readiness look call the server there.
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


class TlsError(ValueError):
    """TLS material sglfleet refuses; the message names the file and the fix."""


@dataclass(frozen=True)
class Pair:
    """
    A server certificate (PEM, with the chain after it where there is one) and its private key.

    + cert: the certificate's PEM text, public
    + key: the private key's PEM text (never in the repr)
    """

    cert: str
    key: str = field(repr=False)

    @property
    def fingerprint(self) -> str:
        """The sha256 of the (first) certificate's DER bytes, 16 hex digits: what diffs show."""
        return fingerprint(self.cert)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _first(cert_pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(cert_pem.encode())


def fingerprint(cert_pem: str) -> str:
    """The sha256 of a certificate's DER bytes (the first of a chain), 16 hex digits."""
    return _first(cert_pem).fingerprint(hashes.SHA256()).hex()[:16]


def names_of(cert_pem: str) -> tuple[str, ...]:
    """A certificate's subjectAltNames, addresses and DNS names as text, in its order."""
    try:
        sans = _first(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(one.value) for one in sans if isinstance(one, (x509.IPAddress, x509.DNSName)))


def describe(cert_pem: str) -> str:
    """
    One line that tells a certificate apart, for diffs and logs: fingerprint, subject, names, end.

    **Example:**

    .. code:: python

        describe(pair.cert)   # "sha256:1f2e3d4c5b6a7988 node1 (10.0.0.11, node1) until 2027-12-05"
    """
    cert = _first(cert_pem)
    subject = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return (f"sha256:{fingerprint(cert_pem)} {subject[0].value if subject else '-'} "
            f"({', '.join(names_of(cert_pem)) or 'no names'}) until {cert.not_valid_after_utc:%Y-%m-%d}")


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def matches(cert_pem: str, key_pem: str) -> bool:
    """Whether ``key_pem`` is the private key of the (first) certificate of ``cert_pem``."""
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    return (key.public_key().public_bytes(serialization.Encoding.DER, public)
            == _first(cert_pem).public_key().public_bytes(serialization.Encoding.DER, public))


def load_pair(cert_path: str | os.PathLike, key_path: str | os.PathLike) -> Pair:
    """
    The operator's certificate and key, checked: both readable PEM, the key unencrypted and the certificate's own.

    + cert_path: the certificate (PEM, the chain after it where it has one)
    + key_path: its private key (PEM, no passphrase: the services start unattended)

    Raises ``TlsError`` with one line that names the file and the fix.

    **Example:**

    .. code:: python

        load_pair("~/tls/gateway.example.com.crt", "~/tls/gateway.example.com.key")
    """
    cert_file, key_file = Path(cert_path).expanduser(), Path(key_path).expanduser()
    for path in (cert_file, key_file):
        if not path.is_file():
            raise TlsError(f"{path}: no such file; give the path of a PEM file on the controller")
    cert_pem = cert_file.read_text(errors="replace")
    try:
        _first(cert_pem)
    except ValueError:
        raise TlsError(f"{cert_file}: not a PEM certificate; give the certificate "
                       f"(-----BEGIN CERTIFICATE-----), its chain after it") from None
    key_pem = key_file.read_text(errors="replace")
    try:
        same = matches(cert_pem, key_pem)
    except TypeError:
        raise TlsError(f"{key_file}: the key is encrypted; the services start unattended: give it without a "
                       f"passphrase (openssl pkey -in KEY -out KEY.plain), in a file only you can read") from None
    except ValueError:
        raise TlsError(f"{key_file}: not a PEM private key; give the certificate's key "
                       f"(-----BEGIN PRIVATE KEY-----)") from None
    if not same:
        raise TlsError(f"{key_file}: not the private key of {cert_file} (sha256:{fingerprint(cert_pem)}); "
                       f"give the key the certificate was issued for")
    return Pair(cert=cert_pem, key=key_pem)


def _write(path: Path, text: str) -> None:
    """``text`` into ``path``, mode 0600, with one rename: a reader sees the old file or the new one."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(descriptor, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


class FleetCA:
    """
    The fleet's certificate authority in one controller folder: made once, then only read.

    + folder: where ``ca.key``, ``ca.crt`` and ``issued/`` live (mode 0700)
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder).expanduser()

    @classmethod
    def beside(cls, secrets_file: str | os.PathLike) -> "FleetCA":
        """The CA of the fleet whose secrets are in ``secrets_file``: ``<secrets_file>.tls/``."""
        path = Path(secrets_file).expanduser()
        return cls(path.with_name(path.name + ".tls"))

    @property
    def cert_path(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def cert(self) -> str:
        """The CA's certificate (PEM): what the gateways and the controller trust."""
        return self.cert_path.read_text()

    def exists(self) -> bool:
        return (self.folder / "ca.key").is_file() and self.cert_path.is_file()

    def ensure(self) -> bool:
        """Make the CA where the folder has none; True where it was made now."""
        with self._held():
            if self.exists():
                return False
            key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sglfleet"),
                              x509.NameAttribute(NameOID.COMMON_NAME, f"sglfleet fleet CA {secrets.token_hex(4)}")])
            now = _now()
            cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                 content_commitment=False, key_encipherment=False,
                                                 data_encipherment=False, key_agreement=False,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                    .sign(key, hashes.SHA256()))
            # The key first: a folder with a certificate and no key is one a crash left, and is made again.
            _write(self.folder / "ca.key", _key_pem(key))
            _write(self.cert_path, _cert_pem(cert))
            return True

    def issue(self, name: str, sans: Iterable[str]) -> Pair:
        """
        A server certificate for host ``name`` that names ``sans`` (and loopback), signed by this CA;
        the one issued before where it still fits, so a converge changes nothing.

        + name: the host's inventory name (the certificate's common name and its file's name)
        + sans: the addresses and names clients reach the host by

        **Example:**

        .. code:: python

            ca.issue("node1", ["10.0.0.11"]).cert   # "-----BEGIN CERTIFICATE-----\\n..."
        """
        wanted = tuple(dict.fromkeys([*sans, *LOOPBACK_NAMES]))
        if not self.exists():
            raise TlsError(f"{self.folder}: no fleet CA; a converge makes it (or FleetCA.ensure)")
        with self._held():
            issued = self.folder / "issued"
            issued.mkdir(mode=0o700, exist_ok=True)
            cert_file, key_file = issued / f"{name}.crt", issued / f"{name}.key"
            if cert_file.is_file() and key_file.is_file():
                kept = Pair(cert=cert_file.read_text(), key=key_file.read_text())
                if self._fits(kept, wanted):
                    return kept
            ca_key = serialization.load_pem_private_key((self.folder / "ca.key").read_bytes(), password=None)
            ca_cert = _first(self.cert)
            key = ec.generate_private_key(ec.SECP256R1())
            now = _now()
            cert = (x509.CertificateBuilder()
                    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                    .issuer_name(ca_cert.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(min(now + datetime.timedelta(days=CERT_DAYS), ca_cert.not_valid_after_utc))
                    .add_extension(x509.SubjectAlternativeName([_san(one) for one in wanted]), critical=False)
                    .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                                 content_commitment=False, data_encipherment=False,
                                                 key_agreement=False, key_cert_sign=False, crl_sign=False,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                    .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                   critical=False)
                    .sign(ca_key, hashes.SHA256()))
            pair = Pair(cert=_cert_pem(cert), key=_key_pem(key))
            _write(key_file, pair.key)
            _write(cert_file, pair.cert)
            return pair

    def _fits(self, pair: Pair, wanted: tuple[str, ...]) -> bool:
        """Whether a certificate issued before still serves: this CA's, the same names, not ending soon."""
        try:
            cert, ca_cert = _first(pair.cert), _first(self.cert)
            cert.verify_directly_issued_by(ca_cert)
            if not matches(pair.cert, pair.key):
                return False
        except (ValueError, TypeError, InvalidSignature):
            return False
        return (set(names_of(pair.cert)) == set(wanted)
                and cert.not_valid_after_utc - _now() > datetime.timedelta(days=RENEW_DAYS))

    @contextmanager
    def _held(self) -> Iterator[None]:
        """The folder's lock: two runs never make two CAs, nor issue one host two certificates."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.folder, 0o700)
        with open(os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600), "r+") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield


def digest(*texts: str) -> str:
    """A short digest over TLS texts, for a release's service digest: a new certificate restarts behind the gate."""
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
