"""A progress bar over the jobs a lab waits for (tqdm.auto: a widget in a notebook, text in a terminal).

``labs.run_sweep`` and ``Sweep.results`` wait for their jobs with one bar, "3/8 jobs ended", so that a
sweep of several minutes is never silent. In a notebook the bar is a widget shown under a display id, and when
the wait ends one line saying how it ended takes its place (a saved notebook would otherwise keep the widget's
text at its first drawing, "0/8"); on a terminal the bar stays where it ended. The bar appears only when the wait lasts more than
``PROGRESS_DELAY_S`` and is a no-op where tqdm is not installed (it comes with the ``lab`` extra). Where
nobody watches it redraw (stderr is not a terminal and this is no notebook: a CLI piped to a file, a batch
job's log), there is no bar: its redraws would fill the file; one line says how the wait ended instead.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

PROGRESS_DELAY_S = 1.0  # shorter waits show no bar
PROGRESS_UNIT = "job"
# the bar is told on every poll (5 a second for local jobs) and redraws at most this often: in a notebook each
# redraw is a widget update sent through the JupyterLab server and drawn by the browser
REDRAW_S = 1.0


def redraws_seen() -> bool:
    """A bar's redraws are seen: in a notebook (a widget), or on a terminal (stderr is a tty)."""
    from coursekit.jobs.queue_view import in_kernel

    try:
        return in_kernel() or sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


class JobsBar:
    """``with JobsBar(total, desc) as bar: ... bar.done(n)``: ``n`` of ``total`` jobs have ended."""

    unit = PROGRESS_UNIT  # what the bar counts (a subclass counts runs)

    def __init__(self, total: int, desc: str = "", enabled: bool = True) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"total={total!r}: give the number of jobs waited for, an int >= 0")
        self.total, self.count, self._first = total, 0, True
        self._bar: Any = None
        self.desc, self._quiet_since = desc, None
        self._shown: Any = None  # a notebook's bar: the display handle it was shown under (after the delay)
        self._started = time.monotonic()
        if enabled and total > 0 and not redraws_seen():
            self._quiet_since = time.monotonic()  # no bar: one line at the end (``close``)
        elif enabled and total > 0:
            self._bar = self._notebook_bar()
            if self._bar is not None:
                return
            try:
                from tqdm.auto import tqdm
            except ImportError:  # tqdm is in the lab extra: without it, no bar
                return
            # smoothing=0: the rate is the mean since the start; jobs that end together would otherwise show
            # the rate of their last few moments ("3/3 [00:52, 4.48job/s]")
            self._bar = tqdm(total=total, desc=desc or None, unit=self.unit, delay=PROGRESS_DELAY_S,
                             mininterval=REDRAW_S, leave=True, smoothing=0)

    def done(self, count: int) -> None:
        """``count`` jobs have ended (called on every poll: it also refreshes the elapsed time)."""
        count = max(self.count, min(count, self.total))
        if self._bar is not None and self._first and count:
            # those that had ended before the wait began: counted, but not in the rate (nor in the time left).
            # Not drawn now: drawn at once, a wait for jobs that had all ended showed a bar and, in a notebook,
            # "1/1 jobs ended after 0 s" under the line of the wait that had really waited for them
            self._bar.initial = self._bar.n = self._bar.last_print_n = count
        elif self._bar is not None:
            self._bar.update(count - self.count)
        self._first = False
        self.count = count
        if self._shown is None and getattr(self._bar, "notebook_widget", False) \
                and time.monotonic() - self._started >= PROGRESS_DELAY_S:
            from IPython.display import display

            self._shown = display(self._bar.container, display_id=True)

    def _notebook_bar(self) -> Any:
        """In a notebook, tqdm's widget, not shown yet (``done`` shows it once the wait outlasts the delay, under a
        display id that ``close`` fills with the closing line); None elsewhere, or without ipywidgets."""
        from coursekit.jobs.queue_view import in_kernel

        if not in_kernel():
            return None
        try:
            from tqdm.notebook import tqdm as notebook_tqdm

            bar = notebook_tqdm(total=self.total, desc=self.desc or None, unit=self.unit, mininterval=REDRAW_S,
                                leave=True, smoothing=0, display=False)
        except ImportError:  # no tqdm, or no ipywidgets: tqdm.auto's text bar (or none)
            return None
        bar.notebook_widget = True
        return bar

    def _closing_line(self, seconds: float) -> str:
        return f"{self.desc or 'jobs'}: {self.count}/{self.total} {self.unit}s ended after {seconds:.0f} s"

    def _say_how_it_ended(self, seconds: float, file: Any) -> None:
        print(self._closing_line(seconds), file=file, flush=True)

    def close(self) -> None:
        if self._quiet_since is not None:
            waited = time.monotonic() - self._quiet_since
            if waited >= PROGRESS_DELAY_S:
                self._say_how_it_ended(waited, sys.stderr)
            self._quiet_since = None
        if self._bar is not None:
            # a notebook's bar is a widget: a saved notebook keeps its first drawing ("0/64") and not where it
            # ended, so one plain line says how the wait ended, for whoever reads it later: in the widget's place
            # where it was shown under a display id, else after it
            drawn_widget = getattr(self._bar, "displayed", False)
            elapsed = self._bar.format_dict.get("elapsed", 0.0)
            self._bar.close()
            self._bar = None
            if self._shown is not None:
                self._shown.update({"text/plain": self._closing_line(elapsed)}, raw=True)
                self._shown = None
            elif drawn_widget:
                self._say_how_it_ended(elapsed, sys.stdout)

    def __enter__(self) -> JobsBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
