"""Dry-run of the labs' gpu profile, as an instructor would before a workshop: execute notebooks end to end.

Every notebook is executed with nbclient from ``notebooks/`` (``COURSEKIT_PROFILE=gpu``, the local site
unless ``COURSEKIT_SITE`` is set, a throw-away course folder), and the run is recorded: wall time, each
claim's verdict (the lines ``labs.check_claim`` prints), the first error, and everything the notebook
printed. One command on a GPU machine::

    python bench/gpu_notebooks.py 06 --out bench/results/gpu_notebooks.json --log-dir bench/results

``python bench/gpu_notebooks.py --report bench/results/gpu_notebooks.json`` rewrites
``bench/REPORT-notebooks-gpu.md`` from the JSON (several JSON files may be given: later runs of a
notebook replace earlier ones).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
REPORT = ROOT / "bench" / "REPORT-notebooks-gpu.md"
CELL_TIMEOUT_S = 1800
VERDICTS = ("CLAIM HOLDS", "CLAIM DOES NOT HOLD", "NOT CHECKED HERE")
GPU_ENV = {"MPLBACKEND": "Agg", "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def find_notebooks(selectors: list[str]) -> list[Path]:
    """``06`` or ``06_data_parallelism`` or a path -> notebook paths; no selector: every lab."""
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
    env_before = dict(os.environ)
    course = tempfile.mkdtemp(prefix=f"coursekit-gpu-{path.stem[:2]}-")
    os.environ.update(GPU_ENV, COURSEKIT_PROFILE=profile)
    os.environ.setdefault("COURSEKIT_SITE", "local")
    os.environ["COURSEKIT_COURSE_DIR"] = course
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    start, error = time.monotonic(), None
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
    claims = [{"verdict": v, "statement": line.split(": ", 1)[1],
               "detail": lines[i + 1].strip() if i + 1 < len(lines) else ""}
              for i, line in enumerate(lines) for v in VERDICTS if line.startswith(v + ":")]
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"gpu_nb{path.stem[:2]}.txt").write_text(text)
    failed_claims = [c for c in claims if c["verdict"] == "CLAIM DOES NOT HOLD"]
    # what the labs say about themselves: the CIFAR-10 stand-in, jobs that did not complete (labs.failures)
    notes = sorted({line.strip() for line in lines if line.startswith("DATASET STAND-IN")
                    or " did not complete:" in line})
    return {"notebook": path.name, "wall_s": round(wall, 1), "passed": error is None and not failed_claims,
            "error": error, "claims": claims, "notes": notes, "course_dir": course}


def write_report(results_files: list[Path], report: Path = REPORT) -> None:
    runs: dict[str, dict[str, Any]] = {}
    for results_file in results_files:
        data = json.loads(results_file.read_text())
        for run in data["notebooks"]:
            runs[run["notebook"]] = {**run, "machine": data["machine"], "command": data["command"],
                                     "date": data["date"], "notes": data.get("notes", "")}
    lines = ["# Labs' gpu profile, run end to end on a GPU machine",
             "",
             "Written by `python bench/gpu_notebooks.py --report <json>` from the runs below (each notebook executed",
             "with nbclient, `COURSEKIT_PROFILE=gpu`, local site). What each notebook printed: `bench/results/gpu_nbXX.txt`.",
             "",
             "| notebook | passed | wall time | claims (holds / fails / not checked) | machine | date |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, run in sorted(runs.items()):
        counts = [sum(c["verdict"] == v for c in run["claims"]) for v in VERDICTS]
        m = run["machine"]
        lines.append(f"| {name} | {'yes' if run['passed'] else '**no**'} | {run['wall_s'] / 60:.1f} min | "
                     f"{counts[0]} / {counts[1]} / {counts[2]} | {m.get('gpus')}× {m.get('gpu_name')}, torch "
                     f"{m.get('torch')}, CUDA {m.get('cuda')} | {run['date']} |")
    for name, run in sorted(runs.items()):
        lines += ["", f"## {name}", "", f"Command: `{run['command']}`", ""]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="e.g. 00 06 (default: every lab)")
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument("--log-dir", type=Path, help="folder for gpu_nbXX.txt (what each notebook printed)")
    parser.add_argument("--profile", default="gpu", help="gpu (default) or cpu, to try the runner itself")
    parser.add_argument("--report", type=Path, nargs="+", help="only rewrite the report from these JSON files")
    args = parser.parse_args(argv)
    if args.report:
        write_report(args.report)
        return 0
    results = {"machine": machine(), "profile": args.profile, "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/gpu_notebooks.py " + " ".join(sys.argv[1:]), "notebooks": []}
    for path in find_notebooks(args.notebooks):
        run = run_notebook(path, args.log_dir, args.profile)
        results["notebooks"].append(run)
        print(f"{path.name}: {'passed' if run['passed'] else 'FAILED'} in {run['wall_s']:.0f} s; "
              f"{len(run['claims'])} claims; error: {run['error']}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
    return 0 if all(r["passed"] for r in results["notebooks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
