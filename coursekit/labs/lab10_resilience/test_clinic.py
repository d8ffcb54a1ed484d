"""Lab 10's failure clinic: the deal, the log reading, the diagnoses and each claim failing on planted logs. The four
jobs (and the hang again with TORCH_DISTRIBUTED_DEBUG=DETAIL) run for real in notebook 10, which CI runs as a
participant's copy (tests/browser/test_participant_exercises.py): a claim that does not hold fails it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.labs.lab10_resilience import clinic, clinic_jobs
from coursekit.labs.lab10_resilience.clinic import ClinicCases, RankLog
from coursekit.labs.lab10_resilience.settings import ClinicSettings, clinic_settings

T0 = 1_000_000.0
CPU = ClinicSettings(**clinic_settings("cpu"))


def stamped(rank: int, *events: tuple[float, str]) -> str:
    return "".join(f"[clinic rank {rank} t={T0 + t:.3f}] {text}\n" for t, text in events)


def rank_log(rank: int, *events: tuple[float, str], err: str = "", ended: float | None = None) -> RankLog:
    return clinic.read_rank_log(rank, stamped(rank, *events), err, None if ended is None else T0 + ended)


def raised_pair(survivor_end: float) -> tuple[RankLog, RankLog]:
    failed = rank_log(1, (0.0, "process group formed"), (0.1, "step 1: loss 1, all-reducing the gradients"),
                      (0.2, "failed: ValueError: step 2: corrupt"),
                      err="ValueError: step 2: corrupt\ncoursekit: the command exited with code 1: -m x\n")
    survivor = rank_log(0, (0.0, "process group formed"), (0.2, "step 2: loss 1, all-reducing the gradients"),
                        err="coursekit: the job reached its time limit, or another task of it failed\n",
                        ended=survivor_end)
    return failed, survivor


# ---------------------------------------------------------------- the deal and the command


def test_the_deal_is_a_shuffle_fixed_per_pseudonym_and_different_between_neighbours() -> None:
    deal = clinic_jobs.case_order("kim")
    assert deal == clinic_jobs.case_order("kim") and sorted(deal) == list(clinic_jobs.LABELS)
    assert sorted(deal.values()) == sorted(clinic_jobs.CASES)
    others = {tuple(clinic_jobs.case_order(name).values()) for name in ("ada", "bob", "lea", "max", "zoe")}
    assert len(others | {tuple(deal.values())}) > 1
    with pytest.raises(ValueError, match="seed"):
        clinic_jobs.case_order("")


def test_a_job_command_names_its_label_not_its_fault() -> None:
    commands = {label: clinic.case_command(label, "kim", CPU) for label in clinic_jobs.LABELS}
    for label, case in clinic_jobs.case_order("kim").items():
        assert f"--label {label} --seed kim" in commands[label] and case not in commands[label]
        same = commands["A"].replace("--label A", "--label X")
        assert commands[label].replace(f"--label {label}", "--label X") == same
        args = clinic_jobs.parse_args(commands[label].split()[2:])
        assert (args.label, args.hang_timeout_s, args.timeout_s) == (label, CPU.hang_timeout_s, None)


def test_the_command_line_refuses_what_cannot_fail_as_planned() -> None:
    with pytest.raises(SystemExit):
        clinic_jobs.parse_args([])  # neither a case nor --label/--seed
    with pytest.raises(SystemExit):
        clinic_jobs.parse_args(["oom_one_rank", "--request-mb", "10", "--headroom-mb", "20"])
    with pytest.raises(ValueError, match="n_gpu=2"):
        clinic_jobs.run_case("rank_raises", rank=0, world_size=1, local_rank=0, addr="127.0.0.1", port=1)
    with pytest.raises(ValueError, match="case="):
        clinic_jobs.run_case("nope", rank=0, world_size=2, local_rank=0, addr="127.0.0.1", port=1)


def test_settings_per_profile_keep_the_hang_short_and_the_stop_bound_below_the_timeout() -> None:
    for profile in ("cpu", "gpu"):
        s = ClinicSettings(**clinic_settings(profile))
        assert s.hang_timeout_s < 60 and s.stop_bound_s < s.stop_timeout_s
    with pytest.raises(ValueError, match="profile"):
        clinic_settings("tpu")
    with pytest.raises(ValueError, match="s.clinic"):
        clinic._settings({"device": "cpu"})


# ---------------------------------------------------------------- reading a rank's logs


def test_lines_of_one_time_stamp_keep_the_order_the_rank_wrote_them_in() -> None:
    """On a GPU a step takes under a millisecond: the barrier line must not come before the step it ends."""
    written = ["step 3: loss 1.0, all-reducing the gradients", "step 4: loss 2.0, all-reducing the gradients",
               "every step done: waiting at the barrier before saving the checkpoint", "checkpoint saved"]
    out = "".join(f"{clinic_jobs.LINE_PREFIX} 1 t={T0 + 1.9:.3f}] {text}\n" for text in written)
    assert [text for _, text in clinic.read_rank_log(1, out, "", None).events] == written


def test_a_rank_log_gives_its_events_exit_code_end_and_error_lines() -> None:
    failed, survivor = raised_pair(survivor_end=1.5)
    assert failed.exit_code == 1 and failed.failed_at == pytest.approx(T0 + 0.2) and failed.end == failed.failed_at
    assert any("ValueError" in hit for hit in failed.hits)
    assert survivor.exit_code == 130 and survivor.failed_at is None and survivor.end == pytest.approx(T0 + 1.5)
    assert survivor.waited_s == pytest.approx(1.3)
    assert clinic.read_rank_log(0, "", "", None).exit_code == 0
    traceback = ('[rank1]:   File "x.py", line 3, in fault\n[rank1]:     torch.empty(n)  # can\'t allocate memory\n'
                 "[rank1]: RuntimeError: DefaultCPUAllocator: can't allocate memory\n")
    assert rank_log(1, (0.0, "failed: RuntimeError: can't allocate memory"), err=traceback).hits == [
        "RuntimeError: DefaultCPUAllocator: can't allocate memory"]  # no frame, no source line, no own line


def test_the_address_space_cap_binds_only_the_process_that_sets_it() -> None:
    code = ("import resource\n"
            "from coursekit.labs.lab10_resilience.clinic_jobs import cap_address_space, MIB\n"
            "cap_address_space(64)\n"
            "small = bytearray(8 * MIB)\n"
            "try:\n    bytearray(512 * MIB)\nexcept MemoryError:\n    print('refused')\n")
    before = resource.getrlimit(resource.RLIMIT_AS)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert done.stdout.strip() == "refused", done.stderr
    assert resource.getrlimit(resource.RLIMIT_AS) == before


# ---------------------------------------------------------------- each claim fails on planted logs


def test_stop_claim_holds_when_the_survivor_ends_soon_and_fails_when_it_hangs() -> None:
    timeout = CPU.stop_timeout_s
    clinic.stop_claim(*raised_pair(survivor_end=1.5), bound_s=CPU.stop_bound_s, timeout_s=timeout, what="raises")
    clinic.stop_claim(*raised_pair(survivor_end=19.5), bound_s=CPU.stop_bound_s, timeout_s=timeout, what="raises")
    with pytest.raises(AssertionError, match="did not hang"):  # it waited for the process group's timeout
        clinic.stop_claim(*raised_pair(survivor_end=timeout + 0.3), bound_s=CPU.stop_bound_s, timeout_s=timeout,
                          what="raises")
    assert CPU.stop_bound_s <= CPU.stop_timeout_s / 3  # a hang until the timeout is far outside the bound


def hang_ranks(waited: float, formed: bool = True) -> list[RankLog]:
    first = (0.0, "process group formed" if formed else "rank 0 of world size 2 joins the process group")
    timeout = f"Timed out waiting {waited * 1000:.0f}ms for recv operation to complete"
    return [rank_log(r, first, (1.0, "step 4: all-reducing"), (1.0 + waited, f"failed: RuntimeError: {timeout}"),
                     err=f"RuntimeError: {timeout}\n") for r in (0, 1)]


def test_hang_claim_holds_at_the_short_timeout_and_fails_at_the_default_or_too_early() -> None:
    clinic.hang_claim(hang_ranks(CPU.hang_timeout_s + 0.1), CPU.hang_timeout_s, CPU.hang_margin_s)
    one_through = [hang_ranks(0.2)[0], hang_ranks(CPU.hang_timeout_s + 0.1)[1]]  # NCCL let rank 0 through
    clinic.hang_claim(one_through, CPU.hang_timeout_s, CPU.hang_margin_s)
    for waited in (1800.0, CPU.hang_timeout_s / 2):  # torch's 30 min; ended before the timeout (not a hang)
        with pytest.raises(AssertionError, match="hung until"):
            clinic.hang_claim(hang_ranks(waited), CPU.hang_timeout_s, CPU.hang_margin_s)
    with pytest.raises(AssertionError, match="never formed"):  # it timed out in the rendezvous instead
        clinic.hang_claim(hang_ranks(CPU.hang_timeout_s, formed=False), CPU.hang_timeout_s, CPU.hang_margin_s)


def rendezvous_ranks(error: str) -> list[RankLog]:
    joins = "rank 0 of world size 3 joins the process group (gloo) at tcp://127.0.0.1:23424, timeout 5 s"
    return [rank_log(0, (0.0, joins), (6.0, "failed: DistStoreError: ..."), err=error)]


def test_rendezvous_claim_needs_the_error_to_name_the_world_size_or_the_port() -> None:
    clinic.rendezvous_claim(rendezvous_ranks(
        "torch.distributed.DistStoreError: Timed out after 6 seconds waiting for clients. 2/3 clients joined.\n"))
    clinic.rendezvous_claim(rendezvous_ranks(
        "[E socket.cpp:1028] [c10d] The client socket has timed out after 4000ms while trying to connect to "
        "(127.0.0.1, 23425).\n"))
    with pytest.raises(AssertionError, match="names what was wrong"):
        clinic.rendezvous_claim(rendezvous_ranks("RuntimeError: something went wrong\n"))
    with pytest.raises(AssertionError, match="names what was wrong"):  # 2/2: not the world size asked for
        clinic.rendezvous_claim(rendezvous_ranks("DistStoreError: Timed out ... 2/2 clients joined.\n"))


def test_oom_claim_fails_unless_rank_1_alone_ran_out_of_memory() -> None:
    oom = "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes\n"
    echo = "RuntimeError: Connection closed by peer\n"
    clinic.oom_claim([rank_log(0, err=echo), rank_log(1, err=oom)])
    for errors in ((oom, oom), (oom, echo), (echo, echo)):
        with pytest.raises(AssertionError, match="rank 1 only"):
            clinic.oom_claim([rank_log(0, err=errors[0]), rank_log(1, err=errors[1])])


# ---------------------------------------------------------------- diagnoses


@pytest.fixture(autouse=True)
def own_course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A diagnosis saves the participant's record in the course folder: here a folder of the test's own."""
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "course"))
    return tmp_path / "course"


