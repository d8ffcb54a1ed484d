"""bench/ddp_gpu.py on CPU processes (gloo) and its report: the GPU command must work the first time it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import ddp_gpu  # noqa: E402
import report_ddp  # noqa: E402

SMOKE_RESULT = Path(__file__).parent / "data" / "ddp_gpu_cpu_smoke.json"  # a full --cpu-smoke run, kept as input
SMOKE_TIMEOUT_S = 600
NCCL_LOG = """\
gpu1:811:811 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
gpu1:811:830 [0] NCCL INFO Channel 00/04 :    0   1
gpu1:811:830 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1
gpu1:811:830 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu1:812:831 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu1:812:831 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via SHM/direct/direct
"""


def test_nccl_debug_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    log.write_text(NCCL_LOG)
    seen = ddp_gpu.transports(log)
    assert seen["nccl_version"] == "2.27.5+cuda12.9" and seen["connections"] == 3
    assert seen["via"] == {"P2P": 2, "SHM": 1}
    assert seen["ring_lines"] == ["Channel 00/04 :    0   1"] and seen["tree_lines"][0].startswith("Trees [0]")
    assert ddp_gpu.transports(tmp_path / "missing.log")["connections"] == 0


def test_report_of_a_full_cpu_smoke_run() -> None:
    result = json.loads(SMOKE_RESULT.read_text())
    text = report_ddp.render(result)
    for heading in ("(a) Scaling", "(b) NCCL all-reduce", "(c) GPU binding", "(d) Gradient buckets"):
        assert heading in text
    assert "CPU smoke run" in text and result["command"] in text
    weak_2 = next(r for r in result["scaling"] if r["mode"] == "weak" and r["world_size"] == 2)
    assert weak_2["efficiency"] == weak_2["img_s"] / result["scaling"][0]["img_s"] / 2
    assert f"| weak | 2 | {weak_2['batch_per_gpu']} |" in text and "≥ 0.93" in text


def test_cpu_smoke_runs_one_process_per_device_with_both_bindings(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One process per device with node and task binding: bus bandwidth (with its NCCL log), and the engine under
    task binding (each process given its own devices).
    (The torchrun launch of part "busbw" is left out here: the multi-node Slurm test runs torchrun.)
    The bench's main runs in this process (its ranks are processes of their own, each launch bounded by
    ddp_gpu.RUN_TIMEOUT_S): a process of its own cost CI another import of torch; the command line itself is
    test_the_command_line_refuses_publishing_a_smoke's."""
    out, report = tmp_path / "ddp.json", tmp_path / "REPORT.md"
    code = ddp_gpu.main(["--cpu-smoke", "--parts", "binding", "--out", str(out), "--report", str(report)])
    assert code == 0, capsys.readouterr()
    result = json.loads(out.read_text())
    assert set(result) >= {"machine", "command", "binding"} and "scaling" not in result
    task_busbw = result["binding"]["task"]["busbw"]
    assert [row["bytes"] for row in task_busbw["rows"]] == list(ddp_gpu.CPU_SMOKE.busbw_sizes)
    for row in task_busbw["rows"]:
        assert row["busbw_gbs"] == row["algbw_gbs"] * 2 * (2 - 1) / 2 > 0
    for binding in ("node", "task"):
        part = result["binding"][binding]
        assert part["busbw"]["backend"] == "gloo" and "nccl_debug" in part["busbw"]
    engine = result["binding"]["task"]["engine"]  # on CPU the engine runs under task binding only
    assert engine["ok"] and engine["img_s"] > 0 and engine["world_size"] == 2 and "engine" not in result["binding"]["node"]
    assert (tmp_path / "ddp_logs" / "engine_task_2.log").read_text().count("CUDA_VISIBLE_DEVICES=") == 2
    assert "(c) GPU binding" in report.read_text() and "(a) Scaling" not in report.read_text()


def test_the_participant_script_it_times_is_lab_06s() -> None:
    """The script row is skipped when the file is missing: a moved script must fail here, not vanish there."""
    assert ddp_gpu.SCRIPT.is_file(), ddp_gpu.SCRIPT


def test_the_command_line_refuses_publishing_a_smoke() -> None:
    """``python bench/ddp_gpu.py`` as a command (argparse only: no torch, no ranks)."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "ddp_gpu.py"), "--cpu-smoke", "--publish"],
                         capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S, cwd=ROOT)
    assert run.returncode == 2 and "--publish writes the labs' recording" in run.stderr, run.stdout + run.stderr
