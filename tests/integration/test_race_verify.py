"""`coursekit instructor race verify` on the real local Slurm, as the real Unix user ``instructor``: ada runs lab
09's cpu entry as the notebook does (her own Slurm job, from her own course folder) and posts it; the instructor,
from theirs, re-runs it with `race verify --top 1` (their own jobs, their own job folders, ada's runs file read
from the shared race folder) and the verified board shows the re-run's time beside ada's claim. The smallest
run there is: lab 09's cpu race (a small MLP, a few seconds a seed). Everything lives under /tmp, removed at
the end; the users' homes are put back as they were (``homes_kept``)."""

from __future__ import annotations

import json
import secrets
import shutil
import string
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import wait_job_end

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from hub_helpers import PARTICIPANT_PYTHON, REPO, as_user, homes_kept, run  # noqa: E402

USERS = ("instructor", "ada")
VERIFY_S = 300  # the whole command, its jobs included (a few seconds each when the cluster is idle)

ENTRY = """
from coursekit import labs
from coursekit.labs import lab09_race as race
s = labs.choose_profile().settings("09")
rules = race.Rules("lab 09", s.baseline, models=s.models, max_parameters=s.max_parameters, max_gpus=s.max_gpus,
                   seeds=s.seeds)
mine = s.baseline.replace(**s.tuned)
entry = labs.run_sweep(rules.submission(mine), name=labs.job_name("ada", "race"), one_at_a_time=True, one_job=True,
                       **s.job, timeout_s=s.timeout_s)
assert race.post_entry("ada", race.entry_name(mine), entry) == rules.seeds, entry
"""


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder every user reaches: ``race/`` (sticky, open, the instructor's, as setup makes it) and one course
    folder per user (``<user>/``, theirs), whose coursekit.toml names the race folder and the instructor."""
    with homes_kept(USERS):
        root = Path(tempfile.mkdtemp(prefix="ck-verify-", dir="/tmp"))
        root.chmod(0o755)
        race_folder = root / "race"
        race_folder.mkdir(mode=0o1777)
        race_folder.chmod(0o1777)
        run(["chown", "instructor", str(race_folder)])
        prefix = "v" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(4))
        for user in USERS:
            course = root / user
            course.mkdir()
            (course / "coursekit.toml").write_text(
                f'site = "slurm"\nprofile = "cpu"\njob_prefix = "{prefix}"\ninstructor = "instructor"\n'
                f'leaderboard = "{race_folder / "leaderboard.jsonl"}"\ndata_dir = "{root / "data"}"\n')
            run(["chown", "-R", user, str(course)])
        try:
            yield root
        finally:
            shutil.rmtree(root)


def as_course_user(user: str, root: Path, code: str) -> str:
    """Python ``code`` run as ``user`` in their course folder (this checkout's coursekit, the hub's Python)."""
    if not PARTICIPANT_PYTHON.exists():
        pytest.fail(f"{PARTICIPANT_PYTHON} is missing: `bash slurm/hub.sh install` (as root) makes it")
    done = as_user(user, ["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={root / user}",
                          str(PARTICIPANT_PYTHON), "-c", code], check=False, timeout_s=VERIFY_S)
    assert done.returncode == 0, f"as {user}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_instructor_verifies_adas_entry_on_slurm(shared: Path) -> None:
    as_course_user("ada", shared, ENTRY)
    posted = [json.loads(line) for line in (shared / "race" / "ada.jsonl").read_text().splitlines()]
    for job_id in {r["job_id"] for r in posted}:  # her job's end reaches accounting a moment after its files: the
        assert wait_job_end(job_id, VERIFY_S) == "COMPLETED"  # board checks her runs against accounting
    out = as_course_user("instructor", shared, "import sys; from coursekit import cli; "
                         "sys.exit(cli.main(['instructor', 'race', 'verify', '--top', '1']))")
    assert "submitted 3 re-run(s) of 1 entry" in out and "as instructor's job(s)" in out, out
    assert "collected 3 re-run(s)" in out, out
    row = next(line.split() for line in out.splitlines() if "ada/tuned-" in line and "±" in line)
    claimed, verified = float(row[2]), float(row[5])  # rank, entry, claimed ± std, verified, verification, marks
    assert claimed > 0 and verified > 0, out
    # sub-second CPU runs on a shared machine: the verdict may go either way, but the board must follow it
    if row[6] == "reproduced":
        assert row[0] == "1" and "final standings (verified times): #1 ada/tuned-" in out, out
    else:
        assert row[6:8] == ["NOT", "REPRODUCED"] and "not reproduced, unranked: ada/tuned-" in out, out
    reruns = [json.loads(line) for line in (shared / "race" / "instructor.jsonl").read_text().splitlines()]
    done = [r for r in reruns if r.get("status") and r["status"] != "submitted"]
    assert sorted(r["seed"] for r in done) == [0, 1, 2] and {r["rerun_of"]["user"] for r in done} == {"ada"}
    jobs = run(["sacct", "-n", "-X", "-P", "-o", "JobID,User,State", "-j", ",".join({r["job_id"] for r in done})])
    assert {tuple(line.split("|")[1:]) for line in jobs.stdout.split()} == {("instructor", "COMPLETED")}, jobs.stdout
