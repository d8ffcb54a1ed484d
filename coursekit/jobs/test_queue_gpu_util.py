"""The queue view's GPU column: the latest utilisation a job's metrics record, "—" where none does."""

from __future__ import annotations

from coursekit.jobs.queue_table import COLUMNS, UNKNOWN, QueueRow, gpu_util_text, rows_to_html, rows_to_text


def test_latest_step_record_gives_the_utilisation():
    records = [{"kind": "start", "config": {}}, {"kind": "step", "step": 10, "gpu_util_pct": 40.0},
               {"kind": "step", "step": 20, "gpu_util_pct": 93.4}]
    assert gpu_util_text(records) == "93%"


def test_ended_job_without_step_values_shows_the_summary_mean():
    records = [{"kind": "step", "step": 10}, {"kind": "summary", "status": "completed", "gpu": {"gpu_util_mean_pct": 71.6}}]
    assert gpu_util_text(records) == "72%"


def test_cpu_runs_and_empty_metrics_show_a_dash():
    assert gpu_util_text([{"kind": "step", "step": 10}, {"kind": "summary", "status": "completed"}]) == UNKNOWN
    assert gpu_util_text([]) == UNKNOWN


def test_the_column_is_in_both_tables():
    row = QueueRow("42", "lab02", "RUNNING", 65.0, "node1", "step 10/100 (10%)", "loss 1.2", gpu_util="88%")
    text = rows_to_text([row])
    assert "GPU use" in text and "88%" in text and text.index("88%") < text.index("loss 1.2")
    assert "<td style='padding:2px 8px'>88%</td>" in rows_to_html([row])
    assert len(row.cells()) == len(COLUMNS)
    assert QueueRow("43", "lab02", "PENDING").cells()[COLUMNS.index("GPU use")] == UNKNOWN
