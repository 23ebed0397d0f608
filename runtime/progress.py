"""A dependency-free progress bar for long compiles and runs.

On a terminal it redraws one line (``label [#####-----] 12/40 conv3``); into
a file or pipe it prints a line at every tenth of the work, so logs stay
short.
"""

import sys
import time

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "compiling") as p: ... p.advance("conv3")``."""

    def __init__(self, total, label, *, stream=None, enabled=True, width=24):
        self.total, self.label, self.width = max(int(total), 1), label, width
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done, self.start = 0, time.perf_counter()
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self._printed_tenth = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def advance(self, text="", n=1):
        self.done = min(self.done + n, self.total)
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        status = f"{self.label} {self.done}/{self.total} {elapsed:5.1f}s {text}"
        if self.tty:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s {text[:40]:40}")
        else:
            tenth = 10 * self.done // self.total
            if tenth == self._printed_tenth:
                return
            self._printed_tenth = tenth
            self.stream.write(status + "\n")
        self.stream.flush()
