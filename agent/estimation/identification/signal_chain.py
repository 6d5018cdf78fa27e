"""Signal chain of paper 004 (section 4): from a dual-encoder robot capture to the rows of a
least-squares problem, and the (weighted) least-squares solve itself.

  1. positions -> zero-phase Butterworth (forward and reverse; default 4th order, cut-off 5x the
     bandwidth of the robot dynamics, section 4.1) -> central differences for speed and
     acceleration ("band-pass filtering");
  2. every column of the observation matrix and the measurement vector -> the same zero-phase
     Butterworth ("parallel filtering", section 4.2) -> keep every 20th sample (decimation);
  3. OLS, then WLS with each equation group (a joint) weighted by the reciprocal of the standard
     deviation of its OLS residual (eq. 13-14), the weights re-estimated from the WLS residual
     until they settle; relative standard deviation of every estimate.

Paper 004 does not give the cut-off of the parallel filter (lost in the extraction). The value
used here is the usual one for decimation (Gautier's IDIM practice, and Matlab's `decimate`):
0.8 times the Nyquist frequency of the decimated signal, 0.8 * fs / (2 * decimation) = 20 Hz at
1 kHz and 20. It sits far above the dynamics band, so it removes what the decimation would fold
down (torque ripple, elastic ringing, quantisation and measurement noise) and nothing else.

A robot capture is one agent.capture.model.Capture per joint on a common time base (channels
link_pos_rad or link_counts, motor_pos_rad or motor_counts, motor_torque_nm; motor side means
the motor shaft). `robot_signals` turns it into link-side arrays and refuses, with the reason, a
capture that misses an encoder channel or whose drive saturated.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import scipy.linalg
from scipy import signal

from agent.capture.files import capture_with_positions
from agent.capture.model import Capture
from agent.errors import CaptureError, EstimationError
from agent.models.robot.description import RobotDescription

Array = npt.NDArray[np.float64]
Method = Literal["ols", "wls"]

DEFAULT_ORDER = 4
BANDWIDTH_FACTOR = 5.0  # paper 004 section 4.1: cut-off = 5 x the frequency of the dynamics
DEFAULT_DECIMATION = 20  # paper 004 section 4.2
PARALLEL_NYQUIST_FRACTION = 0.8  # see the module docstring
BANDWIDTH_FLOOR = 1e-3  # see dynamics_bandwidth_hz
WLS_ITERATIONS = 5
CLIP_RUN_S = 0.1  # torque exactly at its extreme this long: a clipping drive
WLS_TOLERANCE = 0.01


@dataclass(frozen=True)
class FilterSettings:
    """Band-pass process and parallel filtering. None means: derived as documented."""

    order: int = DEFAULT_ORDER
    cutoff_hz: float | None = None  # None: BANDWIDTH_FACTOR x bandwidth_hz
    bandwidth_hz: float | None = None  # None: estimated from the link positions
    decimation: int = DEFAULT_DECIMATION
    parallel_order: int = DEFAULT_ORDER
    parallel_cutoff_hz: float | None = None  # None: 0.8 x Nyquist after decimation

    def resolved(self, sample_rate_hz: float, bandwidth_hz: float) -> ResolvedFilter:
        nyquist = sample_rate_hz / 2.0
        par = self.parallel_cutoff_hz
        if par is None:
            par = PARALLEL_NYQUIST_FRACTION * sample_rate_hz / (2.0 * self.decimation)
        # a derived cut-off stops at the parallel filter's: nothing above it survives decimation
        cutoff = self.cutoff_hz
        if cutoff is None:
            cutoff = min(BANDWIDTH_FACTOR * bandwidth_hz, par)
        if self.decimation < 1 or self.order < 1 or self.parallel_order < 1:
            raise EstimationError("filter order and decimation must be at least 1")
        for name, f in (("cut-off", cutoff), ("parallel cut-off", par)):
            if not 0.0 < f < nyquist:
                raise EstimationError(
                    f"{name} {f:.4g} Hz must lie between 0 and the Nyquist frequency "
                    f"{nyquist:.4g} Hz of the capture"
                )
        return ResolvedFilter(
            sample_rate_hz,
            bandwidth_hz,
            cutoff,
            self.order,
            self.decimation,
            par,
            self.parallel_order,
        )


@dataclass(frozen=True)
class ResolvedFilter:
    sample_rate_hz: float
    bandwidth_hz: float
    cutoff_hz: float
    order: int
    decimation: int
    parallel_cutoff_hz: float
    parallel_order: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@contextlib.contextmanager
def single_thread_blas() -> Iterator[None]:
    """Small dense solves through a threaded BLAS stall for milliseconds on a busy 2-core box."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only the speed changes
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# ------------------------------------------------------------------------------- filters


