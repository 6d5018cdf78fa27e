"""Dynamic identification of a robot with elastic joints and two encoders per joint.

Two models share the signal chain (agent.estimation.identification.filters and
agent.estimation.identification.robot_signals) and the least squares
(agent.estimation.identification.least_squares):

elastic (Zollo, Lopez et al. 2014): the link and rotor equations, stacked, linear in 14
    parameters per joint
    link  j:  Y_j(q, q', q'') pi_link           - K_j (theta_j - q_j) = 0
    rotor j:  Ia_j theta''_j + Fc_j sgn(theta'_j) + Fv_j theta'_j + K_j (theta_j - q_j) = tau_j
  from link position q, motor position theta (link-side units) and motor torque tau. What it
  sees (elastic_base() works it out numerically; Zollo, Lopez et al. 2014, section 5):
    * every rotor inertia, Coulomb and viscous coefficient and stiffness on its own: the rotor
      equation of joint j holds only those four, and the deflection column ties K_j to the link
      equation. Unlike a rigid model, Ia_1 does not merge into the inertia of link 1;
    * the link parameters only as the rigid-body base parameters (the same regrouping as a rigid
      robot mounted the same way: 36 on an upright UR5e); the rest stay invisible. The link
      equation alone is homogeneous: the rotor equation gives it its scale through K.
    * not in the model, so not seen and biasing the rest if present: link-side friction, joint
      damping, an offset between the two encoders' zeros (a constant K * offset torque), the
      friction beyond Coulomb + viscous (Stribeck hump, strain-wave ripple, load dependence).
rigid (Madsen et al. 2020, IDIM with rotor-side compensation): tau_J = tau - Ia theta'' - f_prior
    with the rotor terms known (Ia from the robot file, f_prior a friction model identified
    before), regressed on the rigid base regressor at the link-side positions plus Coulomb +
    viscous friction at the rotor speed; stiffness afterwards from tau_J against the deflection.

Beyond the papers: rotor-equation rows within one parallel-filter length of a speed below
`min_friction_speed_rad_s` are left out of the fit and of the torque NMSE (the Stribeck hump
lives there, a sign column cannot follow it, and at rest friction is anything up to
breakaway); the WLS weights are iterated (least_squares.least_squares); in the elastic model
the gear itself is the link-side torque sensor (K delta), which keeps the link parameters free
of every friction error (bench: 5-10 times smaller base-parameter error than the rigid model).

The model and settings the fit shares with validation live in
agent.estimation.identification.model, the result dataclasses in
agent.estimation.identification.result, the held-out and simulation checks in
agent.estimation.identification.validation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture
from agent.errors import EstimationError
from agent.estimation.identification.equations import (
    DRIVE,
    fit_elastic,
    fit_rigid,
    stiffness_from_link_torque,
)
from agent.estimation.identification.filters import decimation_index, parallel_decimate, subgrid
from agent.estimation.identification.least_squares import (
    single_thread_blas,
)
from agent.estimation.identification.model import (
    Array,
    DynamicModel,
    IdentificationSettings,
    Kinematics,
    full_rate,
    kinematics,
    link_base,
    nmse_nm,
    slow_rows,
)
from agent.estimation.identification.model_check import ModelCheck, model_bias, skipped
from agent.estimation.identification.result import (
    IdentificationResult,
    JointHealth,
)
from agent.estimation.identification.robot_signals import RobotSignals, robot_signals
from agent.estimation.identification.uncertainty import robust_covariance
from agent.models.robot.description import RobotDescription
from agent.models.robot.friction import friction_torque
from agent.models.robot.regressor import regressor


class PoorExcitation(EstimationError):
    """The trajectory does not excite the dynamics: the base regressor is ill-conditioned."""

    def __init__(self, condition_number: float, limit: float) -> None:
        super().__init__(
            f"the trajectory does not excite the dynamics: condition number "
            f"{condition_number:.4g} of the base regressor exceeds the limit {limit:g}; run an "
            "optimised excitation (agent.estimation.identification.excitation)"
        )
        self.condition_number = condition_number
        self.limit = limit

    def __reduce__(self) -> tuple[type[PoorExcitation], tuple[float, float]]:
        # process pools pickle exceptions through their constructor arguments
        return (type(self), (self.condition_number, self.limit))


# ------------------------------------------------------------------------------- identification


def identify(
    captures: tuple[Capture, ...] | list[Capture],
    robot: RobotDescription,
    settings: IdentificationSettings | None = None,
    *,
    where: str = "<captures>",
) -> IdentificationResult:
    """Identify from one capture per joint, or from several runs of the robot (each joint
    captured once per run: the k-th capture of every joint makes run k); refuses (exit code 65)
    what it cannot use."""
    s = settings or IdentificationSettings()
    signals = [
        robot_signals(
            run,
            robot,
            saturation_fraction=s.saturation_fraction,
            where=where,
            # Only the elastic model and the motor-encoder ablation need the motor side.
            require_motor=s.model == "elastic" or not s.use_link_encoder,
            max_gap_ticks=s.max_gap_ticks,
        )
        for run in split_runs(captures, robot, where)
    ]
    return identify_signals(signals, robot, s)


def identify_signals(
    signals: RobotSignals | Sequence[RobotSignals],
    robot: RobotDescription,
    settings: IdentificationSettings,
) -> IdentificationResult:
    """From one run's signals, or several runs' stacked as separate segments: each is filtered
    and differentiated on its own (nothing across a boundary), with the first run's filter."""
    started = time.perf_counter()
    runs = [signals] if isinstance(signals, RobotSignals) else list(signals)
    kins = segment_kinematics(runs, settings)
    result = identify_kinematics(kins, robot, settings, started)
    for run in runs:
        if run.resampled is not None:
            result = replace(result, warnings=(*result.warnings, run.resampled.describe()))
    signals = runs[0]
    missing = [
        spec.name
        for spec, measured in zip(robot.joints, signals.motor_measured, strict=False)
        if not measured
    ]
    if not missing:
        return result
    # The rotor was taken to follow the link: no deflection, so no stiffness to report, and
    # the "encoders agree" warning would name an encoder the capture does not have.
    joints = tuple(
        replace(
            j,
            stiffness_nm_rad=None,
            rel_std_pct={k: v for k, v in j.rel_std_pct.items() if k != "k"},
        )
        if j.joint in missing
        else j
        for j in result.joints
    )
    warnings = tuple(
        w
        for w in result.warnings
        if not any(w.startswith(f"joint {m}: stiffness") for m in missing)
    ) + tuple(
        f"joint {m}: no motor encoder in the capture: fitted as rigid from link position and "
        "torque (the rotor taken to follow the link); stiffness not measured"
        for m in missing
    )
    return replace(result, joints=joints, warnings=warnings)


