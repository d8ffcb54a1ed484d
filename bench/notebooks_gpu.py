"""The labs' gpu profile run end to end, as an instructor would before a workshop: execute the notebooks.

Every notebook is executed with nbclient from ``notebooks/`` (``COURSEKIT_PROFILE=gpu``, the local site
unless ``COURSEKIT_SITE`` is set, a throw-away course folder), and the run is recorded: wall time, each
claim's verdict (the lines ``labs.check_claim`` prints), the first error, and everything the notebook
printed. One command on a GPU machine (after ``source bench/setup_gpu.sh``)::

    python bench/notebooks_gpu.py --out bench/results/gpu_notebooks.json --log-dir /tmp/nb-logs

runs every notebook present in ``notebooks/`` (or those named: ``06 08``). With several GPUs, independent
notebooks run at the same time, each in its own process with its own ``CUDA_VISIBLE_DEVICES`` (and an equal
share of the CPU cores): one GPU each, more for the multi-GPU labs (``labs.lab_gpus``), multi-GPU ones started
first. ``--notebook-timeout`` kills a notebook that runs too long, ``--time-limit`` stops the whole run
(e.g. a job's or a machine's time limit): notebooks still running are killed and reported, those not
started are listed as not run. The JSON is rewritten whenever a notebook starts or ends, so a killed run
still leaves its results.

``python bench/notebooks_gpu.py --report bench/results/gpu_notebooks.json`` rewrites
``bench/REPORT-notebooks-gpu.md`` from the JSON (several JSON files may be given: later runs of a
notebook replace earlier ones).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, read_json  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
REPORT = ROOT / "bench" / "REPORT-notebooks-gpu.md"
CELL_TIMEOUT_S = 1800
# labs.claims' words; only a failed claim fails a notebook ("not seen": a result reported, not asserted)
VERDICTS = ("CLAIM HOLDS", "CLAIM DOES NOT HOLD", "NOT CHECKED HERE", "NOT SEEN ON THIS DATA")
FAILED_VERDICT = VERDICTS[1]
NOTEBOOK_TIMEOUT_S = 1500
LAB_BUDGET_S = 420  # a lab's gpu profile takes at most 7 minutes on its GPUs: a longer run is said to be over it


def over_budget(run: dict[str, Any]) -> str:
    """" (over the 7-min budget)" for a run that took longer than LAB_BUDGET_S, else ""."""
    return f" (over the {LAB_BUDGET_S / 60:.0f}-min budget)" if run.get("wall_s", 0) > LAB_BUDGET_S else ""
TIME_LIMIT_S = 570  # under 10 min, with time to write the results
KILL_GRACE_S = 10
GPU_ENV = {"MPLBACKEND": "Agg", "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def find_notebooks(selectors: list[str]) -> list[Path]:
    """``06`` or ``06_data_parallel`` or a path -> notebook paths; no selector: every lab."""
    every = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not selectors:
        return every
    chosen = []
    for selector in selectors:
        matches = [p for p in every if p.name.startswith(selector)] or [Path(selector)]
        if not matches[0].exists():
            raise SystemExit(f"notebook {selector!r}: none in {NOTEBOOKS} (they are {[p.name for p in every]})")
        chosen += matches
    return chosen


def _text_of(output: dict[str, Any]) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    return data.get("text/plain", "") + ("\n" if "text/plain" in data else "")


def machine() -> dict[str, Any]:
    """Hardware and versions recorded with every result."""
    info: dict[str, Any] = {"host": platform.node(), "python": platform.python_version()}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda, gpus=torch.cuda.device_count(),
                    gpu_name=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        info["torch"] = None
    return info


def run_notebook(path: Path, log_dir: Path | None, profile: str = "gpu") -> dict[str, Any]:
    """Execute one notebook; its verdicts, errors, wall time and printed text."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:  # the stored (cpu profile) outputs must not pass for this run's where a cell never ran
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    env_before = dict(os.environ)
    course = tempfile.mkdtemp(prefix=f"coursekit-gpu-{path.stem[:2]}-")
    os.environ.update(GPU_ENV, COURSEKIT_PROFILE=profile)
    os.environ.setdefault("COURSEKIT_SITE", "local")
    os.environ["COURSEKIT_COURSE_DIR"] = course
    progress = log_dir / f"gpu_nb{path.stem[:2]}_cells.txt" if log_dir is not None else None
    start, error = time.monotonic(), None
    if progress is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        progress.write_text("")

    def cell_done(cell: Any, cell_index: int, **_: Any) -> None:
        """One line per executed cell, written at once: a notebook killed at its time limit still shows where
        its minutes went."""
        if progress is not None and cell.cell_type == "code":
            first = cell.source.splitlines()[0][:80] if cell.source else ""
            with progress.open("a") as handle:
                handle.write(f"{time.monotonic() - start:7.1f} s  cell {cell_index} done: {first}\n")

    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}}, on_cell_executed=cell_done)
    try:
        client.execute()
    except Exception as failure:  # noqa: BLE001 - any failure of a cell is the result we report
        error = f"{type(failure).__name__}: {str(failure)[-1500:]}"
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    wall = time.monotonic() - start
    printed = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and cell.get("outputs"):
            printed.append(f"--- cell {index}\n" + "".join(_text_of(o) for o in cell.outputs))
    text = "\n".join(printed)
    lines = text.splitlines()
    claims = read_claims(lines)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        # what it printed, then the end of each failed job's stderr (in the same file: the device tool brings
        # back a few files per call)
        (log_dir / f"gpu_nb{path.stem[:2]}.txt").write_text(text + failed_job_logs(Path(course)))
        nbformat.write(notebook, log_dir / f"gpu_{path.name}")  # the executed notebook: plots and tables too
    failed_claims = [c for c in claims if c["verdict"] == FAILED_VERDICT]
    # what the labs say about themselves: the CIFAR-10 stand-in, jobs that did not complete (labs.failures)
    notes = sorted({line.strip() for line in lines if line.startswith("DATASET STAND-IN")
                    or " did not complete:" in line})
    return {"notebook": path.name, "wall_s": round(wall, 1), "passed": error is None and not failed_claims,
            "error": error, "claims": claims, "notes": notes, "course_dir": course,
            "slowest_cells": slowest_cells(notebook), "not_for_participants": words_shown(notebook, course)}


