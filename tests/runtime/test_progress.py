"""Progress output: one line per tenth of the work off a terminal, nothing when disabled."""

import io

from tilewright.runtime.progress import Progress


def test_pipe_gets_a_line_per_tenth_with_the_meter():
    out = io.StringIO()
    with Progress(37, "compiling", stream=out) as p:
        for k in range(37):
            p.advance(f"layer{k}")
    lines = out.getvalue().splitlines()
    tenths = {10 * (k + 1) // 37 for k in range(37)}
    assert len(lines) == len(tenths)
    assert all(line.startswith("compiling:") for line in lines)
    assert "37/37" in lines[-1] and "100%" in lines[-1] and lines[-1].endswith("layer36")


def test_disabled_progress_prints_nothing_and_still_counts():
    out = io.StringIO()
    with Progress(5, "running", stream=out, enabled=False) as p:
        for _ in range(7):
            p.advance()
    assert out.getvalue() == "" and p.done == 5
