"""The lab notebooks: built from their sources, executed, shaped like labs, exercises well formed."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

from coursekit.labs import lab_declarations
from coursekit.labs.kit import exercises

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = [lab.notebook.removesuffix(".ipynb") for lab in lab_declarations().values()]  # the declared labs'
TRAINING_LOOP_SIGNS = (".backward(", "optimizer.step(", "opt.step(", "zero_grad(")


def load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_every_notebook_is_built_from_its_source():
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert builder.main(["--check"]) == 0
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


def test_a_lab_is_its_notebook_source_and_its_numbered_module():
    """Adding a lab = notebooks/src/nbNN_*.py + coursekit/labs/labNN_* declaring it: each source is a declared
    lab's (coursekit/labs/test_lab_declarations.py checks every list of labs against the declarations)."""
    assert len(NAMES) >= 10
    sources = sorted(p.name for p in (NOTEBOOKS / "src").glob("nb[0-9][0-9]_*.py"))
    assert sources == sorted(lab.source for lab in lab_declarations().values())


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_shaped_like_a_lab(name):
    nb = load(name)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and "Learning goals" in nb.cells[0].source
    code = [c for c in nb.cells if c.cell_type == "code"]
    checking = [i for i, c in enumerate(code) if "check_claim" in c.source]
    assert checking, "a closing cell checks the lab's claims"
    after = code[checking[-1] + 1:]  # only the room's pooled results and the exit ticket may follow the claims
    assert all("ticket" in c.source or "room" in c.source for c in after), \
        "the claims close the lab; only the room's results and the exit ticket come after"
    for cell in code:
        assert not any(sign in cell.source for sign in TRAINING_LOOP_SIGNS), f"a training loop in: {cell.source[:80]}"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_carries_the_outputs_nbval_compares(name):
    for index, cell in enumerate(load(name).cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"cell {index} was not executed: run build_notebooks.py --execute"
        raises = "raises-exception" in cell.metadata.get("tags", [])
        for output in cell.outputs:
            assert not (output.output_type == "stream" and output.name == "stderr"), f"cell {index} wrote to stderr"
            assert output.output_type != "error" or raises, f"cell {index} failed"


@pytest.mark.parametrize("name", NAMES)
def test_exercises_strip_cleanly(name, tmp_path):
    nb = load(name)
    report = exercises.strip_notebook(nb, name)
    assert report.code_blocks >= 1, "every lab has at least one exercise"
    text = "\n".join(c.source for c in nb.cells)
    assert exercises.BEGIN not in text and exercises.END not in text
    assert text.count(exercises.PLACEHOLDER_RAISE) == report.code_blocks
    nbformat.validate(nb)


def _last_expression_is_a_figure(source: str) -> bool:
    """Does the cell end in an expression that is a figure (``figure``, ``x.something_figure(...)``)?"""
    import ast

    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return False
    if not body or not isinstance(body[-1], ast.Expr):
        return False
    value = body[-1].value
    target = value.func if isinstance(value, ast.Call) else value
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return "figure" in name.lower()


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_a_cell_ends_in_is_shown_as_an_image(name):
    """A plot function's Figure displays only as the cell's last expression, without a trailing ``;``; the
    executed notebook then holds its image (an image-less figure cell is a figure nobody sees)."""
    for index, cell in enumerate(load(name).cells):
        if cell.cell_type != "code" or not _last_expression_is_a_figure(cell.source):
            continue
        assert not cell.source.rstrip().endswith(";"), f"cell {index}: a ';' hides the figure: {cell.source[-80:]}"
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"cell {index} ends in a figure but its executed output holds no image: {cell.source[-80:]}"


def test_a_figure_cell_is_recognised_by_its_last_expression():
    assert _last_expression_is_a_figure("# %matplotlib inline\nx = 1\nlb.spike_figure(table)")
    assert _last_expression_is_a_figure("figure = plots.line(t)\nfigure")
    assert _last_expression_is_a_figure("lb.accuracy_figure(summary);")  # shown? no: the ';' test catches it
    assert not _last_expression_is_a_figure("figure = lb.accuracy_figure(summary)")  # assigned: never shown
    assert not _last_expression_is_a_figure("summary")
