"""`jha stiffness design` and `jha stiffness simulate`: the most informative experiments (poses
and TCP forces, or with --method dual-encoder standstill poses) and the posterior they should
give, then measurements of such a design on the simulated robot (a CSV for `estimate`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.atomic import atomic_write_text
from agent.cli.common import print_json, strict_json_text
from agent.cli.stiffness.measurements import (
    load_tcp_measurements,
    save_dual_encoder_measurements,
    save_tcp_measurements,
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
from agent.models.robot.compliance import ComplianceModel
from agent.models.robot.compliance_measurements import (
    simulate_dual_encoder,
    simulate_tcp_measurements,
)

if TYPE_CHECKING:  # the estimators load scipy: imported by the commands, not by `jha --help`
    from agent.estimation.stiffness.design_solver import StiffnessDesign
    from agent.estimation.stiffness.inference import StiffnessPrior


def register(sub: Any) -> None:
    """Add `design` and `simulate` to the `jha stiffness` command group."""
    d = sub.add_parser("design", help="optimal experiments (A-, D- or E-optimal)")
    add_common_options(d)
    add_method_options(d)
    d.add_argument("--measurements", type=int, required=True, metavar="K")
    d.add_argument("--criterion", choices=["A", "D", "E"], default="A")
    d.add_argument(
        "--force-bounds",
        type=float,
        nargs=3,
        default=(300.0, 300.0, 300.0),
        metavar=("FX", "FY", "FZ"),
        help="|F| bound per base axis, N (300 300 300)",
    )
    d.add_argument(
        "--cone-deg",
        type=float,
        default=80.0,
        help="tool cone of eq. 21 in deg (80; 0 switches it off)",
    )
    d.add_argument(
        "--target",
        type=float,
        nargs=3,
        metavar=("X", "Y", "Z"),
        help="hold the TCP at this base-frame position, m",
    )
    d.add_argument(
        "--given",
        type=Path,
        metavar="MEAS.csv",
        help="measurements already taken: design the next ones",
    )
    d.add_argument("--starts", type=int, default=4)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("-o", "--output", type=Path, metavar="DESIGN.json")
    d.set_defaults(func=_cmd_design)

    s = sub.add_parser("simulate", help="simulated measurements of a design")
    add_common_options(s, json_out=False)
    s.add_argument("design", type=Path, metavar="DESIGN.json")
    s.add_argument(
        "--k-scale", type=float, default=1.0, help="true k = this times the robot file's k (1.0)"
    )
    s.add_argument("--k-true", type=float, nargs="+", help="true k per joint, N·m/rad")
    s.add_argument("--noise-um", type=float, default=1.0)
    s.add_argument("--noise-counts", type=float, default=0.5)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--output", type=Path, required=True, metavar="MEAS.csv")
    s.set_defaults(func=_cmd_simulate)


def _cmd_design(args: argparse.Namespace) -> int:
    from agent.estimation.stiffness.design import TcpDesignSettings, design_tcp
    from agent.estimation.stiffness.design_dual import design_dual_encoder

    model = model_of(args)
    prior = prior_of(model, args)
    if args.method == "dual-encoder":
        design = design_dual_encoder(
            model,
            args.measurements,
            prior,
            criterion=args.criterion,
            joints=joints_of(args),
            noise_counts=args.noise_counts,
            starts=args.starts,
            seed=args.seed,
        )
    else:
        given_q = given_f = None
        if args.given:
            taken = load_tcp_measurements(args.given, model.n_joints)
            given_q, given_f = taken.q_rad, taken.force_n
        fmax = tuple(abs(v) for v in args.force_bounds)
        settings = TcpDesignSettings(
            measurements=args.measurements,
            criterion=args.criterion,
            force_min_n=(-fmax[0], -fmax[1], -fmax[2]),
            force_max_n=(fmax[0], fmax[1], fmax[2]),
            cone_max_deg=None if args.cone_deg <= 0 else args.cone_deg,
            target_m=None if args.target is None else tuple(args.target),
            noise_m=args.noise_um * 1e-6,
            starts=args.starts,
            seed=args.seed,
        )
        design = design_tcp(model, settings, prior, given_q=given_q, given_force=given_f)
    data = {"robot": str(args.robot), "prior": prior.to_dict(), **design.to_dict()}
    if args.output:
        atomic_write_text(args.output, strict_json_text(data))
    if args.json:
        print_json(data)
    else:
        _print_design(design, prior, model)
    return EX_OK


def _print_design(design: StiffnessDesign, prior: StiffnessPrior, model: ComplianceModel) -> None:
    given = f" after {design.given} taken" if design.given else ""
    print(
        f"{design.method} design, {design.criterion}-optimal, "
        f"{len(design.q_rad)} measurements{given}"
    )
    for i, q in enumerate(design.q_rad):
        angles = " ".join(f"{v:8.2f}" for v in np.degrees(q))
        force = ""
        if design.force_n is not None:
            force = "  F " + " ".join(f"{v:7.1f}" for v in design.force_n[i]) + " N"
        print(f"  {i + 1:2d}  q {angles} deg{force}")
    print(f"  {'joint':12s} {'prior k':>12s} {'prior sd':>10s} {'expected sd':>12s}")
    for name, sd in zip(design.joint_names, design.std_nm_rad, strict=True):
        i = model.joint_names.index(name)
        print(f"  {name:12s} {prior.mean_nm_rad[i]:12.4g} {prior.std_nm_rad[i]:10.3g} {sd:12.3g}")
    print(
        f"  criterion {design.criterion}: {design.criterion_value:.4g} "
        f"(prior {design.prior_criterion_value:.4g}); trace {np.trace(design.covariance):.4g}; "
        f"{design.feasible_starts}/{design.starts} starts feasible, {design.seconds:.2f} s"
    )
    for w in design.warnings:
        print(f"  warning: {w}")


def _cmd_simulate(args: argparse.Namespace) -> int:
    model = model_of(args)
    design = read_json(args.design)
    try:
        q = np.asarray(design["q_rad"], dtype=np.float64)
        method = design.get("method", "tcp-deviation")
        force = design.get("force_n")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CaptureError(str(args.design), f"not a design file ({exc})") from None
    k = model.nominal_stiffness() * args.k_scale
    if args.k_true:
        if len(args.k_true) != model.n_joints:
            raise EstimationError(f"--k-true needs {model.n_joints} values")
        k = np.asarray(args.k_true, dtype=np.float64)
    rng = np.random.default_rng(args.seed)
    if method == "dual-encoder":
        offsets = rng.uniform(-1e-3, 1e-3, model.n_joints)
        dual = simulate_dual_encoder(model, q, k, offsets, noise_counts=args.noise_counts, rng=rng)
        save_dual_encoder_measurements(dual, args.output)
    else:
        if force is None:
            raise CaptureError(str(args.design), "a TCP design needs force_n")
        tcp = simulate_tcp_measurements(model, q, force, k, args.noise_um * 1e-6, rng)
        save_tcp_measurements(tcp, args.output)
    print(
        f"{args.output}: {len(q)} simulated {method} measurements, k = "
        + ", ".join(f"{v:.4g}" for v in k)
        + " N·m/rad"
    )
    return EX_OK
