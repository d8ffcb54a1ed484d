"""The lab 07 rules checker: the solution passes, each planted mistake is caught by its own check and named,
a file that does not load or hangs is reported, bad input is refused.

Three tests start the checker's own process (the solution, a syntax error, a hang); the planted mistakes are
measured in this process (``rules_runner.measure``, what that process runs) and judged as the checker judges.
"""

import math
from pathlib import Path

import pytest

from coursekit.labs.kit import exercises
from coursekit.labs.lab07_large_batch import rules_check, rules_runner

EXPECTED_FAILURES = {  # planted mistake -> the checks that must fail, and words the first one's detail must hold
    "sqrt_scaling": ({"scaling"}, "that is the square-root rule"),
    "warmup_off_by_one": ({"warmup", "scheduler"}, "one step ahead"),
    "warmup_from_zero": ({"warmup", "scheduler"}, "starts at 0"),
    "decay_from_step_zero": ({"warmup", "scheduler"}, "never reaches 1"),
    "no_decay": ({"warmup", "scheduler"}, "no decay"),
    "scheduler_one_step_ahead": ({"scheduler"}, "scheduler is one step ahead"),
    "ratio_without_weight_decay": ({"lars"}, "missing weight_decay * ||w||"),
    "ratio_on_every_layer": ({"lars"}, "biases and batch-norm parameters (conv.bias, bn.weight, fc.bias)"),
    "ratio_without_norm_guard": ({"lars"}, "||w|| is 0 at the start in head.weight"),
}
CHECK_ORDER = list(rules_check.CHECK_QUESTIONS)


def judge_in_process(path: Path) -> rules_check.RulesCheckReport:
    """What check_large_batch_rules reports, without starting a process (the file runs in this one)."""
    path = path.resolve()
    return rules_check.judge(rules_runner.measure(rules_runner.load(path), path), str(path))


def test_the_solution_passes_every_check_in_its_own_process():
    report = rules_check.check_large_batch_rules(rules_check.SOLUTION)
    assert report.ok, str(report)
    assert [c.name for c in report.checks] == CHECK_ORDER
    assert report.max_abs_diff is not None and report.max_abs_diff <= rules_check.WEIGHT_TOLERANCE
    rows = {r["layer"]: r for r in report.trust_ratios}
    assert [name for name, r in rows.items() if r["group"] == "trust"] == ["conv.weight", "fc.weight", "head.weight"]
    assert all(r["same"] for r in rows.values())
    assert 0 < rows["conv.weight"]["engine"] < 1 and rows["head.weight"]["engine"] == pytest.approx(1)
    assert rows["bn.weight"]["engine"] == pytest.approx(1) and rows["bn.weight"]["w_norm"] > 0
    assert "28 warm-up steps of 140: step 0: 0.036" in report["warmup"].detail
    assert "local LR of each layer" in str(report) and "<th>yours</th>" in report._repr_html_()


def test_every_planted_mistake_applies_to_the_solution(tmp_path):
    for mistake in rules_check.PLANTED_MISTAKES:
        planted = rules_check.plant_mistake(mistake, tmp_path / f"{mistake}.py").read_text()
        assert planted != rules_check.SOLUTION.read_text()
        compile(planted, mistake, "exec")
    assert set(EXPECTED_FAILURES) == set(rules_check.PLANTED_MISTAKES)
    with pytest.raises(ValueError, match="mistake='typo'"):
        rules_check.plant_mistake("typo", tmp_path / "x.py")


@pytest.mark.parametrize("mistake", sorted(EXPECTED_FAILURES))
def test_a_planted_mistake_is_caught_and_named(mistake, tmp_path):
    failing, words = EXPECTED_FAILURES[mistake]
    report = judge_in_process(rules_check.plant_mistake(mistake, tmp_path / "my_rules.py"))
    assert set(report.failed) == failing, str(report)
    first = next(c for c in report.checks if c.verdict == rules_check.FAIL)
    assert words in first.detail, str(report)
    assert not report.ok and "FAIL" in str(report) and "FAIL" in report._repr_html_()


def test_the_lars_check_names_the_layer_that_differs_most(tmp_path):
    report = judge_in_process(rules_check.plant_mistake("ratio_without_weight_decay", tmp_path / "my_rules.py"))
    wrong = [r["layer"] for r in report.trust_ratios if not r["same"]]
    assert wrong == ["conv.weight", "fc.weight"]  # the plain-SGD layers and the zero-initialised head are right
    assert report["lars"].detail.startswith("the local LR of fc.weight differs most")
    assert report.max_abs_diff > rules_check.WEIGHT_TOLERANCE
    assert "<- differs" in str(report)


