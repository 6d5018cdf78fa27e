"""Dynamic identification of a robot with elastic joints and two encoders per joint.

Two models share the signal chain (agent.estimation.signal_chain) and the least squares:

elastic (paper 002): the link and rotor equations, stacked, linear in 14 parameters per joint
    link  j:  Y_j(q, q', q'') pi_link           - K_j (theta_j - q_j) = 0
    rotor j:  Ia_j theta''_j + Fc_j sgn(theta'_j) + Fv_j theta'_j + K_j (theta_j - q_j) = tau_j
  from link position q, motor position theta (link-side units) and motor torque tau. What it
  sees (elastic_base() works it out numerically, paper 002 section 5):
    * every rotor inertia, Coulomb and viscous coefficient and stiffness on its own: the rotor
      equation of joint j holds only those four, and the deflection column ties K_j to the link
      equation. Unlike a rigid model, Ia_1 does not merge into the inertia of link 1;
    * the link parameters only as the rigid-body base parameters (the same regrouping as a rigid
      robot mounted the same way: 36 on an upright UR5e); the rest stay invisible. The link
      equation alone is homogeneous: the rotor equation gives it its scale through K.
    * not in the model, so not seen and biasing the rest if present: link-side friction, joint
      damping, an offset between the two encoders' zeros (a constant K * offset torque), the
      friction beyond Coulomb + viscous (Stribeck hump, strain-wave ripple, load dependence).
rigid (paper 004, IDIM with rotor-side compensation): tau_J = tau - Ia theta'' - f_prior with
    the rotor terms known (Ia from the robot file, f_prior a friction model identified before),
    regressed on the rigid base regressor at the link-side positions plus Coulomb + viscous
    friction at the rotor speed; stiffness afterwards from tau_J against the deflection.

Beyond the papers: rotor-equation rows within one parallel-filter length of a speed below
`min_friction_speed_rad_s` are left out of the fit and of the torque NMSE (the Stribeck hump
lives there, a sign column cannot follow it, and at rest friction is anything up to
breakaway); the WLS weights are iterated (signal_chain.least_squares); in the elastic model
the gear itself is the link-side torque sensor (K delta), which keeps the link parameters free
of every friction error (bench: 5-10 times smaller base-parameter error than the rigid model).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from agent.capture import Capture
from agent.errors import EstimationError
from agent.estimation.base_params import (
    BaseParameters,
    base_parameters,
    joint_axis_along_y,
    preference_order,
    random_states,
    reduce_regressor,
)
from agent.estimation.signal_chain import (
    FilterSettings,
    LsqSolution,
    Method,
    ResolvedFilter,
    RobotSignals,
    band_pass,
    decimation_index,
    dynamics_bandwidth_hz,
    least_squares,
    parallel_decimate,
    robot_signals,
    single_thread_blas,
    subgrid,
)
from agent.models.elastic_robot import FrictionNonlinearity, friction_torque
from agent.models.regressor import ParameterLayout, parameter_vector, regressor
from agent.models.robot import RobotDescription

Array = npt.NDArray[np.float64]
Model = Literal["elastic", "rigid"]
DRIVE = ("Ia", "fc", "fv", "k")  # per-joint parameters of the rotor equation
# A joint's stiffness is taken as seen when its rotor equation alone pins it to this relative
# standard deviation (%); above, the twist is lost in the encoder quantisation (_fit_elastic).
STIFFNESS_SEEN_REL_STD_PCT = 5.0


class PoorExcitation(EstimationError):
    """The trajectory does not excite the dynamics: the base regressor is ill-conditioned."""

    def __init__(self, condition_number: float, limit: float) -> None:
        super().__init__(
            f"the trajectory does not excite the dynamics: condition number "
            f"{condition_number:.4g} of the base regressor exceeds the limit {limit:g}; run an "
            "optimised excitation (agent.estimation.excitation)"
        )
        self.condition_number = condition_number
        self.limit = limit

    def __reduce__(self) -> tuple[type[PoorExcitation], tuple[float, float]]:
        # process pools pickle exceptions through their constructor arguments
        return (type(self), (self.condition_number, self.limit))


@dataclass(frozen=True)
class IdentificationSettings:
    method: Method = "wls"
    model: Model = "elastic"
    filter: FilterSettings = field(default_factory=FilterSettings)
    # cond of the decimated base regressor (rigid body + friction, SI columns) above which the
    # trajectory is refused as not exciting; optimised excitations reach 20-50 (UR5e ~45)
    max_condition_number: float = 500.0
    min_friction_speed_rad_s: float = 0.05  # 0 keeps every row (the papers)
    saturation_fraction: float = 0.999
    prior_friction: FrictionNonlinearity | None = None  # rigid: compensated before the fit
    use_link_encoder: bool = True  # False: q from the motor encoder (single-encoder ablation)


@functools.lru_cache(maxsize=16)
def link_base(robot: RobotDescription) -> BaseParameters:
    """Rigid-body base parameters of the links (no rotor, no friction columns)."""
    return base_parameters(robot)


def elastic_base(robot: RobotDescription, n_samples: int = 60, seed: int = 0) -> BaseParameters:
    """Identifiability of the 14 parameters per joint of paper 002, from random states."""
    n = robot.n_joints
    layout = ParameterLayout(n, rotor=True, friction=True)
    names = [*layout.names, *(f"k{j + 1}" for j in range(n))]
    q, qd, qdd = random_states(robot, n_samples, seed)
    rng = np.random.default_rng(seed + 1)
    delta, thd, thdd = rng.normal(size=(3, n_samples, n))
    y = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    link_rows = np.zeros((n_samples, n, len(names)))
    link_rows[..., : layout.size] = y
    link_rows[..., layout.rotor_columns()] = 0.0
    fc, fv = layout.friction_columns()
    link_rows[..., fc] = 0.0
    link_rows[..., fv] = 0.0
    joints = np.arange(n)
    kcols = layout.size + joints
    link_rows[:, joints, kcols] = -delta
    motor_rows = np.zeros_like(link_rows)
    motor_rows[:, joints, layout.rotor_columns()] = thdd
    motor_rows[:, joints, fc] = np.sign(thd)
    motor_rows[:, joints, fv] = thd
    motor_rows[:, joints, kcols] = delta
    stacked = np.concatenate([link_rows, motor_rows]).reshape(-1, len(names))
    order = preference_order(names, joint_axis_along_y(robot))
    return reduce_regressor(stacked, names, order=order)


# ------------------------------------------------------------------------------- kinematics


@dataclass(frozen=True)
class Kinematics:
    """Band-passed link (q) and rotor (th) motion at the full rate, with the raw torque."""

    q: Array
    qd: Array
    qdd: Array
    th: Array
    thd: Array
    thdd: Array
    tau: Array
    flt: ResolvedFilter


def kinematics(signals: RobotSignals, settings: FilterSettings) -> Kinematics:
    fs = signals.sample_rate_hz
    bw = settings.bandwidth_hz or dynamics_bandwidth_hz(signals.link_pos_rad, fs)
    flt = settings.resolved(fs, bw)
    q = band_pass(signals.link_pos_rad, fs, flt.cutoff_hz, flt.order)
    th = band_pass(signals.motor_pos_rad, fs, flt.cutoff_hz, flt.order)
    return Kinematics(*q, *th, signals.motor_torque_nm, flt)


# ------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class DynamicModel:
    """Motor torque = Y_base(q, q', q'') pi_base + Ia theta'' + Fc sgn(theta') + Fv theta'
    (+ the prior nonlinear friction). The nominal ("CAD") model and an identified one alike."""

    link_base: Array
    rotor_inertia_kg_m2: Array
    coulomb_nm: Array
    viscous_nm_s_rad: Array
    stiffness_nm_rad: Array | None
    prior: FrictionNonlinearity | None = None

    def decimated_torque(
        self,
        robot: RobotDescription,
        kin: Kinematics,
        keep: npt.NDArray[np.intp],
        sub: npt.NDArray[np.intp],
    ) -> Array:
        """The model's motor torque through the parallel filter, at the samples `keep`."""
        y = link_base(robot).reduce(regressor(robot, kin.q[sub], kin.qd[sub], kin.qdd[sub]))
        rigid = parallel_decimate(np.einsum("njp,p->nj", y, self.link_base), kin.flt, keep, sub)
        drive = self.rotor_inertia_kg_m2 * kin.thdd + self.coulomb_nm * np.sign(kin.thd)
        drive += self.viscous_nm_s_rad * kin.thd
        if self.prior is not None:
            # the load-dependent share needs the transmitted torque: the measured one stands in
            tau_j = kin.tau - self.rotor_inertia_kg_m2 * kin.thdd
            drive += friction_torque(robot, self.prior, kin.thd, kin.th, tau_j, linear=False)[0]
        return rigid + parallel_decimate(drive, kin.flt, keep)