def cases_of(pseudonym: str = "kim") -> ClinicCases:
    return ClinicCases(pseudonym, CPU, {label: None for label in clinic_jobs.LABELS})


def test_a_wrong_diagnosis_says_not_yet_without_the_answer_then_reveals_after_max_tries(
        capsys: pytest.CaptureFixture[str]) -> None:
    cases = cases_of()
    label = cases.label_of("oom_one_rank")
    for attempt in range(1, clinic.MAX_TRIES):
        assert not clinic.diagnose(cases, label, cause="network", rank=0)
        said = capsys.readouterr().out
        assert "not yet" in said and "out_of_memory" not in said and "symptom:" not in said, attempt
    assert not clinic.diagnose(cases, label, cause="exception", rank=1)  # the last try: the answer
    said = capsys.readouterr().out
    assert "the rank is right, the cause is not" in said and "'out_of_memory'" in said and "fix:" in said


def test_a_right_diagnosis_gives_the_explanation_and_the_rank_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    cases = cases_of()
    label = cases.label_of("rendezvous_fails")
    assert not clinic.diagnose(cases, label, cause="rendezvous", rank=0)
    assert "the cause is right, the rank is not" in capsys.readouterr().out
    assert clinic.diagnose(cases, label, cause="rendezvous", rank="all")
    said = capsys.readouterr().out
    assert "right" in said and "symptom:" in said and "cause:" in said and "fix:" in said
    for label, answer in clinic.solution("kim").items():
        assert clinic.diagnose(cases, label, **answer)