def words_shown(notebook: Any, course: str) -> list[str]:
    """What the executed notebook shows a participant that is not for them (``exercises.not_for_participants``):
    its markdown cells and everything its code cells printed or displayed, the course folder's path left out."""
    from coursekit.labs.kit.exercises import not_for_participants

    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            found += [f"cell {index}: {hit}" for hit in not_for_participants(cell.source)]
        elif cell.cell_type == "code":
            shown = "".join(_text_of(o) + o.get("data", {}).get("text/markdown", "") for o in cell.get("outputs", []))
            shown = shown.replace(course, "~/course")
            found += [f"cell {index}: {hit}" for hit in not_for_participants(shown, printed=True)]
    return found


FAILURE_MARKS = ("Traceback", "killed by signal", "Aborted", "terminate called", "Fatal Python error")
KEPT_LOG_BYTES = 40_000  # the end of each failed job's stderr (a worker's own message comes before the traceback)


def failed_job_logs(course: Path) -> str:
    """The stderr of every job in ``course`` that shows a failure, its last ``KEPT_LOG_BYTES`` under a heading
    naming the file ("" when none): the course folder is a temporary one, gone with the GPU machine, and a
    notebook's failure report shows a job's last lines only, while the cause of a crash in a DataLoader worker
    comes before them."""
    parts = []
    for log in sorted(course.rglob("*.err")):
        try:
            with log.open("rb") as handle:
                handle.seek(max(0, log.stat().st_size - KEPT_LOG_BYTES))
                tail = handle.read().decode("utf-8", "replace")
        except OSError as error:  # a job's folder cleaned up meanwhile: the run's result is still written
            parts.append(f"\n--- {log.relative_to(course)}: not read ({error})")
            continue
        if any(mark in tail for mark in FAILURE_MARKS):
            parts.append(f"\n--- failed job's stderr (its last {KEPT_LOG_BYTES} bytes): {log.relative_to(course)}\n{tail}")
    return "".join(parts)