def nominal_model(
    robot: RobotDescription, prior: FrictionNonlinearity | None = None
) -> DynamicModel:
    """The model the robot file describes (paper 004's CAD baseline)."""
    pi = parameter_vector(robot, ParameterLayout(robot.n_joints))
    k = [j.stiffness_nm_rad for j in robot.joints]
    return DynamicModel(
        link_base(robot).to_base(pi),
        np.array([j.rotor_inertia_kg_m2 for j in robot.joints]),
        np.array([j.coulomb_nm for j in robot.joints]),
        np.array([j.viscous_nm_s_rad for j in robot.joints]),
        None if any(v is None for v in k) else np.array(k, dtype=np.float64),
        prior,
    )


def nmse_nm(
    measured: Array, predicted: Array, moving: npt.NDArray[np.bool_] | None = None
) -> tuple[float, Array]:
    """Paper 004 section 4.5: sum over joints of MSE / mean |torque|; (total, per joint).

    `moving` (N, n) keeps, per joint, the samples where it moves: at rest the friction is
    anything up to breakaway and no model predicts it (the standstill before and after an
    excitation would otherwise dominate the figure).
    """
    use = np.ones(measured.shape, dtype=bool) if moving is None else moving
    per_joint = np.array(
        [
            np.mean((m[u] - p[u]) ** 2) / np.mean(np.abs(m[u])) if u.any() else np.nan
            for m, p, u in zip(measured.T, predicted.T, use.T, strict=True)
        ]
    )
    return float(per_joint.sum()), per_joint


