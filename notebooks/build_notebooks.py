"""Build the lab notebooks from their sources: ``notebooks/src/nbXX_*.py`` -> ``notebooks/XX_*.ipynb``.

The sources are the truth (reviewable as code); the .ipynb files are built from them and, for nbval,
carry the outputs of one run in the cpu profile (the profile CI runs)::

    python notebooks/build_notebooks.py                 # rebuild, keep outputs of unchanged cells
    python notebooks/build_notebooks.py --execute 01    # rebuild and run notebook 01, storing its outputs
    python notebooks/build_notebooks.py --check         # exit 1 when a notebook differs from its source

Runs use the local site and a temporary course folder, like notebooks/conftest.py does under nbval.
What participants open in JupyterLab is cleaned on the way: nbval's comment markers become cell tags
(src/cells.py), the temporary course folder reads ``~/course``, and a live widget (the queue view, a
progress bar), whose state JupyterLab does not restore, is stored as its last rendering.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
sys.path.insert(0, str(SOURCES))
from cells import split_markers  # noqa: E402 - notebooks/src is not a package

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
CELL_TIMEOUT_S = 600
BUILD_PATH = re.compile(r"/[^\s'\"]*coursekit-(?:build|nbval)-[^/\s'\"]+")  # a run's temporary course folder
STORED_COURSE_DIR = "~/course"  # what stored outputs show instead (notebooks/sanitize.cfg knows it)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_REPRS = ("HTML(", "VBox(", "HBox(", "Output(")  # a widget's text/plain: useless without its state
BAR_CHAR, BAR_WIDTH = "█", 10  # a stored progress bar, drawn as tqdm draws it in a terminal
STORED_VIEW_TEXT = "(a live view: run the cell to see it)"
STORED_VIEW_NOTE = ("<div style='font-size:90%;color:#57606a'><i>stored copy of the live view as it was when "
                    "this notebook was built: run the cell to follow your own jobs</i></div>")


def load_source(path: Path) -> list[dict]:
    """The cells of a source file (``CELLS``; notebooks/src is on the import path for ``cells``)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CELLS


def notebook_name(source: Path) -> str:
    return source.stem.removeprefix("nb") + ".ipynb"


def build(source: Path, previous: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """The notebook of `source`; a cell whose source and kind are unchanged keeps its stored outputs."""
    old = {}
    if previous is not None:  # a cell built before its markers became tags keeps its outputs too
        for cell in previous.cells:
            old.setdefault((cell.cell_type, split_markers(cell.source)[0]), cell)
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


def _box_text(model: dict, widgets: dict) -> str:
    """The last text of a row of widgets (tqdm's bar: description | bar | counts), as tqdm prints it."""
    parts = []
    for child in model.get("state", {}).get("children", []):
        state = widgets.get(str(child).removeprefix("IPY_MODEL_"), {}).get("state", {})
        if "max" in state and state.get("max"):
            parts.append(BAR_CHAR * round(BAR_WIDTH * state.get("value", 0) / state["max"]))
            parts[-1] = parts[-1].ljust(BAR_WIDTH)
        elif isinstance(state.get("value"), str):
            parts.append(html.unescape(state["value"]).replace("\u2007", " "))
    return "|".join(parts)


def _static_output(output: nbformat.NotebookNode, widgets: dict) -> None:
    """A widget's output in place: its last HTML (a queue view) or its last text (a progress bar)."""
    model = widgets.get(output.data[WIDGET_VIEW].get("model_id"), {})
    value = model.get("state", {}).get("value") if model.get("model_name") == "HTMLModel" else None
    del output.data[WIDGET_VIEW]
    if isinstance(value, str) and value:
        output.data["text/html"] = value + STORED_VIEW_NOTE
    text = _box_text(model, widgets) if model.get("model_name") == "HBoxModel" else ""
    if text:
        output.data["text/plain"] = text
    elif "text/html" in output.data or output.data.get("text/plain", "").startswith(WIDGET_REPRS):
        output.data["text/plain"] = STORED_VIEW_TEXT


def _without_build_paths(value: object) -> object:
    if isinstance(value, str):
        return BUILD_PATH.sub(STORED_COURSE_DIR, value)
    if isinstance(value, list):
        return [_without_build_paths(v) for v in value]
    if isinstance(value, dict):
        return type(value)((k, _without_build_paths(v)) for k, v in value.items())
    return value


def clean_outputs(nb: nbformat.NotebookNode) -> None:
    """What a participant opens: no live widgets (JupyterLab does not restore their state), no build paths."""
    widgets = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if WIDGET_VIEW in output.get("data", {}):
                _static_output(output, widgets)
        cell.outputs = nbformat.from_dict(_without_build_paths(cell.outputs))


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


def _shape(nb: nbformat.NotebookNode) -> list[tuple[str, str, list[str]]]:
    """What --check compares: each cell's kind, source and tags (nbval reads the tags)."""
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


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
        if previous is not None:
            clean_outputs(previous)  # while its widget state is at hand
        nb = build(source, previous)
        if args.check:
            if previous is None or _shape(previous) != _shape(nb):
                stale.append(target.name)
            continue
        if args.execute:
            seconds = execute(nb, target.name)
            print(f"{target.name}: executed in {seconds:.1f} s")
        clean_outputs(nb)
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
