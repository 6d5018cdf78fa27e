"""Prod. Eng. 2023 reproduced and timed: the A-optimal design for the IRB 6660, optimal versus
random designs (A, D, E) at the same force budget, the coverage of the 95 % ellipsoid under the
paper's conditions and under realistic mismatch, the paper's one-position experiment, and the
dual-encoder stiffness of the simulated UR5e.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from scipy.stats import f as f_dist

from agent.estimation.stiffness.design import TcpDesignSettings, design_tcp
from agent.estimation.stiffness.design_dual import design_dual_encoder
from agent.estimation.stiffness.design_random import (
    RANDOM_FORCES,
    measurements_to_match,
    random_design_criteria,
)
from agent.estimation.stiffness.design_solver import CRITERIA
from agent.estimation.stiffness.inference import (
    estimate_dual_encoder,
    estimate_stiffness,
    prior_from_robot,
)
from agent.estimation.stiffness.tcp_errors import TcpErrorPrior
from agent.models.robot.compliance import (
    ComplianceModel,
    InfeasibleRequestError,
    Payload,
    compliance_model,
    with_payload,
)
from agent.models.robot.compliance_errors import (
    REALISTIC_TCP_MISMATCH,
    TcpMismatch,
    draw_mismatch,
    simulate_tcp_mismatch,
    unmodelled_share,
)
from agent.models.robot.compliance_measurements import (
    simulate_dual_encoder,
)
from agent.models.robot.description import load_robot

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
DESIGN_BUDGET_S = 10.0  # acceptance bound: a 5-measurement A-optimal design for the IRB 6660


def irb() -> ComplianceModel:
    return compliance_model(load_robot(ROBOTS / "irb6660.yaml"))


def bench_design_time() -> None:
    model = irb()
    prior = prior_from_robot(model, 0.5)
    started = time.perf_counter()
    design = design_tcp(model, TcpDesignSettings(5, "A"), prior)  # the CLI's defaults
    elapsed = time.perf_counter() - started
    verdict = "PASS" if elapsed <= DESIGN_BUDGET_S else "FAIL"
    print(
        f"IRB 6660, 5 measurements, A-optimal, {design.starts} SLSQP starts: {elapsed:.2f} s "
        f"(budget {DESIGN_BUDGET_S:g} s) {verdict}"
    )
    rel = design.std_nm_rad / prior.mean_nm_rad
    print(
        "  expected posterior sd / k0: "
        + ", ".join(f"{n} {100 * r:.2f} %" for n, r in zip(design.joint_names, rel, strict=True))
    )


def bench_optimal_vs_random(randoms: int, starts: int) -> None:
    """How many random measurements do as well as 5 optimal ones (the paper: 'up to 75 %
    fewer', 5 instead of 20), against the fair baseline: random designs with the optimal
    design's force budget (one force per measurement, each component on its bound). The first
    baseline (forces uniform in the box, a third of that force energy) is printed beside it
    for what it is: against it 5 optimal beat 20 random, against the fair one they do not."""
    model = irb()
    prior = prior_from_robot(model, 0.5)
    rng = np.random.default_rng(0)
    most = 80
    print(
        f"\noptimal 5-measurement design vs random feasible designs (median of {randoms}), "
        "IRB 6660, forces +-300 N, tool cone 80 deg"
    )
    print(
        "  budget: random forces at the optimal design's budget (each component +-300 N, "
        "one force per measurement): the fair baseline"
    )
    print("  box:    random forces uniform in the box (a third of that force energy): unfair")
    print(
        f"  {'crit':4s} {'optimal 5':>11s} {'budget 20':>11s} {'ratio':>6s} {'box 20':>11s} "
        f"{'ratio':>6s}   random K matching the optimal 5: budget / box; paper's claim"
    )
    for crit in CRITERIA:
        design = design_tcp(model, TcpDesignSettings(5, crit, starts=starts), prior)
        settings = TcpDesignSettings(most, crit)
        row, matches = [], []
        for forces in RANDOM_FORCES:
            crits = random_design_criteria(model, settings, prior, randoms, rng, forces=forces)
            row.append(float(np.median(crits[:, 19])))
            matches.append(measurements_to_match(crits, design.criterion_value))
        fair, box = row
        # the paper's claim, 'up to 75 % fewer' (5 instead of 20), held to the fair baseline
        verdict = "75 % reached" if design.criterion_value <= fair else "75 % not reached"
        shown = [f"> {most}" if m is None else str(m) for m in matches]
        saving = "" if matches[0] is None else f" ({100 * (1 - 5 / matches[0]):.0f} % fewer)"
        print(
            f"  {crit:4s} {design.criterion_value:11.4g} {fair:11.4g} "
            f"{design.criterion_value / fair:6.3f} {box:11.4g} {design.criterion_value / box:6.3f}"
            f"   {shown[0]:>4s}{saving} / {shown[1]}  {verdict}"
        )


def bench_coverage(trials: int) -> None:
    """Acceptance: the 95 % ellipsoid holds the true k in 95 +- 3 % of the trials, under the
    paper's conditions (the model exact) and under realistic mismatch (links that tilt, a
    geometry off its table, a turned laser frame, a force sensor off its scale), each with the
    estimator told the conditions' tolerances. Beside them, for information: the paper's
    estimator under mismatch, the same with its covariance scaled by the residual variance
    (s^2 = chi2/dof, F quantile), and the tolerant estimator on exact data."""
    model = irb()
    prior = prior_from_robot(model, 5.0)  # weak prior: frequentist coverage of a fixed k
    design = design_tcp(model, TcpDesignSettings(8, "A", starts=2), prior_from_robot(model))
    assert design.force_n is not None
    k_true = model.nominal_stiffness() * np.array([1.2, 0.85, 1.1, 0.9, 1.15, 0.8])
    real = REALISTIC_TCP_MISMATCH
    told = TcpErrorPrior(**vars(real))
    n_k = model.n_joints
    print(
        f"\ncoverage of the 95 % ellipsoid (eq. 15), 8 designed measurements, noise 1 um, "
        f"{trials} trials per condition"
    )
    print(
        f"  realistic mismatch: links tilting with {real.link_tilt_ratio:g} of their joint's "
        f"compliance (exponential spread), geometry sd {1e3 * real.length_sd_m:g} mm and "
        f"{np.degrees(real.angle_sd_rad):g} deg, laser frame sd "
        f"{1e3 * real.laser_rotation_sd_rad:g} mrad per axis, force scale sd "
        f"{100 * real.force_scale_sd:g} %"
    )

    def wider(factor: float) -> TcpMismatch:
        return TcpMismatch(**{k: factor * v for k, v in vars(real).items()})

    for label, mismatch, errors in (
        ("paper-like (model exact), paper's estimator", TcpMismatch(), None),
        ("realistic mismatch, estimator told the tolerances", real, told),
        # Open world: every tolerance stated too small (goal >= 90 % at 1.5x).
        ("realistic mismatch drawn 1.5x wider than told", wider(1.5), told),
        ("realistic mismatch drawn 2x wider than told", wider(2.0), told),
    ):
        rng = np.random.default_rng(1)
        inside = inside_other = inside_scaled = 0
        shares, rel_sd, seconds = [], [], 0.0
        for _ in range(trials):
            draw = draw_mismatch(model, mismatch, rng)
            shares.append(unmodelled_share(model, design.q_rad, design.force_n, k_true, draw))
            data = simulate_tcp_mismatch(design.q_rad, design.force_n, k_true, 1e-6, draw, rng)
            started = time.perf_counter()
            est = estimate_stiffness(model, data, prior, errors=errors)
            seconds += time.perf_counter() - started
            inside += est.contains(k_true)
            rel_sd.append(est.std_nm_rad / k_true)
            # the other estimator on the same data: the tolerant one on exact data, the
            # paper's (plain, and scaled by its residual variance) under mismatch
            other = estimate_stiffness(model, data, prior, errors=told if errors is None else None)
            inside_other += other.contains(k_true)
            if errors is not None:
                dof = data.deviation_m.size - n_k
                f95 = n_k * float(f_dist.ppf(0.95, n_k, dof))
                inside_scaled += other.mahalanobis2(k_true) / other.chi2_per_dof <= f95
        share = inside / trials
        verdict = "PASS" if abs(share - 0.95) <= 0.03 else "FAIL"
        if "wider" in label:
            verdict = "PASS" if share >= 0.90 else "FAIL (goal >= 90 %)"
        print(
            f"  {label}: {100 * share:.1f} % {verdict} (unmodelled deflection, median "
            f"{100 * float(np.median(shares)):.1f} % of the modelled one; "
            f"{1e3 * seconds / trials:.1f} ms per estimate)"
        )
        print(
            "    median sd / k: " + ", ".join(f"{100 * v:.2g} %" for v in np.median(rel_sd, axis=0))
        )
        if errors is None:
            print(
                f"    the estimator told the realistic tolerances, on these exact data: "
                f"{100 * inside_other / trials:.1f} % (conservative: it allows for errors "
                "that are not there)"
            )
        else:
            print(
                f"    the paper's estimator on these data: {100 * inside_other / trials:.1f} %; "
                f"with its covariance scaled by the residual variance (F quantile): "
                f"{100 * inside_scaled / trials:.1f} % (a force scale error leaves no "
                "residual, and tilting links look like soft joints: residuals cannot show "
                "what they do to k)"
            )


def bench_paper_experiment() -> None:
    """Section 4: one TCP position, forces in X and Y only, five measurements."""
    model = irb()
    prior = prior_from_robot(model, 0.5)
    settings = TcpDesignSettings(
        5,
        "A",
        force_min_n=(-300.0, -300.0, 0.0),
        force_max_n=(300.0, 300.0, 0.0),
        target_m=(1.6, 0.0, 1.2),
    )
    design = design_tcp(model, settings, prior)
    assert design.force_n is not None
    print(
        f"\npaper's experiment: TCP at {settings.target_m} m, F_z = 0, 5 measurements "
        f"({design.seconds:.2f} s)"
    )
    for q, f, cone in zip(design.q_rad, design.force_n, design.extra["cone_deg"], strict=True):
        print(
            "  q "
            + " ".join(f"{v:7.1f}" for v in np.degrees(q))
            + f" deg  F ({f[0]:6.0f}, {f[1]:6.0f}) N  cone {cone:5.1f} deg"
        )
    rel = design.std_nm_rad / prior.mean_nm_rad
    print("  expected sd / k0: " + ", ".join(f"{100 * r:.2f} %" for r in rel))


def bench_dual_encoder(runs: int) -> None:
    """UR5e, 19-bit encoders on both sides, a 3 kg tool, gravity as the only load."""
    base = load_robot(ROBOTS / "ur5e.yaml")
    model = compliance_model(with_payload(base, Payload(3.0, (0.08, 0.0, 0.05))))
    joints = model.joint_names[1:]  # shoulder_pan: gravity never twists it (upright base)
    prior = prior_from_robot(model, 0.5)
    design = design_dual_encoder(model, 8, prior, joints=joints, starts=3)
    k_true = model.nominal_stiffness() * np.array([1.0, 1.2, 0.8, 1.1, 0.9, 1.25])
    rng = np.random.default_rng(2)
    offsets = rng.uniform(-2e-3, 2e-3, 6)
    data = simulate_dual_encoder(model, design.q_rad, k_true, offsets, noise_counts=0.5, rng=rng)
    est = estimate_dual_encoder(model, data, prior, joints=joints)
    print(
        f"\ndual encoder, UR5e + 3 kg tool, 8 designed poses ({design.seconds:.2f} s), "
        "19-bit encoders, 0.5 count noise"
    )
    print(f"  {'joint':14s} {'true k':>9s} {'estimate':>10s} {'95 % interval':>24s}")
    for i, name in enumerate(joints):
        lo, hi = est.intervals_nm_rad[i]
        ok = "in" if lo <= k_true[i + 1] <= hi else "OUT"
        print(
            f"  {name:14s} {k_true[i + 1]:9.0f} {est.k_nm_rad[i]:10.0f} "
            f"[{lo:10.0f}, {hi:10.0f}] {ok}"
        )
    hits = np.zeros(len(joints))
    for _ in range(runs):
        data = simulate_dual_encoder(
            model, design.q_rad, k_true, rng.uniform(-2e-3, 2e-3, 6), noise_counts=0.5, rng=rng
        )
        est = estimate_dual_encoder(model, data, prior, joints=joints)
        lo, hi = est.intervals_nm_rad.T
        hits += (lo <= k_true[1:]) & (k_true[1:] <= hi)
    print(
        f"  per-joint coverage over {runs} runs: "
        + ", ".join(f"{100 * h / runs:.1f} %" for h in hits)
    )
    try:
        design_dual_encoder(model, 8, prior, starts=1)
    except InfeasibleRequestError as exc:  # the expected refusal, shown as it is reported
        print(f"  all six joints requested: {exc}")


def main(quick: bool = False) -> None:
    bench_design_time()
    bench_optimal_vs_random(randoms=20 if quick else 100, starts=2 if quick else 4)
    bench_coverage(trials=200 if quick else 1000)
    bench_paper_experiment()
    bench_dual_encoder(runs=50 if quick else 300)


if __name__ == "__main__":
    main()
