"""`jha stiffness estimate` and `jha stiffness predict`: the MAP stiffness with its covariance,
1-alpha intervals and residuals from a measurement CSV (recorded in the history with --record),
and the TCP deviation under a force with its uncertainty."""

from __future__ import annotations

import argparse
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.atomic import atomic_write_text
from agent.cli.common import (
    add_record_options,
    print_json,
    record_joint_estimates,
    recording_target,
    strict_json_text,
)
from agent.cli.stiffness.measurements import (
    load_dual_encoder_measurements,
    load_tcp_measurements,
)
from agent.cli.stiffness.options import (
    add_common_options,
    add_method_options,
    joints_of,
    model_of,
    prior_of,
    read_json,
)
from agent.errors import EX_OK, CaptureError, EstimationError
from agent.history.records import Estimate
from agent.models.robot.compliance import predict_deviation

if TYPE_CHECKING:  # the estimators load scipy: imported by the commands, not by `jha --help`
    from agent.estimation.stiffness.inference import StiffnessEstimate


def register(sub: Any) -> None:
    """Add `estimate` and `predict` to the `jha stiffness` command group."""
    e = sub.add_parser("estimate", help="MAP stiffness with covariance and intervals")
    add_common_options(e)
    add_method_options(e)
    e.add_argument("file", type=Path, metavar="MEAS.csv")
    e.add_argument("--alpha", type=float, default=0.05, help="1 - confidence (0.05)")
    tol = e.add_argument_group(
        "tolerances (tcp method)",
        "what the paper's model leaves out, marginalised as nuisance parameters so that the "
        "intervals hold under them (default 0: the paper's estimator, exact model assumed)",
    )
    tol.add_argument(
        "--link-tilt-ratio",
        type=float,
        default=0.0,
        metavar="R",
        help="links and bearings tilt: mean and sd of each link's tilt compliance as a "
        "fraction of its joint's 1/k (e.g. 0.06)",
    )
    tol.add_argument("--geometry-sd-mm", type=float, default=0.0, help="DH lengths, tool offset")
    tol.add_argument("--geometry-sd-deg", type=float, default=0.0, help="DH alpha, theta offset")
    tol.add_argument(
        "--laser-rotation-sd-mrad", type=float, default=0.0, help="laser frame vs base frame"
    )
    tol.add_argument(
        "--force-scale-sd-percent", type=float, default=0.0, help="force sensor scale error"
    )
    e.add_argument("-o", "--output", type=Path, metavar="ESTIMATE.json")
    add_record_options(e)
    e.set_defaults(func=_cmd_estimate)

    p = sub.add_parser("predict", help="TCP deviation under a force, with its uncertainty")
    add_common_options(p)
    p.add_argument("--q", type=float, nargs="+", required=True, help="joint angles")
    p.add_argument("--degrees", action="store_true", help="--q in degrees")
    p.add_argument("--force", type=float, nargs=3, required=True, metavar=("FX", "FY", "FZ"))
    p.add_argument(
        "--estimate",
        type=Path,
        metavar="ESTIMATE.json",
        help="k and covariance from `estimate --json`/-o (default: the prior)",
    )
    p.set_defaults(func=_cmd_predict)


def stiffness_estimates(
    est: StiffnessEstimate, source: str
) -> tuple[dict[str, list[Estimate]], dict[str, str]]:
    """History records of an estimate: stiffness_nm_rad per identified joint (sd and interval
    in the detail), and the joints the data did not inform with the reason they are left out
    (their value is the prior's: recording it would fake a trend)."""
    recorded: dict[str, list[Estimate]] = {}
    skipped: dict[str, str] = {}
    for i, name in enumerate(est.joint_names):
        if name in est.unidentified:
            skipped[name] = f"{est.method}: stiffness not determined by the data (prior only)"
            continue
        lo, hi = est.intervals_nm_rad[i]
        detail = {
            "std": float(est.std_nm_rad[i]),
            # an infinite upper end (1/k = 0, a rigid joint, is inside) is stored as null
            "interval": [float(lo), float(hi) if math.isfinite(hi) else None],
            "confidence": 1.0 - est.alpha,
            "method": est.method,
            "source": source,
            "converged": est.converged,
        }
        recorded[name] = [Estimate("stiffness_nm_rad", float(est.k_nm_rad[i]), "N·m/rad", detail)]
    return recorded, skipped