def test_the_diagnoses_are_saved_for_the_instructors_room(capsys: pytest.CaptureFixture[str],
                                                          own_course: Path) -> None:
    """Each answer updates the participant's own record of lab 10's exercise, which the room's exercises
    column reads as "10 1/4" (coursekit/test_instructor_room.py)."""
    from coursekit.course import course_dir
    from coursekit.labs.kit.exercise_scores import EXERCISES_SUBDIR
    from coursekit.labs.kit.ticket import read_records

    cases = cases_of()
    wrong, right = cases.label_of("oom_one_rank"), cases.label_of("rank_raises")
    for _ in range(clinic.MAX_TRIES):
        clinic.diagnose(cases, wrong, cause="network", rank=0)
    clinic.diagnose(cases, right, **clinic.solution("kim")[right])
    capsys.readouterr()
    assert course_dir() == own_course
    (record,) = read_records(course_dir(), EXERCISES_SUBDIR)
    assert (record["lab"], record["score"], record["total"]) == ("10", 1, 4)
    assert record["detail"][wrong] == {"solved": False, "wrong_tries": 3, "answer_shown": True}
    assert record["detail"][right] == {"solved": True, "wrong_tries": 0, "answer_shown": False}


def test_reveal_on_request_and_clear_errors_for_bad_answers(capsys: pytest.CaptureFixture[str]) -> None:
    cases = cases_of()
    label = cases.label_of("mismatched_collectives")
    clinic.diagnose(cases, label, reveal=True)
    assert "collective_mismatch" in capsys.readouterr().out
    with pytest.raises(ValueError, match="cause='deadlock': choose one of"):
        clinic.diagnose(cases, label, cause="deadlock", rank=1)
    with pytest.raises(ValueError, match="rank=2"):
        clinic.diagnose(cases, label, cause="exception", rank=2)
    with pytest.raises(ValueError, match="label='E'"):
        clinic.diagnose(cases, "E", cause="exception", rank=1)
    assert not clinic.diagnose(cases, label)
    assert "no diagnosis yet" in capsys.readouterr().out


