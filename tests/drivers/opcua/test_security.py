"""Security of the OPC UA driver's client side against the peer controller (a real asyncua
server process): trust lists, untrusted servers refused by default, SignAndEncrypt by default,
no security only when the config says so, credentials never in logs or errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import shutil
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from asyncua import ua
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.config.load import load_config
from agent.errors import ConfigError
from agent.opcua.trust import TrustList, certificate_facts, load_certificate_file
from drivers.opcua.driver import OpcUaDriver
from drivers.opcua.session import OpcUaSession, RejectedError
from drivers.opcua.settings import OpcUaSettings, OpcUaUser
from tests.peers.opcua.certs import CertPair, make_certificate
from tests.peers.opcua.harness import PeerProcess, config_text

T = TypeVar("T")
PEER_URI = "urn:jha:test:opcua-controller"
AGENT_URI = "urn:joint-health-agent:client"
PASSWORD = "s3cret-Horse-42"


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


def make_ca_signed(directory: Path, *, revoke: bool = False) -> tuple[Path, CertPair, Path]:
    """A CA, a server certificate it issued (the peer's URI in subjectAltName), and a CRL of
    that CA (revoking the server's serial when `revoke`)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "plant OT CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cell4-controller")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(PEER_URI), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, True, True, True, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    revoked = (
        [x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()]
        if revoke
        else []
    )
    crl_builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_name)
        .last_update(now)
        .next_update(now + dt.timedelta(days=1))
    )
    for r in revoked:
        crl_builder = crl_builder.add_revoked_certificate(r)
    crl = crl_builder.sign(ca_key, hashes.SHA256())
    ca_path, cert_path, key_path = (
        directory / "ca.der",
        directory / "cell4_cert.der",
        directory / "cell4_key.pem",
    )
    crl_path = directory / "ca.crl"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.DER))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.DER))
    crl_path.write_bytes(crl.public_bytes(serialization.Encoding.DER))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, CertPair(cert_path, key_path, PEER_URI), crl_path


@dataclasses.dataclass(frozen=True)
class Pki:
    root: Path
    server: CertPair
    client: CertPair
    impostor: CertPair
    trusted: Path  # holds the server's certificate
    trusted_other: Path  # holds the impostor's only

    def trust_dir(self, name: str, *certs: Path) -> Path:
        d = self.root / name
        d.mkdir(exist_ok=True)
        for c in certs:
            shutil.copy(c, d / c.name)
        return d


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("opcua_pki")
    keys = root / "keys"
    server = make_certificate(keys, "controller", PEER_URI, server=True)
    client = make_certificate(keys, "agent", AGENT_URI, server=False)
    impostor = make_certificate(keys, "impostor", PEER_URI, server=True)
    (root / "password").write_text(PASSWORD + "\n")
    (root / "wrong").write_text("not-" + PASSWORD + "\n")
    for secret in (client.private_key, root / "password", root / "wrong"):
        secret.chmod(0o600)
    p = Pki(root, server, client, impostor, root / "trusted", root / "trusted_other")
    p.trust_dir("trusted", server.certificate)
    p.trust_dir("trusted_other", impostor.certificate)
    return p


def start_peer(directory: Path, *args: str) -> PeerProcess:
    config = directory / "peer.yaml"
    config.write_text(config_text())
    peer = PeerProcess(config, list(args), log=directory / "peer.log")
    peer.start()
    return peer


@pytest.fixture(scope="module")
def secure_peer(pki: Pki) -> Iterator[PeerProcess]:
    """SignAndEncrypt only, trusts the agent's certificate, one user."""
    peer = start_peer(
        pki.root,
        "--security",
        "encrypt",
        "--cert",
        str(pki.server.certificate),
        "--key",
        str(pki.server.private_key),
        "--trust",
        str(pki.client.certificate),
        "--users",
        f"agent:{PASSWORD}",
    )
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def plain_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeerProcess]:
    peer = start_peer(tmp_path_factory.mktemp("plain_peer"), "--security", "none")
    yield peer
    peer.stop()


def settings_for(
    tmp_path: Path, endpoint: str, security: str, user: OpcUaUser | None = None
) -> OpcUaSettings:
    path = tmp_path / "agent.yaml"
    path.write_text(config_text(endpoint, security=security))
    settings = load_config(path).controllers[0].settings
    assert isinstance(settings, OpcUaSettings)
    return dataclasses.replace(settings, user=user)


def secure_yaml(pki: Pki, **extra: str) -> str:
    fields = {
        "certificate": str(pki.client.certificate),
        "private_key": str(pki.client.private_key),
        "trusted_certificates": str(pki.trusted),
        **extra,
    }
    return "{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}"