def _cmd_estimate(args: argparse.Namespace) -> int:
    from agent.estimation.stiffness.inference import estimate_dual_encoder, estimate_stiffness
    from agent.estimation.stiffness.tcp_errors import TcpErrorPrior

    model = model_of(args)
    # a bad config, controller or joint mismatch fails before the fit
    target = recording_target(args, model.joint_names)
    started = datetime.now(UTC)
    prior = prior_of(model, args)
    if args.method == "dual-encoder":
        dual = load_dual_encoder_measurements(args.file, model, args.noise_counts)
        est = estimate_dual_encoder(model, dual, prior, joints=joints_of(args), alpha=args.alpha)
    else:
        tcp = load_tcp_measurements(args.file, model.n_joints, args.noise_um * 1e-6)
        errors = TcpErrorPrior(
            link_tilt_ratio=args.link_tilt_ratio,
            length_sd_m=args.geometry_sd_mm * 1e-3,
            angle_sd_rad=math.radians(args.geometry_sd_deg),
            laser_rotation_sd_rad=args.laser_rotation_sd_mrad * 1e-3,
            force_scale_sd=args.force_scale_sd_percent * 1e-2,
        )
        est = estimate_stiffness(model, tcp, prior, alpha=args.alpha, errors=errors)
    data = {"robot": str(args.robot), "measurements": str(args.file), **est.to_dict()}
    if args.output:
        atomic_write_text(args.output, strict_json_text(data))
    if args.json:
        print_json(data)
    else:
        _print_estimate(est)
    if target is not None:
        recorded, skipped = stiffness_estimates(est, str(args.file))
        record_joint_estimates(target[0], target[1], "stiffness", recorded, started, skipped)
        # stderr: --json output on stdout stays one JSON document
        print(
            f"recorded stiffness of {len(recorded)} joints in {target[0]} (controller {target[1]})",
            file=sys.stderr,
        )
    return EX_OK


def _print_estimate(est: StiffnessEstimate) -> None:
    conf = f"{100 * (1 - est.alpha):g} %"
    print(f"{est.method} estimate (MAP, linearised posterior), {conf} intervals")
    print(f"  {'joint':12s} {'k N·m/rad':>12s} {'sd':>10s} {'interval':>27s} {'prior':>10s}")
    for i, name in enumerate(est.joint_names):
        lo, hi = est.intervals_nm_rad[i]
        flag = "  (prior only)" if name in est.unidentified else ""
        print(
            f"  {name:12s} {est.k_nm_rad[i]:12.5g} {est.std_nm_rad[i]:10.3g} "
            f"[{lo:12.5g}, {hi:12.5g}] {est.prior.mean_nm_rad[i]:10.4g}{flag}"
        )
    print(
        f"  residual rms {est.residual_rms:.3g}, chi2/dof {est.chi2_per_dof:.3g}, "
        f"{est.iterations} iterations{'' if est.converged else ' (not converged)'}"
    )
    for w in est.warnings:
        print(f"  warning: {w}")


def _cmd_predict(args: argparse.Namespace) -> int:
    model = model_of(args)
    n = model.n_joints
    if len(args.q) != n:
        raise EstimationError(f"--q needs {n} joint angles ({', '.join(model.joint_names)})")
    q = np.radians(args.q) if args.degrees else np.asarray(args.q, dtype=np.float64)
    if args.estimate:
        est = read_json(args.estimate)
        try:
            k = np.asarray(est["k_nm_rad"], dtype=np.float64)
            cov = np.asarray(est["covariance"], dtype=np.float64)
            names = tuple(est["joint_names"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CaptureError(str(args.estimate), f"not an estimate file ({exc})") from None
        if names != model.joint_names or k.shape != (n,) or cov.shape != (n, n):
            raise CaptureError(
                str(args.estimate),
                f"estimates joints {', '.join(names)}; {args.robot} has "
                f"{', '.join(model.joint_names)}",
            )
        origin = str(args.estimate)
    else:
        prior = prior_of(model, args)
        k, cov, origin = prior.mean_nm_rad, prior.covariance, prior.origin
    pred = predict_deviation(model, q, args.force, k, cov)
    data = {"robot": str(args.robot), "stiffness_from": origin, **pred.to_dict()}
    if args.json:
        print_json(data)
    else:
        dev, sd = pred.deviation_m[0] * 1e6, pred.std_m[0] * 1e6
        axes = "  ".join(f"{a} {d:9.2f} +- {s:.2f}" for a, d, s in zip("xyz", dev, sd, strict=True))
        print(f"TCP deviation (um, 1 sd from {origin}):")
        print(f"  {axes}")
        print("  joint torques N·m: " + ", ".join(f"{v:.4g}" for v in pred.joint_torque_nm[0]))
    return EX_OK
