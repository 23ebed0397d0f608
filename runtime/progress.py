"""Progress of long compiles and runs, drawn by tqdm.

On a terminal, a tqdm bar redrawn in place (``compiling  40%|████  | 4/10
[00:02<00:03] conv3``). Into a file or pipe, where a redrawn bar would be
one long line of carriage returns, the same meter is printed as a line at
every tenth of the work, so logs stay short.
"""

import sys
import time

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "compiling") as p: ... p.advance("conv3")``."""

    def __init__(self, total, label, *, stream=None, enabled=True):
        self.total, self.label = max(int(total), 1), label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done, self.start = 0, time.perf_counter()
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        # Off a terminal the bar stays disabled; advance() prints tqdm's meter as lines.
        self._bar = tqdm(total=self.total, desc=label, file=self.stream, leave=True, dynamic_ncols=True,
                         disable=not self.tty)
        self._printed_tenth = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._bar.close()

    def advance(self, text="", n=1):
        """Count ``n`` more units done; ``text`` names the one just finished."""
        n = min(n, self.total - self.done)
        self.done += n
        if self.tty:
            self._bar.set_postfix_str(text[:40], refresh=False)
            self._bar.update(n)
            return
        tenth = 10 * self.done // self.total
        if not self.enabled or tenth == self._printed_tenth:
            return
        self._printed_tenth = tenth
        meter = tqdm.format_meter(self.done, self.total, time.perf_counter() - self.start, prefix=self.label)
        self.stream.write(f"{meter} {text}".rstrip() + "\n")
        self.stream.flush()
