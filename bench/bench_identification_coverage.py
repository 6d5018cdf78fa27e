"""Do the identification's 95 % intervals hold the simulated truth 95 % of the time?

The 2-DoF planar arm of Zollo, Lopez et al. 2014 identified with the rigid model (IDIM-WLS with
rotor-side compensation, Madsen et al. 2020) over many trials, each a new robot and new noise:
- paper-like: the file's robot, a Stribeck hump beyond Coulomb + viscous friction (their Fig. 3);
- realistic: a different robot each trial (agent.models.robot.mismatch.realistic: payload,
  warm friction, cogging, cable spring, torque-constant error within +-5 %, 2 % load-dependent
  friction), the torque-constant tolerance given to the identification; then also with the
  load-dependent friction and the joint spring in the model (--load-friction --joint-spring);
- open world: the torque constants drawn 1.5x and 2x wider than the +-5 % the identification is
  told (the goal: >= 90 % per parameter at 1.5x).
Cogging, the cable spring and (without --load-friction) the load share are effects outside the
model family in every realistic row.
Each interval is printed three times: the textbook one (white residuals, the model contains the
truth), the robust one the agent reports (Newey-West HAC + the torque-constant type-B term + the
model check's shift, agent.estimation.identification.model_check), and the robust one without
the model check's term. A share
counts (trial, parameter) pairs; per parameter, the worst ones are named. PASS is 95 +- 3 %.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from agent.estimation.identification.excitation import ExcitationSettings, design_excitation
from agent.estimation.identification.fit import identify
from agent.estimation.identification.model import IdentificationSettings
from agent.estimation.identification.result import Z_95
from agent.estimation.identification.validation import true_parameters
from agent.models.robot import elastic as er
from agent.models.robot import mismatch as mm
from agent.models.robot.description import RobotDescription, load_robot
from agent.models.robot.elastic_measure import measure

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
TORQUE_NOISE_NM = 0.5
Conditions = Callable[[RobotDescription, int], mm.Conditions]


def _paper_like(r: RobotDescription, seed: int) -> mm.Conditions:
    return mm.paper_like(r, seed, as_built=False)


def _realistic(r: RobotDescription, seed: int) -> mm.Conditions:
    return mm.realistic(r, seed, as_built=False)


def _drawn_wider(factor: float) -> Conditions:
    """The drives' torque constants drawn `factor` times wider than the tolerance the
    identification is told (a datasheet's +-5 % that is +-10 % in the plant)."""

    def make(r: RobotDescription, seed: int) -> mm.Conditions:
        tol = factor * mm.TORQUE_CONSTANT_TOLERANCE
        return mm.realistic(r, seed, as_built=False, torque_constant_tolerance=tol)

    return make


RIGID = IdentificationSettings(model="rigid")
TOLD = replace(RIGID, torque_constant_tolerance=mm.TORQUE_CONSTANT_TOLERANCE)
SETTINGS: dict[str, tuple[Conditions, IdentificationSettings]] = {
    "paper-like": (_paper_like, RIGID),
    "realistic, Kt tolerance told": (_realistic, TOLD),
    "realistic, + load friction and spring modelled": (
        _realistic,
        replace(TOLD, load_friction=True, joint_spring=True),
    ),
    # Open world: the stated tolerance too small.
    "realistic, Kt drawn 1.5x wider than told": (_drawn_wider(1.5), TOLD),
    "realistic, Kt drawn 2x wider than told": (_drawn_wider(2.0), TOLD),
}


def _trial(
    args: tuple[str, int, tuple[np.ndarray, ...]],
) -> tuple[list[str], list[bool], list[bool], float, list[bool], float, list[float], list[float]]:
    which, seed, (t, q, qd, qdd) = args
    make, settings = SETTINGS[which]
    r = load_robot(ROBOTS / "planar2.yaml")
    cond = make(r, seed)
    run = er.simulate(cond.truth, t, q, qd, qdd, friction=cond.friction, model=r)
    caps = measure(
        run,
        cond.truth,
        torque_constant_error=cond.torque_constant_error,
        torque_noise_nm=TORQUE_NOISE_NM,
        seed=seed,
    )
    res = identify(caps, r, settings)
    truth = true_parameters(cond.truth, res, cond.friction)
    err = np.abs(res.estimate - truth)
    textbook = res.rel_std_pct * np.abs(res.estimate) / 100.0
    low, high = res.interval_95().T
    return (
        list(res.names),
        (err <= Z_95 * textbook).tolist(),
        ((low <= truth) & (truth <= high)).tolist(),
        float(np.median(res.std_robust / np.maximum(textbook, 1e-300))),
        (err <= res.noise_half_width_95()).tolist(),
        float(np.median((high - low) / 2 / np.maximum(res.noise_half_width_95(), 1e-300))),
        ((high - low) / 2).tolist(),
        np.abs(truth).tolist(),
    )


def coverage(which: str, trials: int, period_s: float) -> None:
    started = time.perf_counter()
    r = load_robot(ROBOTS / "planar2.yaml")
    ex = design_excitation(r, ExcitationSettings(period_s=period_s, harmonics=4, maxiter=20))
    samples = ex.trajectory.sample(1000.0, 1, 0.3)  # one excitation for every trial
    jobs = [(which, 1000 + k, samples) for k in range(trials)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        out = pool.map(_trial, jobs)
    names = out[0][0]
    text = np.array([o[1] for o in out])
    robust = np.array([o[2] for o in out])
    widen = float(np.median([o[3] for o in out]))
    noise = np.array([o[4] for o in out])
    model_widen = float(np.median([o[5] for o in out]))
    elapsed = time.perf_counter() - started

    def verdict(share: float) -> str:
        return "PASS" if abs(share - 0.95) <= 0.03 else "FAIL"

    print(
        f"  {which}:\n    {trials:4d} trials x {len(names)} parameters ({elapsed:.0f} s): "
        f"textbook {100 * text.mean():5.1f} % {verdict(float(text.mean()))}, "
        f"robust {100 * robust.mean():5.1f} % {verdict(float(robust.mean()))} "
        f"(robust / textbook std, median {widen:.1f}x)\n"
        f"    robust without the model check's term {100 * noise.mean():5.1f} % "
        f"{verdict(float(noise.mean()))} (the term widens the intervals {model_widen:.2f}x, "
        "median)"
    )
    per = robust.mean(axis=0)
    width = np.median(np.array([o[6] for o in out]), axis=0)
    size = np.median(np.array([o[7] for o in out]), axis=0)

    def half(w: float, t: float) -> str:
        # relative to the truth, unless the truth is ~0 (a base parameter that sums to nothing)
        return f"+-{100 * w / t:.0f} %" if t > 1e-9 and w < 10 * t else f"+-{w:.2g} (truth ~0)"

    print(
        "    robust, per parameter (coverage, median half-width): "
        + ", ".join(
            f"{n} {100 * p:.0f} % {half(w, t)}"
            for n, p, w, t in zip(names, per, width, size, strict=True)
        )
    )
    low = [n for n, p in zip(names, per, strict=True) if p < 0.90]
    if low:
        print(f"    below 90 %: {', '.join(low)}")


def main(quick: bool = False) -> None:
    trials = 20 if quick else 200
    print(
        "\n-- coverage of the 95 % intervals, planar arm (Zollo, Lopez et al. 2014), rigid "
        f"IDIM-WLS, torque noise {TORQUE_NOISE_NM} N·m, 4 s excitation"
    )
    for which in SETTINGS:
        coverage(which, trials, 4.0)
    print(
        "  (noise and the stated torque-constant tolerance make the robust interval; what the"
        " model lacks is a bias no variance covers, so the model check's second fit with"
        " load-dependent friction and a joint spring adds its shift (GUM F.2.4.5); an effect"
        " neither model has still biases both)"
    )


if __name__ == "__main__":
    main()
