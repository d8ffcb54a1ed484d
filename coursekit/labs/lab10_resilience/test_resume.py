"""The notebook's comparison of a resumed run with the uninterrupted one, and its claims, on runs made in this process
(the solution's ``main``, signalled after a step and run again) and on planted comparisons; no jobs."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from coursekit.labs.kit import exercise
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab10_resilience import resume, resume_check
from coursekit.labs.lab10_resilience.resume import ResumeComparison, check_resume_claims, compare_folders

ARGS = ["--steps", "48", "--checkpoint-every", "10", "--seed", "0"]
INTERRUPT_AT = "23"


@pytest.fixture(autouse=True)
def _keep_signal_handlers():
    """The script installs its own SIGUSR2/SIGTERM handlers: give pytest's back."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def _run(script: Path, folder: Path, interrupted: bool) -> Path:
    """The script's main in this process: uninterrupted, or signalled after step 23 and run again."""
    main = exercise.load_module(script, f"_resume_{script.stem}").main
    out = folder / ("interrupted" if interrupted else "uninterrupted")
    if interrupted:
        assert main(["--out", str(out), *ARGS, "--interrupt-at-step", INTERRUPT_AT]) == resume_check.STOPPED_EXIT_CODE
    assert main(["--out", str(out), *ARGS]) == 0
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return _run(resume_check.SOLUTION, tmp_path_factory.mktemp("reference"), interrupted=False)


def test_a_right_resume_equals_the_uninterrupted_run_in_every_component(tmp_path, reference):
    table = compare_folders(_run(resume_check.SOLUTION, tmp_path, interrupted=True), reference, "cpu")
    assert table.column("component") == ["weights", "optimizer state", "scheduler", "random state", "data order"]
    assert table.column("max_abs_diff") == [0.0] * 5 and all(table.column("equal"))


@pytest.mark.parametrize(("mistake", "component"), [("forget_epoch", "data order"), ("forget_scheduler", "scheduler"),
                                                    ("forget_rng", "random state"),
                                                    ("forget_optimizer", "optimizer state")])
def test_a_planted_resume_mistake_shows_in_its_component_and_fails_the_claim(mistake, component, tmp_path, reference):
    script = resume_check.plant_mistake(mistake, tmp_path / f"{mistake}.py")
    table = compare_folders(_run(script, tmp_path, interrupted=True), reference, "cpu")
    row = table.one(component=component)
    assert not row["equal"], str(table)
    weights = table.one(component="weights")["max_abs_diff"]
    assert weights > 1000 * resume.TOLERANCE["cpu"] and weights > 1000 * resume.TOLERANCE["cuda"], str(table)
    with pytest.raises(AssertionError, match="equals the uninterrupted one"):
        check_resume_claims(_comparison(table))


def _comparison(table: ResultsTable, **changes) -> ResumeComparison:
    values = dict(table=table, device="cpu", tolerance=resume.TOLERANCE["cpu"], starts=2, stop_signals=["SIGTERM"],
                  resumed_at=[23], requeued_in_log=1, started_in_log=2, state="COMPLETED",
                  reference_state="COMPLETED", steps=48)
    values.update(changes)
    return ResumeComparison(**values)


def _equal_table() -> ResultsTable:
    return ResultsTable([{"component": c, "max_abs_diff": 0.0, "tolerance": 0.0, "equal": True}
                         for c in ("weights", "optimizer state", "scheduler", "random state", "data order")])


def test_both_claims_hold_on_a_requeued_exact_run(capsys):
    results = check_resume_claims(_comparison(_equal_table()))
    assert [r.holds for r in results] == [True, True]
    assert "resumed at step(s) 23" in capsys.readouterr().out


def test_the_comparison_shows_as_its_table_in_plain_text_and_in_html():
    comparison = _comparison(_equal_table())
    assert repr(comparison) == str(comparison) == str(comparison.table)
    assert "ResumeComparison(" not in repr(comparison) and "optimizer state" in repr(comparison)
    assert comparison._repr_html_() == comparison.table.to_html()


@pytest.mark.parametrize("changes", [dict(requeued_in_log=0), dict(started_in_log=1, starts=1, resumed_at=[]),
                                     dict(stop_signals=[]), dict(state="TIMEOUT"), dict(resumed_at=[0])])
def test_the_requeue_claim_fails_when_the_log_does_not_show_it(changes):
    with pytest.raises(AssertionError, match="signalled and requeued"):
        check_resume_claims(_comparison(_equal_table(), **changes))


def test_the_exact_claim_fails_on_a_weight_difference_beyond_the_tolerance():
    table = _equal_table()
    table.rows[0].update(max_abs_diff=3e-2, equal=False)
    with pytest.raises(AssertionError, match="differ: weights"):
        check_resume_claims(_comparison(table))


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="lab10_resilience/train_resume.py"):
        resume.start_resume_runs(tmp_path / "missing.py", steps=10, checkpoint_every=5, time_max=1)
    with pytest.raises(ValueError, match="steps=0"):
        resume.start_resume_runs(resume_check.SOLUTION, steps=0, checkpoint_every=5, time_max=1)
    with pytest.raises(ValueError, match="signal_after_s=0"):
        resume.start_resume_runs(resume_check.SOLUTION, steps=10, checkpoint_every=5, time_max=1, signal_after_s=0)
    with pytest.raises(ValueError, match="device='tpu'"):
        resume.start_resume_runs(resume_check.SOLUTION, steps=10, checkpoint_every=5, time_max=1, device="tpu")


def test_the_requeue_lines_are_submitits_own_which_the_job_tail_leaves_out(tmp_path):
    stdout = tmp_path / "7_0_log.out"
    stdout.write_text("submitit INFO (2026-11-29 13:40:00,000) - Starting with JobEnvironment(job_id=7, ...)\n"
                      "step 1 loss 2.3\nstep 2 loss 2.1\n"
                      "submitit INFO (2026-11-29 13:40:09,000) - Requeued job 7 (1 remaining timeouts)\n"
                      "submitit INFO (2026-11-29 13:40:11,000) - Starting with JobEnvironment(job_id=7, ...)\n"
                      "step 3 loss 1.9\n")
    job = SimpleNamespace(stdout=stdout)
    runs = resume.ResumeRuns(job, job, tmp_path, tmp_path, "cpu", None)
    lines = resume.requeue_lines(runs)
    assert [line.split(" - ")[1].split(" ")[0] for line in lines] == ["Starting", "Requeued", "Starting"]
