"""Build the lab notebooks from their sources: ``notebooks/src/nbXX_*.py`` -> ``notebooks/XX_*.ipynb``.

The sources are the truth (reviewable as code); the .ipynb files are built from them and, for nbval,
carry the outputs of one run in the cpu profile (the profile CI runs)::

    python notebooks/build_notebooks.py                 # rebuild, keep outputs of unchanged cells
    python notebooks/build_notebooks.py --execute 01    # rebuild and run notebook 01, storing its outputs
    python notebooks/build_notebooks.py --check         # exit 1 when a notebook differs from its source

Runs use the local site and a temporary course folder, like notebooks/conftest.py does under nbval.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
CELL_TIMEOUT_S = 600


def load_source(path: Path) -> list[dict]:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SOURCES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SOURCES))
    return module.CELLS


def notebook_name(source: Path) -> str:
    return source.stem.removeprefix("nb") + ".ipynb"


def build(source: Path, previous: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """The notebook of `source`; a cell whose source and kind are unchanged keeps its stored outputs."""
    old = {}
    if previous is not None:
        for cell in previous.cells:
            old.setdefault((cell.cell_type, cell.source), cell)
    nb = new_notebook(metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    for spec in load_source(source):
        if spec["kind"] == "markdown":
            cell = new_markdown_cell(spec["source"])
        else:
            cell = new_code_cell(spec["source"])
            kept = old.get(("code", spec["source"]))
            if kept is not None:
                cell.outputs, cell.execution_count = kept.outputs, kept.execution_count
        if spec["tags"]:
            cell.metadata["tags"] = list(spec["tags"])
        nb.cells.append(cell)
    for index, cell in enumerate(nb.cells):  # stable ids keep diffs small
        cell["id"] = f"c{index:02d}"
    return nb


def execute(nb: nbformat.NotebookNode, name: str) -> float:
    """Run `nb` in a fresh kernel with the local site and a throw-away course folder, in place."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="coursekit-build-") as course:
        saved = {k: os.environ.get(k) for k in ("COURSEKIT_SITE", "COURSEKIT_COURSE_DIR")}
        os.environ.setdefault("COURSEKIT_SITE", "local")
        os.environ["COURSEKIT_COURSE_DIR"] = course
        try:
            start = time.perf_counter()
            NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                           resources={"metadata": {"path": str(HERE)}}).execute()
            return time.perf_counter() - start
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="notebook numbers to build (default: all)")
    parser.add_argument("--execute", action="store_true", help="run the notebooks and store their outputs")
    parser.add_argument("--check", action="store_true", help="only compare the notebooks with their sources")
    args = parser.parse_args(argv)
    sources = sorted(SOURCES.glob("nb[0-9][0-9]_*.py"))
    if args.only:
        sources = [s for s in sources if s.stem[2:4] in args.only]
    stale = []
    for source in sources:
        target = HERE / notebook_name(source)
        previous = nbformat.read(target, as_version=4) if target.exists() else None
        nb = build(source, previous)
        if args.check:
            if previous is None or [(c.cell_type, c.source) for c in previous.cells] != \
                    [(c.cell_type, c.source) for c in nb.cells]:
                stale.append(target.name)
            continue
        if args.execute:
            seconds = execute(nb, target.name)
            print(f"{target.name}: executed in {seconds:.1f} s")
        nbformat.validate(nb)
        nbformat.write(nb, target)
        print(f"wrote {target.relative_to(HERE.parent)}")
    if stale:
        print("out of date with notebooks/src (run python notebooks/build_notebooks.py --execute): "
              + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
