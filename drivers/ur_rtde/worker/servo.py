"""The UR worker's excitation cycle: servoJ along a precomputed trajectory at the RTDE rate.

Worker side of drivers.ur_rtde.excitation. Refuse (nothing moves, no control script) unless every
joint stands at the trajectory's start q0; then, inside the same frame as the backlash cycle
(drivers.ur_rtde.worker.cycle `_run_motion`: interlocks, RTDE watchdog, stop and control script
end on any fault), stream one servoJ target per RTDE period with ur_rtde's
initPeriod/waitPeriod and check every package as the backlash capture does (safety bits, robot
mode, program state, missed or frozen packages, the agent's heartbeat). The end is servoStop,
then stopJ.

The periods are timed from one start, not each from its own: ur_rtde's initPeriod/waitPeriod
idiom (t = initPeriod(); ...; waitPeriod(t)) sleeps until t + dt, so every period also carries the
time from waitPeriod's return to the next initPeriod and any late wake-up, and nothing ever
catches that up. On the 2-core test VM that was 9 us a period in the median and 16 us on average
(wake-ups up to 0.2 ms late), about 0.8 % of the trajectory: a 4.8 s stream ended 28-49 ms behind
its schedule in every run, on an idle machine too, and the emulated arm ran the excitation
correspondingly slower. Passing waitPeriod the start of period k on one fixed grid keeps the mean
period at dt (measured 2000.0 us); after a stall it does not wait until the stream is back on the
grid, and every target is still sent in order.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from drivers.ur_rtde.wire import Fault, FaultKind
from drivers.ur_rtde.worker.cycle import CycleOps
from drivers.ur_rtde.worker.stream import GapFiller, Row, StreamError, StreamReader

_TAIL_TIMEOUT_S = 0.5  # after the last target: the remaining packages must arrive by then


class ExcitationOps(CycleOps):
    """The excitation request of drivers.ur_rtde.worker.server.Worker."""

    def op_excite(self, **p: Any) -> dict[str, Any]:
        return self._run_motion(p, lambda: self._check_start(p), self._excite)

    def _check_start(self, p: dict[str, Any]) -> None:
        q = list(self.recv.getActualQ())
        for i, (at, want) in enumerate(zip(q, p["q0_rad"], strict=True)):
            if abs(at - want) > p["start_tolerance_rad"]:
                raise Fault(
                    f"joint {i + 1} stands at {at:.4f} rad, the excitation starts at {want:.4f} "
                    f"rad (tolerance {p['start_tolerance_rad']:g} rad): not moving",
                    FaultKind.ABORT,
                )

    def _take(
        self, reader: StreamReader, rows: list[Row], p: dict[str, Any], gaps: GapFiller
    ) -> None:
        """Every package that has arrived, checked; none may be missing once one was kept."""
        while True:
            try:
                got = reader.next_row(0.0)
            except StreamError as exc:
                raise Fault(str(exc)) from None
            if got is None:
                self._silence(reader, p["stale_after_s"])
                return
            row, missed = got
            self._check_sample(row[8], row[9], row[10])
            if rows and missed:
                try:
                    rows.extend(gaps.fill(rows[-1], row, missed))
                except StreamError as exc:
                    raise Fault(str(exc)) from None
            rows.append(row)

    def _excite(self, ctrl: Any, p: dict[str, Any]) -> list[Row]:
        targets: list[list[float]] = p["targets"]
        dt = 1.0 / self.frequency_hz
        gain, lookahead = p["gain"], p["lookahead_s"]
        rows: list[Row] = []
        gaps = self.gaps = self._gaps(p)
        self._commanding(p)
        self.servoing = True
        began = time.monotonic()
        # How late the latest target went out against the schedule (first target + k periods):
        # a target late by d moves the realised path by up to the joint speed times d, which the
        # capture alone cannot show. The stream catches up after a late period (below), so this
        # is the figure, not the longest gap between two sends.
        self.servo_late_max_s = 0.0
        first_sent: float | None = None
        with self._reader() as reader:
            grid = ctrl.initPeriod()
            for k, q in enumerate(targets):
                # Period k's start on the fixed grid (module docstring): from k * dt each time, so
                # the microsecond rounding of a timedelta does not add up either.
                start = grid + datetime.timedelta(seconds=k * dt)
                self._check_running(p)
                if not ctrl.servoJ(q, 0.0, 0.0, dt, lookahead, gain):
                    raise Fault("the controller refused servoJ", FaultKind.ABORT)
                now = time.monotonic()
                if first_sent is None:
                    first_sent = now
                self.servo_late_max_s = max(self.servo_late_max_s, now - first_sent - k * dt)
                self._take(reader, rows, p, gaps)
                ctrl.waitPeriod(start)
            # The last target (the rest pose) stays commanded until every package is in. The
            # worker's clock and the controller's drift apart a little over a long trajectory
            # (and a loaded controller emulator lags more): allow 10 % of its length on top.
            deadline = time.monotonic() + _TAIL_TIMEOUT_S + 0.1 * len(targets) * dt
            while len(rows) < len(targets):
                start = ctrl.initPeriod()
                self._check_running(p)
                if not ctrl.servoJ(targets[-1], 0.0, 0.0, dt, lookahead, gain):
                    raise Fault("the controller refused servoJ", FaultKind.ABORT)
                self._take(reader, rows, p, gaps)
                if time.monotonic() > deadline:
                    raise Fault(
                        f"RTDE packages stopped arriving at the end of the excitation: "
                        f"{len(rows)} of {len(targets)} in {time.monotonic() - began:.2f} s"
                    )
                ctrl.waitPeriod(start)
        self._send_stop(ctrl, p["decel_rad_s2"])
        return rows[p["n_settle"] : len(targets)]
