"""Lab 10's failure clinic: submit four broken 2-rank jobs, read their symptoms with the kit's tools, type in a
diagnosis for each, and check the claims on what they measured.

``submit_cases(pseudonym, s.clinic, **s.job)`` submits the jobs of ``clinic_jobs`` labelled A-D in an order dealt
per pseudonym (``clinic_jobs.case_order``: a neighbour's answers are not yours); ``symptoms(cases, "A")`` shows
what the kit shows (state, exit codes, each rank's last lines and when it ended, ``search_log``'s paths and the
error lines found in every rank's log); ``diagnose(cases, "A", cause="...", rank=1)`` says right or not yet, and
after ``MAX_TRIES`` wrong tries (or ``reveal=True``) gives the answer; a right answer comes with the explanation
(symptom -> cause -> fix). ``clinic_claims(cases)`` checks, on the jobs just run, that the launcher stopped the
surviving rank, that the hang ended at the short timeout, that the rendezvous error names the world size or the
port, and that only rank 1 ran out of memory.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coursekit.labs.kit.claims import ClaimResult, check_claim
from coursekit.labs.kit.exercise_scores import save_exercise_score
from coursekit.labs.lab10_resilience.clinic_jobs import (
    CASES,
    FAULTY_RANK,
    LABELS,
    OTHER_RANKS_WAIT,
    case_order,
)
from coursekit.labs.lab10_resilience.clinic_logs import (
    ASKED_WORLD,
    CLIENTS_JOINED,
    DIALLED,
    FORMED,
    OOM_PATTERNS,
    RankLog,
    Symptoms,
    job_symptoms,
    read_rank_log,
)
from coursekit.labs.lab10_resilience.settings import ClinicSettings

MODULE = "-m coursekit.labs.lab10_resilience.clinic_jobs"
N_PROCESSES = 2  # every clinic job: two ranks (2 GPUs, or 2 gloo processes on a CPU)
MAX_TRIES = 3  # wrong diagnoses of one job before its answer is shown
ALL_RANKS = "all"  # the rank answer of a fault every rank shares
# a clinic job ends within two minutes however it fails (the NCCL hang: its 20 s timeout + the watchdog's minute);
# this limit, whatever the lab's other jobs get, ends one whose hang nothing noticed
CLINIC_TIME_MAX = "00:05:00"
# NCCL: the watchdog aborts the process after a collective's timeout (torch's default since 2.2, pinned here so that
# a site's TORCH_NCCL_ASYNC_ERROR_HANDLING=0 cannot turn the hang into one that lasts until the time limit)
CLINIC_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}

CAUSES: dict[str, str] = {
    "exception": "one rank raised an exception (a bug or bad data on that rank)",
    "collective_mismatch": "the ranks called different collectives (one skipped or added one)",
    "rendezvous": "the process group never formed (wrong world size, address or port)",
    "out_of_memory": "one rank ran out of memory",
    "time_limit": "the job reached its Slurm time limit",
    "network": "the network between the nodes failed",
}
CASE_CAUSE = {"rank_raises": "exception", "mismatched_collectives": "collective_mismatch",
              "rendezvous_fails": "rendezvous", "oom_one_rank": "out_of_memory"}
CASE_RANK: dict[str, int | str] = {"rank_raises": FAULTY_RANK, "mismatched_collectives": FAULTY_RANK,
                                   "rendezvous_fails": ALL_RANKS, "oom_one_rank": FAULTY_RANK}
EXPLANATIONS = {
    "rank_raises": (
        "symptom: rank 1's log ends with a Python traceback (ValueError: a corrupt record) at step 2; rank 0's "
        "ends a moment later, in its next all-reduce (gloo: 'Connection closed by peer'; NCCL would wait there "
        "until the process group's timeout) or stopped by the launcher ('another task of it failed').",
        "cause: an exception on one rank; the other rank's error is only the echo of it. Read the rank whose "
        "error came first.",
        "fix: the bug on that rank (here: validate the data). The kit already keeps the others from hanging: "
        "srun --kill-on-bad-exit on Slurm, coursekit.launch.stop_local_peer_tasks on the local site."),
    "mismatched_collectives": (
        "symptom: no traceback at first, the job just stops progressing; after the process group's timeout "
        "a rank fails. gloo: both ranks, with 'Timed out waiting ... for recv'. NCCL: rank 0, with the "
        "watchdog's 'collective operation timeout', and its process aborts about a minute later, once the "
        "watchdog gave up waiting for its debug dump; rank 1 went on (its barrier was matched with rank 0's "
        "all-reduce, NCCL does not compare them) and waits until the launcher stops it. Rank 1's log says it "
        "skipped a step, then goes on training: nothing stopped at the skip.",
        "cause: the ranks called different collectives: rank 1 skipped a step's two all-reduces (one per "
        "parameter: the weight's, the bias's). Collectives are matched by their order, not by step: from the "
        "skipped step on, each all-reduce of rank 0 met rank 1's all-reduce of the next step (same shapes, so "
        "two steps' gradients were averaged without a word), until rank 0's all-reduce of its last step's "
        "weight met rank 1's barrier. With TORCH_DISTRIBUTED_DEBUG=DETAIL torch compares each call's operation "
        "and shapes before running it, so it too first fails at that barrier, at once, with 'Detected mismatch "
        "between collectives on ranks': rank 0's own call is the ALLREDUCE, rank 1's the BARRIER (the other "
        "rank's op in the message can be one of the check's own collectives: read each rank's own).",
        "fix: every rank calls the same collectives in the same order (no collective under `if rank == 0` or a "
        "data-dependent `continue`; uneven shards: DistributedSampler(drop_last=True) or DDP's join()); set a "
        "short timeout while debugging (init_process_group(timeout=...)) instead of torch's default (10 minutes "
        "with NCCL, 30 with gloo)."),
    "rendezvous_fails": (
        "symptom: no training line at all; after the rendezvous timeout rank 0 says '2/3 clients joined' (or a "
        "rank says it cannot connect to host:port) and both ranks fail in init_process_group. The two ranks print "
        "different timeouts on purpose: the lab gives the rank whose error names the mistake the short one and the "
        f"other {OTHER_RANKS_WAIT:g} times as long, so that the clear error comes first (in your own jobs every rank "
        "has the same timeout).",
        "cause: the process group never formed: the script asked for a world size of 3 in a job of 2 processes "
        "(or dialled another port than rank 0 listens on). Every rank carries the same mistake.",
        "fix: take RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the launcher (env://, as the kit sets them "
        "for srun and torchrun) instead of hard-coding them; coursekit's init_distributed checks the world size "
        "against the job's (COURSEKIT_EXPECTED_WORLD_SIZE) before any rendezvous."),
    "oom_one_rank": (
        "symptom: rank 1's traceback ends in an allocation error (GPU: torch.OutOfMemoryError 'CUDA out of "
        "memory. Tried to allocate ...'; CPU: 'DefaultCPUAllocator: can't allocate memory'); rank 0 has none and "
        "ends right after, in its next all-reduce or stopped by the launcher.",
        "cause: out of memory on one rank only (on a CPU the lab caps rank 1's address space to make it so): "
        "a larger batch or sequence on that rank, another process on its GPU, a leak on that rank only.",
        "fix: look at that rank's memory (torch.cuda.max_memory_allocated per rank, nvidia-smi on its GPU): "
        "smaller batch, activation checkpointing, mixed precision, sharding (FSDP); check nothing else shares the "
        "GPU. Slurm reports a host-memory OOM as OUT_OF_MEMORY (oom-kill) instead of a traceback."),
}

THIS_LAB = "10"  # the diagnoses are saved as lab 10's exercise


def _settings(settings: Mapping[str, Any] | ClinicSettings) -> ClinicSettings:
    if isinstance(settings, ClinicSettings):
        return settings
    try:
        return ClinicSettings(**dict(settings))
    except TypeError as error:
        raise ValueError(f"settings={dict(settings)!r}: give s.clinic, the fields of ClinicSettings ({error})") \
            from None


# ---------------------------------------------------------------- submitting


def case_command(label: str, seed: str, settings: ClinicSettings) -> str:
    """The command of clinic job ``label``: the label, the seed and every case's timeout; nothing that tells the
    fault (the four commands differ only by their label)."""
    return (f"{MODULE} --label {_check_label(label)} --seed {seed} --device {settings.device} "
            f"--stop-timeout-s {settings.stop_timeout_s:g} --hang-timeout-s {settings.hang_timeout_s:g} "
            f"--rendezvous-timeout-s {settings.rendezvous_timeout_s:g}")


@dataclass
class ClinicCases:
    """The four clinic jobs of one participant, by label, and what was answered for each."""

    pseudonym: str
    settings: ClinicSettings
    jobs: dict[str, Any]  # label -> coursekit Job
    debug: bool = False
    tries: dict[str, int] = field(default_factory=dict)
    solved: dict[str, bool] = field(default_factory=dict)
    save_problem_said: bool = False

    @property
    def labels(self) -> list[str]:
        return sorted(self.jobs)

    def case(self, label: str) -> str:
        """The case dealt as ``label`` (the answer: the claims need it; a diagnosis should not)."""
        return case_order(self.pseudonym)[_check_label(label)]

    def label_of(self, case: str) -> str:
        """The label the case ``case`` was dealt (the answer)."""
        if case not in CASES:
            raise ValueError(f"case={case!r}: use one of {', '.join(CASES)}")
        return next(label for label, dealt in case_order(self.pseudonym).items() if dealt == case)

    def wait(self, timeout_s: float) -> dict[str, str]:
        """Wait until every job ended (``TimeoutError`` after ``timeout_s`` in all); their states by label."""
        deadline = time.monotonic() + timeout_s
        return {label: job.wait(max(1.0, deadline - time.monotonic())) for label, job in sorted(self.jobs.items())}


def _check_label(label: Any) -> str:
    if label not in LABELS:
        raise ValueError(f"label={label!r}: use one of {', '.join(LABELS)}")
    return label


def submit_cases(pseudonym: str, settings: Mapping[str, Any] | ClinicSettings, *, labels: Sequence[str] = LABELS,
                 debug: bool = False, name: str = "clinic", **job_options: Any) -> ClinicCases:
    """Submit the clinic's jobs (``labels``, all four by default) on 2 processes each; ``debug``: with
    TORCH_DISTRIBUTED_DEBUG=DETAIL. ``job_options``: the lab's ``s.job`` (time_max, env, site ...)."""
    from coursekit.jobs.submit import submit_jobs
    from coursekit.labs.kit.participant import job_name

    the_settings = _settings(settings)
    if not isinstance(debug, bool):
        raise ValueError(f"debug={debug!r}: use True (TORCH_DISTRIBUTED_DEBUG=DETAIL) or False")
    wanted = [_check_label(label) for label in labels]
    env = {**(job_options.pop("env", None) or {}), **CLINIC_ENV}
    job_options["time_max"] = CLINIC_TIME_MAX
    if the_settings.nccl_debug:
        env["NCCL_DEBUG"] = "INFO"
    if debug:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    jobs = {}
    for label in wanted:
        suffix = f"{name}{label.lower()}{'d' if debug else ''}"
        (jobs[label],) = submit_jobs(case_command(label, pseudonym, the_settings), n_gpu=N_PROCESSES,
                                     name=job_name(pseudonym, suffix), env=env, **job_options)
    return ClinicCases(pseudonym, the_settings, jobs, debug)


