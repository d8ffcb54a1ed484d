"""The queue view: pure table functions, the row source (fake Slurm), the live widget's thread, a real
Jupyter kernel, and (marker ``slurm``) real jobs followed to their end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from coursekit.jobs import queue_view, watcher
from coursekit.jobs.handle import Job
from coursekit.jobs.queue_table import (
    QueueRow,
    format_duration,
    last_log_line,
    progress_text,
    rows_to_html,
    rows_to_text,
    status_message,
)
from coursekit.jobs.queue_view import QueueSource, QueueView, display_slurm_queue, watch_queue
from coursekit.slurm_cli import SlurmError

QUICK_RETURN_S = 30.0  # display_slurm_queue in a kernel returns while its job runs, and well within this
THREAD_END_S = 10.0


@pytest.fixture(autouse=True)
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test in its own course folder (job handles record final states in its registry)."""
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setattr(watcher, "_watcher", watcher.StateWatcher(min_delay_s=0.0, max_delay_s=0.0))
    return tmp_path


# ------------------------------------------------------------------------------------------ pure table


def test_format_duration_follows_slurm() -> None:
    assert format_duration(None) == ""
    assert format_duration(5) == "0:05"
    assert format_duration(125.9) == "2:05"
    assert format_duration(3 * 3600 + 4 * 60 + 5) == "3:04:05"
    assert format_duration(2 * 86400 + 3600) == "2-01:00:00"


def test_progress_text_from_metrics_records() -> None:
    start = {"kind": "start", "config": {"epochs": 5, "steps": None, "test_steps": None}}
    assert progress_text([]) == ""
    assert progress_text([start]) == "started"
    running = [start, {"kind": "step", "step": 40, "epoch": 2}]
    assert progress_text(running) == "step 40 · epoch 2/5"
    with_total = [{**start, "total_steps": 100}, {"kind": "step", "step": 40, "epoch": 2}]
    assert progress_text(with_total) == "step 40/100 (40%) · epoch 2/5"
    test_mode = [{"kind": "start", "config": {"epochs": 5, "test_steps": 20}}, {"kind": "step", "step": 5, "epoch": 1}]
    assert progress_text(test_mode) == "step 5/20 (25%) · epoch 1"
    epochs_only = [start, {"kind": "epoch", "epoch": 3, "val_acc": 0.5}]
    assert progress_text(epochs_only) == "epoch 3/5"
    ended = [*running, {"kind": "summary", "status": "completed", "val_acc": 0.8125}]
    assert progress_text(ended) == "completed · val_acc 0.812"
    assert progress_text([*running, {"kind": "summary", "status": "nan"}]) == "nan"


def test_last_log_line_skips_progress_bar_redraws_and_submitit_chatter() -> None:
    lines = ["epoch 1 loss 2.3", " 10%|#   \r 50%|#####  \r100%|##########| 20/20", "",
             "submitit INFO (2026-11-26 01:08:14,768) - Job completed successfully", "   "]
    assert last_log_line(lines) == "100%|##########| 20/20"
    assert last_log_line(["x" * 200], width=10) == "x" * 9 + "…"
    assert last_log_line([]) == ""


def test_rows_to_text_aligns_columns() -> None:
    rows = [QueueRow("12", "bs64", "RUNNING", 65, "node1", "step 3", "loss 1.2"),
            QueueRow("1234_5", "a", "PENDING", None, "(Resources)")]
    lines = rows_to_text(rows, "2 jobs").splitlines()
    assert lines[0].split() == ["job", "id", "name", "state", "elapsed", "node", "progress", "GPU", "use", "last",
                                "log", "line"]
    assert lines[1].split() == ["12", "bs64", "RUNNING", "1:05", "node1", "step", "3", "—", "loss", "1.2"]
    assert lines[1].index("RUNNING") == lines[2].index("PENDING") == lines[0].index("state")
    assert lines[-1] == "2 jobs"
    assert rows_to_text([]) == "no jobs"


