"""`jha fleet check --config FILE`: every mistake at its file:line, the secret files held to the
MQTT password file's rules, and nothing started. And the schema migrations."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from agent.cli.main import main
from agent.errors import ConfigError
from agent.fleet.migrate import migrate, migrations
from tests.fleet.conftest import write_fleet_config


def check(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["fleet", "check", "--config", str(config)])
    return code, capsys.readouterr().err.splitlines()


def line_of(config: Path, text: str) -> int:
    for n, line in enumerate(config.read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(f"{text!r} not in {config}")


def test_a_valid_file_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    assert main(["fleet", "check", "--config", str(files.config)]) == 0
    assert capsys.readouterr().out.strip() == f"{files.config}: OK"


def test_the_shipped_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    """config/fleet-example.yaml (installed as /etc/jha-fleet/fleet.example.yaml) checks clean;
    its token is a systemd credential, which exists only while the service runs: a warning."""
    example = Path(__file__).resolve().parents[2] / "config" / "fleet-example.yaml"
    code, err = check(example, capsys)
    assert code == 0, err
    assert [e for e in err if "warning" not in e] == []
    assert any("LoadCredential=" in e for e in err)


def test_mistakes_are_reported_at_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/run/postgresql password=hunter2")
    text = files.config.read_text()
    text = text.replace("port: 1883", "port: eighty")
    text = text.replace("  client_id: jha-fleet-test\n", "")
    text = text.replace("stale_after_s:", "stale_afte_s:")
    text = text.replace("topic_prefix: site-b/jha", "topic_prefix: jha")
    files.config.write_text(text)
    code, errors = check(files.config, capsys)
    assert code == 78
    c = str(files.config)
    expected = {
        line_of(files.config, "port: eighty"): "broker.port",
        # A missing key is reported where its mapping's first key is.
        line_of(files.config, "host: 127.0.0.1"): "broker.client_id",
        line_of(files.config, "stale_afte_s"): "stale_afte_s",
    }
    for line, field in expected.items():
        assert any(e.startswith(f"{c}:{line}: {field}") for e in errors), (line, field, errors)
    assert any("did you mean 'stale_after_s'" in e for e in errors)
    assert errors[-1] == f"{c}: {len(errors) - 1} error(s)"
    assert all(re.match(rf"{re.escape(c)}:\d+: ", e) for e in errors[:-1])


def test_cross_field_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/run/postgresql password=hunter2")
    text = files.config.read_text().replace("topic_prefix: site-b/jha", "topic_prefix: jha")
    files.config.write_text(text)
    code, errors = check(files.config, capsys)
    assert code == 78
    c = str(files.config)
    conninfo = line_of(files.config, "conninfo:")
    assert any(
        e.startswith(f"{c}:{conninfo}: database.conninfo: expected no password") for e in errors
    )
    second = [n for n, t in enumerate(text.splitlines(), 1) if "topic_prefix: jha" in t][1]
    assert any(
        e.startswith(f"{c}:{second}: sources[1].topic_prefix: expected a unique") for e in errors
    )
    assert "hunter2" not in "\n".join(errors)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_others_may_read_is_refused_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    files.token_file.chmod(mode)
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "token_file:")
    assert errors[0].startswith(
        f"{files.config}:{line}: http.token_file: expected a file that only"
    )
    assert f"{mode:04o}" in errors[0]
    assert "s3cret" not in "\n".join(errors)


def test_check_as_a_command_starts_nothing(tmp_path: Path) -> None:
    # A broker port nobody listens on and a database that does not exist: check does not care.
    files = write_fleet_config(tmp_path, 1, "host=/nonexistent dbname=nothing")
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "fleet", "check", "--config", str(files.config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(": OK")


def test_migrations_apply_once_in_order(database: str) -> None:
    known = migrations()
    assert [m.version for m in known] == list(range(1, len(known) + 1))
    with psycopg.connect(database) as conn:
        assert migrate(conn) == [m.name for m in known]
        assert migrate(conn) == []  # already at the newest version
        versions = conn.execute("SELECT version, name FROM schema_version ORDER BY 1").fetchall()
        assert versions == [(m.version, m.name) for m in known]
        conn.execute("INSERT INTO schema_version (version, name) VALUES (999, 'from_the_future')")
        conn.commit()
        with pytest.raises(ConfigError, match="schema version 999, newer than this jha"):
            migrate(conn)


def test_a_systemd_credential_is_noted_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    credential = "/run/credentials/jha-fleet.service/token"
    files.config.write_text(files.config.read_text().replace(str(files.token_file), credential))
    code = main(["fleet", "check", "--config", str(files.config)])
    out = capsys.readouterr()
    assert code == 0
    line = line_of(files.config, "token_file:")
    expected = f"{files.config}:{line}: http.token_file: warning: the token file"
    assert any(w.startswith(expected) for w in out.err.splitlines())
    assert "LoadCredential=" in out.err


def test_a_conninfo_libpq_cannot_read_is_refused_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/run/postgresql dbname")
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "conninfo:")
    assert errors[0].startswith(f"{files.config}:{line}: database.conninfo: expected a libpq")
    assert 'missing "=" after "dbname"' in errors[0]


def with_database_lines(config: Path, lines: str) -> None:
    """`lines` (the database section's indentation) added after its conninfo."""
    text = config.read_text()
    at = text.index("\n", text.index("  conninfo:")) + 1
    config.write_text(text[:at] + lines + text[at:])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"host=/run/postgresql dbname"', 'expected a libpq connection string, found: missing "="'),
        (
            '"host=replica.plant.example password=hunter2"',
            "expected no password in read_conninfo: put it in read_password_file",
        ),
        ("[host=replica.plant.example]", "expected a string"),
        ("5432", "expected a string"),
        ('""', "expected a string of at least 1 character"),
    ],
)
def test_a_read_conninfo_is_held_to_the_rules_of_conninfo_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    with_database_lines(files.config, f"  read_conninfo: {value}\n")
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "read_conninfo:")
    assert errors[0].startswith(f"{files.config}:{line}: database.read_conninfo: {expected}"), (
        errors
    )
    assert errors[-1] == f"{files.config}: 1 error(s)"
    assert "hunter2" not in "\n".join(errors)