def split_runs(
    captures: Sequence[Capture], robot: RobotDescription, where: str
) -> list[list[Capture]]:
    """The captures as runs of the robot: the k-th capture of each joint (by the joint its
    metadata names) belongs to run k; captures that name no joint are taken in order, one run
    per len(joints). A run that misses a joint is refused by robot_signals, naming it."""
    n = robot.n_joints
    if any(not c.meta.joint for c in captures):
        if len(captures) % n or any(c.meta.joint for c in captures):
            return [list(captures)]  # robot_signals says what is wrong with them
        return [list(captures[i : i + n]) for i in range(0, len(captures), n)]
    seen: dict[str, int] = {}
    runs: list[list[Capture]] = []
    for c in captures:
        k = seen.get(c.meta.joint or "", 0)
        seen[c.meta.joint or ""] = k + 1
        if k == len(runs):
            runs.append([])
        runs[k].append(c)
    return runs


def segment_kinematics(
    runs: Sequence[RobotSignals], settings: IdentificationSettings
) -> list[Kinematics]:
    """Each run band-passed on its own, all with the first run's resolved filter (one model of
    the signals for the whole fit); runs of different sample rates are refused."""
    first = kinematics(runs[0], settings.filter)
    kins = [first]
    same = replace(settings.filter, bandwidth_hz=first.flt.bandwidth_hz)
    for i, run in enumerate(runs[1:], start=2):
        if not math.isclose(run.sample_rate_hz, first.flt.sample_rate_hz, rel_tol=1e-6):
            raise EstimationError(
                f"run {i} is sampled at {run.sample_rate_hz:.6g} Hz, run 1 at "
                f"{first.flt.sample_rate_hz:.6g} Hz: runs stacked in one identification must "
                "share their rate"
            )
        kins.append(kinematics(run, same))
    if not settings.use_link_encoder:
        kins = [replace(k, q=k.th, qd=k.thd, qdd=k.thdd) for k in kins]
    return kins