def test_rows_to_html_escapes_every_cell() -> None:
    rows = [QueueRow("7", "<b>x</b>", "FAILED", 3.0, "n", "", "<script>alert(1)</script>")]
    page = rows_to_html(rows, "msg <i>")
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "msg &lt;i&gt;" in page and page.count("<tr>") == 2
    assert "no jobs" in rows_to_html([])


def test_status_message_counts_states_and_reports_slurm_errors() -> None:
    rows = [QueueRow("1", "a", "RUNNING"), QueueRow("2", "a", "RUNNING"), QueueRow("3", "a", "PENDING")]
    text = status_message(rows, SlurmError("Unable to contact slurm controller"), clock=lambda: 0.0)
    assert text.startswith("1 pending, 2 running") and "Unable to contact slurm controller" in text


# ------------------------------------------------------------------------------------------ row source


def make_job(tmp_path: Path, job_id: str, name: str = "sweep", scheduler: str = "slurm", **kwargs: object) -> Job:
    folder = tmp_path / "jobs" / name / job_id
    folder.mkdir(parents=True)
    return Job(job_id, name, folder, scheduler=scheduler, site=scheduler, **kwargs)


class FakeSlurm:
    """squeue/sacct answers for the row source, counting the calls."""

    def __init__(self) -> None:
        self.queue: dict[str, dict[str, str]] = {}
        self.accounting: dict[str, dict[str, str]] = {}
        self.calls = {"squeue": 0, "sacct": 0}
        self.down = False

    def squeue(self, job_ids: list[str]) -> list[dict[str, str]]:
        self.calls["squeue"] += 1
        if self.down:
            raise SlurmError("Unable to contact slurm controller (connect failure)", ["squeue"])
        return [self.queue[j] for j in job_ids if j in self.queue]

    def sacct(self, job_ids: list[str]) -> list[dict[str, str]]:
        self.calls["sacct"] += 1
        return [self.accounting[j] for j in job_ids if j in self.accounting]


