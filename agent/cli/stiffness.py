"""`jha stiffness ...`: joint stiffness with its uncertainty (paper 003) from the command line.

  design    the most informative experiments: poses and TCP forces (or, with
            --method dual-encoder, standstill poses) and the posterior they should give
  simulate  measurements of a design on the simulated robot (a CSV for `estimate`)
  estimate  MAP stiffness, covariance, 1-alpha intervals and residuals from a CSV
  predict   TCP deviation under a force, with its uncertainty

`register(subparsers)` adds the group to the `jha` parser; every sub-command returns an exit
code, and errors are agent.errors exceptions (agent.cli.main maps them to sysexits codes). The
measurement files are CSV with unit-carrying column names (tcp_columns,
dual_encoder_columns); `#` lines are comments. Angles are radians unless --degrees is given.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agent.atomic import atomic_write_text
from agent.cli.common import (
    add_record_options,
    print_json,
    record_joint_estimates,
    recording_target,
    run_standalone,
)
from agent.errors import EX_OK, CaptureError, EstimationError
from agent.history.records import Estimate
from agent.models.robot.compliance import (
    ComplianceModel,
    DualEncoderMeasurements,
    Payload,
    TcpMeasurements,
    compliance_model,
    encoder_sigma_rad,
    predict_deviation,
    simulate_dual_encoder,
    simulate_tcp_measurements,
    with_payload,
)
from agent.models.robot.description import load_robot

if TYPE_CHECKING:  # the estimators load scipy: imported by the commands, not by `jha --help`
    from agent.estimation.stiffness.design import StiffnessDesign
    from agent.estimation.stiffness.inference import StiffnessEstimate, StiffnessPrior

Array = npt.NDArray[np.float64]


# -- measurement files -----------------------------------------------------------------------


def tcp_columns(n_joints: int) -> tuple[str, ...]:
    """Columns of a TCP measurement CSV (sigma_m optional): SI units in the names."""
    q = tuple(f"q{i + 1}_rad" for i in range(n_joints))
    return (*q, "fx_n", "fy_n", "fz_n", "dx_m", "dy_m", "dz_m")


def dual_encoder_columns(n_joints: int) -> tuple[str, ...]:
    """Link angle and motor angle / gear ratio of every joint."""
    q = tuple(f"q{i + 1}_rad" for i in range(n_joints))
    motor = tuple(f"motor{i + 1}_rad" for i in range(n_joints))
    return (*q, *motor)


def _read_csv(path: Path, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Array]:
    """Columns by header name; '#' lines are comments. Errors name file:line and column."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CaptureError(str(path), f"cannot read: {exc.strerror or exc}") from None
    rows = [(n, t.strip()) for n, t in enumerate(lines, 1) if t.strip() and not t.startswith("#")]
    if not rows:
        raise CaptureError(str(path), "empty file: expected a header row and measurements")
    head_line, head = rows[0]
    names = [c.strip() for c in head.split(",")]
    missing = [c for c in required if c not in names]
    if missing:
        raise CaptureError(
            f"{path}:{head_line}",
            f"header lacks {', '.join(missing)} (expected {', '.join(required)})",
        )
    unknown = [c for c in names if c not in required and c not in optional]
    if unknown:
        raise CaptureError(f"{path}:{head_line}", f"unknown columns {', '.join(unknown)}")
    if len(rows) == 1:
        raise CaptureError(f"{path}:{head_line}", "no measurements after the header")
    data = np.empty((len(rows) - 1, len(names)))
    for r, (line, text) in enumerate(rows[1:]):
        cells = text.split(",")
        if len(cells) != len(names):
            raise CaptureError(f"{path}:{line}", f"{len(cells)} values, header has {len(names)}")
        for c, cell in enumerate(cells):
            try:
                data[r, c] = float(cell)
            except ValueError:
                raise CaptureError(
                    f"{path}:{line}",
                    f"column {names[c]}: expected a number, found {cell.strip()!r}",
                ) from None
            if not math.isfinite(data[r, c]):
                raise CaptureError(f"{path}:{line}", f"column {names[c]}: not finite")
    return {name: data[:, c] for c, name in enumerate(names)}


