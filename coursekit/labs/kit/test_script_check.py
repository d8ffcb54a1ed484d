"""The checkers' shared report format and process handling, without a checker (no torch, no training)."""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass

import pytest

from coursekit.labs.kit import script_check
from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, Check, CheckReport
from coursekit.launch import held_ports

QUESTIONS = {"run": "the script runs", "weights": "the weights are right", "printing": "rank 0 alone prints"}


@dataclass(repr=False)
class DemoReport(CheckReport):
    script: str
    checks: list[Check]
    questions = QUESTIONS

    def headline(self) -> str:
        return f"demo check of {self.script}: {self.summary()}"


def demo() -> DemoReport:
    return DemoReport("x.py", [Check("run", PASS, "ran"), Check("weights", FAIL, "max <Δw>\nlargest in fc"),
                               Check("printing", SKIP, "not run")])


def test_the_report_reads_as_text_and_as_a_table():
    report = demo()
    assert report.failed == ["weights"] and not report.ok and report["run"].detail == "ran"
    assert repr(report) == str(report) == (
        "demo check of x.py: 1 problem\n"
        "  pass         run       ran\n"
        "  FAIL         weights   max <Δw>\n"
        "                         largest in fc\n"
        "  not checked  printing  not run")
    page = report._repr_html_()
    assert page.count("<tr>") == 4 and "max &lt;Δw&gt;" in page and "weights: the weights are right" in page
    with pytest.raises(KeyError, match="no check 'speed'"):
        report["speed"]
    assert DemoReport("y.py", [Check("run", PASS, "ran")]).headline() == "demo check of y.py: all checks pass"


def test_a_traceback_keeps_the_participants_frames_only():
    stderr = ('Traceback (most recent call last):\n  File "/k/the_runner.py", line 9, in main\n    runpy.run_path(s)\n'
              '  File "<frozen runpy>", line 287, in run_path\n    code\n  File "/t/mine.py", line 3, in <module>\n'
              '    raise ValueError("no")\n\nValueError: no\n')
    assert script_check.without_runner(stderr, "the_runner.py") == (
        'Traceback (most recent call last):\n  File "/t/mine.py", line 3, in <module>\n    raise ValueError("no")\n'
        '\nValueError: no')
    assert script_check.last_own_lines(stderr, "the_runner.py", lines=2) == '    raise ValueError("no")\nValueError: no'
    assert script_check.tail("\n a\n\nb \n", 5) == "a\nb" and script_check.tail("") == "(nothing)"


def test_the_ranks_stop_soon_after_the_first_failure(tmp_path):
    ranks = script_check.start_ranks(
        [sys.executable, "-c", "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit('rank 1 breaks')\n"
                               "time.sleep(60)"], 2, tmp_path, lambda rank: script_check.rank_env(rank, 2))
    start = time.monotonic()
    assert not script_check.watch(ranks, 30, crash_grace_s=0.2, poll_s=0.02)
    assert time.monotonic() - start < 10 and all(p.poll() is not None for p in ranks)
    assert [p.returncode for p in ranks] == [-15, 1]  # rank 0 stopped with SIGTERM
    assert script_check.read_text(script_check.rank_output(tmp_path, 1, "err")).strip() == "rank 1 breaks"
    assert script_check.read_text(tmp_path / "absent") == ""


def test_a_hanging_process_is_stopped_at_the_deadline(tmp_path):
    hang = script_check.start_ranks([sys.executable, "-c", "import time; time.sleep(60)"], 1, tmp_path,
                                    lambda rank: script_check.launcher_free_env())
    assert script_check.watch(hang, 0.3, poll_s=0.02) and hang[0].poll() is not None


def test_held_ports_differ_and_no_one_else_gets_them_until_released():
    with held_ports(3) as ports:
        assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)
        others = set()
        for _ in range(300):  # the system hands out no held port to another bind
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                others.add(sock.getsockname()[1])
        assert not others & set(ports)
        with socket.socket() as store:  # a rank's store (SO_REUSEADDR, as c10d's) can still listen on one
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("", ports[0]))
            store.listen()


def test_a_planted_mistake_and_a_typo(tmp_path):
    solution = tmp_path / "solution.py"
    solution.write_text("lr = args.lr\nmodel = DDP(model)\n")
    mistakes = {"lr": ("the lr doubled", (("lr = args.lr", "lr = 2 * args.lr"),)),
                "gone": ("nothing", (("not there", ""),))}
    planted = script_check.plant_mistake(mistakes, "lr", tmp_path / "x.py", solution)
    assert planted.read_text() == "lr = 2 * args.lr\nmodel = DDP(model)\n"
    with pytest.raises(ValueError, match="mistake='typo': choose one of"):
        script_check.plant_mistake(mistakes, "typo", tmp_path / "y.py", solution)
    with pytest.raises(ValueError, match="cannot plant 'gone'"):
        script_check.plant_mistake(mistakes, "gone", tmp_path / "y.py", solution)