@pytest.fixture
def fake_slurm(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm()
    monkeypatch.setattr(queue_view.slurm_cli, "squeue", fake.squeue)
    monkeypatch.setattr(queue_view.slurm_cli, "sacct", fake.sacct)
    monkeypatch.setattr(queue_view.slurm_cli, "accounting_enabled", lambda: True)
    return fake


def queue_entry(job_id: str, state: str, elapsed: str = "0:00", node: str = "", reason: str = "None") -> dict:
    return {"job_id": job_id, "state": state, "elapsed": elapsed, "node_list": node, "reason": reason}


def test_source_one_squeue_for_all_then_sacct_once_for_jobs_that_left(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    jobs = [make_job(tmp_path, "11"), make_job(tmp_path, "12"), make_job(tmp_path, "13_0")]
    (jobs[0].folder / "metrics.jsonl").write_text(json.dumps({"kind": "start", "config": {"epochs": 2}}) + "\n"
                                                  + json.dumps({"kind": "step", "step": 3, "epoch": 1}) + "\n")
    jobs[0].stdout.write_text("loading data\nloss 0.9\n")
    fake_slurm.queue = {"11": queue_entry("11", "RUNNING", "1:05", "node7"),
                        "12": queue_entry("12", "PENDING", reason="Resources"),
                        "13_0": queue_entry("13_0", "RUNNING", "0:10", "node8")}
    source = QueueSource(jobs=jobs)
    rows = {row.job_id: row for row in source.rows()}
    assert fake_slurm.calls == {"squeue": 1, "sacct": 0}
    assert rows["11"] == QueueRow("11", "sweep", "RUNNING", 65.0, "node7", "step 3 · epoch 1/2", "loss 0.9")
    assert rows["12"].node == "(Resources)" and rows["12"].state == "PENDING"
    # 11 leaves the queue and is found in accounting; 12 starts; 13_0 ends while still in squeue
    del fake_slurm.queue["11"]
    fake_slurm.accounting["11"] = {"job_id": "11", "state": "COMPLETED", "elapsed": "00:02:00", "node_list": "node7"}
    fake_slurm.queue["12"] = queue_entry("12", "RUNNING", "0:01", "node7")
    fake_slurm.queue["13_0"] = queue_entry("13_0", "FAILED", "0:12", "node8")
    rows = {row.job_id: row for row in source.rows()}
    assert fake_slurm.calls == {"squeue": 2, "sacct": 1}
    assert (rows["11"].state, rows["11"].elapsed_s) == ("COMPLETED", 120.0)
    assert rows["12"].state == "RUNNING" and rows["13_0"].state == "FAILED"
    # ended jobs are never asked again
    fake_slurm.queue["12"] = queue_entry("12", "COMPLETED", "0:30", "node7")
    source.rows()
    fake_slurm.queue.clear()
    final = source.rows()
    assert fake_slurm.calls == {"squeue": 3, "sacct": 1}
    assert [row.state for row in final] == ["COMPLETED", "COMPLETED", "FAILED"]


def test_source_reports_unreachable_controller_as_unknown(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.down = True
    source = QueueSource(jobs=[make_job(tmp_path, "5")])
    rows = source.rows()
    assert [row.state for row in rows] == ["UNKNOWN"] and not rows[0].done
    assert source.error is not None and "Unable to contact" in source.error.message


def test_source_local_job_from_its_handle(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    finished = make_job(tmp_path, "4242", scheduler="local", pid=None)
    (finished.folder / ".coursekit_cancelled").write_text("")
    rows = QueueSource(jobs=[finished]).rows()
    assert rows[0].state == "CANCELLED" and rows[0].done
    assert fake_slurm.calls == {"squeue": 0, "sacct": 0}


def test_source_reads_the_registry_and_leaves_out_old_ended_jobs(tmp_path: Path, fake_slurm: FakeSlurm,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1_000_000.0
    records = [
        {"job_id": "1", "name": "a", "folder": str(tmp_path / "1"), "submitted_at": now - 7200, "final_state": "COMPLETED"},
        {"job_id": "2", "name": "a", "folder": str(tmp_path / "2"), "submitted_at": now - 7200},  # state not known yet
        {"job_id": "3", "name": "a", "folder": str(tmp_path / "3"), "submitted_at": now - 60, "final_state": "FAILED"},
        {"job_id": "4", "name": "b", "folder": str(tmp_path / "4"), "submitted_at": now - 10},
    ]
    monkeypatch.setattr(queue_view.registry, "merged_records", lambda: records)
    assert [job.job_id for job in QueueSource("a", clock=lambda: now).jobs()] == ["2", "3"]
    assert [job.job_id for job in QueueSource(None, clock=lambda: now).jobs()] == ["2", "3", "4"]
    assert [job.job_id for job in QueueSource(None, clock=lambda: now, max_rows=1).jobs()] == ["4"]


def test_source_records_final_states_so_old_jobs_drop_out(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    from coursekit.jobs import registry

    long_ago = time.time() - 10 * 3600
    for job_id in ("61", "62"):
        registry.append(Job(job_id, "old", tmp_path / job_id, submitted_at=long_ago).record())
    fake_slurm.accounting = {"61": {"job_id": "61", "state": "COMPLETED", "elapsed": "0:10", "node_list": "n1"}}
    fake_slurm.queue = {"62": queue_entry("62", "RUNNING", "9:00:00", "n1")}
    rows = QueueSource("old").rows()
    assert [(row.job_id, row.state) for row in rows] == [("61", "COMPLETED"), ("62", "RUNNING")]
    assert {r["job_id"]: r.get("final_state") for r in registry.merged_records()} == {"61": "COMPLETED", "62": None}
    assert [job.job_id for job in QueueSource("old").jobs()] == ["62"], "an old ended job is not shown again"


# ------------------------------------------------------------------------------------------ views


class ScriptedSource:
    """A row source whose rows follow a script, one step per refresh; each refresh takes ``delay_s``, and
    waits first until ``gate`` (if given) is set: a cluster that answers only when the test lets it."""

    def __init__(self, script: list[list[QueueRow]], delay_s: float = 0.0,
                 gate: threading.Event | None = None) -> None:
        self.script, self.delay_s, self.calls, self.error, self.gate = script, delay_s, 0, None, gate

    def rows(self) -> list[QueueRow]:
        if self.gate is not None:
            self.gate.wait(THREAD_END_S)
        time.sleep(self.delay_s)
        self.calls += 1
        return self.script[min(self.calls, len(self.script)) - 1]


RUNNING = [QueueRow("1", "a", "RUNNING", 1.0), QueueRow("2", "a", "PENDING")]
ENDED = [QueueRow("1", "a", "COMPLETED", 2.0), QueueRow("2", "a", "FAILED", 1.0)]


def test_widget_returns_at_once_refreshes_in_background_and_stops_by_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[object] = []
    monkeypatch.setattr(queue_view, "in_kernel", lambda: True)
    monkeypatch.setattr("IPython.display.display", shown.append)
    cluster_answers = threading.Event()  # no refresh can end before the test sets it: an event, not a clock
    source = ScriptedSource([RUNNING, RUNNING, ENDED], gate=cluster_answers)
    monkeypatch.setattr(queue_view, "QueueSource", lambda name, jobs: source)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    view = display_slurm_queue("a", timestep=0.05)
    assert source.calls == 0, "must not wait for a refresh"
    assert isinstance(view, QueueView) and shown == [view.widget] and view.thread.is_alive()
    cluster_answers.set()
    view.thread.join(THREAD_END_S)
    assert not view.thread.is_alive(), "the view stops by itself once every job has ended"
    assert source.calls == 3 and "FAILED" in view.widget.value and "COMPLETED" in view.widget.value
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_widget_stop_ends_the_thread_early() -> None:
    view = QueueView(ScriptedSource([RUNNING]), timestep=0.05).start()
    deadline = time.monotonic() + THREAD_END_S
    while "RUNNING" not in view.widget.value and time.monotonic() < deadline:  # a first refresh shown
        time.sleep(0.01)
    view.stop()
    view.thread.join(THREAD_END_S)
    assert not view.thread.is_alive() and "RUNNING" in view.widget.value


def test_terminal_prints_the_table_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        fake_slurm: FakeSlurm) -> None:
    fake_slurm.queue = {"31": queue_entry("31", "RUNNING", "0:07", "node1")}
    rows = display_slurm_queue(jobs=[make_job(tmp_path, "31", name="bs32")])
    printed = capsys.readouterr().out
    assert isinstance(rows, list) and rows[0].state == "RUNNING"
    assert "31" in printed and "bs32" in printed and "0:07" in printed and "1 running" in printed


def test_watch_repeats_until_every_job_has_ended(capsys: pytest.CaptureFixture[str]) -> None:
    source = ScriptedSource([RUNNING, RUNNING, ENDED])
    rows = watch_queue(timestep=0.01, source=source)  # type: ignore[arg-type]
    assert rows == ENDED and source.calls == 3
    assert capsys.readouterr().out.count("job id") == 3


@pytest.mark.parametrize("bad", [{"timestep": 0}, {"timestep": -1}, {"timestep": "2"}, {"timestep": True},
                                 {"name": ""}, {"name": 3}])
def test_bad_arguments_raise_value_error_naming_them(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        display_slurm_queue(**bad)


# ------------------------------------------------------------------------------------------ real kernel

KERNEL_CODE = """
import signal, subprocess, time
from pathlib import Path
from coursekit.jobs.handle import Job
from coursekit.jobs.local_process import process_start_time
from coursekit.jobs.queue_view import display_slurm_queue
before = signal.getsignal(signal.SIGINT)
process = subprocess.Popen(["sleep", "600"])  # ends when this code ends it, after display returned
folder = Path({folder!r}); folder.mkdir(parents=True)
job = Job(str(process.pid), "kernel", folder, site="local", scheduler="local", pid=process.pid,
          pid_start=process_start_time(process.pid))
started = time.monotonic()
view = display_slurm_queue(jobs=[job], timestep=0.1)
returned_s = time.monotonic() - started
running_at_return = process.poll() is None
alive_at_return = view.thread.is_alive()
process.terminate()
process.wait()
view.thread.join(20)
print("RESULT", running_at_return and returned_s < {quick}, alive_at_return, view.thread.is_alive(), signal.getsignal(signal.SIGINT) is before,
      view.rows[0].state)
"""


def test_in_a_real_jupyter_kernel(tmp_path: Path) -> None:
    jupyter_client = pytest.importorskip("jupyter_client")
    code = KERNEL_CODE.format(folder=str(tmp_path / "jobs" / "kernel" / "1"), quick=QUICK_RETURN_S)
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path),
                                                              env={**os.environ, "COURSEKIT_COURSE_DIR": str(tmp_path)})
    outputs: list[str] = []
    try:
        reply = client.execute_interactive(
            textwrap.dedent(code), timeout=60,
            output_hook=lambda msg: outputs.append(f"{msg['msg_type']} {json.dumps(msg['content'])}"))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", outputs
    assert any("application/vnd.jupyter.widget-view+json" in out for out in outputs), "a widget was displayed"
    result = next(out for out in outputs if out.startswith("stream") and "RESULT" in out)
    assert "RESULT True True False True" in result, result  # quick return, thread ran, stopped, SIGINT untouched
    assert "VANISHED" in result or "COMPLETED" in result, result


# ------------------------------------------------------------------------------------------ real Slurm

SLEEPER = "import sys, time\nfor i in range(int(sys.argv[1])):\n    print('tick', i, flush=True); time.sleep(1)\n"


@pytest.mark.slurm
def test_follows_real_slurm_jobs_to_their_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.jobs.submit import gpu_jobs_submitter

    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    ids = gpu_jobs_submitter(["sleeper.py 3", "sleeper.py 1"], n_gpu=1, name="queue-it", time_max="00:05:00")
    source = QueueSource("queue-it")
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = source.rows()
        seen |= {row.state for row in rows}
        if rows and all(row.done for row in rows):
            break
        time.sleep(0.5)
    assert sorted(row.job_id for row in rows) == sorted(ids)
    assert all(row.state == "COMPLETED" for row in rows), rows
    assert all(row.node for row in rows) and all(row.elapsed_s is not None for row in rows)
    assert {row.last_line for row in rows} == {"tick 2", "tick 0"}
    assert seen & {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING"}, "the jobs were seen before they ended"


def test_module_never_imports_ipython_at_import_time() -> None:
    code = "import sys, coursekit.jobs.queue_view, coursekit.jobs.logs; print('IPython' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_a_cancelled_job_says_so_in_the_view_and_srun_notes_are_skipped(tmp_path: Path, fake_slurm: FakeSlurm) -> None:
    stopped, failed = make_job(tmp_path, "21"), make_job(tmp_path, "22")
    stopped.stderr.write_text("submitit WARNING (2026-11-26 05:35:06,413) - Bypassing signal SIGTERM\n")
    failed.stderr.write_text("RuntimeError: no data\ncoursekit: the command exited with code 3: t.py\n"
                             "srun: error: node1: task 0: Exited with exit code 3\n")
    fake_slurm.queue = {"21": queue_entry("21", "CANCELLED"), "22": queue_entry("22", "FAILED")}
    rows = {row.job_id: row for row in QueueSource(jobs=[stopped, failed]).rows()}
    assert rows["21"].last_line == "job was cancelled"
    assert rows["22"].last_line == "coursekit: the command exited with code 3: t.py"
