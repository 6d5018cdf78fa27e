"""The MQTT publisher's security against a real mosquitto: the broker's TLS certificate verified
(an untrusted CA refused), password authentication, and passwords that never reach a log."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from agent.config.mqtt import MqttSettings
from agent.errors import ConfigError
from agent.publish.mqtt.publisher import OUTBOX_FILE, MqttPublisher
from tests.peers.mosquitto_broker import (
    MosquittoBroker,
    issue_server_cert,
    make_ca,
)
from tests.support.publish.mqtt import cycle_report, settings_for

PASSWORD = "pw-7Hq2-Zx91-secret"
WRONG_PASSWORD = "pw-WRONG-4kT8-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    trusted, untrusted = make_ca(d, "plant-ca"), make_ca(d, "rogue-ca")
    server = issue_server_cert(trusted, d, "broker")
    rogue_server = issue_server_cert(untrusted, d, "rogue-broker")
    return {
        "trusted_ca": trusted.cert_file,
        "untrusted_ca": untrusted.cert_file,
        "cert": server.cert_file,
        "key": server.key_file,
        "rogue_cert": rogue_server.cert_file,
        "rogue_key": rogue_server.key_file,
    }


def password_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"mqtt-password-{mode:o}"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def deliver_one(settings: MqttSettings, state: Path, timeout_s: float) -> MqttPublisher:
    async def run() -> MqttPublisher:
        pub = MqttPublisher(settings, state)
        await pub.start()
        await pub.publish(cycle_report(0))
        await asyncio.to_thread(pub.wait_idle, timeout_s)
        await pub.close()
        return pub

    return asyncio.run(run())


@pytest.mark.security("MQTT: TLS broker certificate verified, untrusted CA refused")
def test_tls_trusted_ca_works_untrusted_refused(
    tmp_path: Path, pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    from tests.peers.mosquitto_broker import ServerCert

    caplog.set_level(logging.INFO)
    tls = ServerCert(pki["cert"], pki["key"], pki["trusted_ca"])
    with MosquittoBroker(tmp_path / "broker", tls=tls) as b:
        # Verification is on by default: the client trusts only the plant CA it is given.
        good = deliver_one(
            settings_for(
                b.port,
                tls=True,
                ca_file=str(pki["trusted_ca"]),
                host="localhost",
                close_timeout_s=0.5,
            ),
            tmp_path / "good",
            10,
        )
        assert good.stats().connects == 1
        assert good.stats().queued == 0
        bad = deliver_one(
            settings_for(b.port, tls=True, ca_file=str(pki["untrusted_ca"]), close_timeout_s=0.0),
            tmp_path / "bad",
            1.0,
        )
        assert bad.stats().connects == 0
        assert bad.stats().queued == 3  # kept for when the trust is fixed
        assert "CERTIFICATE_VERIFY_FAILED" in (bad.stats().last_error or "")
        assert "event=mqtt_connect_failed" in caplog.text
    # A broker presenting a certificate of another CA is refused too.
    rogue = ServerCert(pki["rogue_cert"], pki["rogue_key"], pki["untrusted_ca"])
    with MosquittoBroker(tmp_path / "rogue", tls=rogue) as b:
        bad = deliver_one(
            settings_for(b.port, tls=True, ca_file=str(pki["trusted_ca"]), close_timeout_s=0.0),
            tmp_path / "rogue-state",
            1.0,
        )
        assert bad.stats().connects == 0
        # tls_insecure accepts it, and says so loudly.
        insecure = deliver_one(
            settings_for(
                b.port,
                tls=True,
                ca_file=str(pki["trusted_ca"]),
                tls_insecure=True,
                close_timeout_s=0.5,
            ),
            tmp_path / "insecure",
            10,
        )
        assert insecure.stats().connects == 1
        assert "event=mqtt_tls_insecure" in caplog.text


@pytest.mark.security("MQTT: password never in logs, wrong password a clear error")
def test_password_auth_and_no_password_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, paho's included
    with MosquittoBroker(tmp_path / "broker", users={"jha": PASSWORD}) as b:
        good_file = password_file(tmp_path, PASSWORD)
        good = deliver_one(
            settings_for(b.port, username="jha", password_file=str(good_file)),
            tmp_path / "good",
            10,
        )
        assert good.stats().connects == 1 and good.stats().queued == 0
        wrong_file = password_file(tmp_path / "w", WRONG_PASSWORD)
        wrong = deliver_one(
            settings_for(
                b.port, username="jha", password_file=str(wrong_file), close_timeout_s=0.0
            ),
            tmp_path / "wrong",
            1.0,
        )
        assert wrong.stats().queued == 3 and wrong.stats().connects == 0
        error = wrong.stats().last_error or ""
        assert error.startswith("broker refused the connection: "), error
        assert error == (
            f"broker refused the connection: Not authorized (check username 'jha' "
            f"and the password in {wrong_file})"
        ), error
        assert "event=mqtt_connect_refused" in caplog.text
        assert "username=jha" in caplog.text
        visible = "\n".join(
            [
                caplog.text,
                repr(wrong),
                repr(good),
                json.dumps(wrong.stats().to_dict()),
                error,
                repr(wrong.settings),
            ]
        )
        assert PASSWORD not in visible
        assert WRONG_PASSWORD not in visible
        with sqlite3.connect(tmp_path / "wrong" / OUTBOX_FILE) as db:
            blob = b"".join(r[0] for r in db.execute("SELECT payload FROM outbox"))
        assert WRONG_PASSWORD.encode() not in blob


@pytest.mark.security("MQTT: password file readable by others refused")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=lambda m: f"{m:04o}")
def test_password_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = password_file(tmp_path, PASSWORD, mode)
    with pytest.raises(ConfigError) as info:
        MqttPublisher(settings_for(1883, username="jha", password_file=str(path)), tmp_path)
    message = str(info.value)
    assert str(path) in message and f"{mode:04o}" in message and "chmod 600" in message
    assert PASSWORD not in message


def test_password_file_problems_are_clear(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"{missing}: cannot read the MQTT password file"):
        MqttPublisher(settings_for(1883, username="u", password_file=str(missing)), tmp_path)
    empty = password_file(tmp_path, "")
    with pytest.raises(ConfigError, match="is empty"):
        MqttPublisher(settings_for(1883, username="u", password_file=str(empty)), tmp_path)
    ok = password_file(tmp_path / "ok", PASSWORD, 0o400)
    pub = MqttPublisher(settings_for(1883, username="u", password_file=str(ok)), tmp_path)
    assert PASSWORD not in repr(pub) and PASSWORD not in str(pub.__dict__)