def identify_kinematics(
    kin: Kinematics | Sequence[Kinematics],
    robot: RobotDescription,
    settings: IdentificationSettings,
    started: float | None = None,
) -> IdentificationResult:
    """The least-squares part, from band-passed motion (the paper-002 noise protocol adds its
    noise to these kinematics and enters here); several segments are stacked row-wise."""
    t0 = time.perf_counter() if started is None else started
    kins = [kin] if isinstance(kin, Kinematics) else list(kin)
    with single_thread_blas():
        result = _identify(kins, robot, settings, t0)
        if not settings.model_check or (settings.load_friction and settings.joint_spring):
            return result
        check = _model_check(kins, robot, settings, result)
    return replace(result, seconds=time.perf_counter() - t0).with_model_check(check)


def _model_check(
    kin: list[Kinematics],
    robot: RobotDescription,
    settings: IdentificationSettings,
    result: IdentificationResult,
) -> ModelCheck:
    extended = replace(
        settings, load_friction=True, joint_spring=True, feasible=False, model_check=False
    )
    try:
        alt = _identify(kin, robot, extended, time.perf_counter())
    except (EstimationError, np.linalg.LinAlgError) as exc:
        return skipped(len(result.names), f"the extended fit failed: {exc}")
    return model_bias(
        result.names,
        result.estimate,
        alt.names,
        alt.estimate,
        alt.std_robust,
        alt.nmse_nm,
    )


@dataclass(frozen=True)
class _Segment:
    """One run's decimated rows and what the load column needs of it at the full rate."""

    kin: Kinematics
    keep: npt.NDArray[np.intp]
    sub: npt.NDArray[np.intp]
    y_sub: Array
    y_b: Array
    dec: dict[str, Array]
    slow: npt.NDArray[np.bool_]


def _segment(
    kin: Kinematics, robot: RobotDescription, settings: IdentificationSettings
) -> _Segment:
    flt = kin.flt
    keep = decimation_index(kin.q.shape[0], flt)
    sub = subgrid(kin.q.shape[0], keep, flt)
    y_sub = link_base(robot).reduce(regressor(robot, kin.q[sub], kin.qd[sub], kin.qdd[sub]))
    y_b = parallel_decimate(y_sub, flt, keep, sub)
    slow = slow_rows(kin.thd, flt, settings.min_friction_speed_rad_s)[keep]
    cols = {
        "thdd": kin.thdd,
        "sgn": np.sign(kin.thd),
        "thd": kin.thd,
        "delta": kin.th - kin.q,
        "tau": kin.tau,
    }
    if settings.model == "rigid":
        tau_j = kin.tau - np.array([j.rotor_inertia_kg_m2 for j in robot.joints]) * kin.thdd
        if settings.prior_friction is not None:
            tau_j -= friction_torque(
                robot, settings.prior_friction, kin.thd, kin.th, tau_j, linear=False
            )[0]
        cols["tau_j"] = tau_j
    if settings.joint_spring:
        cols["q"] = kin.q
    dec = {k: parallel_decimate(v, flt, keep) for k, v in cols.items()}
    return _Segment(kin, keep, sub, y_sub, y_b, dec, slow)


