"""atheris targets `capture_csv` and `capture_npz`: capture files through load_capture.

`capture_csv`: the input is a CSV file and its YAML sidecar, separated by the first
`\\n---sidecar---\\n` (no separator: no sidecar), loaded as `jha analyze` loads them.

`capture_npz`: a raw archive would spend the search on zip CRCs, so the input is the archive's
entries, each `name \\0 .npy bytes`, separated by `\\n---entry---\\n`; this module zips them
(stored, CRCs right) and load_capture reads the archive. Coverage guidance then works on the
.npy headers (dtype, shape, order), the arrays' contents and the meta_json document. An input
starting with `PK` is taken as a whole archive instead (zip layer, truncation).

Seeds: captures written by save_capture, from the simulator (the demo joint's constant-speed
test, a few hundred samples) and the hypothesis target's small captures; the npz regressions of
tests/fuzz/cases/capture.py (headers declaring gigabytes, deep meta_json) and an overlong CSV
line.

Property (tests/fuzz/cases/capture.check_capture): a Capture holding every invariant a
reader promises, or CaptureError naming the file; never another exception.
"""

from __future__ import annotations

import functools
import io
import os
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.capture.files import load_capture, save_capture, sidecar_path
from agent.capture.model import Capture
from agent.errors import CaptureError
from tests.fuzz.atheris.oracle import SCRATCH, Target, check, guarded

SIDECAR_SEP = b"\n---sidecar---\n"
ENTRY_SEP = b"\n---entry---\n"
_DIR = SCRATCH / f"jha-atheris-capture-{os.getpid()}"


class _Checks:
    def check(self, ok: bool, what: str) -> None:
        check(ok, what)


def _check_capture(cap: Capture) -> None:
    from tests.fuzz.cases.capture import check_capture

    check_capture(_Checks(), cap)  # type: ignore[arg-type]


def _load(path: Path) -> None:
    try:
        cap = load_capture(path)
    except CaptureError as exc:
        check(path.name in exc.source, f"CaptureError not naming the file: {exc}")
        check(bool(exc.problem.strip()), f"CaptureError without a problem: {exc}")
        return
    _check_capture(cap)
    check(cap.source == str(path), f"source {cap.source!r}")


def _csv(data: bytes) -> None:
    _DIR.mkdir(exist_ok=True)
    path = _DIR / "fuzz.csv"
    csv, sep, sidecar = data.partition(SIDECAR_SEP)
    path.write_bytes(csv)
    side = sidecar_path(path)
    if sep:
        side.write_bytes(sidecar)
    else:
        side.unlink(missing_ok=True)
    _load(path)


def npz_from_entries(data: bytes) -> bytes:
    """The archive an input stands for (see the module docstring)."""
    if data.startswith(b"PK"):
        return data
    buf = io.BytesIO()
    # Two entries of one name are a damage the reader must face: zipfile only warns on them.
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        warnings.simplefilter("ignore")
        for entry in data.split(ENTRY_SEP):
            name, _, npy = entry.partition(b"\0")
            z.writestr(name.decode("utf-8", "replace") + ".npy", npy)
    return buf.getvalue()


def entries_from_npz(archive: bytes) -> bytes:
    """An archive written by save_capture in the entry form of the inputs."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return ENTRY_SEP.join(
            n.removesuffix(".npy").encode() + b"\0" + z.read(n) for n in z.namelist()
        )


def _npz(data: bytes) -> None:
    _DIR.mkdir(exist_ok=True)
    path = _DIR / "fuzz.npz"
    path.write_bytes(npz_from_entries(data))
    _load(path)


def _simulated(samples: int) -> Capture:
    """The demo joint's constant-speed test from the simulator, cut to `samples` samples."""
    from agent.config.model import BacklashCycleSettings, ControllerSettings, JointSettings
    from agent.kinds.backlash.kind import backlash_cycle
    from drivers.sim.backlash import simulate_backlash_capture

    joint = JointSettings(
        name="axis4",
        index=4,
        gear_ratio=40.0,
        backlash_cycle=BacklashCycleSettings(motor_speed_rps=100.0, load_turns=1),
    )
    cycle = backlash_cycle(ControllerSettings(name="r", driver="sim", joints=(joint,)), joint)
    cap = simulate_backlash_capture(joint, cycle, 1.2e-3, noise_counts=1.0, seed=3)
    cut: dict[str, Any] = {k: v[:samples] for k, v in cap.channels.items()}
    return Capture(cap.time_s[:samples], cut, cap.meta)


@functools.cache
def _saved(suffix: str) -> tuple[tuple[bytes, bytes], ...]:
    """(file, sidecar or b"") of captures written by save_capture: simulator and synthetic."""
    from tests.fuzz.cases.capture import make_capture

    captures = [_simulated(200), _simulated(12)] + [make_capture(seed) for seed in range(6)]
    out = []
    with tempfile.TemporaryDirectory(prefix="jha-atheris-seeds-") as tmp:
        for i, cap in enumerate(captures):
            path = Path(tmp) / f"c{i}{suffix}"
            save_capture(cap, path)
            side = sidecar_path(path)
            out.append((path.read_bytes(), side.read_bytes() if side.exists() else b""))
    return tuple(out)


def csv_seeds() -> Iterator[bytes]:
    for csv, side in _saved(".csv"):
        yield csv + SIDECAR_SEP + side if side else csv
    # A line past agent.capture.bounds.MAX_CSV_LINE_BYTES (refused before it is parsed).
    yield b"time_s,motor_pos_rad\n0,1\n1," + b"9" * 5000 + b"\n"


def npz_seeds() -> Iterator[bytes]:
    from tests.fuzz.cases.capture import NPZ_REGRESSIONS

    for archive, _ in _saved(".npz"):
        yield entries_from_npz(archive)
    yield _saved(".npz")[-1][0]  # one whole archive, for the zip layer
    # The regressions: .npy headers declaring gigabytes, meta_json nested 1000 deep.
    for archive in NPZ_REGRESSIONS:
        yield entries_from_npz(archive)


TARGETS = {
    "capture_csv": Target("capture_csv", guarded(_csv), csv_seeds, doc=__doc__ or ""),
    "capture_npz": Target("capture_npz", guarded(_npz), npz_seeds, doc=__doc__ or ""),
}
