from coursekit.labs.kit import failures
from coursekit.labs.kit.results import ResultsTable


class FakeJob:
    def __init__(self, job_id, state, err="", name="ada-amp"):
        self.job_id, self.state, self.name, self._err = job_id, state, name, err

    def tail(self, n, stream="out"):
        return "\n".join(self._err.splitlines()[-n:])

    def result(self, timeout=None):
        from coursekit.jobs import JobFailedError

        raise JobFailedError(f"job {self.job_id} failed")


def test_failed_rows_are_reported_with_state_tail_and_advice(capsys):
    err = "Traceback\nValueError: CIFAR-10 is not in data_dir='/data' (no cifar-10-batches-py/ there)"
    table = ResultsTable([
        {"job_id": "1", "state": "COMPLETED", "summary": {"status": "completed"}},
        {"job_id": "2", "state": "FAILED", "summary": {}, "job": FakeJob("2", "FAILED", err)},
        {"job_id": "3", "state": "FAILED", "summary": {"status": "failed", "error": "OutOfMemoryError: CUDA out of memory"},
         "job": FakeJob("3", "FAILED", "")},
    ])
    found = failures.report_failures(table, what="the precision sweep")
    printed = capsys.readouterr().out
    assert [f.job_id for f in found] == ["2", "3"]
    assert "2 of 3 job(s) of the precision sweep did not complete" in printed
    assert "job 2 (ada-amp) FAILED" in printed and "| ValueError: CIFAR-10 is not in" in printed
    assert "coursekit.labs.kit.datasets --stage" in found[0].advice
    assert "lower the batch size" in found[1].advice
    assert len(failures.completed(table)) == 1


def test_nothing_printed_when_every_job_completed(capsys):
    table = ResultsTable([{"job_id": "1", "state": "COMPLETED", "summary": {"status": "completed"}}])
    assert failures.report_failures(table) == []
    assert capsys.readouterr().out == ""


def test_completed_job_whose_run_diverged_is_a_failure():
    row = {"job_id": "4", "state": "COMPLETED", "summary": {"status": "nan"}, "job": FakeJob("4", "COMPLETED")}
    failure = failures.failure_of(row)
    assert failure is not None and failure.state == "COMPLETED, run nan"


def test_state_advice_for_timeouts_and_unknown_errors():
    assert "time_max" in failures.advice_for("TIMEOUT", "slurmstepd: error: *** JOB 7 CANCELLED DUE TO TIME LIMIT")
    assert failures.advice_for("FAILED", "something odd") == failures.DEFAULT_ADVICE
    assert "fp16" in failures.advice_for("FAILED", "precision='tf32' needs an Ampere or newer GPU (this one is sm_70)")


def test_result_or_none_reports_instead_of_raising(capsys):
    assert failures.result_or_none(FakeJob("9", "FAILED", "RuntimeError: boom"), what="anatomy") is None
    printed = capsys.readouterr().out
    assert "job 9 (anatomy) returned no result" in printed and "| RuntimeError: boom" in printed


def test_a_gpu_out_of_memory_and_slurms_host_memory_kill_get_their_own_advice():
    """Slurm does not watch GPU memory: its OUT_OF_MEMORY (oom-kill) is the node's memory, a CUDA OOM a traceback."""
    gpu = failures.advice_for("FAILED", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    host = failures.advice_for("OUT_OF_MEMORY", "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.0.")
    assert "lower the batch size" in gpu and "host memory" not in gpu
    assert "host memory" in host and "mem" in host and "batch size" not in host
    assert failures.advice_for("OUT_OF_MEMORY", "") == host
