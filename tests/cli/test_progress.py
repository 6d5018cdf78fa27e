"""Terminal progress of long commands (issue 16: `jha simulate identification` ran 65 s silent)."""

from __future__ import annotations

import io

from agent.cli.progress import Steps


def test_steps_on_a_terminal_rewrite_one_line_with_the_time_and_an_eta() -> None:
    out = io.StringIO()
    steps = Steps(3, out, tty=True)
    steps.step("designing the excitation")
    steps.step("simulating", share_done=0.5)
    steps.done()
    text = out.getvalue()
    frames = text.split("\r")[1:]
    assert frames[0].startswith("[1/3 ") and frames[0].rstrip().endswith(
        "designing the excitation..."
    )
    assert frames[1].startswith("[2/3 ") and "s left] simulating..." in frames[1]
    assert frames[2].startswith("[3/3 ") and frames[2].rstrip(" \n").endswith("done")
    assert text.endswith("\n")
    # a shorter line after a longer one is padded over, so no stale characters stay
    assert len(frames[1]) >= len("[1/3 0.0 s] designing the excitation...")


def test_steps_off_a_terminal_write_nothing() -> None:
    out = io.StringIO()  # a pipe, a file, the journal
    steps = Steps(2, out)
    steps.step("a")
    steps.done()
    assert out.getvalue() == ""
