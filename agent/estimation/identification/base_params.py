"""Base parameters of a serial robot (Zollo, Lopez et al. 2014, section 5; Madsen et al. 2020,
section 3).

Not every standard parameter moves the joint torques: some never do (unidentifiable), some do
only together with others (identifiable in combination), the rest do on their own
(identifiable). The reduction is numeric: stack the regressor over random states, find its
rank by QR with column pivoting, then pick the base columns by QR in a fixed order of
preference, so that the base parameters are the textbook regrouped ones (ZZ1R = ZZ1 + Ia1 +
..., the mass and first moment along z of a link regrouped into the link before it) rather
than whatever the pivoting happened to prefer. Every dependent column is written as a linear
combination of base columns: W_dep = W_base @ beta, hence

    torques = W @ pi = W_base @ (pi_base_cols + beta @ pi_dep_cols) = W_base @ (K @ pi).

Which rotor inertias are identifiable depends on the rotor model. With the one of Madsen et al. 2020
(assumption iii: a rotor only spins, adding Ia_j * qdd_j to joint j alone), Ia1 always merges
with the inertia of link 1 about axis 1, and Ia2 with that of link 2 about axis 2 whenever
axis 2 is perpendicular to axis 1 (UR5e, PUMA 560): hence 36 -> 40 base parameters on the UR5e
with rotors, not 42. Coulomb and viscous friction add 2 per joint (52/54).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.linalg

from agent.errors import EstimationError
from agent.models.robot.description import RobotDescription
from agent.models.robot.regressor import ParameterLayout, regressor

Array = npt.NDArray[np.float64]


class ParamClass(StrEnum):
    """What the data can say about one parameter: its value on its own, only a combination of
    it with others, or nothing (its column is zero)."""

    IDENTIFIABLE = "identifiable"
    COMBINATION = "combination"
    UNIDENTIFIABLE = "unidentifiable"


# Kept first when several columns could represent a group: the parameters Khalil's regrouping
# rules keep (XX, XY, XZ, YZ, ZZ, MX, MY of each link, then rotor and friction); YY, MZ and M
# come last, so they are the ones folded into the others.
_PREFERRED_FIRST = ("xx", "xy", "xz", "yz", "zz", "mx", "my", "Ia", "fc", "fv")
_PREFERRED_LAST = ("yy", "mz", "m")

# A column of the normalised regressor whose remainder (after projecting out the columns kept
# before it) is below this is a combination of them. Structural dependencies leave ~1e-15;
# genuinely independent columns on random states stay above ~1e-4.
DEFAULT_RTOL = 1e-8


@dataclass(frozen=True)
class BaseParameters:
    """The base-parameter reduction of one parameter layout.

    matrix (b, P):  pi_base = matrix @ pi          (the regrouping, one row per base parameter)
    inverse (P, b): pi = inverse @ pi_base gives a standard vector with the same torques
                    (the base columns' own parameters, every other parameter zero);
                    matrix @ inverse = identity and W @ inverse = W[:, base_columns].
    """

    names: tuple[str, ...]
    classes: tuple[ParamClass, ...]
    base_columns: tuple[int, ...]
    matrix: Array
    inverse: Array
    rank_gap: tuple[float, float] = field(metadata={"doc": "smallest kept, largest dropped"})
    n_rows: int

    def __post_init__(self) -> None:
        for a in (self.matrix, self.inverse):
            a.setflags(write=False)

    @property
    def count(self) -> int:
        return len(self.base_columns)

    @property
    def base_names(self) -> tuple[str, ...]:
        """Name of each base parameter: its representative, with R when others are folded in."""
        out = []
        for row, col in enumerate(self.base_columns):
            grouped = np.count_nonzero(self.matrix[row]) > 1
            out.append(self.names[col] + ("R" if grouped else ""))
        return tuple(out)

    def of_class(self, cls: ParamClass) -> tuple[str, ...]:
        return tuple(n for n, c in zip(self.names, self.classes, strict=True) if c == cls)

    def reduce(self, y: Array) -> Array:
        """The base regressor: columns of the base parameters of a (..., P) regressor."""
        return np.asarray(y)[..., list(self.base_columns)]

    def to_base(self, pi: npt.ArrayLike) -> Array:
        return self.matrix @ np.asarray(pi, dtype=np.float64)

    def to_standard(self, pi_base: npt.ArrayLike) -> Array:
        return self.inverse @ np.asarray(pi_base, dtype=np.float64)

    def combinations(self, digits: int = 6) -> tuple[str, ...]:
        """Each base parameter as the linear combination it stands for, e.g.
        `zz1R = zz1 + Ia1 + 0.18*m2`."""
        lines = []
        for name, row in zip(self.base_names, self.matrix, strict=True):
            terms = []
            for col in np.flatnonzero(row):
                coef = float(row[col])
                pname = self.names[col]
                if abs(coef - 1.0) < 10.0 ** (-digits):
                    terms.append(f"+ {pname}")
                elif abs(coef + 1.0) < 10.0 ** (-digits):
                    terms.append(f"- {pname}")
                else:
                    sign = "-" if coef < 0 else "+"
                    terms.append(f"{sign} {abs(coef):.{digits}g}*{pname}")
            text = " ".join(terms)
            lines.append(f"{name} = {text.removeprefix('+ ')}")
        return tuple(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "names": list(self.names),
            "classes": dict(zip(self.names, self.classes, strict=True)),
            "base_names": list(self.base_names),
            "base_columns": list(self.base_columns),
            "combinations": list(self.combinations()),
            "matrix": self.matrix.tolist(),
            "rank_gap": list(self.rank_gap),
            "n_rows": self.n_rows,
        }


def preference_order(
    names: Sequence[str], axis_along_y: Sequence[bool] | None = None, link_major: bool = True
) -> list[int]:
    """Column indices in the order the base columns are chosen (see _PREFERRED_FIRST).

    axis_along_y[j] says that joint j+1 turns about the y axis of the frame its link's
    parameters are written in (standard DH with alpha = +-90 degrees): there y plays the
    part z plays in Khalil's rules, so the stems are renamed before ranking.
    """
    swap = {"yy": "zz", "zz": "yy", "my": "mz", "mz": "my", "xy": "xz", "xz": "xy"}

    def key(idx: int) -> tuple[int, int, int]:
        stem = names[idx].rstrip("0123456789")
        link = int(names[idx][len(stem) :] or 0)
        if axis_along_y is not None and 0 < link <= len(axis_along_y) and axis_along_y[link - 1]:
            stem = swap.get(stem, stem)
        if stem in _PREFERRED_FIRST:
            rank = (0, _PREFERRED_FIRST.index(stem))
        elif stem in _PREFERRED_LAST:
            rank = (1, _PREFERRED_LAST.index(stem))
        else:
            rank = (2, idx)
        return (link, *rank) if link_major else (*rank, link)

    return sorted(range(len(names)), key=key)


def reduce_regressor(
    w: npt.ArrayLike,
    names: Sequence[str],
    *,
    order: Sequence[int] | None = None,
    rtol: float = DEFAULT_RTOL,
) -> BaseParameters:
    """Base parameters of a stacked regressor W (rows, P) whose columns are `names`."""
    w_ = np.asarray(w, dtype=np.float64)
    if w_.ndim != 2 or w_.shape[1] != len(names):
        raise EstimationError(f"regressor has shape {w_.shape}, expected (rows, {len(names)})")
    n_p = w_.shape[1]
    if w_.shape[0] < n_p:
        raise EstimationError(f"{w_.shape[0]} rows cannot reveal the rank of {n_p} columns")
    norms = np.linalg.norm(w_, axis=0)
    zero = norms <= 1e-12 * max(float(norms.max()), 1e-300)
    wn = w_ / np.where(zero, 1.0, norms)
    wn[:, zero] = 0.0

    # rank: QR with column pivoting (rank revealing)
    r_piv = scipy.linalg.qr(wn[:, ~zero], mode="r", pivoting=True)[0]
    diag = np.abs(np.diag(r_piv))
    rank = int(np.count_nonzero(diag > rtol * diag[0])) if diag.size else 0

    # which columns: QR in the order of preference; a column's |R_jj| is what is left of it
    # after the columns before it are projected out
    pref = list(order) if order is not None else preference_order(names)
    if sorted(pref) != list(range(n_p)):
        raise EstimationError("order must be a permutation of the columns")
    r_ord = scipy.linalg.qr(wn[:, pref], mode="r")[0]
    rdiag = np.abs(np.diag(r_ord))
    kept = [pref[k] for k in range(n_p) if rdiag[k] > rtol and not zero[pref[k]]]
    kept_set = set(kept)
    dropped = [c for c in pref if c not in kept_set]
    if len(kept) != rank:
        raise EstimationError(
            f"numerical rank is ambiguous: pivoted QR finds {rank}, ordered QR keeps {len(kept)}"
            f" (rtol {rtol:g}); excite more or change rtol"
        )
    smallest_kept = float(min((rdiag[k] for k in range(n_p) if pref[k] in kept_set), default=0.0))
    largest_dropped = float(
        max((rdiag[k] for k in range(n_p) if pref[k] not in kept_set), default=0.0)
    )

    base_cols = sorted(kept)
    dep_cols = sorted(dropped)
    beta = np.zeros((len(base_cols), len(dep_cols)))
    if dep_cols:
        beta = np.asarray(np.linalg.lstsq(w_[:, base_cols], w_[:, dep_cols], rcond=None)[0])
        # A column that is zero in theory (e.g. a first moment of a link whose twist is
        # +-pi/2) carries only rounding noise, which no base column explains: it is left out
        # of the check. The others are judged against their own size, or the regressor's
        # where that is larger, so a tiny column's noise is not taken for structure.
        live = [i for i, c in enumerate(dep_cols) if not zero[c]]
        if live:
            cols = [dep_cols[i] for i in live]
            resid = w_[:, cols] - w_[:, base_cols] @ beta[:, live]
            scale = np.maximum(norms[cols], 1e-9 * float(norms.max()))
            worst = float(np.max(np.linalg.norm(resid, axis=0) / scale))
            if worst > 1e-6:
                at = names[cols[int(np.argmax(np.linalg.norm(resid, axis=0) / scale))]]
                msg = (
                    f"dropped columns are not combinations of the base (residual {worst:.2g} "
                    f"in column {at})"
                )
                raise EstimationError(msg)
        # coefficients that only carry rounding noise become exact zeros
        size = beta * norms[base_cols][:, None] / np.maximum(norms[dep_cols], 1e-300)[None, :]
        beta[np.abs(size) < 1e-9] = 0.0
        beta[:, zero[dep_cols]] = 0.0

    matrix = np.zeros((len(base_cols), n_p))
    matrix[np.arange(len(base_cols)), base_cols] = 1.0
    matrix[:, dep_cols] = beta
    inverse = np.zeros((n_p, len(base_cols)))
    inverse[base_cols, np.arange(len(base_cols))] = 1.0

    classes: list[ParamClass] = []
    for col in range(n_p):
        if zero[col]:
            classes.append(ParamClass.UNIDENTIFIABLE)
        elif col in kept_set:
            row = base_cols.index(col)
            classes.append(
                ParamClass.COMBINATION if np.any(beta[row] != 0.0) else ParamClass.IDENTIFIABLE
            )
        else:
            classes.append(ParamClass.COMBINATION)
    return BaseParameters(
        names=tuple(names),
        classes=tuple(classes),
        base_columns=tuple(base_cols),
        matrix=matrix,
        inverse=inverse,
        rank_gap=(smallest_kept, largest_dropped),
        n_rows=int(w_.shape[0]),
    )


def random_states(
    robot: RobotDescription, n_samples: int, seed: int = 0
) -> tuple[Array, Array, Array]:
    """Random (q, qd, qdd): identifiability is structural, so any generic states reveal it."""
    rng = np.random.default_rng(seed)
    n = robot.n_joints
    q = rng.uniform(-np.pi, np.pi, (n_samples, n))
    return q, rng.normal(size=(n_samples, n)), rng.normal(size=(n_samples, n))


def base_parameters(
    robot: RobotDescription,
    *,
    rotor: bool = False,
    friction: bool = False,
    gravity_m_s2: npt.ArrayLike | None = None,
    n_samples: int | None = None,
    seed: int = 0,
    rtol: float = DEFAULT_RTOL,
) -> BaseParameters:
    """Base parameters of `robot` for the layout (rotor, friction), gravity as mounted."""
    layout = ParameterLayout(robot.n_joints, rotor=rotor, friction=friction)
    samples = n_samples if n_samples is not None else max(50, 4 * layout.size // robot.n_joints)
    q, qd, qdd = random_states(robot, samples, seed)
    y = regressor(robot, q, qd, qdd, rotor=rotor, friction=friction, gravity_m_s2=gravity_m_s2)
    order = preference_order(layout.names, joint_axis_along_y(robot))
    return reduce_regressor(y.reshape(-1, layout.size), layout.names, order=order, rtol=rtol)


def joint_axis_along_y(robot: RobotDescription) -> list[bool]:
    """Per link: does its joint turn about the y axis of the frame its parameters are in?

    Standard DH writes link i in frame i, where the axis of joint i, z_{i-1}, is
    (0, sin alpha_i, cos alpha_i); modified DH writes it in the joint's own frame (z).
    """
    if robot.convention == "modified":
        return [False] * robot.n_joints
    return [abs(np.sin(j.alpha_rad)) > abs(np.cos(j.alpha_rad)) for j in robot.joints]
