"""What a participant opens in JupyterLab: no nbval markers, no raised errors, no dead widgets or build
paths in the stored outputs, and exercises that can be solved from their text once stripped."""

import ast
import builtins
import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

from coursekit.labs import lab_declarations
from coursekit.labs.kit import exercises

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = [lab.notebook.removesuffix(".ipynb") for lab in lab_declarations().values()]  # the declared labs'
NBVAL_MARKER = re.compile(r"^\s*#\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\b", re.MULTILINE)
BUILD_PATH = re.compile(r"coursekit-(build|nbval)-")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IPYTHON_NAMES = {"display", "get_ipython"}
BACKTICKED = re.compile(r"`([^`]+)`")


def load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_there_are_notebooks_to_check():
    assert len(NAMES) == 11 and NAMES == sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert set(REWORDED_SINCE_THE_RUN) | set(NO_GPU_RUN_YET) <= set(NAMES), "an exception for no notebook"


def test_markers_become_tags():
    cell, = _builder().read_source("""
# %% tags=["exercise"]
# NBVAL_IGNORE_OUTPUT
#NBVAL_RAISES_EXCEPTION
x = 1  # NBVAL_SKIP stays: only leading markers are moved
""")
    assert cell["source"] == "x = 1  # NBVAL_SKIP stays: only leading markers are moved"
    assert cell["tags"] == ("nbval-ignore-output", "raises-exception", "exercise")


@pytest.mark.parametrize("name", NAMES)
def test_no_nbval_marker_in_the_code_participants_read(name):
    for index, cell in enumerate(load(name).cells):
        if cell.cell_type == "code":
            assert not NBVAL_MARKER.search(cell.source), f"cell {index} shows an nbval marker: use a tag"


@pytest.mark.parametrize("name", NAMES)
def test_run_all_never_stops_on_an_error(name):
    """JupyterLab leaves the cells after an error queued as [ ]: participants press Run All again."""
    for index, cell in enumerate(load(name).cells):
        if cell.cell_type == "code":
            assert "raises-exception" not in cell.metadata.get("tags", []), f"cell {index} raises on purpose"
            assert all(o.output_type != "error" for o in cell.outputs), f"cell {index} stored an error"


@pytest.mark.parametrize("name", NAMES)
def test_stored_outputs_hold_no_dead_widget_and_no_build_path(name):
    nb = load(name)
    assert "widgets" not in nb.metadata, "JupyterLab does not restore widget state: store a rendering"
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            assert WIDGET_VIEW not in data, f"cell {index}: a live widget stored"
            assert not data.get("text/plain", "").startswith("HTML("), f"cell {index}: a widget's raw repr"
            assert not BUILD_PATH.search(str(output)), f"cell {index}: a build path in the stored output"


def _defined(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _parse(source: str) -> ast.AST:
    return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))


