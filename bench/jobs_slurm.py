"""Jobs benchmark against the local Slurm (slurm/cluster.sh start): how fast coursekit talks to Slurm.

    python bench/jobs_slurm.py                 # all five measurements, writes bench/REPORT-jobs.md
    python bench/jobs_slurm.py --repeats 3 --no-slurm   # search_log only (no cluster needed)
    python bench/jobs_slurm.py --watcher-only  # the state watcher alone: rewrites its section of the report

1. submit a 32-job sweep (16 commands x n_gpu [1, 2]) with gpu_jobs_submitter   target < 3 s
   (idr_pytools sleeps 2 s per sbatch: >= 64 s for the same sweep)
2. submit -> RUNNING latency of one 1-GPU job on an idle cluster (squeue polled every 20 ms)
3. queue refresh (QueueSource.rows) for a handful of jobs, running and pending  target < 150 ms
4. search_log over 10,000 generated log files (5,000 job folders, .out + .err)     target < 50 ms
5. the state watcher: N processes each following M jobs (held, PENDING: they take no GPU) with wait_all
   and a live-view refresh every 2 s; Slurm calls counted by squeue/sacct shims put first on PATH
   (they log, then exec the real command)          target <= 1 call per 5 s per process, whatever M

Every figure is mean ± std over the repetitions (and the median). Jobs are submitted in a temporary
course folder and cancelled at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from robust import check_writable  # noqa: E402

SWEEP_COMMANDS = 16
SWEEP_GPU_COUNTS = [1, 2]
SWEEP_TARGET_S = 3.0
IDR_PYTOOLS_SLEEP_S = 2.0  # idr_pytools' pause after every sbatch
QUEUE_JOBS = 8  # a handful: 4 running (the node's 4 GPUs) and 4 pending
QUEUE_TARGET_MS = 150.0
QUEUE_REFRESHES = 20
QUEUE_SETTLE_S = 5.0
METRICS_STEPS = 1000  # step records each running job of the queue benchmark has written
LOG_FILES = 10_000
LOG_NAMES = 10
SEARCH_TARGET_MS = 50.0
SEARCH_REPEATS = 10
RUNNING_POLL_S = 0.02
RUNNING_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 60.0
JOB_SLEEP_S = 120  # benchmark jobs sleep, and are cancelled when measured
DEFAULT_REPEATS = 5
REPORT = REPO / "bench" / "REPORT-jobs.md"
WATCH_PROCESSES = (1, 8)
WATCH_JOBS = (1, 8, 32)
WATCH_WINDOW_S = 60.0
WATCH_STEADY_AFTER_S = 20.0  # calls after this point of the window count as "steady state"
WATCH_TARGET_PER_S = 1 / 5
WATCH_VIEW_TIMESTEP_S = 2.0
WATCH_SECTION = "## State watcher: Slurm calls per waiting process"
WATCH_WORKER = """import sys, threading, time
from coursekit.jobs.handle import Job
from coursekit.jobs.queue_view import QueueSource
from coursekit.labs.kit.experiments import wait_all
ids, window, timestep = sys.argv[1].split(","), float(sys.argv[2]), float(sys.argv[3])
jobs = [Job(i, "bench-held", "/tmp/coursekit-bench-held/" + i) for i in ids]
stop = threading.Event()
def view():  # what display_slurm_queue's thread does
    source = QueueSource(jobs=jobs)
    while not stop.wait(timestep):
        source.rows()
threading.Thread(target=view, daemon=True).start()
print(time.time(), flush=True)
try:
    wait_all(jobs, timeout_s=window)
except TimeoutError:
    pass
stop.set()
print(time.time(), flush=True)
"""
SHIM = """#!/bin/bash
echo "$PPID $(date +%s.%N) {command}" >> "{log}"
exec "{real}" "$@"
"""
METRICS_WRITER = """import sys, time
from coursekit.metrics import MetricsWriter, default_run_dir
with MetricsWriter(default_run_dir()) as writer:
    writer.write("start", config={{"epochs": 10}}, total_steps=10 * {steps})
    for step in range({steps}):
        writer.write("step", step=step + 1, epoch=1, loss=1.0 / (step + 1), lr=0.1, images_per_s=1000.0)