def slowest_cells(notebook: Any, count: int = 5) -> list[dict[str, Any]]:
    """The notebook's slowest code cells (nbclient's timing): index, seconds and first line."""
    import datetime as dt

    timed = []
    for index, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        begin, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if cell.cell_type == "code" and begin and end:
            seconds = (dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
                       - dt.datetime.fromisoformat(begin.replace("Z", "+00:00"))).total_seconds()
            timed.append({"cell": index, "s": round(seconds, 1), "first_line": cell.source.splitlines()[0][:80]
                          if cell.source else ""})
    return sorted(timed, key=lambda c: -c["s"])[:count]


def read_claims(lines: list[str]) -> list[dict[str, str]]:
    """Each claim a notebook printed (labs.claims.check_claim): its verdict, statement and the line after."""
    return [{"verdict": v, "statement": line.split(": ", 1)[1],
             "detail": lines[i + 1].strip() if i + 1 < len(lines) else ""}
            for i, line in enumerate(lines) for v in VERDICTS if line.startswith(v + ":")]


def write_report(results_files: list[Path], report: Path = REPORT) -> None:
    runs: dict[str, dict[str, Any]] = {}
    for results_file in results_files:
        data = read_json(results_file, "notebooks_gpu.py record")
        for run in data["notebooks"]:
            # one row per lab, by its number: a notebook renamed since (05_data_loading_profiler) is the same lab
            runs[run["notebook"][:2]] = {**run, "machine": data["machine"], "command": data["command"],
                                     "date": data["date"], "notes": data.get("notes", "")}
    lines = ["# Labs' gpu profile, run end to end on a GPU machine",
             "",
             "Written by `python bench/notebooks_gpu.py --report <json>` from the runs below (each notebook executed",
             "with nbclient, `COURSEKIT_PROFILE=gpu`, local site). What each notebook printed goes to `gpu_nbXX.txt` in `--log-dir` (per-run output, not kept in git).",
             "",
             "| notebook | passed | wall time | claims (holds / fails / not checked / not seen, reported) | machine | date |",
             "| --- | --- | --- | --- | --- | --- |"]
    for _, run in sorted(runs.items()):
        name = run["notebook"]
        counts = [sum(c["verdict"] == v for c in run["claims"]) for v in VERDICTS]
        m = run["machine"]
        lines.append(f"| {name} | {'yes' if run['passed'] else '**no**'} | {run['wall_s'] / 60:.1f} min{over_budget(run)} | "
                     f"{' / '.join(map(str, counts))} | {m.get('gpus')}× {m.get('gpu_name')}, torch "
                     f"{m.get('torch')}, CUDA {m.get('cuda')} | {run['date']} |")
    for _, run in sorted(runs.items()):
        lines += ["", f"## {run['notebook']}", "", f"Command: `{run['command']}`", ""]
        if run["notes"]:
            lines += [f"Note: {run['notes']}", ""]
        for claim in run["claims"]:
            lines.append(f"- {claim['verdict']}: {claim['statement']} — {claim['detail']}")
        for note in run.get("notes", []):
            lines.append(f"- NOTE: {note}")
        if run["error"]:
            lines += ["", "Error:", "", "```", run["error"].strip(), "```"]
    report.write_text("\n".join(lines) + "\n")
    print(f"wrote {report}")


def gpus_needed(path: Path, available: int) -> int:
    """GPUs a notebook runs on: what its lab declares (``LAB.gpus`` of its module), at most ``available``."""
    from coursekit.labs import lab_gpus  # reads the labs' declarations: only when the scheduler asks

    return max(1, min(lab_gpus(path.name[:2]), available))


Executor = Callable[[Path, list[int], float], dict[str, Any]]  # (notebook, GPU ids, timeout s) -> result