@pytest.mark.parametrize("name", NAMES)
def test_a_stripped_exercise_uses_only_names_its_text_asks_for(name):
    """After the placeholder, a stripped cell may read only names defined before or named in the text."""
    nb = load(name)
    exercises.strip_notebook(nb, name)
    known = set(dir(builtins)) | IPYTHON_NAMES
    text = ""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = cell.source if "exercise" in cell.metadata.get("tags", []) else text
            continue
        before, placeholder, after = cell.source.partition(exercises.PLACEHOLDER_RAISE)
        if placeholder:
            asked = set(BACKTICKED.findall(text))
            read = {n.id for n in ast.walk(_parse(after)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            missing = read - known - _defined(_parse(before)) - _defined(_parse(after)) - asked
            assert not missing, f"cell {index} reads {sorted(missing)}: define them or ask for them in the text"
        known |= _defined(_parse(cell.source))


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_stores_widgets_as_their_last_rendering_and_hides_build_paths():
    def view(model_id):
        return {"output_type": "display_data", "metadata": {},
                "data": {WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
                         "text/plain": "HTML(value='<table…')" if model_id == "queue" else "ada: 0%| | 0/3"}}

    state = {"queue": {"model_name": "HTMLModel", "state": {"value": "<table><tr><td>COMPLETED</td></tr></table>"}},
             "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}},
             "l": {"model_name": "HTMLModel", "state": {"value": "ada:\u2007100%"}},
             "p": {"model_name": "FloatProgressModel", "state": {"value": 3.0, "max": 3.0}},
             "r": {"model_name": "HTMLModel", "state": {"value": "\u20073/3\u2007[00:04&lt;00:00]"}}}
    log = {"output_type": "stream", "name": "stdout", "text": "summary in /tmp/coursekit-build-ab12/jobs/ada-lr/7\n"}
    nb = nbformat.from_dict(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x", outputs=[view("queue"), view("bar"), log])]))
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    _builder().clean_outputs(nb)
    queue, bar, text = nb.cells[0].outputs
    assert "widgets" not in nb.metadata and WIDGET_VIEW not in queue.data and WIDGET_VIEW not in bar.data
    assert queue.data["text/html"].startswith("<table><tr><td>COMPLETED") and "HTML(" not in queue.data["text/plain"]
    assert bar.data["text/plain"] == "ada: 100%|██████████| 3/3 [00:04<00:00]"
    assert text.text == "summary in ~/course/jobs/ada-lr/7\n"


def test_participant_copies_hold_no_outputs_of_the_solved_run(tmp_path):
    """Every lab's copy starts unrun: no result, claim or checker verdict of the instructor's run."""
    exercises.strip_folder(NOTEBOOKS, tmp_path)
    copies = sorted(tmp_path.glob("*.ipynb"))
    assert [p.name for p in copies] == sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in copies:
        nb = nbformat.read(path, as_version=4)
        stale = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
                 and (cell.outputs or cell.execution_count is not None)]
        assert not stale, f"{path.name}: cells {stale} carry outputs of the solved notebook"
        assert "widgets" not in nb.metadata


GPU_RECORDS = NOTEBOOKS.parent / "bench" / "results"  # bench/notebooks_gpu.py's last run of each notebook
# what a last GPU run showed that was reworded after it (the next run of that notebook must show none of it): none now
REWORDED_SINCE_THE_RUN: dict[str, list[str]] = {}
# notebooks whose gpu profile has no run on record yet (each one an open item of its issue): the entry must go once
# bench/notebooks_gpu.py has recorded a run
NO_GPU_RUN_YET: dict[str, str] = {}  # notebook -> why its gpu profile has no record yet


@pytest.mark.parametrize("name", NAMES)
def test_markdown_holds_nothing_that_is_not_for_participants(name):
    """Text for one profile goes through ``profile.explain``; no jargon, bench commands or machine paths."""
    found = [f"cell {i}: {hit}" for i, cell in enumerate(load(name).cells) if cell.cell_type == "markdown"
             for hit in exercises.not_for_participants(cell.source)]
    assert found == [], found


@pytest.mark.parametrize("name", NAMES)
def test_the_last_gpu_run_showed_nothing_that_is_not_for_participants(name):
    """The executed gpu-profile notebook (markdown and every output) was scanned by bench/notebooks_gpu.py."""
    path = GPU_RECORDS / f"gpu_notebooks_{name[:2]}.json"
    if name in NO_GPU_RUN_YET:
        assert not path.exists(), f"{path.name} is recorded now: take {name} out of NO_GPU_RUN_YET"
        return
    record = json.loads(path.read_text())
    # by the lab's number: a record names the notebook as it was called then (05_data_loading_profiler.ipynb)
    run, = (r for r in record["notebooks"] if r["notebook"].startswith(f"{name[:2]}_"))
    assert "not_for_participants" in run, f"the last GPU run of {name} predates the scan: run it again"
    assert run["not_for_participants"] == REWORDED_SINCE_THE_RUN.get(name, []), run["not_for_participants"]


def test_the_scan_finds_what_is_not_for_participants():
    planted = "On the cpu profile the stand-in trains; see bench/REPORT-gpu.md, run python bench/x.py in /tmp/x"
    assert len(exercises.not_for_participants(planted)) == 6
    assert exercises.not_for_participants("data in /work/main/.fmnist", printed=True) == []  # the participant's own
    assert exercises.not_for_participants("DATASET STAND-IN: stage Fashion-MNIST; your jobs in ~/course/jobs") == []
