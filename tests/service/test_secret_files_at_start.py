"""The daemon applies `jha config check`'s file rules (agent.config.file_findings) at start and on
reload: a password file others may read stops the start (exit 78) or the reload (the running
config stays), instead of every report being dropped later; and a publisher that cannot be made
never switches off the others (agent.publish.factory)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from agent.cli.main import main
from agent.config.load import load_config
from agent.config.publish import PublishSettings
from agent.errors import EX_CONFIG
from agent.publish.factory import publishers_for
from agent.publish.mqtt.queue_only import QueueOnlyPublisher
from agent.publish.prometheus.exporter import PrometheusExporter
from agent.service.daemon import Agent
from tests.cli.test_config_check_password_file import (
    PERSON_UID,
    SECRET,
    config_text,
    password_file,
)
from tests.support.service.agent_config import controller, write
from tests.support.service.daemon import serve


def test_a_password_file_others_may_read_stops_the_start_with_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "jha.yaml"
    config.write_text(config_text(password_file(tmp_path, 0o644)))
    assert main(["run", "--config", str(config), "--once", "--wait-for-stop", "1"]) == EX_CONFIG
    err = capsys.readouterr().err
    assert f"{config}:12: publish.mqtt.password_file:" in err and "0644 are too open" in err
    assert "1 error(s): not started" in err and SECRET not in err
    assert not (tmp_path / "state").exists()  # nothing was started, nothing written


def test_a_password_file_another_account_owns_stops_the_start_with_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "jha.yaml"
    secret = password_file(tmp_path, 0o600)
    os.chown(secret, PERSON_UID, PERSON_UID)
    config.write_text(config_text(secret))
    assert main(["run", "--config", str(config), "--once", "--wait-for-stop", "1"]) == EX_CONFIG
    err = capsys.readouterr().err
    assert f"owned by uid {PERSON_UID}, who may read and change it" in err and SECRET not in err
    assert not (tmp_path / "state").exists()


def test_a_reload_to_a_password_file_others_may_read_keeps_the_running_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "agent.yaml", controller("robot", production_runs_s=3600.0))
    agent = Agent(load_config(path), pool_workers=1)
    loose = password_file(tmp_path, 0o644)
    outcome: list[bool] = []

    async def scenario() -> None:
        doc = yaml.safe_load(path.read_text())
        doc["controllers"].append(controller("second", production_runs_s=3600.0))
        doc["publish"] = {"mqtt": {"host": "127.0.0.1", "username": "jha",
                                   "password_file": str(loose)}}  # fmt: skip
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        outcome.append(await agent.reload())
        await asyncio.sleep(0.1)

    caplog.set_level("INFO")
    assert serve(agent, scenario) == 0
    assert outcome == [False]
    assert set(agent.runners) == {"robot"}  # the new controller was not taken either
    assert "event=reload_rejected" in caplog.text and "are too open" in caplog.text
    assert SECRET not in caplog.text


def test_a_publisher_that_cannot_be_made_leaves_the_others(tmp_path: Path) -> None:
    config = tmp_path / "jha.yaml"
    config.write_text(config_text(password_file(tmp_path, 0o644)) + "  prometheus: {port: 0}\n")
    settings: PublishSettings = load_config(config).publish
    failures: list[str] = []
    made = publishers_for(settings, tmp_path, lambda name, exc: failures.append(name))
    assert failures == ["mqtt"]
    # MQTT's outbox stays, so its reports wait there (tests/publish/test_mqtt_queue_only.py).
    assert [type(p) for p in made] == [QueueOnlyPublisher, PrometheusExporter]
    with pytest.raises(Exception, match="too open"):  # without a handler: the first raises
        publishers_for(settings, tmp_path)
