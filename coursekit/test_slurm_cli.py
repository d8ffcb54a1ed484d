"""Reading Slurm's output (squeue, sacct, sinfo) and its errors, with the commands faked."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from coursekit import slurm_cli
from coursekit.slurm_cli import SlurmError

SQUEUE_TEXT = (
    "41|41|N/A|train|RUNNING|None|1:05|2:00:00|1|vm|gpu|ada|2026-11-26T10:00:00|2026-11-26T10:00:01\n"
    "42_3|42|3|sweep|PENDING|Resources|0:00|2:00:00|1||gpu|ada|2026-11-26T10:00:02|N/A\n"
    "42_[4-5]|42|4-5|sweep|PENDING|Priority|0:00|2:00:00|1||gpu|ada|2026-11-26T10:00:02|N/A\n"
    "garbage line without separators\n"
)
SACCT_TEXT = (
    "50|fail|FAILED|1:0|00:00:03|vm|2026-11-26T10:00:00|2026-11-26T10:00:01|2026-11-26T10:00:04|gpu\n"
    "50.batch|batch|FAILED|1:0|00:00:03|vm|2026-11-26T10:00:00|2026-11-26T10:00:01|2026-11-26T10:00:04|\n"
    "51|stop|CANCELLED by 0|0:15|00:00:09|vm|2026-11-26T10:00:00|2026-11-26T10:00:01|2026-11-26T10:00:10|gpu\n"
    "52_[1-3,7%2]|arr|PENDING|0:0|00:00:00|None assigned|2026-11-26T10:00:00|Unknown|Unknown|gpu\n"
    "53|big|OUT_OF_MEMORY|0:125|00:01:00|vm|2026-11-26T10:00:00|2026-11-26T10:00:01|2026-11-26T10:01:01|gpu\n"
)


def fake_run(monkeypatch: pytest.MonkeyPatch, stdout: str = "", stderr: str = "", returncode: int = 0,
             calls: list[list[str]] | None = None) -> None:
    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        assert kwargs.get("capture_output") and kwargs.get("text") and kwargs.get("timeout")
        assert "shell" not in kwargs
        if calls is not None:
            calls.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    monkeypatch.setattr(slurm_cli.subprocess, "run", run)


def test_squeue_rows_arrays_and_filtering(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    fake_run(monkeypatch, SQUEUE_TEXT, calls=calls)
    rows = slurm_cli.squeue(["41", "42_3"])
    assert [(r["job_id"], r["state"], r["node_list"]) for r in rows] == [("41", "RUNNING", "vm"), ("42_3", "PENDING", "")]
    command = calls[0]
    assert command[0] == "squeue" and "-r" in command and "--states=all" in command
    assert command[command.index("-j") + 1] == "41,42"  # array tasks are asked by their array id


def test_squeue_of_forgotten_jobs_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_run(monkeypatch, stderr="slurm_load_jobs error: Invalid job id specified", returncode=1)
    assert slurm_cli.squeue(["999"]) == []


def test_controller_down_is_an_error_with_slurms_words(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    fake_run(monkeypatch, stderr=message, returncode=1)
    with pytest.raises(SlurmError, match="Unable to contact slurm controller") as caught:
        slurm_cli.squeue(["1"])
    assert caught.value.message == message and caught.value.returncode == 1


def test_sacct_rows_skip_steps_expand_arrays_and_normalise_states(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_run(monkeypatch, SACCT_TEXT)
    rows = {r["job_id"]: r for r in slurm_cli.sacct(["50", "51", "52", "53"])}
    assert set(rows) == {"50", "51", "52_1", "52_2", "52_3", "52_7", "53"}
    assert rows["50"]["state"] == "FAILED" and rows["50"]["exit_code"] == "1:0"
    assert rows["51"]["state"] == "CANCELLED"
    assert rows["53"]["state"] == "OUT_OF_MEMORY"


EVIDENCE_TEXT = (
    "60|ada|1002|COMPLETED|42|2026-11-26T10:00:00|2026-11-26T10:00:42|ws-ada-race\n"
    "60.batch|||COMPLETED|42|2026-11-26T10:00:00|2026-11-26T10:00:42|batch\n"
    "61_0|bob|1003|FAILED|3|2026-11-26T10:00:00|2026-11-26T10:00:03|ws-bob-race\n"
    "61_1|bob|1003|COMPLETED|5|2026-11-26T10:00:00|2026-11-26T10:00:05|ws-bob-race\n"
)


def test_job_evidence_asks_once_for_every_id_and_never_passes_a_foreign_id(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    fake_run(monkeypatch, EVIDENCE_TEXT, calls=calls)
    ids = ["60", "61_0", "61_1", "61_0", "999", "60; rm -rf ~", "-a", None, "j7"]
    found = slurm_cli.job_evidence(ids)
    assert len(calls) == 1, "one sacct call for the whole board"
    command = calls[0]
    assert command[:2] == ["sacct", "-n"] and "-a" in command and "-X" in command
    assert command[command.index("-j") + 1] == "60,61,999"  # arrays asked by their array id; only Slurm's ids
    assert set(found) == {"60", "61_0", "61_1"}  # 999: unknown to accounting
    assert found["60"] == {"job_id": "60", "user": "ada", "uid": 1002, "state": "COMPLETED", "elapsed_s": 42.0,
                           "start": "2026-11-26T10:00:00", "end": "2026-11-26T10:00:42", "name": "ws-ada-race"}
    assert found["61_0"]["state"] == "FAILED" and found["61_1"]["elapsed_s"] == 5.0
    calls.clear()
    assert slurm_cli.job_evidence(["x", None]) == {} and calls == []  # nothing to ask: no call


def test_accounting_disabled_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm_cli._accounting_cache.clear()
    fake_run(monkeypatch, stderr="sacct: error: Slurm accounting storage is disabled", returncode=1)
    assert slurm_cli.accounting_enabled(max_age_s=0) is False
    fake_run(monkeypatch, stdout="")
    assert slurm_cli.accounting_enabled(max_age_s=0) is True
    slurm_cli._accounting_cache.clear()


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8), ("gpu:v100:2,mps:100", 2), ("(null)", 0), ("", 0),
    ("gpu:tesla:2(S:0),gpu:k80:2(S:1)", 4),
])
def test_gpus_in_gres(gres: str, gpus: int) -> None:
    assert slurm_cli.gpus_in_gres(gres) == gpus


def test_sinfo_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_run(monkeypatch, "gpu*|gpu:4|16|1|up|infinite\ncpu|(null)|64|10|up|1-00:00:00\n")
    rows = slurm_cli.sinfo_partitions()
    assert rows[0] == {"name": "gpu", "default": True, "gres": "gpu:4", "gpus_per_node": 4, "cpus": 16,
                       "nodes": 1, "available": "up", "time_limit": "infinite"}
    assert rows[1]["gpus_per_node"] == 0 and not rows[1]["default"]


@pytest.mark.parametrize("raw, state", [
    ("CANCELLED by 1000", "CANCELLED"), ("CA", "CANCELLED"), ("OUT_OF_ME+", "OUT_OF_MEMORY"), ("running", "RUNNING"),
    ("", "UNKNOWN"), ("NODE_FAIL", "NODE_FAIL"),
])
def test_normalise_state(raw: str, state: str) -> None:
    assert slurm_cli.normalise_state(raw) == state


def test_terminal_states() -> None:
    for state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "VANISHED"):
        assert slurm_cli.is_terminal(state)
    for state in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "UNKNOWN"):
        assert not slurm_cli.is_terminal(state)


def test_durations() -> None:
    assert slurm_cli.parse_duration("1:05") == 65
    assert slurm_cli.parse_duration("2-01:00:00") == 176400
    assert slurm_cli.parse_duration("INVALID") is None


@pytest.mark.parametrize("make_error, words", [
    (lambda c, **k: (_ for _ in ()).throw(FileNotFoundError(c[0])), "not installed"),
    (lambda c, **k: (_ for _ in ()).throw(subprocess.TimeoutExpired(c, 30)), "no answer"),
])
def test_missing_or_hanging_commands(monkeypatch: pytest.MonkeyPatch, make_error: Callable, words: str) -> None:
    monkeypatch.setattr(slurm_cli.subprocess, "run", make_error)
    with pytest.raises(SlurmError, match=words):
        slurm_cli.scancel(["1"])


def test_row_for_array_tasks() -> None:
    rows = [{"job_id": "77", "state": "CANCELLED"}, {"job_id": "77_0", "state": "COMPLETED"}]
    assert slurm_cli.row_for(rows, "77_0")["state"] == "COMPLETED"
    assert slurm_cli.row_for(rows, "77_5")["state"] == "CANCELLED"
    assert slurm_cli.row_for(rows, "78") is None and slurm_cli.row_for([], "78_1") is None