def zero_phase_lowpass(
    x: npt.ArrayLike, sample_rate_hz: float, cutoff_hz: float, order: int = DEFAULT_ORDER
) -> Array:
    """Butterworth low-pass run forward and backward along axis 0 (no lag, squared gain).

    The ends are padded with the odd extension over three time constants of the filter, so a
    capture that starts and ends at rest (the excitation cycles do) has no edge transient.
    """
    a = np.asarray(x, dtype=np.float64)
    sos = signal.butter(order, cutoff_hz, fs=sample_rate_hz, output="sos")
    padlen = min(a.shape[0] - 1, math.ceil(3.0 * sample_rate_hz / cutoff_hz))
    return np.asarray(signal.sosfiltfilt(sos, a, axis=0, padtype="odd", padlen=padlen))


def central_difference(x: npt.ArrayLike, sample_rate_hz: float) -> Array:
    """d/dt along axis 0: (x[k+1] - x[k-1]) / 2 dt inside, second-order one-sided at the ends."""
    return np.gradient(np.asarray(x, dtype=np.float64), 1.0 / sample_rate_hz, axis=0, edge_order=2)


def band_pass(
    x: npt.ArrayLike, sample_rate_hz: float, cutoff_hz: float, order: int = DEFAULT_ORDER
) -> tuple[Array, Array, Array]:
    """Position, speed and acceleration: zero-phase low-pass, then two central differences."""
    xf = zero_phase_lowpass(x, sample_rate_hz, cutoff_hz, order)
    xd = central_difference(xf, sample_rate_hz)
    return xf, xd, central_difference(xd, sample_rate_hz)


def dynamics_bandwidth_hz(
    position: npt.ArrayLike, sample_rate_hz: float, floor: float = BANDWIDTH_FLOOR
) -> float:
    """Highest frequency at which the motion still carries power: the last bin of the speed
    spectrum (Hann window, all joints summed) above `floor` times its peak.

    The speed spectrum weights a harmonic by its frequency once; the inertial torques weigh it
    twice more, so the top harmonic of an excitation must lie inside the band even when its
    share of the position is small. A floor of 1e-3 in power (3 % in amplitude) finds it while
    staying above the noise floor of quantised encoders (1e-12 of the peak at 19 bits).
    """
    x = np.asarray(position, dtype=np.float64)
    x = x.reshape(x.shape[0], -1)
    v = np.diff(x, axis=0) * sample_rate_hz
    v = v - v.mean(axis=0)
    power = (np.abs(np.fft.rfft(v * np.hanning(v.shape[0])[:, None], axis=0)) ** 2).sum(axis=1)
    if power.max() <= 0.0:
        raise EstimationError("the link positions do not move: no dynamics to identify")
    freqs = np.fft.rfftfreq(v.shape[0], 1.0 / sample_rate_hz)
    k = int(np.flatnonzero(power >= floor * power.max())[-1])
    return float(max(freqs[k], freqs[1] if freqs.size > 1 else sample_rate_hz))


def parallel_decimate(
    x: npt.ArrayLike,
    flt: ResolvedFilter,
    keep: npt.NDArray[np.intp],
    sub: npt.NDArray[np.intp] | None = None,
) -> Array:
    """Parallel filtering (zero-phase Butterworth along axis 0), then the samples `keep`
    (decimation_index). All-zero columns are skipped.

    `sub` (subgrid) says that x holds only those samples of a signal band-limited far below
    their rate: it is filtered at that rate. The regressor qualifies, being a smooth function
    of positions already low-passed at or below the parallel cut-off; torque and sign columns
    do not and go through at the full rate.
    """
    a = np.asarray(x, dtype=np.float64)
    rate, pos = flt.sample_rate_hz, keep
    if sub is not None:
        stride = int(sub[1] - sub[0]) if sub.size > 1 else 1
        rate, pos = rate / stride, (keep - sub[0]) // stride
    flat = a.reshape(a.shape[0], -1)
    out = np.zeros((keep.size, flat.shape[1]))
    live = np.flatnonzero(np.any(flat != 0.0, axis=0))
    if live.size:
        filtered = zero_phase_lowpass(
            flat[:, live], rate, flt.parallel_cutoff_hz, flt.parallel_order
        )
        out[:, live] = filtered[pos]
    return out.reshape((keep.size, *a.shape[1:]))