def _identify(
    kins: list[Kinematics], robot: RobotDescription, settings: IdentificationSettings, t0: float
) -> IdentificationResult:
    n = robot.n_joints
    flt = kins[0].flt
    base = link_base(robot)
    segments = [_segment(k, robot, settings) for k in kins]
    y_b = np.concatenate([g.y_b for g in segments])
    slow = np.concatenate([g.slow for g in segments])
    dec = {k: np.concatenate([g.dec[k] for g in segments]) for k in segments[0].dec}
    # the evidence's time: each segment after the one before, one decimated step apart
    times, offset = [], 0.0
    for g in segments:
        t = g.keep / flt.sample_rate_hz
        times.append(t - t[0] + offset)
        offset = times[-1][-1] + flt.decimation / flt.sample_rate_hz
    time_s = np.concatenate(times) if len(segments) > 1 else segments[0].keep / flt.sample_rate_hz
    extra = {}
    if settings.torque_offset or settings.joint_spring:
        extra["off"] = np.ones_like(dec["tau"])
    if settings.joint_spring:
        extra["ks"] = dec["q"]
    cond = _condition(y_b, dec["sgn"], dec["thd"])
    if not cond <= settings.max_condition_number:
        raise PoorExcitation(cond, settings.max_condition_number)
    warnings: list[str] = []
    if settings.load_friction and cond > LOAD_SHARE_MAX_CONDITION:
        warnings.append(
            f"the load-dependent friction share is not fitted: the excitation's condition number "
            f"{cond:.3g} exceeds {LOAD_SHARE_MAX_CONDITION:g}, too poor to tell it from the "
            "Coulomb friction (an optimised excitation reaches 20-50)"
        )
    elif settings.load_friction:
        load = LoadColumn(y_b, tuple(segments))
        dec["load"], mu_std = load.fitted(dec, slow, settings, extra)
        extra["mu"] = dec["load"]
        warnings += [
            f"joint {robot.joints[j].name}: the load-dependent friction share is not "
            f"identifiable from this capture (+-{mu_std[j]:.2g} against {MU_STD_MAX:g} needed, "
            "or below 0 beyond its noise: the torque the joint transmits is too small or too "
            "like its friction); fitted without it"
            for j in range(n)
            if not np.any(dec["load"][:, j])
        ]
    k: Array | None
    rel_k: dict[str, float] = {}
    if settings.model == "elastic":
        twist = np.sqrt(np.mean(dec["delta"] ** 2, axis=0))
        steps = twist / twist_quantum_rad(robot)
        if not np.any(steps >= TWIST_MIN_QUANTA):
            # Without a twist the rotor and link equations are one, and the rotor inertia trades
            # freely with the link's (a UR5e log gave -135 and -515 kg·m²): refuse, say why.
            raise EstimationError(
                "the elastic model needs the gear's twist between motor and link encoders, and "
                f"no joint shows one (rms at most {float(np.max(steps)):.2g} encoder steps): the "
                "motor position was probably computed from the link's; use --model rigid"
            )
        sol, names, groups, twist_rel, problem = fit_elastic(y_b, dec, slow, settings.method, extra)
        est = dict(zip(names, sol.theta, strict=True))
        k = np.array([est.get(f"k{j + 1}", math.nan) for j in range(n)])
        ia = np.array([est[f"Ia{j + 1}"] for j in range(n)])
        warnings += [
            f"joint {robot.joints[j].name}: stiffness not seen (the gear twist is too small "
            f"for the encoders: {twist_rel[j]:.3g} % relative std from the rotor equation); "
            "the joint is fitted as rigid"
            for j in range(n)
            if math.isnan(k[j])
        ]
    else:
        sol, names, groups, problem = fit_rigid(y_b, dec, slow, settings.method, extra)
        est = dict(zip(names, sol.theta, strict=True))
        ia = np.array([j.rotor_inertia_kg_m2 for j in robot.joints])
        k = None
        if settings.use_link_encoder:  # one encoder sees no deflection
            k, k_std = stiffness_from_link_torque(y_b, sol.theta[: base.count], dec["delta"])
            twist = np.sqrt(np.mean(dec["delta"] ** 2, axis=0))
            quantum = twist_quantum_rad(robot)
            for j in range(n):
                if math.isnan(k[j]) or twist[j] < TWIST_MIN_QUANTA * quantum[j]:
                    k[j], k_std[j] = math.nan, math.nan
                    warnings.append(
                        f"joint {robot.joints[j].name}: stiffness not seen (the gear twist "
                        f"between the encoders, rms {twist[j]:.3g} rad, is below "
                        f"{TWIST_MIN_QUANTA:g} encoder steps of {quantum[j]:.3g} rad: no twist "
                        "to measure it by; a motor position computed from the link's shows none)"
                    )
            rel_k = {f"k{j + 1}": float(k_std[j]) for j in range(n) if math.isfinite(k_std[j])}
    model = DynamicModel(
        sol.theta[: base.count],
        ia,
        np.array([est[f"fc{j + 1}"] for j in range(n)]),
        np.array([est[f"fv{j + 1}"] for j in range(n)]),
        k,
        settings.prior_friction if settings.model == "rigid" else None,
        _per_joint(est, "off", n),
        _per_joint(est, "mu", n),
        _per_joint(est, "ks", n),
    )
    predicted = np.einsum("njp,p->nj", y_b, model.link_base) + ia * dec["thdd"]
    predicted += model.coulomb_nm * dec["sgn"] + model.viscous_nm_s_rad * dec["thd"]
    if model.offset_nm is not None:
        predicted += model.offset_nm
    if model.load_friction is not None:
        predicted += model.load_friction * dec["load"]
    if model.spring_nm_rad is not None:
        predicted += model.spring_nm_rad * dec["q"]
    if settings.model == "rigid":  # the prior friction that was compensated
        predicted += dec["tau"] - dec["tau_j"] - ia * dec["thdd"]
    total, per_joint = nmse_nm(dec["tau"], predicted, ~slow)
    w_rows = sol.weights[problem.groups]
    robust = robust_covariance(
        problem.a * w_rows[:, None],
        sol.residual * w_rows,
        problem.y * w_rows,
        problem.groups,
        torque_constant_tolerance=settings.torque_constant_tolerance,
    )
    # What a user sees per joint is the robust figure: the textbook one assumes white residuals
    # of a model that contains the truth, and is several times too small on real captures.
    rel_robust = _relative_pct(robust.std, sol.theta)
    rel = {**dict(zip(names, rel_robust, strict=True)), **rel_k}
    joints = tuple(
        JointHealth(
            spec.name,
            float(model.coulomb_nm[j]),
            float(model.viscous_nm_s_rad[j]),
            None if k is None or math.isnan(k[j]) else float(k[j]),
            float(ia[j]),
            float(per_joint[j]),
            {
                p: float(rel[f"{p}{j + 1}"])
                for p in DRIVE
                if f"{p}{j + 1}" in rel and math.isfinite(rel[f"{p}{j + 1}"])
            },
            None if model.offset_nm is None else float(model.offset_nm[j]),
        )
        for j, spec in enumerate(robot.joints)
    )
    warnings += impossible_values(robot, model, fitted_inertia=settings.model == "elastic")
    # A load share is judged by its absolute standard deviation (MU_STD_MAX), never relative
    # to a share that may truly be 0.
    warnings += [
        f"{name}: relative standard deviation {r:.0f} %"
        for name, r in zip(names, sol.relative_std_pct, strict=True)
        if r > 50.0 and not name.startswith("mu")
    ]
    feasible = None
    if settings.feasible:
        from agent.estimation.identification.feasible import feasible_estimate

        feasible = feasible_estimate(problem, sol, names, base, robot)
        warnings += [f"feasible estimate: {v}" for v in feasible.violations]
    return IdentificationResult(
        robot=robot.name,
        model=settings.model,
        method=settings.method,
        names=tuple(names),
        estimate=sol.theta,
        rel_std_pct=sol.relative_std_pct,
        combinations=base.combinations(),
        group_names=groups,
        group_sigma=sol.sigma,
        condition_number=cond,
        n_samples=sum(k.q.shape[0] for k in kins),
        segment_samples=tuple(k.q.shape[0] for k in kins),
        n_rows=int(sol.residual.size),
        filter=flt,
        joints=joints,
        nmse_nm=total,
        dynamic_model=model,
        seconds=time.perf_counter() - t0,
        warnings=tuple(warnings),
        feasible=feasible,
        robust=robust,
        time_s=time_s,
        measured_torque_nm=np.where(slow, np.nan, dec["tau"]),
        predicted_torque_nm=np.where(slow, np.nan, predicted),
    )


