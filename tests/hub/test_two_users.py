"""Two participants of the workshop hub (slurm/hub.sh: ada and bob, real Unix users) and the instructor:
bob cannot cancel ada's job, read its log, or write into her course folder (registry, job folders); the
instructor reads all of it; what the hub's first spawn copies into a course folder belongs to its participant;
bob cannot pass runs off as ada's on lab 09's leaderboard (a sticky race folder, one runs file per user).

No browser and no hub server: the jobs are submitted with sbatch as the users (runuser), the way the servers
do. Marked ``slurm`` (the Slurm group), they need slurm/hub.sh install (the users and their homes)."""

from __future__ import annotations

import json
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hub_helpers import PARTICIPANT_PYTHON, REPO, as_user, course_of, home_of, run

from coursekit.labs import lab09_race as race
from coursekit.train.config import TrainConfig

pytestmark = pytest.mark.slurm

ADA, BOB, INSTRUCTOR = "ada", "bob", "instructor"
JOB_NAME = "ws-ada-perm"
START_TIMEOUT_S = 120
POLL_S = 0.5


def _job_state(job_id: str) -> str:
    return run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


@pytest.fixture
def ada_job(hub: str) -> Iterator[tuple[str, Path]]:
    """A running job of ada's (sleep), its log in her course folder: (job id, log path); cancelled at the end."""
    course = course_of(ADA)
    as_user(ADA, ["mkdir", "-p", str(course / "jobs")])
    done = as_user(ADA, ["sbatch", "--parsable", f"--job-name={JOB_NAME}", f"--chdir={course}", "--time=5",
                         f"--output={course}/jobs/{JOB_NAME}-%j.out", "--wrap", "echo secret-of-ada; sleep 300"])
    job_id = done.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _job_state(job_id) != "RUNNING":
            assert time.monotonic() < deadline, f"ada's job {job_id} not running after {START_TIMEOUT_S} s"
            time.sleep(POLL_S)
        log = course / "jobs" / f"{JOB_NAME}-{job_id}.out"
        while "secret-of-ada" not in run(["cat", str(log)], check=False).stdout:
            assert time.monotonic() < deadline, f"ada's job {job_id} wrote nothing to {log}"
            time.sleep(POLL_S)
        yield job_id, log
    finally:
        as_user(ADA, ["scancel", job_id], check=False)


def test_bob_cannot_cancel_adas_job(ada_job: tuple[str, Path]) -> None:
    job_id, _ = ada_job
    refused = as_user(BOB, ["scancel", job_id], check=False)
    assert "denied" in (refused.stderr + refused.stdout).lower(), f"scancel as bob: {refused.stderr!r}"
    time.sleep(2 * POLL_S)  # a cancel would show at once (KillWait 5 s: CANCELLED/COMPLETING first)
    assert _job_state(job_id) == "RUNNING", "bob's scancel ended ada's job"


def test_bob_cannot_read_or_write_adas_course_and_the_instructor_reads_it(ada_job: tuple[str, Path]) -> None:
    _, log = ada_job
    course = course_of(ADA)
    assert as_user(BOB, ["cat", str(log)], check=False).returncode != 0, "bob read ada's job log"
    assert as_user(BOB, ["ls", str(course)], check=False).returncode != 0, "bob listed ada's course folder"
    forged = '{"event": "submitted", "job_id": "1", "name": "ws-ada-forged"}\n'
    wrote = as_user(BOB, ["sh", "-c", 'printf %s "$1" >> "$2"', "sh", forged, str(course / "jobs" / "registry.jsonl")],
                    check=False)
    assert wrote.returncode != 0, "bob appended to ada's job registry"
    made = as_user(BOB, ["mkdir", str(course / "jobs" / "ws-ada-forged")], check=False)
    assert made.returncode != 0, "bob made a job folder in ada's course"
    assert "secret-of-ada" in as_user(INSTRUCTOR, ["cat", str(log)]).stdout, "the instructor cannot read ada's log"
    assert as_user(INSTRUCTOR, ["sh", "-c", 'printf x >> "$1"', "sh", str(log)], check=False).returncode != 0, \
        "the instructor could write into ada's files (read-only is enough)"


def test_homes_keep_participants_apart() -> None:
    for user in (ADA, BOB):
        mode = run(["stat", "-c", "%a %U %G", str(home_of(user))]).stdout.split()
        assert mode == ["2750", user, INSTRUCTOR], f"{user}'s home: {mode} (want 2750 {user} {INSTRUCTOR})"
    assert as_user(ADA, ["ls", str(home_of(BOB))], check=False).returncode != 0, "ada listed bob's home"



# --- lab 09's leaderboard: one runs file per user in a sticky folder, a run is its file owner's -------------

RACE_CONFIG = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16,
                          batch_size=50, epochs=10, lr=0.05, target_acc=0.6, eval_every=5, data_seed=0,
                          progress="off", device="cpu")