def test_neighbours_answers_are_not_yours() -> None:
    kim, bob = clinic.solution("kim"), clinic.solution("bob")
    assert kim != bob  # both deals are fixed: these two pseudonyms were dealt differently


# ---------------------------------------------------------------- the four jobs, for real


def test_detail_names_the_mismatch_at_once_and_a_timeout_or_a_silent_log_does_not_count() -> None:
    named = "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running ALLREDUCE\n"
    ranks = [rank_log(0, (0.0, "step 4: loss 1, all-reducing the gradients"), (0.2, "failed: RuntimeError: ..."),
                      err=named), rank_log(1, (0.0, "every step done: waiting at the barrier"),
                                           (0.1, "failed: RuntimeError: ..."))]
    holds, measured = clinic.mismatch_named(ranks, CPU.hang_timeout_s)
    assert holds and "Detected mismatch" in measured
    timed_out = [rank_log(0, (0.0, "step 4: loss 1, all-reducing the gradients"),
                          (CPU.hang_timeout_s, "failed: RuntimeError: ..."), err=named)]
    assert not clinic.mismatch_named(timed_out, CPU.hang_timeout_s)[0]  # named, but only at the timeout
    silent = [rank_log(0, (0.0, "step 4"), (0.2, "failed: RuntimeError: Timed out"), err="Timed out\n")]
    assert not clinic.mismatch_named(silent, CPU.hang_timeout_s)[0]


