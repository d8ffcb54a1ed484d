"""The AMP checker: the solution passes, each planted mistake is caught by its own check, bad input is refused.

Every check runs the real scripts (forked from one runner that imported torch once, on the CPU); the float32
reference runs once and is cached.
"""

import pytest

from coursekit.labs.lab04_mixed_precision import amp_check

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

REFERENCE = amp_check.SOLUTION.with_name(amp_check.REFERENCE_NAME)
EXPECTED_FAILURES = {  # planted mistake -> the checks that must fail, and words their detail must hold
    "no_autocast": ({"autocast"}, "autocast was off during the forward pass"),
    "no_scaler": ({"scaler", "skipped"}, "the loss was never scaled"),
    "optimizer_step": ({"run"}, "call scaler.step(optimizer) instead of optimizer.step()"),
    "unscale_then_optimizer_step": ({"skipped"}, "step 3's gradient was infinite, and the optimizer applied it"),
    "model_half": ({"run", "master_weights"}, "the layers' weights were float16"),
}


@pytest.fixture(scope="module")
def solution_report() -> amp_check.AMPCheckReport:
    return amp_check.check_amp_script(amp_check.SOLUTION, device="cpu")


def test_the_solution_passes_every_check(solution_report):
    report = solution_report
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == list(amp_check.CHECK_QUESTIONS)
    assert report["speed"].verdict == amp_check.SKIP and "not judged on a CPU" in report["speed"].detail
    assert report.speedup is not None and report.speedup > 0
    poison = amp_check.CheckOptions().poison_step
    assert dict(report.scales)[poison] == dict(report.scales)[poison - 1] / 2
    assert poison not in report.applied_steps and len(report.applied_steps) == amp_check.CheckOptions().steps - 1
    assert len(report.losses) == len(report.reference_losses) == amp_check.CheckOptions().steps
    assert report.losses[0] == pytest.approx(report.reference_losses[0], abs=0.01)  # low precision, same model


def test_bfloat16_needs_no_scaler(solution_report):
    report = amp_check.check_amp_script(amp_check.SOLUTION, dtype="bfloat16", device="cpu")
    assert report.ok, str(report)
    assert "bfloat16 under autocast" in report["autocast"].detail
    assert report["skipped"].verdict == amp_check.SKIP and report.scales == []


def test_every_planted_mistake_applies_to_the_solution(tmp_path):
    for mistake in amp_check.PLANTED_MISTAKES:
        planted = amp_check.plant_mistake(mistake, tmp_path / f"{mistake}.py").read_text()
        assert planted != amp_check.SOLUTION.read_text()
        compile(planted, mistake, "exec")
    assert set(EXPECTED_FAILURES) == set(amp_check.PLANTED_MISTAKES)
    with pytest.raises(ValueError, match="mistake='typo'"):
        amp_check.plant_mistake("typo", tmp_path / "x.py")


@pytest.mark.parametrize("mistake", sorted(EXPECTED_FAILURES))
def test_a_planted_mistake_is_caught_by_its_check(mistake, tmp_path, solution_report):
    failing, words = EXPECTED_FAILURES[mistake]
    script = amp_check.plant_mistake(mistake, tmp_path / f"{mistake}.py")
    report = amp_check.check_amp_script(script, reference=REFERENCE, device="cpu")
    assert set(report.failed) == failing, str(report)
    assert any(words in report[name].detail for name in failing), str(report)
    assert not report.ok and "FAIL" in str(report) and "FAIL" in report._repr_html_()


def test_a_crashing_script_shows_its_own_error(tmp_path, solution_report):
    script = tmp_path / "crash.py"
    script.write_text("import torch\n\nraise RuntimeError('breaks here')\n")
    report = amp_check.check_amp_script(script, reference=REFERENCE, device="cpu")
    assert report.failed == ["run"]
    detail = report["run"].detail
    assert "exit code 1" in detail and "RuntimeError: breaks here" in detail
    assert "crash.py" in detail and amp_check.RUNNER.name not in detail and "runpy" not in detail
    assert all(c.verdict == amp_check.SKIP for c in report.checks[1:])


def test_a_hanging_script_is_stopped_at_the_timeout(tmp_path, solution_report):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('waiting for nothing', flush=True)\ntime.sleep(600)\n")
    report = amp_check.check_amp_script(script, reference=REFERENCE, device="cpu", timeout_s=1.0)
    assert report.failed == ["run"]
    assert "did not finish within 1 s" in report["run"].detail and "waiting for nothing" in report["run"].detail
    assert report.seconds < 1.0 + 2 * amp_check.STOP_GRACE_S


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="path='nowhere/train_amp.py'"):
        amp_check.check_amp_script("nowhere/train_amp.py")
    lonely = tmp_path / "train_amp.py"
    lonely.write_text("")
    with pytest.raises(FileNotFoundError, match="no train_fp32.py next to train_amp.py"):
        amp_check.check_amp_script(lonely)
    with pytest.raises(ValueError, match="dtype='fp16'"):
        amp_check.check_amp_script(lonely, reference=REFERENCE, dtype="fp16")
    with pytest.raises(ValueError, match="device='tpu'"):
        amp_check.check_amp_script(lonely, reference=REFERENCE, device="tpu")
    with pytest.raises(ValueError, match="options.poison_step=6"):
        amp_check.check_amp_script(lonely, reference=REFERENCE, options=amp_check.CheckOptions(steps=6, poison_step=6))


def test_the_report_reads_as_text_and_as_a_table():
    report = amp_check.AMPCheckReport("x.py", "float16", "cpu", [
        amp_check.Check("run", amp_check.PASS, "6 of 6 steps"),
        amp_check.Check("scaler", amp_check.FAIL, "no <GradScaler>")])
    assert report.failed == ["scaler"] and not report.ok
    text = str(report)
    assert text.splitlines()[0] == "mixed-precision check of x.py (float16, cpu): 1 problem"
    assert "FAIL" in text.splitlines()[2] and "scaler" in text.splitlines()[2]
    page = report._repr_html_()
    assert page.count("<tr>") == 3 and "&lt;GradScaler&gt;" in page
    with pytest.raises(KeyError, match="no check 'speed'"):
        report["speed"]