def decimation_index(n_samples: int, flt: ResolvedFilter) -> npt.NDArray[np.intp]:
    """Samples kept after decimation: every decimation-th, away from both ends by one period of
    the parallel filter's cut-off (where its padding still shows)."""
    edge = math.ceil(flt.sample_rate_hz / flt.parallel_cutoff_hz)
    idx = np.arange(edge, n_samples - edge, flt.decimation)
    if idx.size < 2:
        raise EstimationError(f"{n_samples} samples are too few for the filters")
    return idx


def subgrid(
    n_samples: int, keep: npt.NDArray[np.intp], flt: ResolvedFilter
) -> npt.NDArray[np.intp]:
    """Every stride-th sample, through all of `keep`: where smooth columns are evaluated.

    The stride is the largest divisor of the decimation that keeps the rate at least ten times
    the parallel cut-off, so the parallel filter still acts there as it does at the full rate.
    """
    stride = (
        max(
            r
            for r in range(1, flt.decimation + 1)
            if flt.decimation % r == 0 and flt.sample_rate_hz / r >= 10.0 * flt.parallel_cutoff_hz
        )
        if flt.sample_rate_hz >= 10.0 * flt.parallel_cutoff_hz
        else 1
    )
    return np.arange(int(keep[0]) % stride, n_samples, stride)


# ------------------------------------------------------------------------------- captures


@dataclass(frozen=True)
class RobotSignals:
    """Link-side arrays of a dual-encoder capture, (N, n) each.

    motor_pos_rad is the rotor angle seen from the link, theta = motor shaft angle / gear ratio;
    motor_torque_nm is the drive torque seen from the link, motor shaft torque * gear ratio.
    """

    time_s: Array
    link_pos_rad: Array
    motor_pos_rad: Array
    motor_torque_nm: Array
    sample_rate_hz: float
    sources: tuple[str, ...]


def _joint_captures(
    captures: Sequence[Capture], robot: RobotDescription, where: str
) -> list[Capture]:
    names = robot.joint_names
    if not captures:
        raise CaptureError(where, "no capture given")
    tagged = {c.meta.joint: c for c in captures if c.meta.joint}
    if tagged:
        unknown = sorted(set(tagged) - set(names))
        if unknown:
            raise CaptureError(
                where,
                f"capture of joint {unknown[0]!r}, which {robot.name} does not have "
                f"(joints: {', '.join(names)})",
            )
        missing = [n for n in names if n not in tagged]
        if missing:
            raise CaptureError(
                where,
                f"no capture for joint {missing[0]!r}: all {len(names)} joints of "
                f"{robot.name} must be captured together (have {', '.join(sorted(tagged))})",
            )
        return [tagged[n] for n in names]
    if len(captures) != len(names):
        raise CaptureError(
            where,
            f"{len(captures)} captures without joint names for {len(names)} joints of "
            f"{robot.name}: name them (metadata field joint) or give one per joint in order",
        )
    return list(captures)


def _position(cap: Capture, side: str, joint: str) -> Array:
    name = f"{side}_pos_rad"
    if name not in cap.channels:
        counts = f"{side}_counts"
        if counts not in cap.channels:
            which = "link-side" if side == "link" else "motor-side"
            raise CaptureError(
                cap.source,
                f"joint {joint}: no {which} encoder channel ({name} or {counts}); the "
                "identification needs both encoders of every joint (paper 004, rotor-side "
                "compensation; paper 002, transmission deflection)",
            )
        cap = capture_with_positions(cap)
    return np.asarray(cap.channels[name], dtype=np.float64)