# ------------------------------------------------------------------------------- results


class IndicatorRow(NamedTuple):
    joint: str
    indicator: str
    value: float
    unit: str
    rel_std_pct: float | None


@dataclass(frozen=True)
class JointHealth:
    """Wear indicators of one joint, with the relative standard deviation of each estimate."""

    joint: str
    coulomb_nm: float
    viscous_nm_s_rad: float
    stiffness_nm_rad: float | None
    rotor_inertia_kg_m2: float
    torque_nmse_nm: float
    rel_std_pct: dict[str, float]

    def rows(self) -> tuple[IndicatorRow, ...]:
        items = [
            ("coulomb_friction_nm", self.coulomb_nm, "N·m", "fc"),
            ("viscous_friction_nm_s_rad", self.viscous_nm_s_rad, "N·m·s/rad", "fv"),
            ("stiffness_nm_rad", self.stiffness_nm_rad, "N·m/rad", "k"),
            ("rotor_inertia_kg_m2", self.rotor_inertia_kg_m2, "kg·m²", "Ia"),
            ("torque_nmse_nm", self.torque_nmse_nm, "N·m", ""),
        ]
        return tuple(
            IndicatorRow(self.joint, name, float(v), unit, self.rel_std_pct.get(key))
            for name, v, unit, key in items
            if v is not None
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "rel_std_pct": dict(self.rel_std_pct)}