# Passes of the load column: the transmitted torque it needs comes from the fit it enters.
LOAD_COLUMN_PASSES = 3
# The load share is told from the Coulomb friction only by an excitation that separates the
# rigid-body terms well: on random 2 s trajectories (condition 7,200-7,700) the share came out
# -0.31..+0.27 with standard deviations under 0.05 and the Coulomb friction 47-124 % off, on an
# optimised one (condition 49) within 5 %. Above this, the share is not fitted (said).
LOAD_SHARE_MAX_CONDITION = 200.0
# The load share a joint's capture must pin to this standard deviation for the term to be
# fitted there (shares of strain-wave gears are 0.05-0.3: a 0.15 share is then 3 sigma). On a
# simulated UR5e excitation: 0.0004-0.004 on joints 1-4, 0.02 on joint 5, 1.2-1.7 on joint 6.
MU_STD_MAX = 0.05


@dataclass(frozen=True)
class LoadColumn:
    """sgn(theta') |tau_J| on the decimated rows, tau_J the torque the gear transmits: the
    rigid body's link torque of the model being fitted, interpolated from the subgrid to the
    full rate (the sign and the absolute value are not band-limited, so they are taken at the
    full rate and filtered there, as the other friction columns are).

    The measured torque must not stand in for tau_J: it holds the friction itself, and on a
    joint whose torque is mostly friction (a wrist, a vertical axis) sgn(theta') |tau| is then
    the Coulomb column again: the fit split the friction between the two at random (load
    shares of 0.6-1.0 and Coulomb near 0 on a simulated UR5e's wrist).
    """

    y_b: Array
    segments: tuple[_Segment, ...]

    def of(self, link_base: Array) -> Array:
        out = []
        for g in self.segments:
            rigid = full_rate(np.einsum("njp,p->nj", g.y_sub, link_base), g.sub, g.kin.q.shape[0])
            out.append(parallel_decimate(np.sign(g.kin.thd) * np.abs(rigid), g.kin.flt, g.keep))
        return np.concatenate(out)

    def fitted(
        self,
        dec: dict[str, Array],
        slow: npt.NDArray[np.bool_],
        settings: IdentificationSettings,
        extra: dict[str, Array],
    ) -> tuple[Array, Array]:
        """The column of the model fitted with it: tau_J from a fit without the load term, then
        from the fit with it, LOAD_COLUMN_PASSES times. A joint whose share the capture cannot
        pin to MU_STD_MAX gets a zero column: the term is left out there. Returns the column and
        the share's standard deviation per joint."""
        fit = fit_elastic if settings.model == "elastic" else fit_rigid
        n_base = self.segments[0].y_sub.shape[2]
        column: Array | None = None
        for _ in range(LOAD_COLUMN_PASSES):
            with_load = extra if column is None else {**extra, "mu": column}
            theta = fit(self.y_b, dec, slow, settings.method, with_load)[0].theta
            column = self.of(theta[:n_base])
        assert column is not None
        found = fit(self.y_b, dec, slow, settings.method, {**extra, "mu": column})
        sol, names = found[0], found[1]
        n = column.shape[1]
        std = np.array([sol.std[names.index(f"mu{j + 1}")] for j in range(n)])
        share = np.array([sol.theta[names.index(f"mu{j + 1}")] for j in range(n)])
        # Pinned, and physical: a share below 0 beyond its noise is the fit's answer to data
        # that cannot show it, never a gear's (a gear's friction does not fall with its load).
        keep = (std <= MU_STD_MAX) & (share >= -2.0 * std)
        # Left all zero, a joint's column is pinned to 0 by the equations (equations._dropped).
        return np.where(keep, 1.0, 0.0) * column, std


