"""Atomic writes of files and captures: parents created, a failed write or rename leaves the old
file and no temporary, a CSV and its sidecar stay a pair, modes follow the umask."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.atomic import atomic_write_bytes, atomic_write_text, atomic_writer
from agent.capture.files import load_capture, save_capture, write_csv
from tests.support.capture_files import META, assert_same, sample_capture

pytestmark = pytest.mark.usefixtures("_in_tmp")

# ---------------------------------------------------------------------------------- atomicity


def test_atomic_writes_create_parents_and_replace() -> None:
    atomic_write_text("a/b/c.txt", "one\n")
    atomic_write_text("a/b/c.txt", "two\n")
    assert Path("a/b/c.txt").read_text() == "two\n"
    atomic_write_bytes("a/d.bin", b"\x00\x01")
    assert Path("a/d.bin").read_bytes() == b"\x00\x01"
    assert sorted(os.listdir("a/b")) == ["c.txt"]
    with pytest.raises(ValueError, match="mode"), atomic_writer("a/e.txt", "a"):
        pass


def test_a_write_that_raises_midway_leaves_the_old_file_and_no_temp() -> None:
    atomic_write_text("r.txt", "old\n")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_writer("r.txt") as f:
        f.write("new, half")
        raise RuntimeError("disk on fire")
    assert Path("r.txt").read_text() == "old\n"
    assert os.listdir(".") == ["r.txt"]


def test_failed_rename_leaves_the_old_file_and_no_temp(monkeypatch: pytest.MonkeyPatch) -> None:
    atomic_write_text("r.txt", "old\n")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OSError, match="No space"):
        m.setattr(os, "replace", broken_replace)
        atomic_write_text("r.txt", "new\n")
    assert Path("r.txt").read_text() == "old\n"
    assert os.listdir(".") == ["r.txt"]


def test_capture_write_that_fails_midway_keeps_the_previous_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = sample_capture(n=50, seed=1)
    save_capture(old, "cap.npz")
    save_capture(old, "cap.csv")
    before = {p: Path(p).read_bytes() for p in os.listdir(".")}

    def savez_then_fail(file: object, *args: object, **kwargs: object) -> None:
        file.write(b"PK\x03\x04 partial archive")  # type: ignore[attr-defined]
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m, pytest.raises(OSError, match="Input/output"):
        m.setattr(np, "savez_compressed", savez_then_fail)
        save_capture(sample_capture(n=60, seed=2), "cap.npz")

    real_replace = os.replace

    def replace_once_then_fail(src: object, dst: object) -> None:
        if str(dst).endswith(".csv"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    new = sample_capture(n=60, seed=2, meta=replace(META, machine="robot-4"))
    with monkeypatch.context() as m, pytest.raises(OSError, match="No space"):
        m.setattr(os, "replace", replace_once_then_fail)
        write_csv(new, "cap.csv")
    # The sidecar had been replaced before the CSV failed; it is put back, so the pair matches.
    assert Path("cap.csv.meta.yaml").read_bytes() == before["cap.csv.meta.yaml"]

    assert Path("cap.npz").read_bytes() == before["cap.npz"]
    assert Path("cap.csv").read_bytes() == before["cap.csv"]
    assert sorted(os.listdir(".")) == sorted(before)  # no temp files left behind
    assert_same(load_capture("cap.npz"), old)
    assert_same(load_capture("cap.csv"), old)


def test_failed_first_csv_write_leaves_no_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    real_replace = os.replace

    def fail_csv(src: object, dst: object) -> None:
        if str(dst).endswith(".csv"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    with monkeypatch.context() as m, pytest.raises(OSError):
        m.setattr(os, "replace", fail_csv)
        write_csv(sample_capture(n=10), "fresh.csv")
    assert os.listdir(".") == []


def test_new_files_follow_the_umask_and_replacements_keep_their_mode() -> None:
    atomic_write_text("p.txt", "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat("p.txt").st_mode) == 0o666 & ~umask
    os.chmod("p.txt", 0o640)
    atomic_write_text("p.txt", "y")
    assert stat.S_IMODE(os.stat("p.txt").st_mode) == 0o640