def symptoms(cases: ClinicCases, label: str) -> Symptoms:
    """What the kit shows of clinic job ``label``."""
    return job_symptoms(cases.jobs[_check_label(label)], label)


# ---------------------------------------------------------------- diagnoses


def _check_answer(cause: Any, rank: Any) -> None:
    if cause not in CAUSES:
        raise ValueError(f"cause={cause!r}: choose one of {', '.join(repr(c) for c in CAUSES)}")
    if rank != ALL_RANKS and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < N_PROCESSES):
        raise ValueError(f"rank={rank!r}: give the rank whose log shows the cause (0 or 1), or {ALL_RANKS!r} when "
                         "every rank has it")


def explanation(case: str) -> str:
    """Symptom -> cause -> fix of ``case``."""
    return "\n".join(f"    {part}" for part in EXPLANATIONS[case])


def diagnose(cases: ClinicCases, label: str, cause: str | None = None, rank: int | str | None = None, *,
             reveal: bool = False) -> bool:
    """Check the diagnosis of job ``label``: ``cause`` (a key of CAUSES) and the faulty ``rank`` (0, 1 or "all").
    Prints right (with the explanation) or not yet (what is wrong, not what is right); the answer after
    MAX_TRIES wrong tries or with ``reveal=True``. True when right."""
    label = _check_label(label)
    case = cases.case(label)
    if reveal:
        print(f"job {label}: the answer — cause {CASE_CAUSE[case]!r} ({CAUSES[CASE_CAUSE[case]]}), rank "
              f"{CASE_RANK[case]!r}\n{explanation(case)}")
        return False
    if cause is None and rank is None:
        print(f"job {label}: no diagnosis yet: diagnose(cases, {label!r}, cause=..., rank=...) with a cause among "
              f"{', '.join(CAUSES)}")
        return False
    _check_answer(cause, rank)
    cause_right, rank_right = cause == CASE_CAUSE[case], rank == CASE_RANK[case]
    if cause_right and rank_right:
        cases.solved[label] = True
        _save_diagnoses(cases)
        print(f"job {label}: right — {CAUSES[cause]}, rank {rank!r}\n{explanation(case)}")
        return True
    cases.tries[label] = cases.tries.get(label, 0) + 1
    _save_diagnoses(cases)
    what = ("the cause is right, the rank is not" if cause_right
            else "the rank is right, the cause is not" if rank_right else "neither the cause nor the rank")
    left = MAX_TRIES - cases.tries[label]
    if left > 0:
        print(f"job {label}: not yet ({what}); {left} more tr{'y' if left == 1 else 'ies'} before the answer is "
              "shown. Look again at which rank failed first and at its last error line.")
    else:
        print(f"job {label}: not yet ({what}). The answer, after {MAX_TRIES} tries:")
        diagnose(cases, label, reveal=True)
    return False


