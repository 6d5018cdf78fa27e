"""Limits of the identification indicators (`controllers[].identification.limits:`).

Friction and stiffness differ several-fold between robots, joints and gearbox sizes, so no
absolute number can judge them; each joint is judged against its own baseline instead: the
median of its first `baseline_identifications` successful identifications (the median, so one
bad early identification does not set the baseline), or the value measured at commissioning
(`baseline: {<joint>: {...}}`), which wins when given.

Why the defaults (fractions of the baseline; where a number is a judgement, it says so):
- Friction rise, watch +30 % / alert +60 %. Wear of a strain-wave or cycloid gear raises its
  friction (lubricant degradation, pitting): Bittencourt & Axelsson (LiTH-ISY-R-3058, 2013) saw the
  friction of an industrial robot joint rise under accelerated wear, and found that temperature and
  load change friction as much as or more than moderate wear does. Limits tighter than that spread
  would alert on a cold morning; +30 % sits well above the spread of a repeated identification
  (Zollo, Lopez et al. 2014: 0.86 % mean parameter error without static friction; Madsen et al.
  2020: small relative standard deviations on the UR5e friction terms) and below the doubling of a
  dry or contaminated gear. The exact +30/+60 is a judgement, not a published limit.
- Stiffness drop, watch -15 % / alert -30 %. Flexspline or flank wear and a loosened bearing preload
  soften the joint, and the gears are what makes a robot compliant (Prod. Eng. 2023); the
  identification finds stiffness to ~1-2 % (Zollo, Lopez et al. 2014, and the daemon's own test), so
  a 15 % drop is clear of the noise while still early. A judgement, half the friction limits because
  stiffness scatters less and its loss costs path accuracy under process forces directly.
- Torque-prediction NMSE rise, watch 2x / alert 4x. The NMSE rises when the model stops describing
  the joint (a new friction shape, backlash, a bent link); Madsen et al. 2020's calibration gains
  16-28 % of NMSE over a CAD model, so a doubling means the identified model is clearly no longer
  this joint's. 2x/4x is a judgement.
- noise_sigmas 2: a change smaller than twice its standard deviation (from the WLS relative
  standard deviations and the scatter of the baseline identifications) is within the noise and
  never raises a status, whatever limit it crosses (about 2.3 % false warnings on one side).
  The same width is the smallest change an identification resolves: when it is wider than the
  step to the watch limit the indicator is "cannot judge" (NE 107 check function), never OK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class JointBaselineSettings:
    """Commissioning values of one joint (SI); the others come from its first identifications."""

    coulomb_friction_nm: float | None = field(default=None, metadata={"gt": 0.0})
    viscous_friction_nm_s_rad: float | None = field(default=None, metadata={"gt": 0.0})
    stiffness_nm_rad: float | None = field(default=None, metadata={"gt": 0.0})
    torque_nmse_nm: float | None = field(default=None, metadata={"gt": 0.0})

    def value(self, indicator: str) -> float | None:
        found = getattr(self, indicator, None)
        return found if isinstance(found, float | int) else None


@dataclass(frozen=True)
class IdentificationLimitSettings:
    """Watch and alert limits relative to each joint's baseline (see the module docstring)."""

    baseline_identifications: int = field(
        default=3,
        metadata={"ge": 1, "le": 50, "doc": "first successful ones whose median is the baseline"},
    )
    coulomb_rise_watch: float = field(default=0.30, metadata={"gt": 0.0, "le": 10.0})
    coulomb_rise_alert: float = field(default=0.60, metadata={"gt": 0.0, "le": 10.0})
    viscous_rise_watch: float = field(default=0.30, metadata={"gt": 0.0, "le": 10.0})
    viscous_rise_alert: float = field(default=0.60, metadata={"gt": 0.0, "le": 10.0})
    stiffness_drop_watch: float = field(default=0.15, metadata={"gt": 0.0, "lt": 1.0})
    stiffness_drop_alert: float = field(default=0.30, metadata={"gt": 0.0, "lt": 1.0})
    nmse_ratio_watch: float = field(default=2.0, metadata={"gt": 1.0, "le": 1000.0})
    nmse_ratio_alert: float = field(default=4.0, metadata={"gt": 1.0, "le": 1000.0})
    noise_sigmas: float = field(
        default=2.0,
        metadata={
            "ge": 0.0,
            "le": 10.0,
            "doc": "a change within this many standard deviations is not a warning",
        },
    )
    baseline: dict[str, JointBaselineSettings] = field(
        default_factory=dict, metadata={"doc": "commissioning values per robot joint"}
    )

    def check(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for stem in ("coulomb_rise", "viscous_rise", "stiffness_drop", "nmse_ratio"):
            watch, alert = getattr(self, f"{stem}_watch"), getattr(self, f"{stem}_alert")
            if not watch < alert:
                found.append(
                    (f"{stem}_alert", f"expected above {stem}_watch ({watch:g}), found {alert:g}")
                )
        return found

    def check_joints(self, robot_file: str) -> list[tuple[str, str]]:
        """Baseline joints that the robot file does not have (paths relative to the
        identification section); nothing when the file cannot be read (reported elsewhere)."""
        if not self.baseline:
            return []
        names = robot_joint_names(robot_file)
        if names is None:
            return []
        return [
            (
                f"limits.baseline.{joint}",
                f"expected a joint of {robot_file} ({', '.join(names)}), found {joint!r}",
            )
            for joint in self.baseline
            if joint not in names
        ]


# The key of the limits in an identification estimate's recorded detail, and what it holds.
LIMITS_KEY = "limits"
LIMIT_FIELDS = (
    "baseline_identifications",
    "coulomb_rise_watch",
    "coulomb_rise_alert",
    "viscous_rise_watch",
    "viscous_rise_alert",
    "stiffness_drop_watch",
    "stiffness_drop_alert",
    "nmse_ratio_watch",
    "nmse_ratio_alert",
    "noise_sigmas",
)
_BASELINE_FIELDS = (
    "coulomb_friction_nm",
    "viscous_friction_nm_s_rad",
    "stiffness_nm_rad",
    "torque_nmse_nm",
)


def limits_detail(settings: IdentificationLimitSettings, joint: str) -> dict[str, Any]:
    """The limits in force for one joint, recorded with its identification's estimates, so that
    a report made from the history alone (`jha report`, a backlash cycle's report) judges it as
    the daemon's config says (agent.health.identification.baseline.limits_from_detail)."""
    found: dict[str, Any] = {name: getattr(settings, name) for name in LIMIT_FIELDS}
    given = settings.baseline.get(joint)
    if given is not None:
        found["baseline"] = {
            name: v for name in _BASELINE_FIELDS if (v := given.value(name)) is not None
        }
    return found


def robot_joint_names(robot_file: str) -> list[str] | None:
    """The joint names of a robot description, read plainly (the full validation of the file
    happens where it is used); None when the file cannot be read as one."""
    try:
        data: Any = yaml.safe_load(Path(robot_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    joints = data.get("joints") if isinstance(data, dict) else None
    if not isinstance(joints, list):
        return None
    return [str(j["name"]) for j in joints if isinstance(j, dict) and "name" in j]
