"""The DDP checker: the solution passes, each planted mistake is caught by its own check, bad input is refused.

Every check runs real processes (2 gloo ranks on CPU); the serial reference runs once and is cached.
"""

import textwrap

import pytest

from coursekit.labs.lab06_data_parallel import ddp_check

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

SERIAL = ddp_check.SOLUTION.with_name(ddp_check.SERIAL_NAME)
EXPECTED_FAILURES = {  # planted mistake -> the checks that must fail, and words their detail must hold
    "lr_times_world_size": ({"weights"}, "learning rate is 0.1, but --lr was 0.05"),
    "no_ddp_wrapper": ({"weights", "accuracy"}, "not wrapped in DistributedDataParallel"),
    "no_set_epoch": ({"shuffling", "weights"}, "set_epoch(epoch)"),
    "every_rank_saves": ({"checkpoint"}, "ranks 0, 1 all call torch.save"),
    "rank_local_accuracy": ({"accuracy"}, "is rank 0's accuracy on its own 128 validation images"),
    "every_rank_prints": ({"printing"}, "ranks 0, 1 each print"),
}


@pytest.fixture(scope="module")
def solution_report() -> ddp_check.DDPCheckReport:
    return ddp_check.check_ddp_script(ddp_check.SOLUTION)


def test_the_solution_passes_every_check(solution_report):
    report = solution_report
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == list(ddp_check.CHECK_QUESTIONS)
    assert report.max_abs_diff is not None and report.max_abs_diff <= ddp_check.WEIGHT_TOLERANCE
    assert report.printed_accuracy == pytest.approx(report.global_accuracy, abs=ddp_check.ACCURACY_TOLERANCE)
    assert report.printed_accuracy == pytest.approx(report.serial_accuracies[-1], abs=ddp_check.ACCURACY_TOLERANCE)
    assert report.local_accuracy[0] != report.local_accuracy[1]  # so a rank-local value cannot pass for the mean
    assert set(report.outputs) == {0, 1} and report.outputs[1] == ""


def test_the_ranks_share_the_data_and_reshuffle_every_epoch(solution_report):
    orders = solution_report.epoch_orders
    size = ddp_check.CheckOptions().data_size
    for epoch in range(2):
        assert sorted(orders[0][epoch] + orders[1][epoch]) == list(range(size))  # disjoint halves of all
    assert orders[0][0] != orders[0][1]


def test_every_planted_mistake_applies_to_the_solution(tmp_path):
    for mistake in ddp_check.PLANTED_MISTAKES:
        planted = ddp_check.plant_mistake(mistake, tmp_path / f"{mistake}.py").read_text()
        assert planted != ddp_check.SOLUTION.read_text()
        compile(planted, mistake, "exec")
    assert set(EXPECTED_FAILURES) <= set(ddp_check.PLANTED_MISTAKES)
    with pytest.raises(ValueError, match="mistake='typo'"):
        ddp_check.plant_mistake("typo", tmp_path / "x.py")


@pytest.mark.parametrize("mistake", sorted(EXPECTED_FAILURES))
def test_a_planted_mistake_is_caught_by_its_check(mistake, tmp_path):
    failing, words = EXPECTED_FAILURES[mistake]
    script = ddp_check.plant_mistake(mistake, tmp_path / f"{mistake}.py")
    report = ddp_check.check_ddp_script(script, serial=SERIAL)
    assert set(report.failed) == failing, str(report)
    assert any(words in report[name].detail for name in failing), str(report)
    assert not report.ok and "FAIL" in str(report) and "FAIL" in report._repr_html_()


def test_a_crashing_rank_shows_its_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ddp_check, "CRASH_GRACE_S", 1.0)
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""\
        import os, time
        if os.environ["RANK"] == "1":
            raise RuntimeError("rank 1 breaks here")
        time.sleep(60)
    """))
    report = ddp_check.check_ddp_script(script, serial=SERIAL)
    assert report.failed == ["run"]
    assert "rank 1 failed with exit code 1" in report["run"].detail
    assert "RuntimeError: rank 1 breaks here" in report["run"].detail
    assert "crash.py" in report["run"].detail and "ddp_runner" not in report["run"].detail  # their frames only
    assert all(c.verdict == ddp_check.SKIP for c in report.checks[1:])


def test_a_hanging_script_is_stopped_at_the_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('waiting for the others', flush=True)\ntime.sleep(600)\n")
    # the serial reference first, with the default time (then cached): the 4 s below bound the ranks, not it
    options = ddp_check.CheckOptions()
    ddp_check.serial_reference(SERIAL, options, ddp_check.DEFAULT_NPROC * options.batch_size,
                               ddp_check.DEFAULT_TIMEOUT_S)
    report = ddp_check.check_ddp_script(script, serial=SERIAL, timeout_s=4)
    assert report.failed == ["run"]
    assert "did not finish within 4 s" in report["run"].detail
    assert report.seconds < 4 + 2 * ddp_check.STOP_GRACE_S


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="path='nowhere/train_ddp.py'"):
        ddp_check.check_ddp_script("nowhere/train_ddp.py")
    lonely = tmp_path / "train_ddp.py"
    lonely.write_text("")
    with pytest.raises(FileNotFoundError, match="no train_serial.py next to train_ddp.py"):
        ddp_check.check_ddp_script(lonely)
    with pytest.raises(ValueError, match="nproc=1"):
        ddp_check.check_ddp_script(lonely, serial=SERIAL, nproc=1)


def test_the_report_reads_as_text_and_as_a_table():
    report = ddp_check.DDPCheckReport("x.py", 2, [
        ddp_check.Check("run", ddp_check.PASS, "2 ranks finished"),
        ddp_check.Check("checkpoint", ddp_check.FAIL, "ranks 0, 1 <both> save")])
    assert report.failed == ["checkpoint"] and not report.ok
    text = str(report)
    assert text.splitlines()[0] == "DDP check of x.py on 2 processes (gloo, CPU): 1 problem"
    assert "FAIL" in text.splitlines()[2] and "checkpoint" in text.splitlines()[2]
    page = report._repr_html_()
    assert page.count("<tr>") == 3 and "&lt;both&gt;" in page
    with pytest.raises(KeyError, match="no check 'weights'"):
        report["weights"]