def run_all(notebooks: list[Path], gpu_ids: list[int], execute: Executor, notebook_timeout_s: float,
            time_limit_s: float, on_change: Callable[[dict[str, dict[str, Any]]], None] = lambda states: None,
            clock: Callable[[], float] = time.monotonic) -> dict[str, dict[str, Any]]:
    """Run ``notebooks`` at the same time where GPUs allow: each takes ``gpus_needed`` ids from ``gpu_ids``
    (multi-GPU ones first), runs through ``execute`` in a thread with the smaller of its timeout and what is
    left of ``time_limit_s``, then gives its GPUs back. Returns (and hands ``on_change``, whenever a notebook
    starts or ends) each notebook's state: ``running`` (with its GPUs), its result, or ``not run``."""
    deadline = clock() + time_limit_s
    order = sorted(notebooks, key=lambda p: -gpus_needed(p, len(gpu_ids)))  # stable: file order within a size
    states: dict[str, dict[str, Any]] = {p.name: {"notebook": p.name, "state": "pending"} for p in order}
    free, done = list(gpu_ids), threading.Condition()
    pending, threads = list(order), []

    def work(path: Path, gpus: list[int], timeout: float) -> None:
        try:
            result = execute(path, gpus, timeout)
        except Exception as error:  # noqa: BLE001 - the executor's own failure is this notebook's result
            result = {"notebook": path.name, "passed": False, "error": f"{type(error).__name__}: {error}"}
        with done:
            states[path.name] = {**result, "state": "finished", "gpus": gpus}
            free.extend(gpus)
            on_change(states)
            done.notify_all()

    with done:
        while pending:
            left = deadline - clock()
            if left <= 0:
                break
            path = next((p for p in pending if gpus_needed(p, len(gpu_ids)) <= len(free)), None)
            if path is None:  # wait for GPUs to come back
                done.wait(timeout=min(left, 1.0))
                continue
            pending.remove(path)
            gpus = [free.pop(0) for _ in range(gpus_needed(path, len(gpu_ids)))]
            states[path.name] = {"notebook": path.name, "state": "running", "gpus": gpus}
            on_change(states)
            thread = threading.Thread(target=work, args=(path, gpus, min(notebook_timeout_s, left)), daemon=True)
            threads.append(thread)
            thread.start()
        for path in pending:
            states[path.name] = {"notebook": path.name, "state": "not run", "passed": False,
                                 "error": f"not started: the run's time limit ({time_limit_s:.0f} s) was reached"}
        on_change(states)
    for thread in threads:
        thread.join()
    return states


