"""The sweep's progress display: tqdm's bar on a terminal, plain lines elsewhere."""

import io

from pipeline.sweep.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_plain_lines_with_the_time_left_at_every_tenth():
    out = io.StringIO()
    progress = Progress(200, out)
    for _ in range(100):
        progress.advance(2)
    progress.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 10  # one per tenth of the jobs, not one per batch
    assert lines[0].startswith("jobs: 20/200 (10%), 00:00 elapsed, ETA ")
    assert lines[-1].startswith("jobs: 200/200 (100%)")


def test_a_terminal_gets_a_bar_with_rate_and_eta():
    out = Terminal()
    progress = Progress(50, out)
    progress.advance(10)
    progress.close()
    text = out.getvalue()
    assert "\r" in text and "10/50" in text and "job" in text and "<" in text  # elapsed<left
