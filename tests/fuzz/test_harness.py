"""The fuzz harness and the summary registry: counting, judging, time limits, the table."""

from __future__ import annotations

from tests.support import summary


def test_render_aligns_sections_in_order() -> None:
    with summary.isolated():
        summary.security("socket 0600", True)
        tally = summary.counted("fuzzing", "config")
        tally.case(3)
        summary.counted("fuzzing", "config").case()
        summary.fault("kill -9 in write", 0)
        lines = summary.render()
        assert lines[0] == "fuzzing:"
        assert lines.index("faults:") < lines.index("security:")
        row = next(line for line in lines if line.strip().startswith("config"))
        assert row.split() == ["config", "4", "0"]
        assert any(line.split() == ["socket", "0600", "yes"] for line in lines)
    assert "kill -9 in write" not in " ".join(summary.render())


def test_oracle_counts_cases_and_judges_errors() -> None:
    import time

    import pytest

    from agent.errors import ConfigError
    from tests.fuzz.harness import CrashFound, Hang, Oracle, time_limit

    with summary.isolated():
        oracle = Oracle("demo", expected=(ConfigError,), place=lambda e: "x.yaml:3" in str(e))

        def bad(kind: str) -> None:
            if kind == "typed":
                raise ConfigError("x.yaml:3: wrong")
            if kind == "placeless":
                raise ConfigError("wrong")
            raise KeyError(kind)

        assert oracle.call(bad, "typed") is None
        with pytest.raises(CrashFound, match="without a place"):
            oracle.call(bad, "placeless")
        with pytest.raises(CrashFound, match="KeyError"):
            oracle.call(bad, "other")
        assert (oracle.cases, oracle.tally.crashes) == (3, 2)
        with pytest.raises(AssertionError):
            oracle.assert_done(1)

        known = Oracle("demo2", expected=(), known={"bug X": lambda d: d.startswith("KeyError")})
        assert known.call(bad, "other") is None  # a reported bug: counted apart, not a crash
        assert known.tally.crashes == 0
        assert ["bug", "X", "1", "1"] in [line.split() for line in summary.render()]

        with pytest.raises(Hang), time_limit(0.05):
            time.sleep(1.0)