def robot_signals(
    captures: Sequence[Capture],
    robot: RobotDescription,
    *,
    saturation_fraction: float = 0.999,
    where: str = "<captures>",
) -> RobotSignals:
    """Link-side arrays from one capture per joint; refuses missing channels and saturation."""
    caps = _joint_captures(captures, robot, where)
    t = np.asarray(caps[0].time_s, dtype=np.float64)
    n_s = t.size
    if n_s < 3:
        raise CaptureError(caps[0].source, "needs more than two samples")
    dt = np.diff(t)
    if np.max(np.abs(dt - np.median(dt))) > 0.01 * np.median(dt):
        k = int(np.argmax(np.abs(dt - np.median(dt))))
        raise CaptureError(
            caps[0].source,
            f"sampling is not uniform (step {dt[k]:.6g} s at sample {k + 1}, "
            f"median {np.median(dt):.6g} s); the filters need a fixed rate",
        )
    link = np.empty((n_s, robot.n_joints))
    motor = np.empty((n_s, robot.n_joints))
    torque = np.empty((n_s, robot.n_joints))
    for j, (cap, spec) in enumerate(zip(caps, robot.joints, strict=True)):
        if len(cap) != n_s or not np.allclose(cap.time_s, t, rtol=0.0, atol=1e-9):
            raise CaptureError(
                cap.source,
                f"joint {spec.name}: time base differs from {caps[0].source}'s; "
                "all joints must be sampled together",
            )
        ratio = spec.gear_ratio
        if cap.meta.gear_ratio is not None and not math.isclose(
            cap.meta.gear_ratio, ratio, rel_tol=1e-9
        ):
            raise CaptureError(
                cap.source,
                f"joint {spec.name}: gear_ratio {cap.meta.gear_ratio:g} in the "
                f"capture, {ratio:g} in {robot.source}",
            )
        link[:, j] = _position(cap, "link", spec.name)
        motor[:, j] = _position(cap, "motor", spec.name) / ratio
        if "motor_torque_nm" not in cap.channels:
            raise CaptureError(
                cap.source,
                f"joint {spec.name}: no motor_torque_nm channel (the drive torque "
                "is the measurement the dynamic model is fitted to)",
            )
        torque[:, j] = np.asarray(cap.channels["motor_torque_nm"], dtype=np.float64) * ratio
        _check_saturation(
            cap.source, spec.name, t, torque[:, j], spec.torque_max_nm, saturation_fraction
        )
    return RobotSignals(
        t, link, motor, torque, float((n_s - 1) / (t[-1] - t[0])), tuple(c.source for c in caps)
    )


def _check_saturation(
    source: str, joint: str, t: Array, tau: Array, limit_nm: float, fraction: float
) -> None:
    """A drive at its torque limit no longer obeys the model: refuse, naming when it happened.

    Two signs: the torque reaches the joint's limit, or it sits exactly on its extreme value
    for several samples in a row (a drive clipping at a lower current limit of its own).
    """
    mag = np.abs(tau)
    hits = np.flatnonzero(mag >= fraction * limit_nm)
    if hits.size:
        raise CaptureError(
            source,
            f"joint {joint} saturated: |torque| reached {mag[hits[0]]:.4g} N·m (limit "
            f"{limit_nm:g} N·m) on {hits.size} samples from t = {t[hits[0]]:.3f} s; the "
            "drive was at its limit, so the torque does not follow the dynamic model",
        )
    peak = float(mag.max())
    if peak <= 0.0:
        return
    at_peak = mag == peak
    run = _longest_run(at_peak)
    # A smooth peak read through a coarse torque quantisation also sits on one value for a
    # while (a few tens of ms at 0.1 N·m steps); a drive clipping for 0.1 s is no such peak.
    rate = (t.size - 1) / (t[-1] - t[0])
    if run >= max(10, CLIP_RUN_S * rate):
        first = int(np.flatnonzero(at_peak)[0])
        raise CaptureError(
            source,
            f"joint {joint} saturated: the torque stays at exactly {peak:.6g} N·m for "
            f"{run} samples in a row (from t = {t[first]:.3f} s), the mark of a clipping drive",
        )


def _longest_run(mask: npt.NDArray[np.bool_]) -> int:
    if not mask.any():
        return 0
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return int(np.max(edges[1::2] - edges[0::2]))


# ------------------------------------------------------------------------------- least squares