@dataclass(frozen=True)
class IdentificationResult:
    robot: str
    model: Model
    method: Method
    names: tuple[str, ...]  # estimated parameters: link base parameters, then drive ones
    estimate: Array
    rel_std_pct: Array
    combinations: tuple[str, ...]  # what each link base parameter stands for
    group_names: tuple[str, ...]
    group_sigma: Array  # residual std of each equation group (N·m)
    condition_number: float
    n_samples: int
    n_rows: int
    filter: ResolvedFilter
    joints: tuple[JointHealth, ...]
    nmse_nm: float
    dynamic_model: DynamicModel = field(repr=False)
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    # Evidence for the report's measured-vs-predicted plots: the decimated rows of the fit
    # (time from the start of the capture; NaN where a joint stood still and was left out).
    time_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    measured_torque_nm: Array = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    predicted_torque_nm: Array = field(default_factory=lambda: np.zeros((0, 0)), repr=False)

    def __post_init__(self) -> None:
        for a in (
            self.estimate,
            self.rel_std_pct,
            self.group_sigma,
            self.time_s,
            self.measured_torque_nm,
            self.predicted_torque_nm,
        ):
            a.setflags(write=False)

    def value(self, name: str) -> float:
        return float(self.estimate[self.names.index(name)])

    def indicator_rows(self) -> tuple[IndicatorRow, ...]:
        return tuple(r for j in self.joints for r in j.rows())

    def to_dict(self, evidence: bool = False) -> dict[str, Any]:
        d = self._summary()
        if evidence:
            d["evidence"] = {
                "time_s": self.time_s.tolist(),
                "measured_torque_nm": _nan_to_none(self.measured_torque_nm),
                "predicted_torque_nm": _nan_to_none(self.predicted_torque_nm),
            }
        return d

    def _summary(self) -> dict[str, Any]:
        return {
            "robot": self.robot,
            "model": self.model,
            "method": self.method,
            "parameters": [
                {"name": n, "value": float(v), "rel_std_pct": _finite(s)}
                for n, v, s in zip(self.names, self.estimate, self.rel_std_pct, strict=True)
            ],
            "combinations": list(self.combinations),
            "group_sigma": dict(zip(self.group_names, map(_finite, self.group_sigma), strict=True)),
            "condition_number": self.condition_number,
            "n_samples": self.n_samples,
            "n_rows": self.n_rows,
            "filter": self.filter.to_dict(),
            "joints": [j.to_dict() for j in self.joints],
            "nmse_nm": self.nmse_nm,
            "seconds": self.seconds,
            "warnings": list(self.warnings),
        }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _nan_to_none(a: Array) -> list[list[float | None]]:
    return [[_finite(v) for v in row] for row in a.tolist()]


# ------------------------------------------------------------------------------- identification


def identify(
    captures: tuple[Capture, ...] | list[Capture],
    robot: RobotDescription,
    settings: IdentificationSettings | None = None,
    *,
    where: str = "<captures>",
) -> IdentificationResult:
    """Identify from one capture per joint; refuses (exit code 65) what it cannot use."""
    s = settings or IdentificationSettings()
    signals = robot_signals(captures, robot, saturation_fraction=s.saturation_fraction, where=where)
    return identify_signals(signals, robot, s)


def identify_signals(
    signals: RobotSignals, robot: RobotDescription, settings: IdentificationSettings
) -> IdentificationResult:
    started = time.perf_counter()
    kin = kinematics(signals, settings.filter)
    if not settings.use_link_encoder:
        kin = replace(kin, q=kin.th, qd=kin.thd, qdd=kin.thdd)
    return identify_kinematics(kin, robot, settings, started)


def identify_kinematics(
    kin: Kinematics,
    robot: RobotDescription,
    settings: IdentificationSettings,
    started: float | None = None,
) -> IdentificationResult:
    """The least-squares part, from band-passed motion (the paper-002 noise protocol adds its
    noise to these kinematics and enters here)."""
    t0 = time.perf_counter() if started is None else started
    with single_thread_blas():
        return _identify(kin, robot, settings, t0)


