"""ScriptExercise: the opening steps' messages, planted mistakes, the reference cache and the run gate."""

from __future__ import annotations

import pytest

from coursekit.labs.kit import exercise
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, Check

QUESTIONS = {"run": "it runs", "speed": "it is fast", "memory": "it is small"}
MISTAKES = {"slow": ("sleeps", (("x = 1\n", "import time\ntime.sleep(1)\nx = 1\n"),)),
            "twice": ("not once", (("y = 2\n", "y = 3\n"),))}


@pytest.fixture
def made(tmp_path):
    solution = tmp_path / "solution.py"
    solution.write_text("x = 1\ny = 2\ny = 2\n")
    return ScriptExercise(solution, tmp_path / "my_runner.py", QUESTIONS, MISTAKES, "toy script", "lab99/toy.py",
                          "toy_reference.py", "toy", made_from="your toy version")


def test_the_opening_steps_say_what_to_give(made, tmp_path):
    with pytest.raises(FileNotFoundError, match="give the path of your toy script, .* e.g. 'lab99/toy.py'"):
        made.script(tmp_path / "missing.py")
    script = made.script(made.solution)
    with pytest.raises(FileNotFoundError, match="no toy_reference.py next to solution.py: no toy script at .*; "
                                                "pass reference= the script your toy version was made from"):
        made.reference(script, None)
    (tmp_path / "toy_reference.py").write_text("")
    assert made.reference(script, None) == tmp_path / "toy_reference.py"
    with pytest.raises(ValueError, match="give a list of one or more scripts"):
        made.scripts(str(script))
    for call, bad in ((exercise.positive_timeout, 0), (exercise.processes, 1), (exercise.known_device, "tpu")):
        with pytest.raises(ValueError):
            call(bad)
    assert exercise.resolve_device("auto", False, "here") == "cpu"
    with pytest.raises(ValueError, match="no GPU is visible here"):
        exercise.resolve_device("cuda", False, "here")


def test_planted_mistakes(made, tmp_path):
    target = made.plant_mistake("slow", tmp_path / "planted.py")
    assert "time.sleep(1)" in target.read_text()
    assert "time.sleep(1)" in made.planted("slow")
    with pytest.raises(ValueError, match="is not once in"):
        made.planted("twice")
    with pytest.raises(ValueError, match="mistake='typo'"):
        made.planted("typo")


def test_the_cache_computes_once_and_keeps_no_failure(made):
    calls = []
    assert made.cached(("a",), lambda: calls.append(1) or len(calls)) == 1
    assert made.cached(("a",), lambda: calls.append(1) or len(calls)) == 1
    with pytest.raises(RuntimeError):
        made.cached(("b",), lambda: (_ for _ in ()).throw(RuntimeError("failed")))
    assert made.cached(("b",), lambda: 7) == 7


def test_the_run_gate_skips_the_other_checks(made):
    run = Check("run", FAIL, "it crashed")
    checks = made.not_run(run, instead={"memory": Check("memory", FAIL, "too big")})
    assert [(c.name, c.verdict) for c in checks] == [("run", FAIL), ("speed", SKIP), ("memory", FAIL)]
    assert made.not_run(Check("run", PASS, ""), "the file did not load")[1].detail == "the file did not load"