@dataclass(frozen=True)
class LsqSolution:
    """theta = argmin sum_g ||(y_g - A_g theta) / sigma_g||^2 and its statistics."""

    theta: Array
    covariance: Array
    sigma: Array  # residual standard deviation of each group (after the final fit)
    weights: Array  # 1 / sigma_g used in the final fit (ones for OLS)
    residual: Array
    condition_number: float  # of the (weighted) observation matrix, columns as they are
    method: Method

    @property
    def std(self) -> Array:
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))

    @property
    def relative_std_pct(self) -> Array:
        """100 sigma_i / |theta_i| (paper 004 Table 4); inf where the estimate is 0."""
        with np.errstate(divide="ignore"):
            return np.where(self.theta != 0.0, 100.0 * self.std / np.abs(self.theta), np.inf)


def _group_sigma(res: Array, a: Array, groups: npt.NDArray[np.intp], n_groups: int) -> Array:
    """sigma_g^2 = ||rho_g||^2 / (r_g - b_g), b_g the parameters the group's rows see (eq. 14)."""
    sigma = np.empty(n_groups)
    for g in range(n_groups):
        rows = groups == g
        r_g = int(np.count_nonzero(rows))
        if r_g == 0:  # a group with no rows (left out) has no residual
            sigma[g] = math.nan
            continue
        b_g = int(np.count_nonzero(np.any(a[rows] != 0.0, axis=0)))
        dof = max(r_g - b_g, 1)
        sigma[g] = math.sqrt(float(res[rows] @ res[rows]) / dof)
    return sigma


def _solve(a: Array, y: Array) -> tuple[Array, Array]:
    """theta and (A^T A)^-1, through QR of the column-normalised matrix."""
    norms = np.linalg.norm(a, axis=0)
    if np.any(norms == 0.0):
        raise EstimationError(
            f"{int(np.count_nonzero(norms == 0.0))} parameter column(s) are zero in the data: "
            "the capture does not move what they describe"
        )
    q, r = scipy.linalg.qr(a / norms, mode="economic")
    theta_s = scipy.linalg.solve_triangular(r, q.T @ y)
    rinv = scipy.linalg.solve_triangular(r, np.eye(r.shape[0]))
    cov_s = rinv @ rinv.T
    return theta_s / norms, cov_s / np.outer(norms, norms)


def least_squares(
    a: npt.ArrayLike, y: npt.ArrayLike, groups: npt.ArrayLike, method: Method = "wls"
) -> LsqSolution:
    """OLS, or WLS weighted per group by 1 / sigma_g of the OLS residual (paper 004 eq. 13-14)."""
    a_ = np.asarray(a, dtype=np.float64)
    y_ = np.asarray(y, dtype=np.float64)
    g_ = np.asarray(groups, dtype=np.intp)
    if a_.ndim != 2 or y_.shape != (a_.shape[0],) or g_.shape != y_.shape:
        raise EstimationError(f"least squares: A {a_.shape}, y {y_.shape}, groups {g_.shape}")
    if a_.shape[0] <= a_.shape[1]:
        raise EstimationError(f"{a_.shape[0]} rows cannot determine {a_.shape[1]} parameters")
    n_groups = int(g_.max()) + 1
    with single_thread_blas():
        theta, cov = _solve(a_, y_)
        res = y_ - a_ @ theta
        sigma = _group_sigma(res, a_, g_, n_groups)
        weights = np.ones(n_groups)
        aw = a_
        if method == "wls":
            # Paper 004 weights by the OLS residual once. That residual still carries the OLS
            # error of the noisy groups into the quiet ones, so the weights are re-estimated
            # from the WLS residual until they settle (a few passes).
            for _ in range(WLS_ITERATIONS):
                if np.any(sigma <= 0.0):
                    raise EstimationError("a joint's equations fit exactly: WLS weights undefined")
                new_weights = 1.0 / sigma
                settled = np.allclose(new_weights, weights, rtol=WLS_TOLERANCE, equal_nan=True)
                weights = new_weights
                w_rows = weights[g_]
                aw = a_ * w_rows[:, None]
                theta, cov = _solve(aw, y_ * w_rows)
                res = y_ - a_ @ theta
                sigma = _group_sigma(res, a_, g_, n_groups)
                if settled:
                    break
        else:
            # OLS: one variance for all rows
            dof = max(a_.shape[0] - a_.shape[1], 1)
            cov = cov * float(res @ res) / dof
        sv = np.linalg.svd(aw, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    return LsqSolution(theta, cov, sigma, weights, res, cond, method)