def _identify(
    kin: Kinematics, robot: RobotDescription, settings: IdentificationSettings, t0: float
) -> IdentificationResult:
    n = robot.n_joints
    flt = kin.flt
    base = link_base(robot)
    keep = decimation_index(kin.q.shape[0], flt)
    sub = subgrid(kin.q.shape[0], keep, flt)
    y_b = parallel_decimate(
        base.reduce(regressor(robot, kin.q[sub], kin.qd[sub], kin.qdd[sub])), flt, keep, sub
    )
    sgn = np.sign(kin.thd)
    delta = kin.th - kin.q
    slow = _slow_rows(kin.thd, flt, settings.min_friction_speed_rad_s)[keep]
    cols = {
        "thdd": kin.thdd,
        "sgn": sgn,
        "thd": kin.thd,
        "delta": delta,
        "tau": kin.tau,
    }
    if settings.model == "rigid":
        tau_j = kin.tau - np.array([j.rotor_inertia_kg_m2 for j in robot.joints]) * kin.thdd
        if settings.prior_friction is not None:
            tau_j -= friction_torque(
                robot, settings.prior_friction, kin.thd, kin.th, tau_j, linear=False
            )[0]
        cols["tau_j"] = tau_j
    dec = {k: parallel_decimate(v, flt, keep) for k, v in cols.items()}
    cond = _condition(y_b, dec["sgn"], dec["thd"])
    if not cond <= settings.max_condition_number:
        raise PoorExcitation(cond, settings.max_condition_number)
    k: Array | None
    rel_k: dict[str, float] = {}
    warnings: list[str] = []
    if settings.model == "elastic":
        sol, names, groups, twist_rel = _fit_elastic(y_b, dec, slow, settings.method)
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
        sol, names, groups = _fit_rigid(y_b, dec, slow, settings.method)
        est = dict(zip(names, sol.theta, strict=True))
        ia = np.array([j.rotor_inertia_kg_m2 for j in robot.joints])
        k = None
        if settings.use_link_encoder:  # one encoder sees no deflection
            k, k_std = _stiffness_from_link_torque(y_b, sol.theta[: base.count], dec["delta"])
            rel_k = {f"k{j + 1}": float(k_std[j]) for j in range(n)}
    model = DynamicModel(
        sol.theta[: base.count],
        ia,
        np.array([est[f"fc{j + 1}"] for j in range(n)]),
        np.array([est[f"fv{j + 1}"] for j in range(n)]),
        k,
        settings.prior_friction if settings.model == "rigid" else None,
    )
    predicted = np.einsum("njp,p->nj", y_b, model.link_base) + ia * dec["thdd"]
    predicted += model.coulomb_nm * dec["sgn"] + model.viscous_nm_s_rad * dec["thd"]
    if settings.model == "rigid":  # the prior friction that was compensated
        predicted += dec["tau"] - dec["tau_j"] - ia * dec["thdd"]
    total, per_joint = nmse_nm(dec["tau"], predicted, ~slow)
    rel = {**dict(zip(names, sol.relative_std_pct, strict=True)), **rel_k}
    joints = tuple(
        JointHealth(
            spec.name,
            float(model.coulomb_nm[j]),
            float(model.viscous_nm_s_rad[j]),
            None if k is None or math.isnan(k[j]) else float(k[j]),
            float(ia[j]),
            float(per_joint[j]),
            {p: float(rel[f"{p}{j + 1}"]) for p in DRIVE if f"{p}{j + 1}" in rel},
        )
        for j, spec in enumerate(robot.joints)
    )
    warnings += [
        f"{name}: relative standard deviation {r:.0f} %"
        for name, r in zip(names, sol.relative_std_pct, strict=True)
        if r > 50.0
    ]
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
        n_samples=kin.q.shape[0],
        n_rows=int(sol.residual.size),
        filter=flt,
        joints=joints,
        nmse_nm=total,
        dynamic_model=model,
        seconds=time.perf_counter() - t0,
        warnings=tuple(warnings),
        time_s=keep / flt.sample_rate_hz,
        measured_torque_nm=np.where(slow, np.nan, dec["tau"]),
        predicted_torque_nm=np.where(slow, np.nan, predicted),
    )


def _slow_rows(speed: Array, flt: ResolvedFilter, min_speed: float) -> npt.NDArray[np.bool_]:
    """Samples within one parallel-filter length of a rotor speed below min_speed."""
    if min_speed <= 0.0:
        return np.zeros(speed.shape, dtype=bool)
    width = 2 * math.ceil(flt.sample_rate_hz / flt.parallel_cutoff_hz) + 1
    slow = (np.abs(speed) < min_speed).astype(np.float64)
    kernel = np.ones(width)
    spread = np.stack([np.convolve(slow[:, j], kernel, mode="same") for j in range(slow.shape[1])])
    return np.asarray(spread.T > 0.0)


def _condition(y_b: Array, sgn: Array, thd: Array) -> float:
    n_d, n, b = y_b.shape
    w = np.zeros((n_d, n, b + 2 * n))
    w[..., :b] = y_b
    j = np.arange(n)
    w[:, j, b + j] = sgn
    w[:, j, b + n + j] = thd
    sv = np.linalg.svd(w.reshape(-1, b + 2 * n), compute_uv=False)
    return float(sv[0] / sv[-1]) if sv[-1] > 0.0 else math.inf


