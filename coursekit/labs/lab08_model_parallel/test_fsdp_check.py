"""The FSDP checker: the solution passes, each planted mistake is caught by its own check, bad input is refused.

The solution and the planted mistakes run in ONE pair of gloo processes (``check_fsdp_scripts``): each process
imports torch once (seconds of CPU) and then runs the scripts one after the other (a fraction of a second each).
The crashing and hanging scripts import no torch: the runner then imports none either.
"""

import textwrap

import pytest

from coursekit.labs.kit import exercises
from coursekit.labs.lab08_model_parallel import fsdp_check

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

EXPECTED_FAILURES = {  # planted mistake -> the checks that must fail, and words their detail must hold
    "no_fully_shard": ({"weights", "sharded", "memory"}, "fully_shard was never called"),
    "root_only": ({"sharded"}, "only the whole model is an FSDP unit"),
    "optimizer_before_sharding": ({"weights", "memory"}, "build the optimizer after sharding"),
    "local_state_dict": ({"weights"}, "that is rank 0's shard, not the full weight"),
    "sharded_state_dict": ({"weights"}, "sharded tensors (DTensors"),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, fsdp_check.FSDPCheckReport]:
    folder = tmp_path_factory.mktemp("fsdp")
    paths = [fsdp_check.SOLUTION]
    for mistake in EXPECTED_FAILURES:
        paths.append(folder / f"{mistake}.py")
        paths[-1].write_text(fsdp_check.planted(mistake))
    stripped = folder / "train_fsdp.py"  # the participant's copy, last: it fails, and a failure ends the runs
    stripped.write_text(exercises.strip_source(fsdp_check.SOLUTION.read_text(), "train_fsdp.py",
                                               exercises.SCRIPT_PLACEHOLDER_RAISE)[0])
    names = ["solution", *EXPECTED_FAILURES, "stripped"]
    return dict(zip(names, fsdp_check.check_fsdp_scripts([*paths, stripped]), strict=True))


def test_the_solution_passes_every_check(reports):
    report = reports["solution"]
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == list(fsdp_check.CHECK_QUESTIONS)
    assert report.max_abs_diff is not None and report.max_abs_diff <= fsdp_check.WEIGHT_TOLERANCE
    assert report.units == ["blocks.0", "blocks.1", "blocks.2", "blocks.3", ""]
    assert "rank 0: holds" in report.outputs[0] and "saved" in report.outputs[0]


def test_the_weight_check_can_fail():
    """Training moves every weight tensor far beyond the tolerance: a rank that skipped steps cannot pass."""
    assert fsdp_check.serial_reference(fsdp_check.CheckOptions()).moved > 100 * fsdp_check.WEIGHT_TOLERANCE


def test_each_rank_holds_half_of_the_state_as_the_formula_says(reports):
    report = reports["solution"]
    psi = sum(v.numel() for v in fsdp_check.serial_reference(fsdp_check.CheckOptions()).weights.values())
    assert report.formula_bytes == 16 * psi / 2  # fp32 AdamW: (4 + 4 + 8) bytes per parameter, over 2 ranks
    for state in report.state_bytes.values():
        assert state["param_bytes"] == state["grad_bytes"] == 4 * psi / 2
        assert state["optimizer_bytes"] == pytest.approx(8 * psi / 2, rel=0.01)  # + AdamW's step counters


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


def test_every_planted_mistake_changes_the_solution():
    for mistake in fsdp_check.PLANTED_MISTAKES:
        text = fsdp_check.planted(mistake)
        assert text != fsdp_check.SOLUTION.read_text()
        compile(text, mistake, "exec")
    assert set(EXPECTED_FAILURES) <= set(fsdp_check.PLANTED_MISTAKES)
    with pytest.raises(ValueError, match="mistake='typo'"):
        fsdp_check.planted("typo")


def test_a_crashing_rank_shows_its_error_and_stops_the_scripts_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(fsdp_check, "CRASH_GRACE_S", 1.0)
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""\
        import os, time
        if os.environ["RANK"] == "1":
            raise RuntimeError("rank 1 breaks here")
        time.sleep(60)
    """))
    first, second = fsdp_check.check_fsdp_scripts([script, script])
    assert first.failed == ["run"] and second.failed == ["run"]
    assert "rank 1 failed" in first["run"].detail and "RuntimeError: rank 1 breaks here" in first["run"].detail
    assert "crash.py" in first["run"].detail and "fsdp_runner" not in first["run"].detail  # their frames only
    assert all(c.verdict == fsdp_check.SKIP for c in first.checks[1:])
    assert "not run" in second["run"].detail
    assert first.seconds < 1.0 + 2 * fsdp_check.STOP_GRACE_S + 5


def test_a_hanging_script_is_stopped_at_the_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('waiting for the others', flush=True)\ntime.sleep(600)\n")
    report = fsdp_check.check_fsdp_script(script, timeout_s=2)
    assert report.failed == ["run"]
    assert "did not finish within 2 s" in report["run"].detail
    assert report.outputs[0].strip() == "waiting for the others"
    assert report.seconds < 2 + 2 * fsdp_check.STOP_GRACE_S


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="path='nowhere/train_fsdp.py'"):
        fsdp_check.check_fsdp_script("nowhere/train_fsdp.py")
    script = tmp_path / "train_fsdp.py"
    script.write_text("")
    with pytest.raises(ValueError, match="nproc=1"):
        fsdp_check.check_fsdp_script(script, nproc=1)
    with pytest.raises(ValueError, match="timeout_s=0"):
        fsdp_check.check_fsdp_script(script, timeout_s=0)
    with pytest.raises(ValueError, match="give a list"):
        fsdp_check.check_fsdp_scripts(str(script))
    with pytest.raises(ValueError, match="batch_size=30 does not split over nproc=4"):
        fsdp_check.check_fsdp_script(script, nproc=4, options=fsdp_check.CheckOptions(batch_size=30))


def test_the_report_reads_as_text_and_as_a_table():
    report = fsdp_check.FSDPCheckReport("x.py", 2, [
        fsdp_check.Check("run", fsdp_check.PASS, "2 ranks ran to their end"),
        fsdp_check.Check("sharded", fsdp_check.FAIL, "only the <root>")])
    assert report.failed == ["sharded"] and not report.ok
    lines = str(report).splitlines()
    assert lines[0] == "FSDP check of x.py on 2 processes: 1 problem"
    assert "FAIL" in lines[2] and "sharded" in lines[2]
    page = report._repr_html_()
    assert page.count("<tr>") == 3 and "&lt;root&gt;" in page
    with pytest.raises(KeyError, match="no check 'weights'"):
        report["weights"]