def diagnoses_record(cases: ClinicCases) -> dict[str, dict[str, Any]]:
    """What the participant answered, per job label: solved, wrong tries, whether the answer was shown after
    MAX_TRIES wrong ones (the instructor's room reads it)."""
    return {label: {"solved": bool(cases.solved.get(label)), "wrong_tries": cases.tries.get(label, 0),
                    "answer_shown": cases.tries.get(label, 0) >= MAX_TRIES} for label in cases.labels}


def _save_diagnoses(cases: ClinicCases) -> None:
    """Keep the diagnoses for the instructor's room (``exercises`` column: cases solved of four); a course
    folder that cannot be written is said once, and the clinic goes on."""
    solved = sum(bool(cases.solved.get(label)) for label in cases.labels)
    problem = save_exercise_score(THIS_LAB, solved, len(cases.labels), diagnoses_record(cases))
    if problem and not cases.save_problem_said:
        cases.save_problem_said = True
        print(f"(note: {problem})")


def solution(pseudonym: str) -> dict[str, dict[str, Any]]:
    """The right answers of ``pseudonym``'s deal (the solved notebook's): ``{label: {"cause": ..., "rank": ...}}``."""
    return {label: {"cause": CASE_CAUSE[case], "rank": CASE_RANK[case]}
            for label, case in case_order(pseudonym).items()}