RACE_RULES = race.Rules("two users", RACE_CONFIG, models=("mlp",), max_parameters=300_000)
# as a participant, with a hub server's umask: post rows (job_id, summary) through the kit's API
POST_AS = ("import json, os, sys; os.umask(0o027); from pathlib import Path; "
           "from coursekit.labs.lab09_race import post_entry; "
           "post_entry(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), Path(sys.argv[1]))")
READ_AS = ("import json, sys; from pathlib import Path; from coursekit.labs.lab09_race import read_board; "
           "print(json.dumps(read_board(Path(sys.argv[1])), default=str))")


def _rows(tag: str, seconds: float) -> list[dict]:
    """Three finished seeds of the race's task, as ``labs.run_sweep`` rows."""
    summary = {"status": "completed", "target_reached": True, "time_to_target_s": seconds, "steps_to_target": 10,
               "config": RACE_CONFIG.to_dict(), "code_hash": race.code_hash(), "val_hash": "v", "val_samples": 400,
               "device_name": "cpu", "config_hash": "c", "num_parameters": 1000}
    return [{"job_id": f"{tag}{seed}", "summary": {**summary, "seed": seed}} for seed in range(3)]


@pytest.fixture
def race_folder() -> Iterator[Path]:
    """A race folder as ``slurm/hub.sh install`` makes it (root's, mode 1777), that ada and bob can reach."""
    for user in (ADA, BOB, INSTRUCTOR):
        try:
            pwd.getpwnam(user)
        except KeyError:
            pytest.fail(f"no Unix user {user}: `bash slurm/hub.sh install` (as root) makes ada, bob, instructor")
    if not PARTICIPANT_PYTHON.exists():
        pytest.fail(f"{PARTICIPANT_PYTHON} is missing: `bash slurm/hub.sh install` (as root)")
    folder = Path(tempfile.mkdtemp(prefix="coursekit-race-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_bob_cannot_post_as_ada_on_the_race_leaderboard(race_folder: Path) -> None:
    board = race_folder / "leaderboard.jsonl"
    # this checkout's coursekit (the participants' Python may hold another editable install)
    python = ["env", f"PYTHONPATH={REPO}", str(PARTICIPANT_PYTHON)]
    said = as_user(ADA, [*python, "-c", POST_AS, str(board), ADA, "fast", json.dumps(_rows("a", 2.0))]).stdout
    assert "ada/fast: posted 3 run(s)" in said and "MARKED" not in said, said
    hers = race_folder / f"{ADA}.jsonl"
    assert run(["stat", "-c", "%U %a", str(hers)]).stdout.split() == [ADA, "644"]  # the instructor reads it

    # bob, through the kit's API, under ada's pseudonym and her submission, faster and with her job ids: refused,
    # saying which pseudonym is his (ada's login is hers), and nothing written
    done = as_user(BOB, [*python, "-c", POST_AS, str(board), ADA, "fast", json.dumps(_rows("a", 0.5))], check=False)
    assert done.returncode != 0 and f"bob may not post as '{ADA}'" in done.stderr, done.stderr[-1500:]
    assert "posted" not in done.stdout and not (race_folder / f"{BOB}.jsonl").exists()
    # bob, by hand: a forged line in his own file, then into ada's file, over it, around it
    forged = {**_rows("f", 0.1)[0]["summary"], "seed": 5, "participant": ADA, "submission": "fast",
              "job_id": "f5", "user": ADA, "not_theirs": None, "posted": 0.0}  # "hers", "posted first"
    line = json.dumps(forged) + "\n"
    as_user(BOB, ["sh", "-c", 'umask 022; printf %s "$1" >> "$2"', "sh", line, str(race_folder / f"{BOB}.jsonl")])
    for attempt in (["sh", "-c", 'printf %s "$1" >> "$2"', "sh", line, str(hers)],
                    ["sh", "-c", ': > "$1"', "sh", str(hers)],
                    ["rm", "-f", str(hers)],
                    ["rm", "-f", str(race_folder / f"{ADA}.claim")],
                    ["mv", "-f", str(race_folder / f"{BOB}.jsonl"), str(hers)]):
        done = as_user(BOB, attempt, check=False)
        assert done.returncode != 0, f"bob could: {attempt} ({done.stderr.strip()})"
    as_user(BOB, ["sh", "-c", 'printf "not json\\n" >> "$1"', "sh", str(race_folder / "junk.jsonl")])
    assert len(run(["cat", str(hers)]).stdout.splitlines()) == 3, "ada's file changed"

    # the instructor reads all of it; a run is the owner's of the file it came from
    runs, problems = json.loads(as_user(INSTRUCTOR, [*python, "-c", READ_AS, str(board)]).stdout)
    assert any("junk.jsonl: named after junk but owned by bob: ignored" in problem for problem in problems), problems
    assert sorted((r["user"], r["participant"]) for r in runs) == [(ADA, ADA)] * 3 + [(BOB, ADA)]
    table = race.entries(runs, RACE_RULES, race.code_hash(), problems)
    (her_entry,) = [r for r in table if r["user"] == ADA]
    (his_entry,) = [r for r in table if r["user"] == BOB]
    assert her_entry["participant"] == his_entry["participant"] == ADA
    assert her_entry["counts"] and her_entry["rank"] == 1 and her_entry["time_to_target_s"] == 2.0, her_entry["marks"]
    assert sorted(run["job_id"] for run in her_entry["runs"]) == ["a0", "a1", "a2"]
    assert not his_entry["counts"] and his_entry["rank"] is None
    assert f"pseudonym of another user: 'ada' belongs to Unix user {ADA}, posted by {BOB}" in his_entry["marks"]
    assert [run["job_id"] for run in his_entry["runs"]] == ["f5"]  # the forged line, written by hand


# --- pooled results: lab 06's team sweep, two members posting at once into a shared pool ------------------

TEAM_BATCHES, TEAM_GPUS, TEAM_SIZE, POSTS_EACH = [32, 64, 128, 256], [1, 2, 4, 8], 2, 10
# as a participant (a hub server's umask): take a part of team "red", post its rows POSTS_EACH times
TEAM_AS = ("import json, os, sys; os.umask(0o027); from coursekit.labs import lab06_data_parallel as dp; "
           "me = sys.argv[1]; b, n, size, times = json.loads(sys.argv[2]); "
           "part = dp.take_part('red', me, b, n, size); "
           "rows = [{'n_gpu': g, 'batch_size': x, 'images_per_s_median': 100.0 * g + x, 'state': 'COMPLETED'} "
           "for x in part.my_batches for g in n]; "
           "[dp.post_part(part, me, rows) for _ in range(times)]; print(part.part, part.my_batches)")
TEAM_READ_AS = ("import json, sys; from coursekit.labs import lab06_data_parallel as dp; "
                "b, n, size = json.loads(sys.argv[1]); part = dp.TeamPart('red', 0, size, tuple(b), tuple(n)); "
                "table, notes = dp.team_table(part); print(json.dumps([list(table), notes]))")


@pytest.fixture
def shared_course() -> Iterator[Path]:
    """A course folder every user reads whose pools live in a sticky folder (what an instructor sets up)."""
    course = Path(tempfile.mkdtemp(prefix="coursekit-pools-", dir="/tmp"))
    course.chmod(0o755)
    (course / "pools").mkdir(mode=0o1777)
    (course / "pools").chmod(0o1777)
    (course / "coursekit.toml").write_text(f'pools = "{course / "pools"}"\n')
    try:
        yield course
    finally:
        shutil.rmtree(course)


def test_two_members_pool_one_team_sweep_at_once_and_a_forged_row_is_ignored(race_folder: Path,
                                                                              shared_course: Path) -> None:
    # the local site: these rows name no Slurm job, which accounting would mark (tests/integration/
    # test_pool_evidence.py has pools read against the real accounting); here, the pool's own rules
    python = ["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={shared_course}", "COURSEKIT_SITE=local",
              str(PARTICIPANT_PYTHON)]
    shape = json.dumps([TEAM_BATCHES, TEAM_GPUS, TEAM_SIZE, POSTS_EACH])
    with ThreadPoolExecutor(2) as both:  # ada and bob post at the same time
        said = list(both.map(lambda user: as_user(user, [*python, "-c", TEAM_AS, user, shape]).stdout, (ADA, BOB)))
    parts = sorted(line.split()[0] for line in said)
    assert parts == ["0", "1"], said  # one part each, whoever came first
    folder = shared_course / "pools" / "lab06-scaling-red"
    lines = {user: run(["cat", str(folder / f"{user}.jsonl")]).stdout.splitlines() for user in (ADA, BOB)}
    assert all(len(found) == POSTS_EACH * 2 * len(TEAM_GPUS) for found in lines.values()), "a post was lost"
    assert all(json.loads(line)["participant"] == user for user, found in lines.items() for line in found)

    # bob writes a faster run of a row of ada's part into his own file, and a line that is no record
    ada_batch = next(json.loads(line)["batch_size"] for line in lines[ADA])
    forged = json.dumps({"participant": BOB, "team": "red", "part": 0, "n_gpu": 8, "batch_size": ada_batch,
                         "images_per_s_median": 1e9, "state": "COMPLETED"})
    as_user(BOB, ["sh", "-c", 'printf "%s\\n{torn\\n" "$1" >> "$2"', "sh", forged, str(folder / f"{BOB}.jsonl")])
    table, notes = json.loads(as_user(INSTRUCTOR, [*python, "-c", TEAM_READ_AS,
                                                   json.dumps([TEAM_BATCHES, TEAM_GPUS, TEAM_SIZE])]).stdout)
    assert len(table) == len(TEAM_BATCHES) * len(TEAM_GPUS), notes  # the team's whole sweep
    cell = next(r for r in table if (r["n_gpu"], r["batch_size"]) == (8, ada_batch))
    assert cell["participant"] == ADA and cell["images_per_s_median"] == 800.0 + ada_batch
    assert any("ignored 1 record(s)" in note for note in notes) and any("not a record" in n for n in notes), notes
