"""The plan over HTTPS (http.cert_file, http.key_file): a client that verifies the server with
the plant's CA gets the plan; a plain HTTP client on the same port and one that connects and
says nothing are each dropped without holding up the others; `jha fleet check` names a key
other users may read and a certificate that does not go with its key, at their lines."""

from __future__ import annotations

import http.client
import socket
import ssl
from pathlib import Path

from agent.fleet.settings import fleet_issues
from tests.fleet.conftest import TOKEN, FleetFiles, write_fleet_config
from tests.fleet.running import running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, issue_server_cert, make_ca


def _with_https(files: FleetFiles, cert: Path, key: Path) -> None:
    text = files.config.read_text()
    text = text.replace("http:\n", f"http:\n  cert_file: {cert}\n  key_file: {key}\n", 1)
    files.config.write_text(text)


def _get(port: int, ca: Path, path: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_the_plan_over_https_and_what_is_not_https_is_dropped(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    ca = make_ca(tmp_path / "pki", "plant-ca")
    server = issue_server_cert(ca, tmp_path / "pki", "fleet")
    files = write_fleet_config(tmp_path / "fleet", broker.port, database)
    _with_https(files, server.cert_file, server.key_file)
    with running_fleet(files.config) as fleet:
        port = fleet.web.address[1]
        # A client that connects and says nothing: its handshake waits in its own thread.
        silent = socket.create_connection(("127.0.0.1", port))
        try:
            status, body = _get(port, ca.cert_file, "/api/plan")
            assert status == 200 and body.startswith(b"{")
            # Plain HTTP on the HTTPS port: no answer in the clear, and the server goes on.
            plain = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                plain.request("GET", "/api/plan", headers={"Authorization": f"Bearer {TOKEN}"})
                try:
                    answer = plain.getresponse().status
                except (http.client.HTTPException, OSError):
                    answer = None
                assert answer is None
            finally:
                plain.close()
            assert _get(port, ca.cert_file, "/")[0] == 200
            # A client that does not trust the server's CA refuses it.
            other = make_ca(tmp_path / "other", "other-ca")
            try:
                _get(port, other.cert_file, "/api/plan")
                raise AssertionError("a certificate of another CA was accepted")
            except ssl.SSLCertVerificationError:
                pass
        finally:
            silent.close()


def test_check_names_a_readable_key_and_a_mismatched_pair(database: str, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "pki", "plant-ca")
    server = issue_server_cert(ca, tmp_path / "pki", "fleet")
    another = issue_server_cert(ca, tmp_path / "pki", "other")
    files = write_fleet_config(tmp_path / "fleet", 1883, database)
    _with_https(files, server.cert_file, server.key_file)

    server.key_file.chmod(0o644)
    settings, issues = fleet_issues(files.config)
    assert settings is None
    assert [(i.line, i.path) for i in issues] == [(_line(files, "key_file:"), "http.key_file")]
    assert "0644" in issues[0].message

    server.key_file.chmod(0o600)
    assert fleet_issues(files.config)[1] == []

    mismatched = write_fleet_config(tmp_path / "mismatched", 1883, database)
    _with_https(mismatched, server.cert_file, another.key_file)
    settings, issues = fleet_issues(mismatched.config)
    assert settings is None
    where = _line(mismatched, "cert_file:")
    assert [(i.line, i.path) for i in issues] == [(where, "http.cert_file")]
    assert "loadable pair" in issues[0].message


def _line(files: FleetFiles, text: str) -> int:
    lines = files.config.read_text().splitlines()
    return 1 + next(i for i, x in enumerate(lines) if text in x)
