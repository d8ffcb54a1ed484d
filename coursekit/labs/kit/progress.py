"""A progress bar over the jobs a lab waits for (tqdm.auto: a widget in a notebook, text in a terminal).

``labs.run_sweep`` and ``Sweep.results`` wait for their jobs with one bar, "3/8 jobs ended", so that a
sweep of several minutes is never silent. The bar appears only when the wait lasts more than
``PROGRESS_DELAY_S`` and is a no-op where tqdm is not installed (it comes with the ``lab`` extra).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

PROGRESS_DELAY_S = 1.0  # shorter waits show no bar
PROGRESS_UNIT = "job"


class JobsBar:
    """``with JobsBar(total, desc) as bar: ... bar.done(n)``: ``n`` of ``total`` jobs have ended."""

    def __init__(self, total: int, desc: str = "", enabled: bool = True) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"total={total!r}: give the number of jobs waited for, an int >= 0")
        self.total, self.count = total, 0
        self._bar: Any = None
        if enabled and total > 0:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # tqdm is in the lab extra: without it, no bar
                return
            # smoothing=0: the rate is the mean since the start; jobs that end together would otherwise show
            # the rate of their last few moments ("3/3 [00:52, 4.48job/s]")
            self._bar = tqdm(total=total, desc=desc or None, unit=PROGRESS_UNIT, delay=PROGRESS_DELAY_S,
                             leave=True, smoothing=0)

    def done(self, count: int) -> None:
        """``count`` jobs have ended (called on every poll: it also refreshes the elapsed time)."""
        count = max(self.count, min(count, self.total))
        if self._bar is not None:
            self._bar.update(count - self.count)
        self.count = count

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> JobsBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