def impossible_values(
    robot: RobotDescription, model: DynamicModel, *, fitted_inertia: bool
) -> list[str]:
    """A warning for every drive parameter the unconstrained estimate gives a physically
    impossible value (a negative rotor inertia, friction or stiffness): such a value is the
    least-squares' answer to data that cannot show it, never a property of the joint."""
    named = [
        ("friction (Coulomb)", model.coulomb_nm, "N·m"),
        ("friction (viscous)", model.viscous_nm_s_rad, "N·m·s/rad"),
    ]
    if fitted_inertia:
        named.append(("rotor inertia", model.rotor_inertia_kg_m2, "kg·m²"))
    if model.stiffness_nm_rad is not None:
        named.append(("stiffness", model.stiffness_nm_rad, "N·m/rad"))
    return [
        f"joint {robot.joints[j].name}: {what} {values[j]:.3g} {unit} is physically impossible "
        "(negative): the capture cannot show it; see --feasible for a consistent estimate"
        for what, values, unit in named
        for j in range(robot.n_joints)
        if math.isfinite(values[j]) and values[j] < 0.0
    ]


# A stiffness is read from the gear's twist only when the twist's rms is this many encoder steps
# (link step plus motor step seen from the link): below, it is the encoders' quantisation.
TWIST_MIN_QUANTA = 2.0


def twist_quantum_rad(robot: RobotDescription) -> Array:
    """Per joint, the smallest twist the two encoders resolve (link step + motor step / gear)."""
    cpt = robot.encoder_counts_per_turn or 2**19
    gear = np.array([j.gear_ratio or 1.0 for j in robot.joints])
    return 2.0 * math.pi / cpt * (1.0 + 1.0 / gear)


def _per_joint(est: dict[str, float], prefix: str, n: int) -> Array | None:
    if f"{prefix}1" not in est:
        return None
    return np.array([est[f"{prefix}{j + 1}"] for j in range(n)])


def _relative_pct(std: Array, theta: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):  # a term left out: 0 / 0
        return np.where(theta != 0.0, 100.0 * std / np.abs(theta), np.inf)


def _condition(y_b: Array, sgn: Array, thd: Array) -> float:
    n_d, n, b = y_b.shape
    w = np.zeros((n_d, n, b + 2 * n))
    w[..., :b] = y_b
    j = np.arange(n)
    w[:, j, b + j] = sgn
    w[:, j, b + n + j] = thd
    sv = np.linalg.svd(w.reshape(-1, b + 2 * n), compute_uv=False)
    return float(sv[0] / sv[-1]) if sv[-1] > 0.0 else math.inf