def load_tcp_measurements(
    path: str | Path, n_joints: int, sigma_m: float = 1e-6
) -> TcpMeasurements:
    """A TCP measurement CSV (tcp_columns); sigma_m, when the file has no column, per axis."""
    p = Path(path)
    cols = _read_csv(p, tcp_columns(n_joints), ("sigma_m",))
    q = np.stack([cols[f"q{i + 1}_rad"] for i in range(n_joints)], axis=1)
    f = np.stack([cols[c] for c in ("fx_n", "fy_n", "fz_n")], axis=1)
    d = np.stack([cols[c] for c in ("dx_m", "dy_m", "dz_m")], axis=1)
    sig = cols.get("sigma_m", np.full(len(q), sigma_m))
    if np.any(sig <= 0):
        raise CaptureError(str(p), "sigma_m must be > 0")
    return TcpMeasurements(q, f, d, np.repeat(sig[:, None], 3, axis=1), str(p))


def save_tcp_measurements(data: TcpMeasurements, path: str | Path) -> None:
    n = data.q_rad.shape[1]
    header = ",".join((*tcp_columns(n), "sigma_m"))
    rows = np.concatenate([data.q_rad, data.force_n, data.deviation_m, data.sigma_m[:, :1]], axis=1)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rows)
    atomic_write_text(path, f"{header}\n{body}\n")


def load_dual_encoder_measurements(
    path: str | Path, model: ComplianceModel, noise_counts: float = 0.5
) -> DualEncoderMeasurements:
    """A dual-encoder CSV (dual_encoder_columns); the noise follows from the robot's encoder
    resolution and `noise_counts`."""
    p = Path(path)
    n = model.n_joints
    robot = model.robot
    if robot.encoder_counts_per_turn is None:
        raise EstimationError(f"{robot.source}: no encoder_counts_per_turn")
    cols = _read_csv(p, dual_encoder_columns(n), ())
    gear = [j.gear_ratio for j in robot.joints]
    return DualEncoderMeasurements(
        q_link_rad=np.stack([cols[f"q{i + 1}_rad"] for i in range(n)], axis=1),
        q_motor_link_rad=np.stack([cols[f"motor{i + 1}_rad"] for i in range(n)], axis=1),
        sigma_rad=encoder_sigma_rad(robot.encoder_counts_per_turn, gear, noise_counts),
        source=str(p),
    )


def save_dual_encoder_measurements(data: DualEncoderMeasurements, path: str | Path) -> None:
    n = data.q_link_rad.shape[1]
    rows = np.concatenate([data.q_link_rad, data.q_motor_link_rad], axis=1)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rows)
    atomic_write_text(path, ",".join(dual_encoder_columns(n)) + f"\n{body}\n")


# -- the commands --------------------------------------------------------------------------------


def _model(args: argparse.Namespace) -> ComplianceModel:
    robot = load_robot(args.robot)
    mass = getattr(args, "payload_kg", None)
    if mass:
        com = args.payload_com or (0.0, 0.0, 0.0)
        robot = with_payload(robot, Payload(mass, (com[0], com[1], com[2])))
    return compliance_model(robot)


def _prior(model: ComplianceModel, args: argparse.Namespace) -> StiffnessPrior:
    from agent.estimation.stiffness.inference import prior_from_robot

    return prior_from_robot(model, args.prior_rel_std)


def _joints(args: argparse.Namespace) -> tuple[str, ...] | None:
    return tuple(args.joints) if getattr(args, "joints", None) else None


