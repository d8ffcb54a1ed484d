"""The pipeline checker: the solution passes, each planted mistake is caught by its own check, bad input is refused.

The solution, the planted mistakes and the participant's copy run in ONE pair of gloo processes
(``check_pipeline_scripts``): each process imports torch once and then runs the scripts one after the other. The
hanging script imports no torch: the runner then imports none either.
"""

import pytest

from coursekit.labs.kit import exercises
from coursekit.labs.lab08_model_parallel import pipeline_check

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

EXPECTED_FAILURES = {  # planted mistake -> the checks that must fail, and words their detail must hold
    "whole_model_on_each_rank": ({"memory"}, "holds layers of the other stage too"),
    "no_gradient_back": ({"weights", "memory"}, "stage 0's weights never moved"),
    "losses_summed": ({"weights"}, "the micro-batch losses are added up, not averaged"),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, pipeline_check.PipelineCheckReport]:
    folder = tmp_path_factory.mktemp("pipeline")
    paths = [pipeline_check.SOLUTION]
    for mistake in EXPECTED_FAILURES:
        paths.append(folder / f"{mistake}.py")
        paths[-1].write_text(pipeline_check.planted(mistake))
    stripped = folder / "train_pipeline.py"  # the participant's copy, last: it fails, and a failure ends the runs
    stripped.write_text(exercises.strip_source(pipeline_check.SOLUTION.read_text(), "train_pipeline.py",
                                               exercises.SCRIPT_PLACEHOLDER_RAISE)[0])
    names = ["solution", *EXPECTED_FAILURES, "stripped"]
    return dict(zip(names, pipeline_check.check_pipeline_scripts([*paths, stripped]), strict=True))


def test_the_solution_passes_every_check(reports):
    report = reports["solution"]
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == list(pipeline_check.CHECK_QUESTIONS)
    assert report.relative_diff is not None and report.relative_diff <= pipeline_check.REL_TOLERANCE
    assert "rank 1: stage 1 holds" in report.outputs[1] and "saved" in report.outputs[0]


def test_each_rank_holds_its_stage_as_the_formula_says(reports):
    report = reports["solution"]
    weights = pipeline_check.serial_reference(pipeline_check.CheckOptions()).weights
    assert sum(report.stage_parameters.values()) == sum(v.numel() for v in weights.values())
    for rank, state in report.state_bytes.items():
        psi = report.stage_parameters[rank]
        assert report.formula_bytes[rank] == 12 * psi  # fp32 SGD with momentum: 4 + 4 + 4 bytes per parameter
        assert state["param_bytes"] == state["grad_bytes"] == state["optimizer_bytes"] == 4 * psi


def test_the_weight_check_can_fail():
    """Serial training moves the weights far beyond the tolerance, relative to its own largest move."""
    reference = pipeline_check.serial_reference(pipeline_check.CheckOptions())
    least = min(pipeline_check.fsdp_check._max_diff(reference.weights[k], reference.initial[k])
                for k in reference.weights)
    assert least > 10 * pipeline_check.REL_TOLERANCE * reference.largest_move


@pytest.mark.parametrize("mistake", sorted(EXPECTED_FAILURES))
def test_a_planted_mistake_is_caught_by_its_check(mistake, reports):
    failing, words = EXPECTED_FAILURES[mistake]
    report = reports[mistake]
    assert set(report.failed) == failing, str(report)
    assert any(words in report[name].detail for name in failing), str(report)
    assert not report.ok and "FAIL" in str(report) and "FAIL" in report._repr_html_()


def test_the_participants_copy_fails_at_its_first_todo(reports):
    report = reports["stripped"]
    assert report.failed == ["run"]
    assert "NotImplementedError: Exercise: write this part (see the TODO above)" in report["run"].detail
    assert "train_pipeline.py" in report["run"].detail and "fsdp_runner" not in report["run"].detail


def test_every_planted_mistake_changes_the_solution():
    for mistake in pipeline_check.PLANTED_MISTAKES:
        text = pipeline_check.planted(mistake)
        assert text != pipeline_check.SOLUTION.read_text()
        compile(text, mistake, "exec")
    assert set(EXPECTED_FAILURES) == set(pipeline_check.PLANTED_MISTAKES)
    with pytest.raises(ValueError, match="mistake='typo'"):
        pipeline_check.planted("typo")


def test_a_hanging_script_is_stopped_at_the_timeout_with_its_last_lines(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('rank waits in dist.recv', flush=True)\ntime.sleep(600)\n")
    report = pipeline_check.check_pipeline_script(script, timeout_s=1)
    assert report.failed == ["run"]
    detail = report["run"].detail
    assert "did not finish within 1 s" in detail and "every send needs its receive" in detail
    assert "rank 0's last lines:\nrank waits in dist.recv" in detail
    assert report.seconds < 1 + 2 * pipeline_check.fsdp_check.STOP_GRACE_S


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="path='nowhere/train_pipeline.py'"):
        pipeline_check.check_pipeline_script("nowhere/train_pipeline.py")
    script = tmp_path / "train_pipeline.py"
    script.write_text("")
    with pytest.raises(ValueError, match="timeout_s=0"):
        pipeline_check.check_pipeline_script(script, timeout_s=0)
    with pytest.raises(ValueError, match="give a list"):
        pipeline_check.check_pipeline_scripts(str(script))
    with pytest.raises(ValueError, match="options.microbatches=5"):
        pipeline_check.check_pipeline_script(script, options=pipeline_check.CheckOptions(microbatches=5))
