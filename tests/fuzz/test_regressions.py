"""Every crash the atheris targets found, kept twice: its input replayed through the target
(tests/fuzz/corpus/TARGET/crash-*, also a seed of every later run) and a test of the behaviour
that is now right, written the way a reader of the parser would check it.
"""

from __future__ import annotations

import io
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pytest

from agent.capture.files import load_capture
from agent.config.load import load_config
from agent.errors import CaptureError, ConfigError
from agent.feedrate.gcode.blocks import ParserOptions
from agent.feedrate.gcode.dialect import DIALECTS
from agent.feedrate.gcode.emit import GcodeEmitter
from agent.feedrate.gcode.lex import lex_line
from agent.feedrate.gcode.parser import ModalState
from agent.publish.mqtt.outbox import Outbox, OutboxError
from agent.schema.yaml_lines import issues_of
from tests.fuzz.atheris.outbox import _prepare as _prepare_outbox
from tests.fuzz.atheris.run import CORPUS, load_target

CRASHES = sorted(CORPUS.glob("*/crash-*"))


@pytest.mark.parametrize("path", CRASHES, ids=[f"{p.parent.name}/{p.name}" for p in CRASHES])
def test_crash_input_now_holds_the_property(path: Path) -> None:
    load_target(path.parent.name).one_input(path.read_bytes())


def test_every_crash_input_is_replayed() -> None:
    assert len(CRASHES) >= 6  # one per finding below; a new finding adds its file


# atheris `gcode` (Marlin emitter): a block-deleted tape mark `/%` passed through as
# `/N2 %*86`, a line the parser itself refuses ("expected a letter and a number at '%'").
# Fixed in agent/feedrate/gcode/emit.py: a tape mark, block-deleted or not, is dropped from a
# numbered stream, as a plain `%` already was.
@pytest.mark.parametrize("block_delete", [True, False])
def test_marlin_drops_a_block_deleted_tape_mark(block_delete: bool) -> None:
    state = ModalState(options=ParserOptions(block_delete=block_delete), source="p.nc")
    emitter = GcodeEmitter(DIALECTS["marlin"])
    assert emitter.passthrough(state.apply("/%\n", 1)) == ""
    kept = emitter.passthrough(state.apply("/G1 X1 F100\n", 2))
    assert kept.startswith("/N1 G1 X1 F100*")
    lex_line(kept, 2)  # its checksum holds


# atheris `gcode`: in G93 a rapid carried its F word as inverse_time_f, so `G0 X5 F0` gave a
# Block whose duration_s divided 60 by 0 (ZeroDivisionError), and `G0 X5 F30` a 2 s duration
# for a rapid. Fixed in agent/feedrate/gcode/parser.py: only feed moves keep their inverse-time F.
def test_g93_rapid_is_not_timed_by_its_f_word() -> None:
    state = ModalState(source="p.nc")
    state.apply("G93", 1)
    for line_no, text in enumerate(("G0 X5 F0", "G0 X9 F30"), 2):
        block = state.apply(text, line_no)
        assert block.inverse_time_f is None
        assert block.duration_s is None
    move = state.apply("G1 X19 F30", 4)
    assert move.duration_s == pytest.approx(2.0)


# atheris `capture_npz`: numpy hands out an archive entry without the .npy magic as raw bytes,
# and read_npz then failed with AttributeError ('bytes' object has no attribute 'ndim'), exit
# 70 instead of 65. Fixed in agent/capture/files.py: such an entry is a CaptureError naming it.
def test_npz_entry_that_is_no_array_is_a_capture_error(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, time_s=np.arange(3.0), motor_pos_rad=np.zeros(3))
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr("meta_json.npy", b'{"format_version": 1, "meta": {}}')  # JSON, no .npy
    path = tmp_path / "c.npz"
    path.write_bytes(buf.getvalue())
    with pytest.raises(CaptureError, match=r"c\.npz: archive entry 'meta_json' is not") as err:
        load_capture(path)
    assert err.value.source == str(path)


# atheris `config_yaml` (seeded with config/cnc_example.yaml): an inline machine key that is no
# identifier (`"bad key": 1`) made GrblSettings.check return the path "machine.['bad key']",
# which the schema cannot split: ValueError out of load_config instead of a ConfigError.
# Fixed in drivers/grbl/settings.py: no dot before a quoted key.
def test_inline_machine_odd_key_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "cnc.yaml"
    path.write_bytes((CORPUS / "config_yaml" / "crash-inline-machine-quoted-key").read_bytes())
    with pytest.raises(ConfigError) as err:
        load_config(path)
    where = {(i.line, i.path) for i in issues_of(err.value)}
    assert (10, "controllers[0].settings.machine['bad key']") in where


# atheris `mqtt_outbox` (bytes of the file overwritten): a damaged page of the outbox made
# SQLite return the queued rows out of seq order ([1, 93, 3, 4]); the sender, which goes on
# from the last seq it handed over, would then skip or repeat messages. Fixed in
# agent/publish/mqtt/outbox.py: a file failing PRAGMA quick_check is refused with an OutboxError.
def test_outbox_with_a_damaged_page_is_refused(tmp_path: Path) -> None:
    crash = (CORPUS / "mqtt_outbox" / "crash-page-damage-rows-out-of-order").read_bytes()
    path = tmp_path / "outbox.sqlite"
    _prepare_outbox(crash, path)
    db = sqlite3.connect(path)
    try:  # the input still damages the file the way it did (else this test proves nothing)
        assert db.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    finally:
        db.close()
    with pytest.raises(OutboxError, match=r"outbox\.sqlite: damaged MQTT outbox"):
        Outbox(path, max_messages=100, max_bytes=1 << 20)


# atheris `mqtt_outbox` (a table `outbox` of another making, columns untyped): a row whose seq
# was text that is not UTF-8 and whose kind was unknown made pending() discard it by that seq,
# and binding the seq back failed with UnicodeEncodeError, out of pending() (the sender thread
# would have died). Fixed in agent/publish/mqtt/outbox.py: a file whose outbox.seq is not the
# INTEGER PRIMARY KEY is refused with an OutboxError when it is opened.
def test_outbox_table_of_another_making_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE outbox (seq, message_id, kind, topic, payload, retain, supersedes)")
    db.execute("INSERT INTO outbox VALUES (CAST(x'91' AS TEXT), 'm', 'bogus', 't', x'00', 0, NULL)")
    db.commit()
    db.close()
    with pytest.raises(OutboxError, match=r"outbox\.sqlite: table outbox is not this agent's"):
        Outbox(path, max_messages=100, max_bytes=1 << 20)