# ---------------------------------------------------------------- claims


def stop_claim(failed: RankLog, survivor: RankLog, bound_s: float, timeout_s: float, what: str) -> ClaimResult:
    """The surviving rank ended at most ``bound_s`` after the failing rank (not at the process-group timeout)."""
    gap = None if failed.end is None or survivor.end is None else survivor.end - failed.end
    how = survivor.exit_line or (survivor.hits[-1] if survivor.hits else "no line")
    return check_claim(
        f"{what}: rank {survivor.rank} did not hang — it ended within {bound_s:g} s of rank {failed.rank}'s failure "
        f"(its process group would have waited {timeout_s:g} s)",
        gap is not None and gap <= bound_s,
        f"rank {survivor.rank} ended {'?' if gap is None else f'{gap:.1f}'} s after rank {failed.rank} failed; it "
        f"ended with: {how[:160]}")


def hang_claim(ranks: Sequence[RankLog], timeout_s: float, margin_s: float) -> ClaimResult:
    """The mismatched collective hung until the short timeout: the longest wait of a rank in its last call lies
    in ``[timeout_s, timeout_s + margin_s]`` (NCCL may let one rank through a mismatched call: the job ends when
    the other's times out), after the process group had formed (not a rendezvous that timed out)."""
    waits = [r.waited_s for r in ranks]
    longest = max((w for w in waits if w is not None), default=None)
    formed = bool(ranks) and all(any(text == FORMED for _, text in r.events) for r in ranks)
    holds = formed and longest is not None and timeout_s <= longest <= timeout_s + margin_s
    shown = ", ".join(f"rank {r.rank}: {'?' if w is None else f'{w:.1f}'} s" for r, w in zip(ranks, waits,
                                                                                           strict=True))
    return check_claim(
        f"the mismatched collective hung until the process group's timeout ({timeout_s:g} s, within "
        f"+{margin_s:g} s), not torch's default (10 min with NCCL, 30 min with gloo)",
        holds, f"waited in the last call: {shown}" + ("" if formed else "; the process group never formed"))