def _names(prefixes: tuple[str, ...], n: int) -> list[str]:
    return [f"{p}{j + 1}" for p in prefixes for j in range(n)]


def _twist_seen(dec: dict[str, Array], slow: npt.NDArray[np.bool_]) -> Array:
    """Relative std (%) of each joint's stiffness from its rotor equation alone."""
    rel = np.empty(dec["tau"].shape[1])
    for j in range(rel.size):
        rows = ~slow[:, j]
        a = np.stack([dec[key][rows, j] for key in ("thdd", "sgn", "thd", "delta")], axis=1)
        if rows.sum() <= a.shape[1] or np.any(np.all(a == 0.0, axis=0)):
            rel[j] = math.inf
            continue
        sol = least_squares(a, dec["tau"][rows, j], np.zeros(int(rows.sum()), np.intp), "ols")
        rel[j] = sol.relative_std_pct[3]
    return rel


def _fit_elastic(
    y_b: Array, dec: dict[str, Array], slow: npt.NDArray[np.bool_], method: Method
) -> tuple[LsqSolution, list[str], tuple[str, ...], Array]:
    """Stacked link and rotor equations (paper 002); groups: link j, then rotor j.

    The link equation is homogeneous: only the twist term K_j delta_j in the rotor equation
    gives it a scale. A joint whose twist stays within a few encoder counts (the PUMA's wrist
    at K = 2000 N·m/rad) has none, and a weighted fit then drifts towards pi = 0, K = 0, which
    zeroes those rows. Such a joint is fitted as rigid instead (link + rotor equations summed:
    Y_j pi + Ia theta'' + friction = tau) and its stiffness is reported as not seen.
    Returns also the rotor-equation relative std of every stiffness (%).
    """
    n_d, n, b = y_b.shape
    twist_rel = _twist_seen(dec, slow)
    seen = [j for j in range(n) if twist_rel[j] <= STIFFNESS_SEEN_REL_STD_PCT]
    kcol = {j: b + 3 * n + i for i, j in enumerate(seen)}
    p = b + 3 * n + len(seen)
    blocks, rhs, groups = [], [], []
    for j in range(n):
        moving = ~slow[:, j]
        rotor = np.zeros((n_d, p))
        for c, key in enumerate(("thdd", "sgn", "thd")):
            rotor[:, b + c * n + j] = dec[key][:, j]
        if j in kcol:
            link = np.zeros((n_d, p))
            link[:, :b] = y_b[:, j]
            link[:, kcol[j]] = -dec["delta"][:, j]
            rotor[:, kcol[j]] = dec["delta"][:, j]
            blocks += [link, rotor[moving]]
            rhs += [np.zeros(n_d), dec["tau"][moving, j]]
            groups += [np.full(n_d, j), np.full(int(moving.sum()), n + j)]
        else:
            rotor[:, :b] = y_b[:, j]
            blocks.append(rotor[moving])
            rhs.append(dec["tau"][moving, j])
            groups.append(np.full(int(moving.sum()), n + j))
    sol = least_squares(np.vstack(blocks), np.concatenate(rhs), np.concatenate(groups), method)
    names = [f"base{i + 1}" for i in range(b)] + _names(DRIVE[:3], n)
    names += [f"k{j + 1}" for j in seen]
    group_names = (*_names(("link",), n), *_names(("rotor",), n))
    return sol, names, group_names, twist_rel


def _fit_rigid(
    y_b: Array, dec: dict[str, Array], slow: npt.NDArray[np.bool_], method: Method
) -> tuple[LsqSolution, list[str], tuple[str, ...]]:
    """IDIM on the rotor-compensated torque (paper 004 eq. 13); groups: joints."""
    n_d, n, b = y_b.shape
    j = np.arange(n)
    a = np.zeros((n_d, n, b + 2 * n))
    a[..., :b] = y_b
    a[:, j, b + j] = dec["sgn"]
    a[:, j, b + n + j] = dec["thd"]
    # one row holds the rigid body and the friction: a slow joint's row goes whole
    keep = ~slow
    rows = a[keep]
    groups = np.nonzero(keep)[1]
    sol = least_squares(rows, dec["tau_j"][keep], groups, method)
    names = [f"base{i + 1}" for i in range(b)] + _names(("fc", "fv"), n)
    return sol, names, tuple(_names(("joint",), n))