def cpu_share(gpus: list[int], total_gpus: int) -> list[int]:
    """The CPU cores that go with ``gpus``: the machine's cores split evenly over its GPUs."""
    cores = sorted(os.sched_getaffinity(0))
    per_gpu = max(1, len(cores) // max(total_gpus, 1))
    return [c for g in gpus for c in cores[g * per_gpu:(g + 1) * per_gpu]] or cores


def subprocess_executor(log_dir: Path | None, profile: str, total_gpus: int) -> Executor:
    """Each notebook in its own ``python bench/notebooks_gpu.py --one`` process (own CUDA_VISIBLE_DEVICES,
    own cores), killed with its kernel and jobs (process group) when it passes its timeout."""

    def execute(path: Path, gpus: list[int], timeout: float) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
            result_file = Path(handle.name)
        cores = cpu_share(gpus, total_gpus) if gpus else sorted(os.sched_getaffinity(0))
        path_env = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # the kernel's too
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "OMP_NUM_THREADS": str(len(cores)),
               "PYTHONPATH": path_env}
        command = [sys.executable, str(Path(__file__).resolve()), "--one", str(path), "--profile", profile,
                   "--result", str(result_file)] + (["--log-dir", str(log_dir)] if log_dir else [])
        start = time.monotonic()
        process = subprocess.Popen(command, env=env, start_new_session=True,
                                   preexec_fn=lambda: os.sched_setaffinity(0, cores))
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            return {"notebook": path.name, "passed": False, "wall_s": round(time.monotonic() - start, 1),
                    "claims": [], "notes": [], "error": f"killed after {timeout:.0f} s (timeout)"}
        if result_file.stat().st_size == 0:
            return {"notebook": path.name, "passed": False, "wall_s": round(time.monotonic() - start, 1),
                    "claims": [], "notes": [], "error": f"runner exited with {process.returncode}, no result"}
        result = json.loads(result_file.read_text())
        result_file.unlink()
        return result

    return execute


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="e.g. 00 06 (default: every notebook in notebooks/)")
    parser.add_argument("--out", type=Path, help="JSON results file, rewritten as notebooks start and end")
    parser.add_argument("--log-dir", type=Path, help="folder for gpu_nbXX.txt (what each notebook printed)")
    parser.add_argument("--profile", default="gpu", help="gpu (default) or cpu, to try the runner itself")
    parser.add_argument("--gpus", type=int, help="GPUs to use (default: all that torch sees; 0: none)")
    parser.add_argument("--gpu-ids", help="which GPUs, e.g. 2,3 (default: the first --gpus): other work can use the rest")
    parser.add_argument("--notebook-timeout", type=float, default=NOTEBOOK_TIMEOUT_S, help="seconds per notebook")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds for the whole run")
    parser.add_argument("--report", type=Path, nargs="+", help="only rewrite the report from these JSON files")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: run one notebook in this process
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report:
        write_report(args.report)
        return 0
    if args.one:
        run = run_notebook(args.one, args.log_dir, args.profile)
        args.result.write_text(json.dumps(run))
        return 0
    import importlib.util

    absent = [name for name in ("nbclient", "nbformat") if importlib.util.find_spec(name) is None]
    if absent:
        raise SystemExit(f"bench/notebooks_gpu.py: {' and '.join(absent)} missing: no notebook can be executed, nothing "
                         "to measure; pip install -e '.[test]' (or pip install nbclient nbformat ipykernel)")
    if args.out:
        check_writable(args.out)
    from coursekit.labs.kit.exercises import link_kit_scripts

    link_kit_scripts(NOTEBOOKS)  # the participants' scripts the solved notebooks open (git-ignored links)
    info = machine()
    seen_gpus = info.get("gpus") or 0
    if args.profile == "gpu" and seen_gpus and args.gpus is not None and args.gpus > seen_gpus:
        print(f"bench/notebooks_gpu.py: --gpus {args.gpus} asked, this machine shows {seen_gpus} GPU(s): the notebooks "
              f"share those {seen_gpus}; run it on a machine with {args.gpus} GPUs to run more side by side",
              file=sys.stderr, flush=True)
        args.gpus = seen_gpus
    if args.profile == "gpu" and not seen_gpus and (args.gpus is None or args.gpus > 0):
        print("bench/notebooks_gpu.py: no CUDA GPU here (torch sees none): the gpu profile's notebooks run without one "
              "and their GPU claims are not checked; run it on a GPU machine (source bench/setup_gpu.sh there)",
              file=sys.stderr, flush=True)
    total = args.gpus if args.gpus is not None else seen_gpus
    results = {"machine": info, "profile": args.profile, "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/notebooks_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "notebooks": []}

    def save(states: dict[str, dict[str, Any]]) -> None:
        results["notebooks"] = [s for s in states.values() if "wall_s" in s]
        results["states"] = {name: {k: s.get(k) for k in ("state", "gpus", "passed", "wall_s", "error")}
                             for name, s in states.items()}
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1))

    def announce(states: dict[str, dict[str, Any]]) -> None:
        save(states)
        for name, state in states.items():
            key = (name, state["state"])
            if key not in seen and state["state"] != "pending":
                seen.add(key)
                detail = ((f"on GPU {state.get('gpus')}" if total else "without a GPU") if state["state"] == "running" else
                          f"{'passed' if state.get('passed') else 'FAILED'} in {state.get('wall_s', 0):.0f} s"
                          f"{over_budget(state)}; "
                          f"{len(state.get('claims', []))} claims; error: {state.get('error')}")
                print(f"{name}: {state['state']} {detail}", flush=True)

    seen: set[tuple[str, str]] = set()
    gpu_ids = list(range(total)) or [0]  # no GPU (cpu profile): one notebook at a time, no device named
    if args.gpu_ids:
        gpu_ids = [int(i) for i in args.gpu_ids.split(",")]
        total = max(info.get("gpus") or 0, max(gpu_ids) + 1)  # the cores are shared out over all the GPUs
    execute = subprocess_executor(args.log_dir, args.profile, total)
    if not total:
        execute_inner = execute
        execute = lambda path, gpus, timeout: execute_inner(path, [], timeout)  # noqa: E731
    states = run_all(find_notebooks(args.notebooks), gpu_ids, execute, args.notebook_timeout, args.time_limit,
                     announce)
    save(states)
    return 0 if all(s.get("passed") for s in states.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
