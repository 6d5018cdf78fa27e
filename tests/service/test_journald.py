"""What a real systemd-journald stores from the agent's stderr (issue 16: `journalctl -p warning`
showed nothing, every line was priority info)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent.logfmt import JsonFormatter, parse_kv, setup_logging, stream_is_journal
from tests.peers.journald import journald
from tests.support.service.faults import config

SNIPPET = """
import logging, sys
from agent.logfmt import kv, setup_logging
setup_logging("debug", log_format=sys.argv[1])
log = logging.getLogger("agent.test")
log.debug(kv("probe_debug"))
log.info(kv("probe_info", joint="j1"))
log.warning(kv("probe_warning", reason="interlock off"))
log.error(kv("probe_error", path="/var/lib/jha"))
try:
    1 / 0
except ZeroDivisionError:
    log.exception(kv("probe_crash"))
"""


@pytest.mark.parametrize("log_format", ["logfmt", "json"])
def test_journald_stores_each_line_at_its_priority(log_format: str) -> None:
    with journald() as jd:
        with jd.stream("jhaprobe") as (fd, env):
            subprocess.run(
                [sys.executable, "-c", SNIPPET, log_format],
                stderr=fd,
                env=env,
                check=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        every = jd.entries("jhaprobe", expect=5)
        warnings = jd.entries("jhaprobe", "-p", "warning", expect=3)
    got = {
        json.loads(e["MESSAGE"])["event"]
        if log_format == "json"
        else parse_kv(e["MESSAGE"])["event"]: int(e["PRIORITY"])
        for e in every
    }
    assert got == {
        "probe_debug": 7,
        "probe_info": 6,
        "probe_warning": 4,
        "probe_error": 3,
        "probe_crash": 3,
    }
    # -p warning: warnings and worse only, and the stored message has no "<4>" left
    assert sorted(int(e["PRIORITY"]) for e in warnings) == [3, 3, 4]
    assert all(not e["MESSAGE"].startswith("<") for e in every)
    crash = next(e["MESSAGE"] for e in every if "probe_crash" in e["MESSAGE"])
    # one event, one journal entry: the traceback is a field of it, not lines of its own
    assert "ZeroDivisionError" in crash and len(every) == 5


def test_jha_run_under_the_journal_logs_its_warnings_as_warnings(tmp_path: Path) -> None:
    """The daemon itself: a config with an interlock off warns about it at start."""
    stops = [{"at_s": 0.2, "length_s": 3.0}]
    cfg = config(tmp_path / "agent.yaml", tmp_path / "state", stops, joints=1)
    with journald() as jd:
        with jd.stream("jha") as (fd, env):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "agent.cli",
                    "run",
                    "--config",
                    str(cfg),
                    "--once",
                    "--dry-run",
                    "--wait-for-stop",
                    "10",
                ],
                stderr=fd,
                stdout=subprocess.DEVNULL,
                env=env,
                check=False,
                timeout=120,
                cwd=Path(__file__).resolve().parents[2],
            )
        warnings = jd.entries("jha", "-p", "warning", expect=1)
        infos = jd.entries("jha", "-p", "info..info", expect=1)
    assert done.returncode == 0
    assert any("event=interlock_off" in e["MESSAGE"] for e in warnings)
    assert all(int(e["PRIORITY"]) <= 4 for e in warnings)
    assert any("event=ready" in e["MESSAGE"] for e in infos)


def test_the_prefix_only_when_stderr_is_the_stream_journald_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tempfile.TemporaryFile("w+") as f:
        st = Path(f"/proc/self/fd/{f.fileno()}").stat()
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert stream_is_journal(f)
        handler = setup_logging("info", stream=f)
        logging.getLogger("agent.x").warning("event=w")
        handler.flush()
        f.seek(0)
        assert f.read().startswith("<4>time=")
        # another file (a terminal, a pipe to a log shipper): no prefix
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
        assert not stream_is_journal(f)
    for bad in ("", "x:y", "12"):
        monkeypatch.setenv("JOURNAL_STREAM", bad)
        assert not stream_is_journal(sys.stderr)
    assert not stream_is_journal(io.StringIO())


def test_json_lines_carry_the_event_fields_and_quotes_survive() -> None:
    record = logging.LogRecord(
        "agent.x",
        logging.ERROR,
        __file__,
        1,
        'event=e path="/a b" n=3 q="say \\"hi\\""',
        None,
        None,
    )
    doc = json.loads(JsonFormatter().format(record))
    assert doc["level"] == "error" and doc["logger"] == "agent.x"
    assert (doc["event"], doc["path"], doc["n"], doc["q"]) == ("e", "/a b", "3", 'say "hi"')
    plain = logging.LogRecord("agent.x", logging.INFO, __file__, 1, "plain text", None, None)
    assert json.loads(JsonFormatter().format(plain))["msg"] == "plain text"
