"""A real mosquitto broker for the MQTT tests: a generated config on a free port, plain or TLS
(with a test CA made by `cryptography`), optionally with users (mosquitto_passwd) and with
persistence (so that it can be killed and restarted on the same port keeping its sessions).

Also a TCP relay in front of a broker that the test can cut (RST) to drop a client's connection
while the broker stays up.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import pwd
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

MOSQUITTO = "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = "/usr/bin/mosquitto_passwd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port that refuses connections for as long as the block runs: bound, never listening,
    so that no other process (the machine runs other test suites) can start a server on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def wait_until(
    condition: Callable[[], object], timeout_s: float, what: str, step_s: float = 0.02
) -> None:
    """Poll `condition()` until true; AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(step_s)


# -- test PKI --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestCa:
    name: str
    cert_file: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


@dataclass(frozen=True)
class ServerCert:
    cert_file: Path
    key_file: Path
    ca_file: Path  # the CA that signed it


def make_ca(directory: Path, name: str) -> TestCa:
    """A self-signed CA valid for a day (EC P-256: fast to generate)."""
    directory.mkdir(parents=True, exist_ok=True)
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
        .not_valid_after(now + dt.timedelta(days=1))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return TestCa(name, path, key, cert)


def issue_server_cert(ca: TestCa, directory: Path, name: str = "broker") -> ServerCert:
    """A server certificate for localhost / 127.0.0.1 signed by `ca`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return ServerCert(cert_file, key_file, ca.cert_file)


# -- the broker ------------------------------------------------------------------------------


class MosquittoBroker:
    """One mosquitto process; `restart()` brings it back on the same port with the same files."""

    def __init__(
        self,
        directory: Path,
        *,
        tls: ServerCert | None = None,
        users: dict[str, str] | None = None,
        acl: str | None = None,
        persistence: bool = False,
        port: int | None = None,
        max_packet_size: int | None = None,
    ) -> None:
        self.directory = directory
        self.tls = tls
        self.users = users
        self.acl = acl  # mosquitto acl_file text (with users: who may read and write what)
        self.max_packet_size = max_packet_size  # larger packets: the client is disconnected
        self.persistence = persistence
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_file = directory / "mosquitto.log"
        self.conf_file = directory / "mosquitto.conf"
        directory.mkdir(parents=True, exist_ok=True)
        self._write_config()

    def _write_config(self) -> None:
        lines = [
            f"listener {self.port} 127.0.0.1",
            f"user {pwd.getpwuid(os.getuid()).pw_name}",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "max_inflight_messages 100",
            "max_queued_messages 100000",
        ]
        if self.max_packet_size is not None:
            lines.append(f"max_packet_size {self.max_packet_size}")
        if self.users is not None:
            passwd = self.directory / "passwd"
            passwd.unlink(missing_ok=True)
            for i, (user, password) in enumerate(self.users.items()):
                args = [MOSQUITTO_PASSWD, "-b"] + (["-c"] if i == 0 else [])
                subprocess.run(
                    [*args, str(passwd), user, password],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            passwd.chmod(0o600)
            lines += ["allow_anonymous false", f"password_file {passwd}"]
            if self.acl is not None:
                acl_file = self.directory / "acl"
                acl_file.write_text(self.acl)
                acl_file.chmod(0o600)
                lines.append(f"acl_file {acl_file}")
        else:
            lines.append("allow_anonymous true")
        if self.tls is not None:
            lines += [
                f"cafile {self.tls.ca_file}",
                f"certfile {self.tls.cert_file}",
                f"keyfile {self.tls.key_file}",
                "tls_version tlsv1.2",
            ]
        if self.persistence:
            store = self.directory / "store"
            store.mkdir(exist_ok=True)
            lines += [
                "persistence true",
                f"persistence_location {store}/",
                "autosave_interval 1",
                "autosave_on_changes true",
            ]
        self.conf_file.write_text("\n".join(lines) + "\n")

    def start(self, timeout_s: float = 10.0) -> MosquittoBroker:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        log = open(self.log_file, "ab")  # noqa: SIM115 (the process keeps it open)
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.conf_file)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        wait_until(self._accepting, timeout_s, f"mosquitto to listen on port {self.port}")
        return self

    def _accepting(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"mosquitto exited with {self.proc.returncode}: {self.log_text()[-2000:]}"
            )
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex((self.host, self.port)) == 0

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        """SIGTERM: mosquitto saves its persistence and exits; SIGKILL: it just dies."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        self.proc.wait(timeout_s)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, timeout_s: float = 10.0) -> MosquittoBroker:
        self.stop()
        return self.start(timeout_s)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def __enter__(self) -> MosquittoBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# -- a relay the test can cut -----------------------------------------------------------------


class CuttableRelay:
    """TCP relay 127.0.0.1:port -> target. `cut()` resets every relayed connection at once (the
    client sees its connection die mid-stream) while new connections keep being accepted."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closing = False
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> int:
        """Reset every open relayed connection; returns how many sockets were cut."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                # SO_LINGER 0: the close sends RST (the shutdown wakes the relay's blocked recv).
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(socks)

    def close(self) -> None:
        self._closing = True
        self._server.close()
        self.cut()
