"""Certificate trust lists for OPC UA, shared by the driver (server certificates) and the health
server (client certificates).

A trust list is a directory of DER or PEM certificates: a peer is trusted when its certificate
is in the directory itself (self-signed application instance certificates, the usual case) or
was issued by a CA certificate in it. An optional directory of CRLs revokes certificates by
serial number. Files that are not certificates (a private key left beside them) are an error
naming the file, not silently skipped: a trust list that does not load must not open the door.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509 import verification

_DER = Encoding.DER
_CERT_SUFFIXES = (".der", ".pem", ".crt", ".cer")
_CRL_SUFFIXES = (".der", ".pem", ".crl")


def private_file_problem(path: str | Path) -> str | None:
    """Why a secret file (private key, password) is not fit to use, or None: it must be a
    regular file that only its owner, the user the agent runs as, can read (like ssh with a
    private key)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        return f"{p}: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"{p}: expected a regular file"
    if st.st_mode & 0o077:
        return (
            f"{p}: mode {stat.S_IMODE(st.st_mode):04o} lets other users read it; expected "
            "0600 or 0400 (readable only by the service user)"
        )
    if st.st_uid != os.geteuid():
        return f"{p}: owned by uid {st.st_uid}, expected the service user (uid {os.geteuid()})"
    return None


class TrustListError(ValueError):
    """A trust list directory or one of its files cannot be used."""


@dataclass(frozen=True)
class CertificateFacts:
    """What a person needs to recognise a certificate: subject, SHA-1 thumbprint (the form OPC
    UA tools show), SHA-256 fingerprint, validity."""

    subject: str
    issuer: str
    thumbprint_sha1: str
    fingerprint_sha256: str
    not_before_iso: str
    not_after_iso: str
    application_uris: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "thumbprint_sha1": self.thumbprint_sha1,
            "fingerprint_sha256": self.fingerprint_sha256,
            "not_before": self.not_before_iso,
            "not_after": self.not_after_iso,
            "application_uris": list(self.application_uris),
        }

    def describe(self) -> str:
        return f"subject {self.subject!r}, SHA-1 thumbprint {self.thumbprint_sha1}"


def certificate_facts(cert: x509.Certificate) -> CertificateFacts:
    der = cert.public_bytes(_DER)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = tuple(san.get_values_for_type(x509.UniformResourceIdentifier))
    except x509.ExtensionNotFound:
        uris = ()
    return CertificateFacts(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        thumbprint_sha1=hashlib.sha1(der, usedforsecurity=False).hexdigest().upper(),
        fingerprint_sha256=hashlib.sha256(der).hexdigest().upper(),
        not_before_iso=cert.not_valid_before_utc.isoformat(),
        not_after_iso=cert.not_valid_after_utc.isoformat(),
        application_uris=uris,
    )


def parse_certificate(data: bytes, where: str) -> x509.Certificate:
    """DER or PEM bytes -> certificate; `where` names the source in the error."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError as exc:
        raise TrustListError(
            f"{where}: expected an X.509 certificate (DER or PEM): {exc}"
        ) from None


def first_certificate_der(chain: bytes) -> bytes:
    """The leaf of a DER certificate chain (OPC UA sends chains as certificates simply
    concatenated)."""
    if len(chain) < 2 or chain[0] != 0x30:
        return chain
    size = chain[1]
    if size < 0x80:
        return chain[: 2 + size]
    n = size & 0x7F
    return chain[: 2 + n + int.from_bytes(chain[2 : 2 + n], "big")]


def load_certificate_file(path: str | Path) -> x509.Certificate:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TrustListError(f"certificate file {p}: {exc.strerror or exc}") from None
    return parse_certificate(data, f"certificate file {p}")


def _files(directory: Path, suffixes: Iterable[str], what: str) -> list[Path]:
    if not directory.is_dir():
        raise TrustListError(f"{what} {directory}: expected a directory")
    wanted = tuple(suffixes)
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in wanted)


def _load_crl(path: Path) -> x509.CertificateRevocationList:
    data = path.read_bytes()
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_crl(data)
        return x509.load_der_x509_crl(data)
    except ValueError as exc:
        raise TrustListError(f"revocation list {path}: expected an X.509 CRL: {exc}") from None


class TrustList:
    """Certificates trusted directly or through a CA, minus revoked serials."""

    def __init__(
        self,
        certificates: Iterable[x509.Certificate],
        revoked: Iterable[tuple[x509.Name, int]] = (),
        source: str = "trust list",
    ) -> None:
        self.certificates = tuple(certificates)
        self._der = {c.public_bytes(_DER) for c in self.certificates}
        self.revoked = frozenset(revoked)
        self.source = source

    @classmethod
    def from_directories(
        cls, trusted: str | Path, revocation_lists: str | Path | None = None
    ) -> TrustList:
        certs = [
            load_certificate_file(p)
            for p in _files(Path(trusted), _CERT_SUFFIXES, "trust list directory")
        ]
        revoked: list[tuple[x509.Name, int]] = []
        if revocation_lists is not None:
            for path in _files(Path(revocation_lists), _CRL_SUFFIXES, "revocation list directory"):
                crl = _load_crl(path)
                revoked += [(crl.issuer, r.serial_number) for r in crl]
        return cls(certs, revoked, source=f"trust list {trusted}")

    def problem(self, cert: x509.Certificate, now: dt.datetime | None = None) -> str | None:
        """Why `cert` is not to be trusted, or None when it is."""
        moment = now or dt.datetime.now(dt.UTC)
        if cert.not_valid_after_utc < moment:
            return f"expired on {cert.not_valid_after_utc.isoformat()}"
        if cert.not_valid_before_utc > moment:
            return f"not valid before {cert.not_valid_before_utc.isoformat()}"
        if (cert.issuer, cert.serial_number) in self.revoked:
            return "revoked by a revocation list"
        if cert.public_bytes(_DER) in self._der:
            return None
        if not self.certificates:
            return f"the {self.source} is empty"
        if self._issued_by_trusted_ca(cert, moment):
            return None
        return f"neither in the {self.source} nor issued by a CA certificate in it"

    def _issued_by_trusted_ca(self, cert: x509.Certificate, moment: dt.datetime) -> bool:
        # The path builder of `cryptography` checks signatures, validity and CA constraints;
        # the leaf's own key usages are OPC UA's business (asyncua checks them for clients).
        ca_policy = verification.ExtensionPolicy.webpki_defaults_ca()
        ee_policy = verification.ExtensionPolicy.permit_all()
        builder = (
            verification.PolicyBuilder()
            .store(verification.Store(list(self.certificates)))
            .time(moment)
            .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
        )
        try:
            builder.build_client_verifier().verify(cert, [])
        except verification.VerificationError:
            return False
        return True
