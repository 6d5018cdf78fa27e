"""Checks of an identified model in simulation and on held-out captures (Zollo, Lopez et al.
2014; Madsen et al. 2020).

validate() is Madsen et al. 2020's cross-validation torque NMSE; true_parameters() and
normalised_mean_error() are Zollo, Lopez et al. 2014's figure of merit against the robot file's
values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agent.capture.model import Capture
from agent.errors import EstimationError
from agent.estimation.identification.filters import decimation_index, parallel_decimate, subgrid
from agent.estimation.identification.fit import segment_kinematics, split_runs
from agent.estimation.identification.least_squares import single_thread_blas
from agent.estimation.identification.model import (
    Array,
    DynamicModel,
    IdentificationSettings,
    nmse_nm,
    nominal_model,
    slow_rows,
)
from agent.estimation.identification.result import IdentificationResult
from agent.estimation.identification.robot_signals import robot_signals
from agent.models.robot.description import RobotDescription
from agent.models.robot.friction import FrictionNonlinearity


@dataclass(frozen=True)
class Validation:
    """Torque error of a model on samples it was not fitted to: the NMSE of Madsen et al. 2020
    (section 4.5; total and per joint) and the RMS torque error per joint, over moving samples."""

    nmse_nm: float
    per_joint_nm: Array
    rms_nm: Array = field(default_factory=lambda: np.zeros(0))
    samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "nmse_nm": self.nmse_nm,
            "per_joint_nm": self.per_joint_nm.tolist(),
            "rms_nm": self.rms_nm.tolist(),
            "samples": self.samples,
        }


def validate(
    model: DynamicModel,
    robot: RobotDescription,
    captures: tuple[Capture, ...] | list[Capture],
    settings: IdentificationSettings | None = None,
    reference: DynamicModel | None = None,
    *,
    filtered: bool = True,
) -> Validation:
    """Torque NMSE of `model` on a capture not used for its estimation (Madsen et al. 2020,
    section 5); measured and predicted torques go through the same chain as in the estimation.
    With `filtered` False the measured torque is taken raw at the same samples (its noise and
    everything the parallel filter removes count against the model too).

    With `reference` (in simulation, the true robot's model) the torque compared against is
    that model's prediction instead of the measured one: the error of the parameters alone,
    without what neither model contains.
    """
    parts: list[tuple[Array, Array, Any]] = []
    samples = 0
    for kin, keep, sub, s in _validation_kinematics(robot, captures, settings):
        with single_thread_blas():
            if reference is not None:
                measured = reference.decimated_torque(robot, kin, keep, sub)
            elif filtered:
                measured = parallel_decimate(kin.tau, kin.flt, keep)
            else:
                measured = kin.tau[keep]
            predicted = model.decimated_torque(robot, kin, keep, sub)
        moving = ~slow_rows(kin.thd, kin.flt, s.min_friction_speed_rad_s)[keep]
        parts.append((measured, predicted, moving))
        samples += int(kin.q.shape[0])
    # several held-out runs: their rows together, each run filtered on its own
    measured, predicted, moving = (np.concatenate([p[i] for p in parts]) for i in range(3))
    total, per_joint = nmse_nm(measured, predicted, moving)
    rms = np.array(
        [
            float(np.sqrt(np.mean((m[u] - p[u]) ** 2))) if u.any() else math.nan
            for m, p, u in zip(measured.T, predicted.T, moving.T, strict=True)
        ]
    )
    return Validation(total, per_joint, rms, samples)


def with_fitted_friction(
    model: DynamicModel,
    robot: RobotDescription,
    captures: tuple[Capture, ...] | list[Capture],
    settings: IdentificationSettings | None = None,
) -> DynamicModel:
    """`model` with its Coulomb and viscous coefficients fitted (per joint, least squares on
    the moving samples) to what its links and rotors leave of the measured torque: the fair
    baseline for a comparison with an identified model, whose friction was fitted too."""
    ((kin, keep, sub, s),) = _validation_kinematics(robot, captures, settings)[:1]
    bare = replace(model, coulomb_nm=np.zeros_like(model.coulomb_nm),
                   viscous_nm_s_rad=np.zeros_like(model.viscous_nm_s_rad), prior=None)  # fmt: skip
    with single_thread_blas():
        left = parallel_decimate(kin.tau, kin.flt, keep) - bare.decimated_torque(
            robot, kin, keep, sub
        )
        sgn = parallel_decimate(np.sign(kin.thd), kin.flt, keep)
        speed = parallel_decimate(kin.thd, kin.flt, keep)
    moving = ~slow_rows(kin.thd, kin.flt, s.min_friction_speed_rad_s)[keep]
    fc, fv = model.coulomb_nm.copy(), model.viscous_nm_s_rad.copy()
    for j in range(robot.n_joints):
        u = moving[:, j]
        a = np.stack([sgn[u, j], speed[u, j]], axis=1)
        if u.sum() > 2:
            fc[j], fv[j] = np.linalg.lstsq(a, left[u, j], rcond=None)[0]
    return replace(model, coulomb_nm=fc, viscous_nm_s_rad=fv, prior=None)


def _validation_kinematics(
    robot: RobotDescription,
    captures: tuple[Capture, ...] | list[Capture],
    settings: IdentificationSettings | None,
) -> list[tuple[Any, Any, Any, IdentificationSettings]]:
    """Per run of the captures (fit.split_runs): its kinematics, kept rows and subgrid."""
    s = settings or IdentificationSettings()
    runs = [
        robot_signals(
            run,
            robot,
            saturation_fraction=s.saturation_fraction,
            require_motor=s.model == "elastic" or not s.use_link_encoder,
            max_gap_ticks=s.max_gap_ticks,
        )
        for run in split_runs(captures, robot, "<held-out captures>")
    ]
    out = []
    for kin in segment_kinematics(runs, s):
        keep = decimation_index(kin.q.shape[0], kin.flt)
        out.append((kin, keep, subgrid(kin.q.shape[0], keep, kin.flt), s))
    return out


def true_parameters(
    robot: RobotDescription,
    result: IdentificationResult,
    friction: FrictionNonlinearity | None = None,
) -> Array:
    """The values a perfect identification of `result`'s parameters would give (simulation);
    `friction` is the simulation's torques beyond Coulomb + viscous, for the load-dependent
    share and the joint spring (a spring relaxed at q0 shows as an offset of -k q0)."""
    m = nominal_model(robot)
    n = robot.n_joints
    nl = friction or FrictionNonlinearity.none(n)
    spring = np.asarray(nl.cable_nm_rad or (0.0,) * n, dtype=np.float64)
    neutral = np.asarray(nl.cable_neutral_rad or (0.0,) * n, dtype=np.float64)
    drive = {
        "Ia": m.rotor_inertia_kg_m2,
        "fc": m.coulomb_nm,
        "fv": m.viscous_nm_s_rad,
        "k": m.stiffness_nm_rad,
        "off": -spring * neutral,  # the robot file's sensors have no bias
        "mu": np.full(n, nl.load_fraction),
        "ks": spring,
    }
    out = []
    for name in result.names:
        if name.startswith("base"):
            out.append(m.link_base[int(name[4:]) - 1])
        else:
            stem = name.rstrip("0123456789")
            values = drive[stem]
            if values is None:
                raise EstimationError(f"{robot.source}: gives no value of {stem} to compare with")
            out.append(values[int(name[len(stem) :]) - 1])
    return np.array(out, dtype=np.float64)


def normalised_mean_error(
    result: IdentificationResult, robot: RobotDescription, skip: tuple[str, ...] = ()
) -> tuple[float, dict[str, float]]:
    """Zollo, Lopez et al. 2014's figure of merit in simulation: mean of |estimate - true| / |true|
    over the estimated parameters whose true value is not zero (the others have no relative error; a
    rounding residue below 1e-12 of the largest counts as zero). `skip`: name prefixes to leave out
    (Zollo, Lopez et al. 2014 also quote the mean without static friction, "fc")."""
    truth = true_parameters(robot, result)
    floor = 1e-12 * float(np.max(np.abs(truth)))
    errors = {
        name: float(abs(est - tv) / abs(tv))
        for name, est, tv in zip(result.names, result.estimate, truth, strict=True)
        if abs(tv) > floor and name.rstrip("0123456789") not in skip
    }
    return float(np.mean(list(errors.values()))), errors