def agent_user(pki: Pki, file: str = "password") -> OpcUaUser:
    return OpcUaUser(username="agent", password_file=str(pki.root / file))


async def open_and_read(settings: OpcUaSettings) -> tuple[ua.MessageSecurityMode, list[str]]:
    session = await OpcUaSession.open(settings)
    try:
        return session.client.security_policy.Mode, session.namespaces
    finally:
        await session.close()


def refused(settings: OpcUaSettings) -> str:
    """connect() of the real driver fails at once (a rejection is not retried)."""
    driver = OpcUaDriver("robot1", settings, ())
    started = time.monotonic()
    with pytest.raises(RejectedError) as exc:
        run(driver.connect())
    assert time.monotonic() - started < 5.0, "a rejection must not be retried"
    return str(exc.value)


# --- trust ----------------------------------------------------------------------------------------


@pytest.mark.security("OPC UA driver: Basic256Sha256 SignAndEncrypt by default")
def test_trusted_server_is_accepted_with_sign_and_encrypt_by_default(
    secure_peer: PeerProcess, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drivers.opcua.security")
    settings = settings_for(tmp_path, secure_peer.endpoint, secure_yaml(pki), agent_user(pki))
    assert settings.security.mode == "SignAndEncrypt"  # not written in the config
    mode, namespaces = run(open_and_read(settings))
    assert mode == ua.MessageSecurityMode.SignAndEncrypt
    assert PEER_URI in namespaces
    thumbprint = certificate_facts(load_certificate_file(pki.server.certificate)).thumbprint_sha1
    assert any(
        "opcua_server_certificate_trusted" in r.getMessage() and thumbprint in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.security("OPC UA driver refuses an untrusted server certificate")
def test_untrusted_server_is_refused_naming_endpoint_subject_and_thumbprint(
    secure_peer: PeerProcess, pki: Pki, tmp_path: Path
) -> None:
    facts = certificate_facts(load_certificate_file(pki.server.certificate))
    other = settings_for(
        tmp_path,
        secure_peer.endpoint,
        secure_yaml(pki, trusted_certificates=str(pki.trusted_other)),
        agent_user(pki),
    )
    message = refused(other)
    assert secure_peer.endpoint in message
    assert "CN=controller" in message and facts.thumbprint_sha1 in message
    assert f"copy its certificate into {pki.trusted_other}" in message
    # An empty trust list trusts nobody; a wrong pinned certificate is refused the same way.
    empty = pki.trust_dir("empty")
    assert "is empty" in refused(
        settings_for(
            tmp_path, secure_peer.endpoint, secure_yaml(pki, trusted_certificates=str(empty))
        )
    )
    pinned_yaml = (
        "{" + f"certificate: {pki.client.certificate}, private_key: "
        f"{pki.client.private_key}, server_certificate: {pki.impostor.certificate}" + "}"
    )
    pinned = refused(settings_for(tmp_path, secure_peer.endpoint, pinned_yaml))
    assert facts.thumbprint_sha1 in pinned and "pinned server_certificate" in pinned


def test_server_issued_by_a_trusted_ca_is_accepted_unless_revoked(pki: Pki, tmp_path: Path) -> None:
    ca, cell4, crl = make_ca_signed(tmp_path / "ca")
    trusted_ca = pki.trust_dir("trusted_ca", ca)
    assert (
        TrustList.from_directories(trusted_ca).problem(load_certificate_file(cell4.certificate))
        is None
    )
    peer = start_peer(
        tmp_path,
        "--security",
        "encrypt",
        "--cert",
        str(cell4.certificate),
        "--key",
        str(cell4.private_key),
        "--trust",
        str(pki.client.certificate),
    )
    try:
        settings = settings_for(
            tmp_path, peer.endpoint, secure_yaml(pki, trusted_certificates=str(trusted_ca))
        )
        mode, _ = run(open_and_read(settings))
        assert mode == ua.MessageSecurityMode.SignAndEncrypt
        # A CRL of that CA that revokes nothing changes nothing; one revoking it refuses it.
        crls = tmp_path / "crls"
        crls.mkdir()
        shutil.copy(crl, crls / "ok.crl")
        assert (
            TrustList.from_directories(trusted_ca, crls).problem(
                load_certificate_file(cell4.certificate)
            )
            is None
        )
        ca5, cell5, crl5 = make_ca_signed(tmp_path / "ca5", revoke=True)
        crls5 = tmp_path / "crls5"
        crls5.mkdir()
        shutil.copy(crl5, crls5 / "ca5.crl")
        revoked = TrustList.from_directories(pki.trust_dir("trusted_ca5", ca5), crls5)
        assert revoked.problem(load_certificate_file(cell5.certificate)) == (
            "revoked by a revocation list"
        )
    finally:
        peer.stop()


def test_trust_list_directory_with_a_key_in_it_is_an_error(
    pki: Pki, tmp_path: Path, secure_peer: PeerProcess
) -> None:
    messy = pki.trust_dir("messy", pki.server.certificate, pki.server.private_key)
    message = refused(
        settings_for(
            tmp_path, secure_peer.endpoint, secure_yaml(pki, trusted_certificates=str(messy))
        )
    )
    assert "controller_key.pem" in message and "expected an X.509 certificate" in message


# --- SignAndEncrypt enforced, no security only when allowed ---------------------------------------


def test_no_security_only_when_explicitly_allowed(
    plain_peer: PeerProcess, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The secure default refuses a server that only offers None.
    offered = refused(settings_for(tmp_path, plain_peer.endpoint, secure_yaml(pki)))
    assert "offers no Basic256Sha256 SignAndEncrypt endpoint" in offered and "None" in offered
    # `policy: None` alone is a config error; with allow_none_security it connects, loudly.
    path = tmp_path / "none.yaml"
    path.write_text(config_text(plain_peer.endpoint, security="{policy: None}"))
    with pytest.raises(ConfigError, match="allow_none_security: true"):
        load_config(path)
    no_section = tmp_path / "default.yaml"
    no_section.write_text(
        config_text(plain_peer.endpoint).replace(
            "      security: {policy: None, allow_none_security: true}\n", ""
        )
    )
    with pytest.raises(ConfigError, match=r"settings\.security: .*required"):
        load_config(no_section)
    caplog.set_level(logging.WARNING, logger="drivers.opcua.session")
    allowed = settings_for(
        tmp_path, plain_peer.endpoint, "{policy: None, allow_none_security: true}"
    )
    mode, _ = run(open_and_read(allowed))
    assert mode == ua.MessageSecurityMode.None_
    assert any("opcua_insecure_channel" in r.getMessage() for r in caplog.records)


def test_sign_only_is_an_explicit_choice_and_the_server_may_refuse_it(
    secure_peer: PeerProcess, pki: Pki, tmp_path: Path
) -> None:
    sign = settings_for(
        tmp_path, secure_peer.endpoint, secure_yaml(pki, mode="Sign"), agent_user(pki)
    )
    assert sign.security.mode == "Sign"
    message = refused(sign)
    assert "offers no Basic256Sha256 Sign endpoint" in message
    assert "SignAndEncrypt" in message  # what the server does offer


@pytest.mark.security("OPC UA driver refuses key/password files others can read")
def test_secret_files_others_can_read_are_refused(
    secure_peer: PeerProcess, pki: Pki, tmp_path: Path
) -> None:
    loose_key = tmp_path / "agent_key.pem"
    shutil.copy(pki.client.private_key, loose_key)
    loose_key.chmod(0o644)
    message = refused(
        settings_for(tmp_path, secure_peer.endpoint, secure_yaml(pki, private_key=str(loose_key)))
    )
    assert f"security.private_key {loose_key}: mode 0644" in message
    loose_password = tmp_path / "password"
    loose_password.write_text(PASSWORD + "\n")
    loose_password.chmod(0o640)
    user = OpcUaUser(username="agent", password_file=str(loose_password))
    message = refused(settings_for(tmp_path, secure_peer.endpoint, secure_yaml(pki), user))
    assert f"user.password_file {loose_password}: mode 0640" in message
    assert PASSWORD not in message


# --- credentials ----------------------------------------------------------------------------------


@pytest.mark.security("OPC UA driver: credentials never in logs or errors")
def test_credentials_never_in_logs_or_errors(
    secure_peer: PeerProcess, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # everything, asyncua's request dumps included
    good = settings_for(tmp_path, secure_peer.endpoint, secure_yaml(pki), agent_user(pki))
    run(open_and_read(good))
    bad = dataclasses.replace(good, user=agent_user(pki, "wrong"))
    message = refused(bad)
    assert "BadUserAccessDenied" in message
    text = caplog.text + message
    assert "ActivateSessionRequest" in caplog.text  # the request dump was logged...
    assert "Password=<redacted>" in caplog.text  # ...with the password taken out
    assert PASSWORD not in text and f"not-{PASSWORD}" not in text
    assert PASSWORD.encode().hex() not in text