print("job", sys.argv[2], "wrote {steps} steps", flush=True)
time.sleep(float(sys.argv[1]))
"""


class Stat:
    """Samples of one measurement, in the unit given."""

    def __init__(self, label: str, unit: str, samples: list[float], target: float | None = None) -> None:
        self.label, self.unit, self.samples, self.target = label, unit, samples, target

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def std(self) -> float:
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "meets target" if self.median < self.target else "MISSES target"

    def row(self) -> str:
        target = f"< {self.target:g} {self.unit}" if self.target is not None else ""
        return (f"| {self.label} | {self.mean:.3g} ± {self.std:.2g} {self.unit} | {self.median:.3g} {self.unit} | "
                f"{len(self.samples)} | {target} | {self.verdict()} |")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------ Slurm parts


def wait_idle(job_ids: list[str]) -> None:
    """Until none of these jobs is pending or running (cancelled jobs take a moment to leave)."""
    from coursekit import slurm_cli

    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while time.monotonic() < deadline:
        rows = slurm_cli.squeue(job_ids) if job_ids else []
        if all(row["state"] in slurm_cli.TERMINAL_STATES for row in rows):
            return
        time.sleep(0.1)
    raise RuntimeError(f"jobs {job_ids} still active after {IDLE_TIMEOUT_S} s")


def cancel(job_ids: list[str]) -> None:
    from coursekit import slurm_cli

    if job_ids:
        slurm_cli.scancel(sorted({job_id.split("_")[0] for job_id in job_ids}))
        wait_idle(job_ids)


def bench_sweep(repeats: int) -> Stat:
    from coursekit.jobs.submit import gpu_jobs_submitter

    commands = [f"sleeper.py {JOB_SLEEP_S} --seed {i}" for i in range(SWEEP_COMMANDS)]
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        ids = gpu_jobs_submitter(commands, n_gpu=SWEEP_GPU_COUNTS, name="bench-sweep", time_max="00:10:00")
        seconds = time.perf_counter() - start
        assert len(ids) == SWEEP_COMMANDS * len(SWEEP_GPU_COUNTS), ids
        samples.append(seconds)
        cancel(ids)
    return Stat(f"submit a {len(commands) * len(SWEEP_GPU_COUNTS)}-job sweep", "s", samples, SWEEP_TARGET_S)


def bench_latency(repeats: int) -> Stat:
    from coursekit import slurm_cli
    from coursekit.jobs.submit import gpu_jobs_submitter

    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        [job_id] = gpu_jobs_submitter(f"sleeper.py {JOB_SLEEP_S}", n_gpu=1, name="bench-latency", time_max="00:10:00")
        while True:
            rows = slurm_cli.squeue([job_id])
            if rows and rows[0]["state"] == "RUNNING":
                samples.append(time.perf_counter() - start)
                break
            if time.perf_counter() - start > RUNNING_TIMEOUT_S:
                raise RuntimeError(f"job {job_id} not RUNNING after {RUNNING_TIMEOUT_S} s: {rows}")
            time.sleep(RUNNING_POLL_S)
        cancel([job_id])
    return Stat("submit -> RUNNING (1 job, idle cluster)", "s", samples)


def bench_queue(repeats: int) -> tuple[Stat, Stat]:
    from coursekit.jobs.queue_view import QueueSource
    from coursekit.jobs.submit import gpu_jobs_submitter

    commands = [f"metrics_writer.py {JOB_SLEEP_S} {i}" for i in range(QUEUE_JOBS)]
    ids = gpu_jobs_submitter(commands, n_gpu=1, name="bench-queue", time_max="00:10:00")
    try:
        time.sleep(QUEUE_SETTLE_S)  # the first four run and have written metrics; four are pending
        first = [timed(lambda: QueueSource("bench-queue").rows()) * 1e3 for _ in range(repeats)]
        source = QueueSource("bench-queue")
        source.rows()
        steady = [timed(source.rows) * 1e3 for _ in range(QUEUE_REFRESHES)]
        states = sorted({row.state for row in source.rows()})
    finally:
        cancel(ids)
    return (Stat(f"queue: first refresh, {QUEUE_JOBS} jobs ({'/'.join(states)})", "ms", first, QUEUE_TARGET_MS),
            Stat(f"queue: next refreshes, {QUEUE_JOBS} jobs", "ms", steady, QUEUE_TARGET_MS))


# ------------------------------------------------------------------------------------------ search_log


def make_log_tree(root: Path, files: int) -> None:
    """``files`` log files in ``files // 2`` job folders over LOG_NAMES names, each as submitit leaves a
    finished job: .out + .err logs, script, submitted and result pickles, metrics."""
    jobs = files // 2
    for index in range(jobs):
        job_id = str(100_000 + index)
        folder = root / f"name{index % LOG_NAMES}" / job_id
        folder.mkdir(parents=True)
        for suffix in ("_0_log.out", "_0_log.err", "_submission.sh", "_submitted.pkl", "_0_result.pkl"):
            (folder / f"{job_id}{suffix}").touch()
        (folder / "metrics.jsonl").touch()
    old = time.time() - 3600  # a finished workshop: folders not touched for an hour
    for name_folder in root.iterdir():
        for folder in name_folder.iterdir():
            os.utime(folder, (old, old))


def bench_search(root: Path, repeats: int) -> list[Stat]:
    from coursekit.jobs import logs

    make_log_tree(root, LOG_FILES)
    found = logs.search_log(root=root, with_err=True)
    assert len(found["stdout"]) + len(found["stderr"]) == LOG_FILES, {k: len(v) for k, v in found.items()}
    index = root / logs.INDEX_FILE

    def forget(drop_index: bool) -> None:
        logs._folder_logs.clear()
        logs._indexes.clear()
        if drop_index:
            index.unlink(missing_ok=True)

    first_ever, new_process = [], []
    for _ in range(repeats):
        forget(drop_index=True)
        first_ever.append(timed(lambda: logs.search_log(root=root, with_err=True)) * 1e3)
    for _ in range(repeats):
        forget(drop_index=False)
        new_process.append(timed(lambda: logs.search_log(root=root, with_err=True)) * 1e3)
    warm = [timed(lambda: logs.search_log(root=root, with_err=True)) * 1e3 for _ in range(repeats)]
    by_id = [timed(lambda: logs.search_log(root=root, contains="104321")) * 1e3 for _ in range(repeats)]
    folders = [job.path for name in os.scandir(root) if name.is_dir() for job in os.scandir(name.path)]
    floor = [timed(lambda: [os.listdir(folder) for folder in folders]) * 1e3 for _ in range(repeats)]
    return [Stat(f"floor: os.listdir of the {len(folders)} job folders alone", "ms", floor),
            Stat(f"search_log, {LOG_FILES} files, first search ever (no index: lists every folder)", "ms",
                 first_ever),
            Stat(f"search_log, {LOG_FILES} files, first call of a new process (reads the index)", "ms", new_process,
                 SEARCH_TARGET_MS),
            Stat(f"search_log, {LOG_FILES} files, later calls", "ms", warm, SEARCH_TARGET_MS),
            Stat(f"search_log(contains=<job id>), {LOG_FILES} files", "ms", by_id, SEARCH_TARGET_MS)]


# ------------------------------------------------------------------------------------------ state watcher


def make_shims(folder: Path, log: Path) -> Path:
    """squeue and sacct shims that log ``<parent pid> <time> <command>`` then run the real command."""
    folder.mkdir(parents=True, exist_ok=True)
    for command in ("squeue", "sacct"):
        real = shutil.which(command)
        if real is None:
            raise RuntimeError(f"{command} is not on PATH: start the local Slurm (bash slurm/cluster.sh start)")
        (folder / command).write_text(SHIM.format(command=command, log=log, real=real))
        (folder / command).chmod(0o755)
    return folder


def held_array(size: int) -> list[str]:
    """``size`` held (PENDING, taking nothing) array tasks: their ids."""
    done = subprocess.run(["sbatch", "--hold", "--parsable", "-J", "bench-held", "-o", "/dev/null",
                           f"--array=0-{size - 1}", "--wrap", "sleep 1"], capture_output=True, text=True, check=True)
    array_id = done.stdout.strip().split(";")[0]
    return [f"{array_id}_{task}" for task in range(size)]


def bench_watcher(processes: Sequence[int], jobs: Sequence[int], window_s: float, work: Path,
                  coursekit_path: Path | None = None) -> list[dict[str, float]]:
    """For each N x M: N worker processes, each following its own M held jobs for ``window_s`` seconds;
    the Slurm calls each one made (mean and worst over the N), per second."""
    results = []
    for n in processes:
        for m in jobs:
            log = work / f"calls-{n}x{m}.log"
            bin_dir = make_shims(work / f"shims-{n}x{m}", log)
            arrays = [held_array(m) for _ in range(n)]
            env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                      PYTHONPATH=str(coursekit_path or REPO))
            try:
                workers = [subprocess.Popen([sys.executable, "-c", WATCH_WORKER, ",".join(ids), str(window_s),
                                             str(WATCH_VIEW_TIMESTEP_S)], env=env, stdout=subprocess.PIPE, text=True,
                                            cwd=work)  # not the repository: PYTHONPATH decides
                           for ids in arrays]
                spans = {}
                for worker in workers:
                    out, _ = worker.communicate(timeout=window_s + 120)
                    begin, end = (float(x) for x in out.split())
                    spans[worker.pid] = (begin, end)
            finally:
                subprocess.run(["scancel", *{ids[0].split("_")[0] for ids in arrays}], capture_output=True, check=False)
            calls: dict[int, list[float]] = {pid: [] for pid in spans}
            for line in log.read_text().splitlines() if log.exists() else []:
                pid, stamp, _ = line.split()
                if int(pid) in calls:
                    calls[int(pid)].append(float(stamp))
            rates = [len(calls[pid]) / (end - begin) for pid, (begin, end) in spans.items()]
            steady = [sum(t >= begin + WATCH_STEADY_AFTER_S for t in calls[pid]) / (end - begin - WATCH_STEADY_AFTER_S)
                      for pid, (begin, end) in spans.items()]
            results.append({"processes": n, "jobs": m, "window_s": window_s,
                            "calls": statistics.fmean(len(c) for c in calls.values()),
                            "rate": statistics.fmean(rates), "worst": max(rates), "steady": max(steady)})
            print(f"watcher: {n} process(es) x {m} job(s): {results[-1]}", flush=True)
    return results


def watcher_section(results: list[dict[str, float]], command: str) -> str:
    lines = [WATCH_SECTION, "",
             f"Command: `{command}`. Each process follows its own M held jobs (PENDING, taking no GPU) with "
             f"`wait_all` and, in a thread, a live-view refresh (`QueueSource.rows()`) every "
             f"{WATCH_VIEW_TIMESTEP_S:g} s, for {results[0]['window_s']:.0f} s; every `squeue`/`sacct` it runs goes "
             "through a shim first on PATH that logs the call and execs the real command.", "",
             f"Machine: {machine()[0]}; {machine()[2]}. Date: {time.strftime('%Y-%m-%d %H:%M %Z')}.", "",
             "| processes N | jobs per process M | calls per process | calls/s per process (mean, worst) | "
             f"worst after the first {WATCH_STEADY_AFTER_S:.0f} s | target ≤ {WATCH_TARGET_PER_S:g}/s |",
             "|---|---|---|---|---|---|"]
    for r in results:
        verdict = "meets target" if r["worst"] <= WATCH_TARGET_PER_S else "MISSES target"
        lines.append(f"| {r['processes']} | {r['jobs']} | {r['calls']:.1f} | {r['rate']:.3f}, {r['worst']:.3f} | "
                     f"{r['steady']:.3f} | {verdict} |")
    lines += ["", "The watcher (coursekit/jobs/watcher.py) asks at 0, 1, 2, 4, 8, 16 s... after the youngest job's "
              "submission (half its age, at most every 10 s), one `squeue` for all the jobs the process follows "
              "(and one `sacct` for those that left the queue); `Job.state`, `repr(job)`, `Job.wait`, `wait_all` "
              "and the live view all read it, so the figure does not grow with M nor with the view's timestep.", ""]
    return "\n".join(lines)


def replace_section(report: Path, section: str) -> None:
    """Put ``section`` (which starts with WATCH_SECTION) in the report, in place of the old one."""
    text = report.read_text() if report.exists() else "# Jobs benchmark (local Slurm)\n"
    before, _, after = text.partition(WATCH_SECTION)
    rest = after[after.find("\n## "):] if "\n## " in after else ""
    report.write_text(before.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + rest)


# ------------------------------------------------------------------------------------------ report


def machine() -> list[str]:
    def first_line(command: list[str]) -> str:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    import submitit

    return [f"host {platform.node()}, {os.cpu_count()} CPU cores ({cpu}), kernel {platform.release()}",
            f"Python {platform.python_version()}, submitit {submitit.__version__}, "
            f"Slurm {first_line(['sinfo', '--version'])}",
            f"cluster: {first_line(['sinfo', '-h', '-o', '%D node(s) %c CPUs %G partition %P'])}",
            f"load average {os.getloadavg()[0]:.1f} when written (the cores are shared: expect noise)"]


def write_report(stats: list[Stat], command: str, path: Path) -> str:
    sweep = next((s for s in stats if s.label.startswith("submit a")), None)
    lines = ["# Jobs benchmark (local Slurm)", "",
             f"Command: `{command}` (from the repository root, with `bash slurm/cluster.sh start` done).", "",
             "Machine: " + "; ".join(machine()) + ".", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}.", "",
             "| measurement | mean ± std | median | runs | target | |", "|---|---|---|---|---|---|",
             *(stat.row() for stat in stats), ""]
    if sweep is not None:
        jobs = SWEEP_COMMANDS * len(SWEEP_GPU_COUNTS)
        lines += [f"idr_pytools sleeps {IDR_PYTOOLS_SLEEP_S:g} s after each sbatch: the same {jobs}-job sweep takes "
                  f"at least {jobs * IDR_PYTOOLS_SLEEP_S:.0f} s there, {jobs * IDR_PYTOOLS_SLEEP_S / sweep.median:.0f}x "
                  f"the median here (jobs with the same resources go in one job array: one sbatch).", ""]
    lines += ["Notes: search_log opens no log file. A finished job's folder is listed once ever: its logs are "
              "kept in memory and in `<jobs>/.search_log_index.json`, which a new process reads instead of "
              "listing the folders; unfinished folders are re-listed only when their mtime changed. The 'floor' "
              "row is the kernel's share of listing every job folder once (what the first search ever pays, "
              "and what a plain scandir walk pays on every call). Queue refresh = one squeue for all jobs shown, plus one "
              "sacct when jobs leave the queue; ended jobs are not asked again.", ""]
    text = "\n".join(lines)
    path.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="repetitions of each measurement")
    parser.add_argument("--no-slurm", action="store_true", help="only search_log (no cluster needed)")
    parser.add_argument("--report", type=Path, default=REPORT, help="where to write the markdown report")
    parser.add_argument("--watcher-only", action="store_true", help="only the state watcher's calls (section 5)")
    parser.add_argument("--watch-processes", type=int, nargs="+", default=list(WATCH_PROCESSES))
    parser.add_argument("--watch-jobs", type=int, nargs="+", default=list(WATCH_JOBS))
    parser.add_argument("--watch-window", type=float, default=WATCH_WINDOW_S, help="seconds each process waits")
    parser.add_argument("--coursekit-path", type=Path, default=None,
                        help="run the watcher's workers with the coursekit found there (e.g. an older checkout)")
    args = parser.parse_args(argv)
    absent = [name for name in ("sbatch", "squeue", "sacct", "scancel", "sinfo") if shutil.which(name) is None]
    if absent and (args.watcher_only or not args.no_slurm):
        raise SystemExit(f"bench/jobs_slurm.py: Slurm's {', '.join(absent)} not on PATH: nothing to measure against "
                         "Slurm; start the local Slurm (bash slurm/cluster.sh install && bash slurm/cluster.sh start), "
                         "or give --no-slurm to measure search_log alone")
    check_writable(args.report, "--report")
    command = "python bench/jobs_slurm.py" + (f" {' '.join(argv or sys.argv[1:])}" if (argv or sys.argv[1:]) else "")
    if args.watcher_only:
        work = Path(tempfile.mkdtemp(prefix="coursekit-bench-watch-"))
        try:
            results = bench_watcher(args.watch_processes, args.watch_jobs, args.watch_window, work, args.coursekit_path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        section = watcher_section(results, command)
        replace_section(args.report, section)
        print(section)
        return 0
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (mean ± std)")
    work = Path(tempfile.mkdtemp(prefix="coursekit-bench-"))
    os.environ["COURSEKIT_COURSE_DIR"] = str(work / "course")
    os.environ.setdefault("COURSEKIT_SITE", "slurm")
    (work / "course").mkdir()
    (work / "course" / "sleeper.py").write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\n")
    (work / "course" / "metrics_writer.py").write_text(METRICS_WRITER.format(steps=METRICS_STEPS))
    os.chdir(work / "course")
    stats: list[Stat] = []
    try:
        if not args.no_slurm:
            stats.append(bench_sweep(args.repeats))
            stats.append(bench_latency(args.repeats * 2))
            stats.extend(bench_queue(args.repeats))
        stats.extend(bench_search(work / "logs" / "jobs", max(args.repeats, SEARCH_REPEATS)))
    finally:
        os.chdir(REPO)
        shutil.rmtree(work, ignore_errors=True)
    text = write_report(stats, command, args.report)
    if not args.no_slurm:
        work = Path(tempfile.mkdtemp(prefix="coursekit-bench-watch-"))
        try:
            results = bench_watcher(args.watch_processes, args.watch_jobs, args.watch_window, work, args.coursekit_path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        replace_section(args.report, watcher_section(results, command))
        text = args.report.read_text()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
