"""One identification cycle of the planar robot per package run: the cycle, the capture of a
healthy robot and of one whose joint_2 is worn (each takes seconds, so the modules share them)."""

from __future__ import annotations

import asyncio

import pytest

from agent.kinds.identification.analysis import excitation_cycle
from drivers.base import ExcitationCycle
from drivers.sim.settings import SimJointWear
from tests.support.identification.captures import controller, run_identification_cycle, sim_driver


@pytest.fixture(scope="package")
def cycle() -> ExcitationCycle:
    return excitation_cycle(controller())


@pytest.fixture(scope="package")
def healthy(cycle):
    return asyncio.run(run_identification_cycle(sim_driver(), cycle))


@pytest.fixture(scope="package")
def worn(cycle):
    wear = {"joint_2": SimJointWear(friction_scale=2.0, stiffness_scale=0.7)}
    return asyncio.run(run_identification_cycle(sim_driver(wear, seed=4), cycle))
