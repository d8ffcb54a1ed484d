"""The resume checker: the solution passes, each planted mistake fails and is named, bad input is refused.

The checks that run scripts fork them from one runner that imported torch once (on the CPU), three runs a check;
the comparison of step records is tested on planted records, without processes.
"""

from __future__ import annotations

import pytest
import torch

from coursekit.labs.kit.script_check import SKIP
from coursekit.labs.lab10_resilience import records, resume_check
from coursekit.labs.lab10_resilience.records import Divergence, compare_steps

# planted mistake -> the checks that must fail, and words their detail must hold (what the resume forgot)
EXPECTED_FAILURES = {
    "forget_scheduler": ({"exact"}, "Forgotten: scheduler"),
    "forget_optimizer": ({"exact"}, "Forgotten: optimizer state"),
    "forget_epoch": ({"exact"}, "the sampler's epoch was not restored"),
    "forget_position": ({"exact"}, "the position in the epoch was not restored"),
    "forget_rng": ({"exact"}, "Forgotten: random state"),
    "restart_step": ({"resumes", "exact"}, "Forgotten: step counter"),
    "forget_model": ({"exact"}, "Forgotten: model weights"),
    "not_atomic": ({"saves"}, "torch.save wrote straight onto checkpoint.pt"),
}
# a mistake in the resume must move the final weights far beyond the tolerance, not just past it
MIN_MISTAKE_FACTOR = 1000


@pytest.fixture(scope="module")
def solution_report() -> resume_check.ResumeCheckReport:
    return resume_check.check_resume_script(resume_check.SOLUTION)


@pytest.mark.slow
def test_the_solution_passes_every_check(solution_report):
    report = solution_report
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == list(resume_check.CHECK_QUESTIONS)
    assert report.max_abs_diff is not None and report.max_abs_diff <= report.tolerance
    assert report.resumed_at == resume_check.CheckOptions().interrupt_at_step and report.divergence is None
    assert set(report.saved.values()) - {"yes"} == {"2", "3", "23"}  # epoch 2, position 3, step 23
    assert "resuming at step 23" in report.outputs["resumed"]


def test_every_planted_mistake_applies_to_the_solution(tmp_path):
    assert set(EXPECTED_FAILURES) == set(resume_check.PLANTED_MISTAKES)
    for mistake in resume_check.PLANTED_MISTAKES:
        planted = resume_check.plant_mistake(mistake, tmp_path / f"{mistake}.py").read_text()
        assert planted != resume_check.SOLUTION.read_text()
        compile(planted, mistake, "exec")
    with pytest.raises(ValueError, match="mistake='typo'"):
        resume_check.plant_mistake("typo", tmp_path / "x.py")


@pytest.mark.slow
@pytest.mark.parametrize("mistake", sorted(EXPECTED_FAILURES))
def test_a_planted_mistake_fails_and_is_named(mistake, tmp_path, solution_report):
    failing, words = EXPECTED_FAILURES[mistake]
    report = resume_check.check_resume_script(resume_check.plant_mistake(mistake, tmp_path / f"{mistake}.py"))
    assert set(report.failed) == failing, str(report)
    assert any(words in report[name].detail for name in failing), str(report)
    if "exact" in failing and mistake != "restart_step":  # restart_step: the LR is 0 past the end, weights agree
        assert report.max_abs_diff > MIN_MISTAKE_FACTOR * report.tolerance, str(report)
    assert "FAIL" in str(report) and "FAIL" in report._repr_html_()


@pytest.mark.slow
def test_a_script_whose_save_is_not_written_fails_to_run(tmp_path, solution_report):
    text = resume_check.SOLUTION.read_text()
    start, end = text.index("    ### BEGIN SOLUTION\n    state = {"), text.index("    ### END SOLUTION\n")
    script = tmp_path / "stripped.py"
    script.write_text(text[:start] + "    raise NotImplementedError('Exercise: write this part')\n" + text[end:])
    report = resume_check.check_resume_script(script)
    assert report.failed == ["run"], str(report)
    assert "NotImplementedError" in report["run"].detail and resume_check.RUNNER.name not in report["run"].detail
    assert all(c.verdict == SKIP for c in report.checks[1:])


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="lab10_resilience/train_resume.py"):
        resume_check.check_resume_script(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="device='tpu'"):
        resume_check.check_resume_script(resume_check.SOLUTION, device="tpu")
    with pytest.raises(ValueError, match="interrupt_at_step=48"):
        resume_check.check_resume_script(resume_check.SOLUTION,
                                         options=resume_check.CheckOptions(interrupt_at_step=48))


# ---------------------------------------------------------------- the comparison, on planted records

def _records(steps: range, **changed_at: dict[int, dict]) -> list[dict]:
    records = [{"step": s, "epoch": (s - 1) // 10, "position": (s - 1) % 10, "batch": f"b{s}", "rng": f"r{s}",
                "momentum": float(s), "lr": 0.1 / s, "loss": 1.0 / s} for s in steps]
    for record in records:
        record.update(changed_at.get("at", {}).get(record["step"], {}))
    return records


def test_equal_records_do_not_part():
    assert compare_steps(_records(range(1, 49)), _records(range(24, 49)), 23, 1e-9) is None


@pytest.mark.parametrize(("change", "forgotten"), [
    ({"lr": 0.5}, "scheduler"), ({"momentum": 0.0, "lr": 0.5}, "optimizer state"), ({"rng": "other"}, "random state"),
    ({"loss": 9.0}, "model weights"), ({"batch": "b4"}, "data order"), ({"batch": "b21"}, "data order")])
def test_the_first_differing_record_names_what_was_forgotten(change, forgotten):
    found = compare_steps(_records(range(1, 49)), _records(range(24, 49), at={26: change}), 23, 1e-9)
    assert isinstance(found, Divergence) and found.step == 26 and found.forgotten == forgotten
    if change.get("batch") == "b4":
        assert "epoch 0" in found.explanation and "\"epoch\"" in found.explanation
    if change.get("batch") == "b21":
        assert "first batch of epoch 2" in found.explanation


def test_a_resume_that_counts_from_step_one_is_named():
    resumed = _records(range(1, 26), at={1: {"position": 3, "epoch": 2}})
    found = compare_steps(_records(range(1, 49)), resumed, 0, 1e-9)
    assert found is not None and found.forgotten == "step counter"


def test_checkpoint_parts_are_found_by_their_shape():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    saved = {"weights": model.state_dict(), "opt": optimizer.state_dict(), "sched": scheduler.state_dict(),
             "generators": {"cpu": torch.get_rng_state()}, "progress": {"epoch": 1, "position": 2, "step": 12}}
    parts = records.checkpoint_parts(saved)
    assert set(parts) == {"model", "optimizer", "scheduler", "rng", "epoch", "position", "step"}
    assert set(records.checkpoint_parts(model.state_dict())) == {"model"}
    assert records.max_abs_diff(model.state_dict(), model.state_dict()) == 0.0
