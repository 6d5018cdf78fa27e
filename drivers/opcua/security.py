"""Security of the driver's OPC UA channel: the server's certificate checked against the trust
list before anything is sent, Basic256Sha256 with the configured mode, and passwords kept out
of asyncua's debug logs. Used by drivers.opcua.session at every connect."""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from agent.errors import DriverError
from agent.opcua.trust import (
    TrustList,
    TrustListError,
    certificate_facts,
    first_certificate_der,
    load_certificate_file,
    parse_certificate,
    private_file_problem,
)
from drivers.base import within
from drivers.opcua.settings import OpcUaSettings

log = logging.getLogger(__name__)


class RedactPasswords(logging.Filter):
    """asyncua's client logs every request at DEBUG, ActivateSession with the user's password
    in it (in clear inside a SignAndEncrypt channel): `--log-level debug` must not print it."""

    _PASSWORD = re.compile(r"(Password=)b?(['\"])(?:\\.|(?!\2).)*\2")

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "Password=" in text:
            record.msg, record.args = self._PASSWORD.sub(r"\1<redacted>", text), None
        return True


_REDACT = RedactPasswords()
for _name in (
    "asyncua.client.ua_client.UASocketProtocol",
    "asyncua.client.ua_client",
    "asyncua.client.client",
):
    if _REDACT not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_REDACT)
_DER = Encoding.DER


class RejectedError(DriverError):
    """The server refused the agent's identity, or does not match the config (a node, a method
    signature, a file the config names): retrying the same thing will not help."""


def read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RejectedError(f"cannot read the {what} file {path}: {exc.strerror}") from None


def trust_list(settings: OpcUaSettings) -> TrustList:
    """The server certificates the driver accepts: the pinned one and the trust directory's."""
    sec = settings.security
    try:
        listed = (
            TrustList.from_directories(sec.trusted_certificates, sec.revocation_lists)
            if sec.trusted_certificates is not None
            else TrustList(())
        )
        pinned = (
            [load_certificate_file(sec.server_certificate)]
            if sec.server_certificate is not None
            else []
        )
    except TrustListError as exc:
        raise RejectedError(f"security: {exc}") from None
    sources = [f"pinned server_certificate {sec.server_certificate}"] if pinned else []
    if sec.trusted_certificates is not None:
        sources.append(f"trust list {sec.trusted_certificates}")
    return TrustList([*pinned, *listed.certificates], listed.revoked, source=" or ".join(sources))


async def secure_channel(client: Client, s: OpcUaSettings) -> None:
    """Basic256Sha256 with the configured mode, after the server's certificate passed the trust
    list: nothing but the unauthenticated endpoint discovery is sent to an untrusted server."""
    sec = s.security
    if sec.certificate is None or sec.private_key is None:  # the settings check requires both
        raise RejectedError(f"security: policy {sec.policy} needs certificate and private_key")
    for path in (sec.certificate, sec.private_key):
        if not Path(path).is_file():
            raise RejectedError(f"security: file {path} does not exist")
    for name in ("private_key", "private_key_password_file"):
        path = getattr(sec, name)
        problem = None if path is None else private_file_problem(path)
        if problem is not None:
            raise RejectedError(f"security.{name} {problem}")
    key_password = (
        read_text(sec.private_key_password_file, "private key password")
        if sec.private_key_password_file
        else None
    )
    trusted = trust_list(s)
    offered = await _offered_certificate(s)
    problem = trusted.problem(offered)
    facts = certificate_facts(offered)
    if problem is not None:
        log.warning(
            "event=opcua_server_certificate_refused endpoint=%s subject=%r thumbprint=%s reason=%r",
            s.endpoint,
            facts.subject,
            facts.thumbprint_sha1,
            problem,
        )
        advice = (
            f"; if this is the right server, copy its certificate into {sec.trusted_certificates}"
            if sec.trusted_certificates is not None and "revoked" not in problem
            else ""
        )
        raise RejectedError(
            f"{s.endpoint}: server certificate refused ({facts.describe()}): {problem}{advice}"
        )
    log.info(
        "event=opcua_server_certificate_trusted endpoint=%s subject=%r thumbprint=%s",
        s.endpoint,
        facts.subject,
        facts.thumbprint_sha1,
    )
    await client.set_security(
        SecurityPolicyBasic256Sha256,
        certificate=sec.certificate,
        private_key=sec.private_key,
        private_key_password=key_password,
        server_certificate=offered.public_bytes(_DER),
        mode=getattr(ua.MessageSecurityMode, sec.effective_mode),
    )


async def _offered_certificate(s: OpcUaSettings) -> x509.Certificate:
    """The certificate the server offers with the configured policy and mode (GetEndpoints,
    which OPC UA answers on an unsecured channel so that clients can do exactly this)."""
    mode = getattr(ua.MessageSecurityMode, s.security.effective_mode)
    probe = Client(s.endpoint, timeout=s.request_timeout_s)
    try:
        endpoints = await within(probe.connect_and_get_server_endpoints(), s.request_timeout_s * 2)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            probe.disconnect_socket()
        if not isinstance(exc, Exception):
            raise
        raise DriverError(f"cannot connect to {s.endpoint}: {describe_error(exc)}") from None
    wanted = [
        e
        for e in endpoints
        if e.SecurityPolicyUri == SecurityPolicyBasic256Sha256.URI and e.SecurityMode == mode
    ]
    if not wanted or not wanted[0].ServerCertificate:
        offered = (
            ", ".join(
                f"{e.SecurityPolicyUri.rsplit('#', 1)[-1]}/{e.SecurityMode.name}" for e in endpoints
            )
            or "none"
        )
        raise RejectedError(
            f"{s.endpoint} offers no Basic256Sha256 {s.security.effective_mode} endpoint with a "
            f"certificate (it offers: {offered})"
        )
    try:
        leaf = first_certificate_der(wanted[0].ServerCertificate)
        return parse_certificate(leaf, "server certificate")
    except TrustListError as exc:
        raise RejectedError(f"{s.endpoint}: {exc}") from None


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ua.UaStatusCodeError):
        return f"{type(exc).__name__} ({exc})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
