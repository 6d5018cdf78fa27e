"""The stacked least-squares problems of the two models (agent.estimation.identification.fit
says what each is): their design matrices, right-hand sides and equation groups, and the
stiffness that follows from the rigid fit.

`extra` adds per-joint columns where the measured torque is, in the rotor equation (elastic)
or the joint's equation (rigid), each named by its prefix (EXTRA says what they are): a
constant (`off<j>`, N·m link-side: a torque sensor's bias, or a current sensor's offset times
the torque constant), a load-dependent friction share (`mu<j>`: sgn(theta') |tau|, the
strain-wave gear's friction growing with the torque it carries) and a spring on the joint
(`ks<j>`, N·m/rad: a cable dress pack or a balancer; with the offset, k (q - q0)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.estimation.identification.least_squares import LsqSolution, Method, least_squares
from agent.estimation.identification.model import Array

DRIVE = ("Ia", "fc", "fv", "k", "off", "mu", "ks")  # per-joint parameters of the rotor equation
EXTRA = ("off", "mu", "ks")  # optional ones, in this column order
# A joint's stiffness is taken as seen when its rotor equation alone pins it to this relative
# standard deviation (%); above, the twist is lost in the encoder quantisation (fit_elastic).
STIFFNESS_SEEN_REL_STD_PCT = 5.0


@dataclass(frozen=True)
class LsqProblem:
    """The stacked equations A theta = y and the group (weight) of each row, as fitted."""

    a: Array
    y: Array
    groups: npt.NDArray[np.intp]


def names_of(prefixes: tuple[str, ...], n: int) -> list[str]:
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


def fit_elastic(
    y_b: Array,
    dec: dict[str, Array],
    slow: npt.NDArray[np.bool_],
    method: Method,
    extra: dict[str, Array] | None = None,
) -> tuple[LsqSolution, list[str], tuple[str, ...], Array, LsqProblem]:
    """Stacked link and rotor equations (Zollo, Lopez et al. 2014); groups: link j, then rotor j.

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
    extras = _ordered(extra)
    x0 = p
    p += n * len(extras)
    blocks, rhs, groups = [], [], []
    for j in range(n):
        moving = ~slow[:, j]
        rotor = np.zeros((n_d, p))
        for c, key in enumerate(("thdd", "sgn", "thd")):
            rotor[:, b + c * n + j] = dec[key][:, j]
        for i, (_, values) in enumerate(extras):
            rotor[:, x0 + i * n + j] = values[:, j]
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
    for i, j in _dropped(extras):
        pin = np.zeros((1, p))
        pin[0, x0 + i * n + j] = 1.0
        blocks.append(pin)
        rhs.append(np.zeros(1))
        groups.append(np.full(1, n + j))
    problem = LsqProblem(np.vstack(blocks), np.concatenate(rhs), np.concatenate(groups))
    sol = least_squares(problem.a, problem.y, problem.groups, method)
    names = [f"base{i + 1}" for i in range(b)] + names_of(DRIVE[:3], n)
    names += [f"k{j + 1}" for j in seen]
    names += names_of(tuple(k for k, _ in extras), n)
    group_names = (*names_of(("link",), n), *names_of(("rotor",), n))
    return sol, names, group_names, twist_rel, problem


def fit_rigid(
    y_b: Array,
    dec: dict[str, Array],
    slow: npt.NDArray[np.bool_],
    method: Method,
    extra: dict[str, Array] | None = None,
) -> tuple[LsqSolution, list[str], tuple[str, ...], LsqProblem]:
    """IDIM on the rotor-compensated torque (Madsen et al. 2020, eq. 13); groups: joints."""
    n_d, n, b = y_b.shape
    j = np.arange(n)
    extras = _ordered(extra)
    a = np.zeros((n_d, n, b + (2 + len(extras)) * n))
    a[..., :b] = y_b
    a[:, j, b + j] = dec["sgn"]
    a[:, j, b + n + j] = dec["thd"]
    for i, (_, values) in enumerate(extras):
        a[:, j, b + (2 + i) * n + j] = values
    # one row holds the rigid body and the friction: a slow joint's row goes whole
    keep = ~slow
    rows = a[keep]
    groups = np.nonzero(keep)[1]
    y = dec["tau_j"][keep]
    dropped = _dropped(extras)
    if dropped:
        pins = np.zeros((len(dropped), rows.shape[1]))
        for r, (i, jj) in enumerate(dropped):
            pins[r, b + (2 + i) * n + jj] = 1.0
        rows = np.vstack([rows, pins])
        y = np.concatenate([y, np.zeros(len(dropped))])
        groups = np.concatenate([groups, np.array([jj for _, jj in dropped], dtype=np.intp)])
    problem = LsqProblem(rows, y, groups)
    sol = least_squares(rows, problem.y, groups, method)
    names = [f"base{i + 1}" for i in range(b)] + names_of(("fc", "fv"), n)
    names += names_of(tuple(k for k, _ in extras), n)
    return sol, names, tuple(names_of(("joint",), n)), problem


def _dropped(extras: list[tuple[str, Array]]) -> list[tuple[int, int]]:
    """(extra, joint) of every extra column left all zero for a joint: a term the caller found
    not identifiable there. One row pins it to 0 (in the joint's group, with no residual), so
    the problem keeps its shape and rank and the term is exactly absent."""
    return [
        (i, j)
        for i, (_, values) in enumerate(extras)
        for j in range(values.shape[1])
        if not np.any(values[:, j])
    ]


def _ordered(extra: dict[str, Array] | None) -> list[tuple[str, Array]]:
    unknown = set(extra or {}) - set(EXTRA)
    if unknown:
        raise ValueError(f"unknown extra columns {sorted(unknown)}; expected some of {EXTRA}")
    return [(k, (extra or {})[k]) for k in EXTRA if k in (extra or {})]


def stiffness_from_link_torque(y_b: Array, pi_b: Array, delta: Array) -> tuple[Array, Array]:
    """K_j = <tau_link_j, delta_j> / <delta_j, delta_j> with tau_link the model's link torque
    (the link equation of Zollo, Lopez et al. 2014 with the inertial part fixed); its relative
    std in %. NaN for a joint whose encoders never disagree (no deflection: 0/0)."""
    tau_link = np.einsum("njp,p->nj", y_b, pi_b)
    dd = np.sum(delta * delta, axis=0)
    seen = dd > 0.0
    safe_dd = np.where(seen, dd, 1.0)
    k = np.where(seen, np.sum(tau_link * delta, axis=0) / safe_dd, np.nan)
    res = tau_link - delta * np.where(seen, k, 0.0)
    var = np.sum(res * res, axis=0) / max(delta.shape[0] - 1, 1) / safe_dd
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(seen & (k != 0.0), 100.0 * np.sqrt(var) / np.abs(k), np.nan)
    return k, rel
