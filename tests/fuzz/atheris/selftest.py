"""atheris target `selftest`: breaks the property on purpose, so the runner's reports are tested.

An input starting with `raise` raises a ValueError (an exception none of our parsers may let
out), one starting with `hang` sleeps past the per-input time limit; anything else passes.
tests/fuzz/test_atheris.py seeds it with one of them and checks that the run fails, names the
exception and keeps the input as a crash file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from tests.fuzz.atheris.oracle import INPUT_LIMIT_S, Target, guarded


def _selftest(data: bytes) -> None:
    if data.startswith(b"raise"):
        raise ValueError("selftest: the property broke")
    if data.startswith(b"hang"):
        time.sleep(INPUT_LIMIT_S * 3)


def seeds() -> Iterator[bytes]:
    yield b"fine"


TARGET = Target("selftest", guarded(_selftest), seeds, doc=__doc__ or "")
