"""An MQTT publisher that cannot be made (here: its password file is not there yet, as under
systemd's LoadCredential= before the credential exists) is replaced by its outbox alone
(agent.publish.mqtt.queue_only): the daemon's reports wait in the outbox, and the next start
whose publisher can be made sends them to a real mosquitto, in order, each once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from agent.config.publish import PublishSettings
from agent.publish.factory import publishers_for
from agent.publish.mqtt.outbox import OUTBOX_FILE
from agent.publish.mqtt.publisher import MqttPublisher
from agent.publish.mqtt.queue_only import QueueOnlyPublisher
from tests.peers.mosquitto_broker import MosquittoBroker
from tests.publish.test_mqtt import queued_report_ids
from tests.support.publish.mqtt import Subscriber, cycle_report, settings_for
from tests.support.summary import fault


def test_reports_wait_in_the_outbox_until_a_publisher_can_send_them(
    broker: MosquittoBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    missing = tmp_path / "credentials" / "mqtt-password"
    broken = PublishSettings(
        mqtt=settings_for(broker.port, username="jha", password_file=str(missing))
    )
    failures: list[str] = []
    caplog.set_level(logging.INFO)

    async def first_run() -> list[str]:
        (pub,) = publishers_for(broken, state, lambda name, exc: failures.append(name))
        assert isinstance(pub, QueueOnlyPublisher)
        await pub.start()
        for n in range(3):
            await pub.publish(cycle_report(n))
        # 3 reports, and the latest health of each of the 2 joints (a newer one replaces an
        # unsent older one: retained topics only ever show the latest).
        assert pub.queued_messages() == 5
        await pub.close()
        return queued_report_ids(state)

    queued = asyncio.run(first_run())
    assert failures == ["mqtt"] and len(queued) == 3
    assert "event=mqtt_queue_only" in caplog.text and "No such file or directory" in caplog.text
    assert caplog.text.count("event=mqtt_not_sent") == 3

    sub = Subscriber(broker.port)

    async def second_run() -> None:
        (pub,) = publishers_for(PublishSettings(mqtt=settings_for(broker.port)), state)
        assert isinstance(pub, MqttPublisher)
        await pub.start()
        assert await asyncio.to_thread(pub.wait_idle, 20)
        await pub.close()

    asyncio.run(second_run())
    sub.wait(lambda: len(sub.ids()) >= 3, "the 3 queued reports")
    delivered = sub.ids()
    sub.close()
    fault(
        "MQTT publisher cannot be made (password file not there), reports queued, sent later",
        records_lost=len(set(queued) - set(delivered)),
    )
    assert delivered == queued  # in order, each once
    assert queued_report_ids(state) == []
    assert (state / OUTBOX_FILE).exists()