def rendezvous_claim(ranks: Sequence[RankLog]) -> ClaimResult:
    """torch's rendezvous error names the world size the script asked for, or the port a rank dialled."""
    asked = [(int(m[1]), int(m[2])) for r in ranks for _, text in r.events if (m := ASKED_WORLD.search(text))]
    errors = [hit for r in ranks for hit in r.hits if "clinic rank" not in hit]
    named = []
    for world, port in set(asked):
        for hit in errors:
            joined = CLIENTS_JOINED.search(hit)
            dialled = DIALLED.search(hit)
            if joined and int(joined.group(2)) == world:
                named.append(f"world size {world}: {hit[:120]}")
            elif dialled and port != int(next(g for g in dialled.groups()[1:] if g)):
                named.append(f"port {next(g for g in dialled.groups()[1:] if g)} (rank 0 listens on {port}): "
                             f"{hit[:100]}")
    return check_claim(
        "the rendezvous failure names what was wrong: the world size asked for, or the port dialled",
        bool(named) and bool(asked),
        named[0] if named else f"asked {asked or 'nothing'}; no error line names them ({len(errors)} error lines)")


MISMATCH_NAMED = "Detected mismatch"  # what torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check says of unequal collectives


def mismatch_named(ranks: Sequence[RankLog], timeout_s: float) -> tuple[bool, str]:
    """With TORCH_DISTRIBUTED_DEBUG=DETAIL: did a rank's error name the mismatch, and did every rank end in less
    than half the process group's timeout (named at once, not timed out)? The verdict and what was measured."""
    named = next((hit for r in ranks for hit in r.hits if MISMATCH_NAMED in hit), None)
    waits = [r.waited_s for r in ranks if r.waited_s is not None]
    quick = bool(waits) and max(waits) < timeout_s / 2
    shown = ", ".join(f"rank {r.rank}: {r.waited_s:.1f} s" for r in ranks if r.waited_s is not None) or "no wait seen"
    return named is not None and quick, (f"waited in the last call: {shown} (timeout {timeout_s:g} s); "
                                         + (f"named: {named[:110]}" if named else "no rank's error names a mismatch"))


def oom_claim(ranks: Sequence[RankLog], faulty_rank: int = FAULTY_RANK) -> ClaimResult:
    """Out of memory on ``faulty_rank`` only: its log has an allocation error, no other rank's has."""
    oom = {r.rank: any(OOM_PATTERNS.search(h) for h in r.hits) for r in ranks}
    holds = oom.get(faulty_rank, False) and not any(v for k, v in oom.items() if k != faulty_rank)
    return check_claim(
        f"out of memory on rank {faulty_rank} only",
        holds, ", ".join(f"rank {k}: {'out of memory' if v else 'no allocation error'}"
                         for k, v in sorted(oom.items())))


def clinic_claims(cases: ClinicCases) -> list[ClaimResult]:
    """The clinic's four claims on the jobs of ``cases`` (each job's case looked up: call after the diagnoses)."""
    s = cases.settings
    by_case = {cases.case(label): job_symptoms(job, label) for label, job in cases.jobs.items()}
    missing = [c for c in CASES if c not in by_case]
    if missing:
        raise ValueError(f"cases: no job of {', '.join(missing)}; submit all four labels")
    survivor = 1 - FAULTY_RANK
    results = []
    for case, what in (("rank_raises", "a rank that raises"), ("oom_one_rank", "a rank out of memory")):
        ranks = by_case[case].ranks
        results.append(stop_claim(ranks[FAULTY_RANK], ranks[survivor], s.stop_bound_s, s.stop_timeout_s, what))
    results.append(hang_claim(by_case["mismatched_collectives"].ranks, s.hang_timeout_s, s.hang_margin_s))
    results.append(rendezvous_claim(by_case["rendezvous_fails"].ranks))
    results.append(oom_claim(by_case["oom_one_rank"].ranks))
    return results


__all__ = ["ALL_RANKS", "CAUSES", "ClinicCases", "MAX_TRIES", "RankLog", "Symptoms",
           "clinic_claims", "diagnose", "explanation", "hang_claim", "job_symptoms",
           "oom_claim", "read_rank_log", "rendezvous_claim", "solution", "stop_claim", "submit_cases", "symptoms"]