def _cmd_design(args: argparse.Namespace) -> int:
    from agent.estimation.stiffness.design import (
        TcpDesignSettings,
        design_dual_encoder,
        design_tcp,
    )

    model = _model(args)
    prior = _prior(model, args)
    if args.method == "dual-encoder":
        design = design_dual_encoder(
            model,
            args.measurements,
            prior,
            criterion=args.criterion,
            joints=_joints(args),
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
        atomic_write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.json:
        print_json(data, allow_nan=True)
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
    model = _model(args)
    design = _read_json(args.design)
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


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CaptureError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise CaptureError(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise CaptureError(str(path), "expected a JSON object")
    return data


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
            "interval": [float(lo), float(hi)],
            "confidence": 1.0 - est.alpha,
            "method": est.method,
            "source": source,
            "converged": est.converged,
        }
        recorded[name] = [Estimate("stiffness_nm_rad", float(est.k_nm_rad[i]), "N·m/rad", detail)]
    return recorded, skipped


def _cmd_estimate(args: argparse.Namespace) -> int:
    from agent.estimation.stiffness.inference import estimate_dual_encoder, estimate_stiffness

    target = recording_target(args)  # a bad config or controller fails before the fit
    started = datetime.now(UTC)
    model = _model(args)
    prior = _prior(model, args)
    if args.method == "dual-encoder":
        dual = load_dual_encoder_measurements(args.file, model, args.noise_counts)
        est = estimate_dual_encoder(model, dual, prior, joints=_joints(args), alpha=args.alpha)
    else:
        tcp = load_tcp_measurements(args.file, model.n_joints, args.noise_um * 1e-6)
        est = estimate_stiffness(model, tcp, prior, alpha=args.alpha)
    data = {"robot": str(args.robot), "measurements": str(args.file), **est.to_dict()}
    if args.output:
        atomic_write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.json:
        print_json(data, allow_nan=True)
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
    model = _model(args)
    n = model.n_joints
    if len(args.q) != n:
        raise EstimationError(f"--q needs {n} joint angles ({', '.join(model.joint_names)})")
    q = np.radians(args.q) if args.degrees else np.asarray(args.q, dtype=np.float64)
    if args.estimate:
        est = _read_json(args.estimate)
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
        prior = _prior(model, args)
        k, cov, origin = prior.mean_nm_rad, prior.covariance, prior.origin
    pred = predict_deviation(model, q, args.force, k, cov)
    data = {"robot": str(args.robot), "stiffness_from": origin, **pred.to_dict()}
    if args.json:
        print_json(data, allow_nan=True)
    else:
        dev, sd = pred.deviation_m[0] * 1e6, pred.std_m[0] * 1e6
        axes = "  ".join(f"{a} {d:9.2f} +- {s:.2f}" for a, d, s in zip("xyz", dev, sd, strict=True))
        print(f"TCP deviation (um, 1 sd from {origin}):")
        print(f"  {axes}")
        print("  joint torques N·m: " + ", ".join(f"{v:.4g}" for v in pred.joint_torque_nm[0]))
    return EX_OK


def register(subparsers: Any) -> None:
    """Add `stiffness design|simulate|estimate|predict` to an argparse subparsers object."""
    top = subparsers.add_parser("stiffness", help="joint stiffness and its uncertainty (paper 003)")
    sub = top.add_subparsers(dest="stiffness_command", required=True)

    def common(p: argparse.ArgumentParser, *, json_out: bool = True) -> None:
        p.add_argument("--robot", type=Path, required=True, help="robot file (config/robots)")
        p.add_argument(
            "--prior-rel-std",
            type=float,
            default=0.5,
            metavar="R",
            help="prior sd of k as a fraction of the robot file's value (0.5)",
        )
        p.add_argument("--payload-kg", type=float, help="payload on the flange (dual encoder)")
        p.add_argument(
            "--payload-com",
            type=float,
            nargs=3,
            metavar=("X", "Y", "Z"),
            help="payload centre of mass in the last DH frame, m",
        )
        if json_out:
            p.add_argument("--json", action="store_true")

    def method(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", choices=["tcp", "dual-encoder"], default="tcp")
        p.add_argument(
            "--joints",
            nargs="+",
            metavar="NAME",
            help="dual encoder: the joints to estimate (default all)",
        )
        p.add_argument(
            "--noise-um", type=float, default=1.0, help="laser sensor sd in um (paper 003: 1)"
        )
        p.add_argument(
            "--noise-counts",
            type=float,
            default=0.5,
            help="dual encoder: count noise sd of each encoder",
        )

    d = sub.add_parser("design", help="optimal experiments (A-, D- or E-optimal)")
    common(d)
    method(d)
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
    common(s, json_out=False)
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

    e = sub.add_parser("estimate", help="MAP stiffness with covariance and intervals")
    common(e)
    method(e)
    e.add_argument("file", type=Path, metavar="MEAS.csv")
    e.add_argument("--alpha", type=float, default=0.05, help="1 - confidence (0.05)")
    e.add_argument("-o", "--output", type=Path, metavar="ESTIMATE.json")
    add_record_options(e)
    e.set_defaults(func=_cmd_estimate)

    p = sub.add_parser("predict", help="TCP deviation under a force, with its uncertainty")
    common(p)
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


if __name__ == "__main__":  # pragma: no cover - stand-alone use
    run_standalone(register)