def test_clinic_jobs_get_a_short_limit_and_nccl_aborts_on_timeout_whatever_the_lab_passes(
        monkeypatch: pytest.MonkeyPatch, own_course: Path) -> None:
    submitted = []

    def fake_submit(command: str, **options: object) -> list[str]:
        submitted.append(options)
        return [f"job {len(submitted)}"]

    monkeypatch.setattr("coursekit.jobs.submit.submit_jobs", fake_submit)
    site_env = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "OMP_NUM_THREADS": "1"}  # a site that turned the abort off
    cases = clinic.submit_cases("ada", clinic_settings("gpu"), labels=["A", "B"], time_max="00:20:00",
                                env=site_env)
    assert list(cases.jobs) == ["A", "B"] and len(submitted) == 2
    for options in submitted:
        assert options["time_max"] == clinic.CLINIC_TIME_MAX  # a hang nothing noticed ends at 5 minutes, not 20
        assert options["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # the watchdog aborts after the timeout
        assert options["env"]["OMP_NUM_THREADS"] == "1" and options["env"]["NCCL_DEBUG"] == "INFO"
    assert site_env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"  # the caller's dict is not changed


def test_the_symptoms_show_a_skipped_step_even_when_it_is_not_among_the_last_lines() -> None:
    skipped = "step 2: loss 1.0, this rank's batch was empty: step skipped"
    rank1 = rank_log(1, (0.0, "process group formed"), (0.1, "step 1: loss 1, all-reducing the gradients"),
                     (0.2, skipped), (0.3, "step 3: loss 1, all-reducing the gradients"),
                     (0.4, "step 4: loss 1, all-reducing the gradients"),
                     (0.5, "every step done: waiting at the barrier before saving the checkpoint"),
                     (0.6, "checkpoint saved"))
    shown = str(clinic.Symptoms("A", "7", "FAILED", None, [rank1], []))
    assert skipped in shown and "step 1: loss 1" not in shown  # the skip, then the last four lines only
    assert shown.index(skipped) < shown.index("checkpoint saved")


def test_a_cpp_stack_is_not_shown_as_error_lines() -> None:
    err = ("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f in libc10.so)\n"
           "frame #1: c10::DistNetworkError::DistNetworkError(c10::SourceLocation, std::string) + 0x72 (0x7f in "
           "libc10.so)\n"
           "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.\n")
    log = clinic.read_rank_log(1, stamped(1, (0.0, "rank 1 of world size 3 joins")), err, None)
    assert log.hits == ["torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely "
                        "closed."], log.hits


def test_the_rendezvous_explanation_says_why_its_ranks_print_different_timeouts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0's log says 'timeout 20 s', rank 1's 'timeout 40 s': the symptom text gives the ratio the job uses."""
    joined: dict[int, float] = {}

    class Joined(Exception):
        pass

    def join(rank: int, world_size: int, addr: str, port: int, timeout_s: float, device: object) -> None:
        joined[rank] = timeout_s
        raise Joined

    monkeypatch.setattr(clinic_jobs, "_join", join)
    monkeypatch.setattr(clinic_jobs, "_prepare", lambda rank, device: (None, None))
    for rank in (0, 1):
        with pytest.raises(Joined):
            clinic_jobs.run_case("rendezvous_fails", rank=rank, world_size=2, local_rank=rank, addr="127.0.0.1",
                                 port=29500, device="cpu", rendezvous_timeout_s=20.0)
    ratio = joined[1] / joined[0]
    assert joined[0] == 20.0 and ratio != 1.0
    symptom = clinic.EXPLANATIONS["rendezvous_fails"][0]
    assert "different timeouts on purpose" in symptom and f"other {ratio:g} times as long" in symptom
