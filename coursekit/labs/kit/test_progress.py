"""The progress bar over a sweep's waiting: told how many jobs ended on every poll, never beyond the total."""

import pytest

from coursekit.labs.kit import experiments, progress
from coursekit.labs.kit.progress import JobsBar
from coursekit.labs.kit.test_experiments import StandInJob


def test_wait_all_reports_how_many_jobs_ended_on_every_poll(monkeypatch):
    monkeypatch.setattr(experiments, "LOCAL_POLL_S", 0.001)
    jobs = [StandInJob(job_id=str(i), done_after=i) for i in range(3)]
    seen = []
    assert experiments.wait_all(jobs, timeout_s=10, on_progress=seen.append) == ["COMPLETED"] * 3
    assert seen == sorted(seen) and seen[0] == 1 and seen[-1] == 3


def test_bar_counts_up_to_the_total_and_closes(monkeypatch):
    monkeypatch.setattr(progress, "redraws_seen", lambda: True)  # a terminal or a notebook
    with JobsBar(3, "ada-bs") as bar:
        assert bar._bar is not None and bar._bar.total == 3
        bar.done(1)
        bar.done(0)  # a poll of a later job of a one-at-a-time sweep never moves the bar back
        bar.done(5)
        assert bar.count == 3 and bar._bar.n == 3
    assert bar._bar is None


def test_a_wait_for_jobs_that_had_all_ended_draws_nothing(monkeypatch, capsys):
    """A second wait for the same jobs (a cell that reads their results again) is not a wait: no bar, no line."""
    monkeypatch.setattr(progress, "redraws_seen", lambda: True)
    with JobsBar(2, "ada-long") as bar:
        bar.done(2)
        assert bar._bar.n == 2 and bar._bar.initial == 2  # counted, not in the rate
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)  # a wait that lasts: the bar shows its count
    with JobsBar(2, "ada-long") as bar:
        bar.done(1)
        bar.done(2)
    assert "2/2" in capsys.readouterr().err


def test_bar_disabled_or_empty_draws_nothing():
    assert JobsBar(0)._bar is None and JobsBar(2, enabled=False)._bar is None
    with pytest.raises(ValueError, match="total="):
        JobsBar(-1)


def test_sweep_wait_draws_one_bar_over_its_jobs(monkeypatch):
    monkeypatch.setattr(experiments, "LOCAL_POLL_S", 0.001)
    drawn = []
    monkeypatch.setattr(experiments, "JobsBar", lambda total, desc: drawn.append((total, desc)) or JobsBar(total, desc))
    sweep = experiments.Sweep("ada-bs", [], [StandInJob(job_id="1", done_after=2), StandInJob(job_id="2")])
    assert sweep.wait(timeout_s=10) == ["COMPLETED", "COMPLETED"]
    assert drawn == [(2, "ada-bs")]


def test_where_nobody_sees_redraws_there_is_no_bar_and_one_line_says_how_the_wait_ended(monkeypatch, capsys):
    """``coursekit instructor race verify > log``: stderr is a file, a bar's redraws would fill it."""
    monkeypatch.setattr(progress, "redraws_seen", lambda: False)
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)
    with JobsBar(3, "re-runs") as bar:
        assert bar._bar is None
        for count in (1, 2, 3, 3, 3):
            bar.done(count)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "re-runs: 3/3 jobs ended after" in err, err
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 3600.0)
    with JobsBar(2, "quick") as bar:
        bar.done(2)
    assert capsys.readouterr().err == ""  # a short wait says nothing, as a bar would not have shown


def test_a_drawn_notebook_bar_leaves_a_line_saying_how_the_wait_ended(capsys):
    """A saved notebook keeps a widget's first drawing ("0/64"): the line after it must say where it ended."""
    from tqdm.notebook import tqdm as notebook_tqdm

    class DrawnWidget:  # what tqdm.notebook keeps: drawn once its delay passed, its elapsed time
        displayed = True
        format_dict = {"elapsed": 332.4}

        def close(self) -> None:
            pass

    real = notebook_tqdm(total=1, delay=3600)  # the attributes read are tqdm's own: not drawn before its delay
    assert real.displayed is False and "elapsed" in real.format_dict
    real.close()
    bar = JobsBar(64, "lab 07", enabled=False)
    bar._bar, bar.count = DrawnWidget(), 64
    bar.close()
    assert capsys.readouterr().out == "lab 07: 64/64 jobs ended after 332 s\n"
    DrawnWidget.displayed = False  # a wait shorter than the delay drew nothing: nothing to say
    bar._bar = DrawnWidget()
    bar.close()
    assert capsys.readouterr().out == ""
    runs = experiments.RunsBar(64, "lab 07", enabled=False)  # a bar over runs says runs
    runs._bar, runs.count = DrawnWidget(), 3
    DrawnWidget.displayed = True
    runs.close()
    assert capsys.readouterr().out == "lab 07: 3/64 runs ended after 332 s\n"


def test_the_bar_redraws_at_most_once_a_second_however_often_it_is_told(monkeypatch):
    monkeypatch.setattr(progress, "redraws_seen", lambda: True)
    with JobsBar(3, "ada-bs") as bar:
        assert bar._bar.mininterval == progress.REDRAW_S >= 1.0


def test_a_notebook_bar_is_shown_after_the_delay_and_its_closing_line_takes_its_place(monkeypatch, capsys):
    """A saved notebook keeps what its display id holds last: the line, not the widget's first drawing."""
    import IPython.display

    from coursekit.jobs import queue_view

    shown = []

    class Handle:
        def update(self, data, raw=False):
            shown.append(("update", data, raw))

    def display(obj, display_id=False):
        shown.append(("display", type(obj).__name__, display_id))
        return Handle()

    monkeypatch.setattr(progress, "redraws_seen", lambda: True)
    monkeypatch.setattr(queue_view, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 3600.0)
    with JobsBar(2, "ada-quick") as bar:  # a wait shorter than the delay shows nothing, and says nothing
        bar.done(2)
    assert shown == [] and capsys.readouterr().out == ""
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)
    with JobsBar(3, "ada-bs") as bar:
        for count in (1, 1, 3):
            bar.done(count)
    assert [entry[0] for entry in shown] == ["display", "update"] and shown[0][2] is True  # shown once, by id
    assert shown[1][1]["text/plain"].startswith("ada-bs: 3/3 jobs ended after ") and shown[1][2] is True
    assert capsys.readouterr().out == ""  # the line is in the bar's place, not printed a second time
