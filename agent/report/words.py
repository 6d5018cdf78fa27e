"""Identification verdicts in words for the report page: "viscous friction rose 40 % (0.12 ->
0.17 N·m·s/rad)", never a field name like `viscous_friction_nm_s_rad`.

The verdicts themselves are agent.health.identification's (the daemon's rule); this module only
says them. A planner reads what changed and by how much first, the limit it is held to second.
"""

from __future__ import annotations

from agent.health.display import indicator_info
from agent.health.identification.baseline import LimitKind
from agent.health.identification.indicator import IndicatorVerdict
from agent.health.identification.joint import JointIdentificationVerdict
from agent.health.status import Status


def _number(indicator: str, value: float) -> str:
    info = indicator_info(indicator)
    return f"{value * info.scale:.3g}"


def change_words(w: IndicatorVerdict) -> str:
    """What the indicator did against its baseline: 'viscous friction rose 40 % (0.12 -> 0.17
    N·m·s/rad)', 'stiffness fell 20 % (18 -> 14.4 kN·m/rad)', 'torque-prediction NMSE x2.5
    (...)'; without a baseline, the value alone."""
    info = indicator_info(w.indicator)
    if w.value is None:
        return f"{info.label}: no valid value"
    if w.baseline is None or w.change is None:
        return f"{info.label} {info.format(w.value, 4)}"
    span = (
        f"({_number(w.indicator, w.baseline.value)} -> {_number(w.indicator, w.value)} "
        f"{info.display_unit})"
    )
    if w.limits.kind == LimitKind.RATIO:
        return f"{info.label} x{w.change + 1.0:.3g} of its baseline {span}"
    pct = abs(100.0 * w.change)
    if pct < 0.05:
        return f"{info.label} unchanged {span}"
    moved = "rose" if w.change > 0 else "fell"
    return f"{info.label} {moved} {pct:.2g} % {span}"


def verdict_words(w: IndicatorVerdict) -> str:
    """One indicator's verdict: the change in words, then the limit or why there is none."""
    if w.failure is not None:
        return f"{indicator_info(w.indicator).label}: identification failed: {w.failure}"
    said = change_words(w)
    if w.value is None:
        return said
    if w.baseline is None:
        if w.no_baseline is not None:
            return f"{said}: {w.no_baseline}"
        return f"{said}: baseline being set ({w.n_points} of {w.needed} identifications)"
    if w.change is None:  # a baseline that is not positive: no relative limit applies
        return f"{said}: baseline {w.baseline.describe()} is not positive, so not judged"
    if w.cannot_judge is not None:
        return f"{said}: {w.cannot_judge}"
    base = f"against the {w.baseline.describe()}"
    if w.status is Status.ALERT:
        return f"{said}, past the alert limit {w.limits.text(w.limits.alert)} {base}"
    if w.status is Status.WATCH:
        return f"{said}, past the watch limit {w.limits.text(w.limits.watch)} {base}"
    beyond = w.limits.crossed(w.value, w.watch) if w.watch is not None else False
    if beyond and not w.significant:
        return f"{said}: past the watch limit but within the measurement noise, no warning"
    return f"{said}: within the watch limit {w.limits.text(w.limits.watch)} {base}"


def joint_words(v: JointIdentificationVerdict) -> str:
    """A joint's identification verdict in one line: what is wrong, else that nothing is."""
    failed = next((w for w in v.indicators if w.failure is not None), None)
    if failed is not None:
        return f"identification failed: {failed.failure}"
    bad = [w for w in v.indicators if w.status is not Status.OK]
    if not bad:
        return "every identification indicator within its limits"
    bad.sort(key=lambda w: -w.status.severity)
    return "; ".join(verdict_words(w) for w in bad)