def _stiffness_from_link_torque(y_b: Array, pi_b: Array, delta: Array) -> tuple[Array, Array]:
    """K_j = <tau_link_j, delta_j> / <delta_j, delta_j> with tau_link the model's link torque
    (paper 002's link equation with the inertial part fixed); its relative std in %."""
    tau_link = np.einsum("njp,p->nj", y_b, pi_b)
    dd = np.sum(delta * delta, axis=0)
    k = np.sum(tau_link * delta, axis=0) / dd
    res = tau_link - delta * k
    var = np.sum(res * res, axis=0) / max(delta.shape[0] - 1, 1) / dd
    return k, 100.0 * np.sqrt(var) / np.abs(k)


# ------------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class Validation:
    nmse_nm: float
    per_joint_nm: Array

    def to_dict(self) -> dict[str, Any]:
        return {"nmse_nm": self.nmse_nm, "per_joint_nm": self.per_joint_nm.tolist()}


def validate(
    model: DynamicModel,
    robot: RobotDescription,
    captures: tuple[Capture, ...] | list[Capture],
    settings: IdentificationSettings | None = None,
    reference: DynamicModel | None = None,
) -> Validation:
    """Torque NMSE of `model` on a capture not used for its estimation (paper 004 section 5);
    measured and predicted torques go through the same chain as in the estimation.

    With `reference` (in simulation, the true robot's model) the torque compared against is
    that model's prediction instead of the measured one: the error of the parameters alone,
    without what neither model contains.
    """
    s = settings or IdentificationSettings()
    signals = robot_signals(captures, robot, saturation_fraction=s.saturation_fraction)
    kin = kinematics(signals, s.filter)
    if not s.use_link_encoder:
        kin = replace(kin, q=kin.th, qd=kin.thd, qdd=kin.thdd)
    keep = decimation_index(kin.q.shape[0], kin.flt)
    sub = subgrid(kin.q.shape[0], keep, kin.flt)
    with single_thread_blas():
        if reference is None:
            measured = parallel_decimate(kin.tau, kin.flt, keep)
        else:
            measured = reference.decimated_torque(robot, kin, keep, sub)
        predicted = model.decimated_torque(robot, kin, keep, sub)
    moving = ~_slow_rows(kin.thd, kin.flt, s.min_friction_speed_rad_s)[keep]
    total, per_joint = nmse_nm(measured, predicted, moving)
    return Validation(total, per_joint)


def true_parameters(robot: RobotDescription, result: IdentificationResult) -> Array:
    """The values a perfect identification of `result`'s parameters would give (simulation)."""
    m = nominal_model(robot)
    drive = {
        "Ia": m.rotor_inertia_kg_m2,
        "fc": m.coulomb_nm,
        "fv": m.viscous_nm_s_rad,
        "k": m.stiffness_nm_rad,
    }
    out = []
    for name in result.names:
        if name.startswith("base"):
            out.append(m.link_base[int(name[4:]) - 1])
        else:
            stem = name.rstrip("0123456789")
            values = drive[stem]
            assert values is not None
            out.append(values[int(name[len(stem) :]) - 1])
    return np.array(out, dtype=np.float64)


def normalised_mean_error(
    result: IdentificationResult, robot: RobotDescription, skip: tuple[str, ...] = ()
) -> tuple[float, dict[str, float]]:
    """Paper 002's figure of merit in simulation: mean of |estimate - true| / |true| over the
    estimated parameters whose true value is not zero (the others have no relative error; a
    rounding residue below 1e-12 of the largest counts as zero). `skip`: name prefixes to
    leave out (paper 002 also quotes the mean without static friction, "fc")."""
    truth = true_parameters(robot, result)
    floor = 1e-12 * float(np.max(np.abs(truth)))
    errors = {
        name: float(abs(est - tv) / abs(tv))
        for name, est, tv in zip(result.names, result.estimate, truth, strict=True)
        if abs(tv) > floor and name.rstrip("0123456789") not in skip
    }
    return float(np.mean(list(errors.values()))), errors