def test_a_replica_password_file_is_a_secret_file_and_needs_a_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    secret = tmp_path / "replica-password"
    secret.write_text("hunter2\n")
    secret.chmod(0o644)
    with_database_lines(files.config, f"  read_password_file: {secret}\n")
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "read_password_file:")
    assert errors[0] == (
        f"{files.config}:{line}: database.read_password_file: "
        "expected read_conninfo with it, found none"
    )

    secret.chmod(0o600)
    with_database_lines(files.config, '  read_conninfo: "host=replica.plant.example dbname=jha"\n')
    assert main(["fleet", "check", "--config", str(files.config)]) == 0, capsys.readouterr().err
    capsys.readouterr()

    secret.chmod(0o640)
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "read_password_file:")
    assert errors[0].startswith(
        f"{files.config}:{line}: database.read_password_file: expected a file that only"
    )
    assert "hunter2" not in "\n".join(errors)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "expected an integer >= 1 and <= 1200 or null, found 0"),
        ("1201", "expected an integer >= 1 and <= 1200 or null, found 1201"),
        ("twelve", "expected an integer"),
        ("1.5", "expected an integer"),
    ],
)
def test_retention_months_is_checked_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/nonexistent dbname=jha")
    with_database_lines(files.config, f"  retention_months: {value}\n")
    code, errors = check(files.config, capsys)
    assert code == 78
    line = line_of(files.config, "retention_months:")
    assert errors[0].startswith(f"{files.config}:{line}: database.retention_months: {expected}"), (
        errors
    )


def test_every_mistake_in_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A planner's file found 14 mistakes in 4 runs (7, 4, 1, 2): the secret files and the
    cross-field rules waited for the schema to pass. Now one run names them all."""
    files = write_fleet_config(tmp_path, 1883, "host=/run/postgresql dbname=jha")
    files.token_file.chmod(0o644)  # a secret others may read
    text = files.config.read_text()
    text = text.replace("port: 1883", "port: eighty")  # schema
    text = text.replace("topic_prefix: site-b/jha", "topic_prefix: jha")  # cross-field
    text = text.replace("  token_file:", "  cert_file: /etc/jha/https.crt\n  token_file:")
    files.config.write_text(text)
    code, errors = check(files.config, capsys)
    assert code == 78
    fields = {e.split(": ")[1] for e in errors[:-1]}
    assert fields == {
        "broker.port",
        "sources[1].topic_prefix",
        "http.key_file",
        "http.token_file",
    }, errors
    lines = [int(e.split(":")[1]) for e in errors[:-1]]
    assert lines == sorted(lines)  # in the file's order


def test_plain_http_beyond_this_host_is_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fleet_config(tmp_path, 1883, "host=/run/postgresql dbname=jha")
    code, err = check(files.config, capsys)
    assert code == 0 and not any("plain HTTP" in e for e in err)  # 127.0.0.1
    text = files.config.read_text()
    files.config.write_text(text.replace("host: 127.0.0.1\n  port: 0", "host: 0.0.0.0\n  port: 0"))
    code, err = check(files.config, capsys)
    line = line_of(files.config, "host: 0.0.0.0")
    assert code == 0
    assert any(e.startswith(f"{files.config}:{line}: http.host: warning: the plan is served "
                            "over plain HTTP on 0.0.0.0") for e in err), err  # fmt: skip