def test_the_participant_copy_says_what_is_still_to_write(tmp_path):
    text, stripped = exercises.strip_script(rules_check.SOLUTION, rules_check.SOLUTION.parent)
    assert stripped.code_blocks == 4
    path = tmp_path / "my_rules.py"
    path.write_text(text)
    report = judge_in_process(path)
    assert report["run"].verdict == rules_check.PASS
    assert "scaled_lr is not written yet" in report["scaling"].detail
    assert "warmup_then_decay is not written yet" in report["warmup"].detail
    assert "fix it first" in report["scheduler"].detail
    assert "LARS is not written yet" in report["lars"].detail


def test_an_error_shows_the_files_own_lines(tmp_path):
    path = tmp_path / "my_rules.py"
    path.write_text(rules_check.SOLUTION.read_text().replace(
        "return base_lr * batch / base_batch", "return base_lr * batch / (base_batch - base_batch)"))
    detail = judge_in_process(path)["scaling"].detail
    assert "scaled_lr raised an error" in detail and "ZeroDivisionError" in detail
    assert "my_rules.py" in detail and "rules_runner" not in detail


def test_a_syntax_error_is_shown_and_nothing_else_is_checked(tmp_path):
    path = tmp_path / "my_rules.py"
    path.write_text("def scaled_lr(base_lr, base_batch, batch)\n    return base_lr\n")
    report = rules_check.check_large_batch_rules(path)
    assert report.failed == ["run"]
    assert "SyntaxError" in report["run"].detail and "line 1" in report["run"].detail
    assert all(c.verdict == rules_check.SKIP for c in report.checks[1:])


def test_a_file_that_hangs_is_stopped_at_the_timeout(tmp_path):
    path = tmp_path / "my_rules.py"
    path.write_text("import time\ntime.sleep(600)\n")
    rules_check.engine_answers()  # the engine's answers first (then cached): the 1 s below bound the file alone
    report = rules_check.check_large_batch_rules(path, timeout_s=1)
    assert report.failed == ["run"]
    assert "did not finish within 1 s" in report["run"].detail
    assert report.seconds < 1 + 2 * rules_check.STOP_GRACE_S


def test_a_part_that_hangs_fails_and_the_parts_after_it_are_not_checked():
    measured = {"load": {"ok": True}, "scaling": {"values": list(rules_check.engine_answers()["scaling"])},
                "running": "warmup"}
    report = rules_check.judge(measured, "my_rules.py", timed_out=True, timeout_s=60)
    assert [c.verdict for c in report.checks] == ["pass", "pass", "FAIL", "not checked", "not checked"]
    assert "did not finish within 60 s" in report["warmup"].detail


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="path='nowhere/my_rules.py'"):
        rules_check.check_large_batch_rules("nowhere/my_rules.py")
    with pytest.raises(ValueError, match="timeout_s=0"):
        rules_check.check_large_batch_rules(rules_check.SOLUTION, timeout_s=0)


def test_the_fixed_model_is_the_same_every_time_and_leaves_the_global_rng_alone():
    import torch

    state = torch.random.get_rng_state()
    first, second = rules_runner.fixed_model(), rules_runner.fixed_model()
    assert torch.equal(state, torch.random.get_rng_state())
    for (name, a), b in zip(first.named_parameters(), second.parameters(), strict=True):
        assert a.dtype == torch.float64 and torch.equal(a, b), name
    norms = {n: torch.linalg.vector_norm(p).item() for n, p in first.named_parameters()}
    assert norms["head.weight"] == 0 and norms["bn.weight"] == pytest.approx(math.sqrt(8))


def test_the_report_reads_as_text_and_as_a_table():
    report = rules_check.RulesCheckReport("x.py", [
        rules_check.Check("run", rules_check.PASS, "loaded"),
        rules_check.Check("scaling", rules_check.FAIL, "gives <0.57>")])
    assert report.failed == ["scaling"] and not report.ok
    text = str(report)
    assert text.splitlines()[0].endswith(": 1 problem")
    assert "FAIL" in text.splitlines()[2] and "scaling" in text.splitlines()[2]
    page = report._repr_html_()
    assert page.count("<tr>") == 3 and "&lt;0.57&gt;" in page
    with pytest.raises(KeyError, match="no check 'lars'"):
        report["lars"]


def test_the_scripts_example_runs_as_a_program(capsys):
    source = rules_check.SOLUTION.read_text()
    exec(compile(source, str(rules_check.SOLUTION), "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert "batch 4096: lr 1.6" in printed and "28 warm-up steps of 140" in printed
    assert printed.count("\n") == 3
