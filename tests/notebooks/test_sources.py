"""The notebooks' sources: percent-format scripts (jupytext's), read by build_notebooks.py into cells."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCES = sorted((NOTEBOOKS / "src").glob("nb[0-9][0-9]_*.py"))
BUILT = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SOURCE = '''"""Notebook 99: a docstring, not a cell."""

# %% [markdown]
# # 99 — Title
#
# Text with a blank line above; `code`.

# %% tags=["nbval-ignore-output"]
# %matplotlib inline
import os

# a comment stays a comment
x = """
# %% inside a string: not a cell
%not a magic either
"""
os.getcwd()

# %% [markdown] tags=["exercise"]
# ## Exercise

# %% tags=["exercise", "nbval-skip"]
# !ls -l
# %%time
# # %time: a comment in the notebook too
print(x);


# %%
'''
CELLS = [
    {"kind": "markdown", "source": "# 99 — Title\n\nText with a blank line above; `code`.", "tags": ()},
    {"kind": "code", "source": '%matplotlib inline\nimport os\n\n# a comment stays a comment\nx = """\n'
                               '# %% inside a string: not a cell\n%not a magic either\n"""\nos.getcwd()',
     "tags": ("nbval-ignore-output",)},
    {"kind": "markdown", "source": "## Exercise", "tags": ("exercise",)},
    {"kind": "code", "source": "!ls -l\n%%time\n# %time: a comment in the notebook too\nprint(x);",
     "tags": ("exercise", "nbval-skip")},
    {"kind": "code", "source": "", "tags": ()},
]


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells(nb: nbformat.NotebookNode) -> list[dict]:
    return [{"kind": c.cell_type, "source": c.source, "tags": tuple(c.metadata.get("tags", []))} for c in nb.cells]


def test_a_source_reads_as_its_cells_and_is_written_back_as_it_was():
    builder = _builder()
    assert builder.read_source(SOURCE) == CELLS
    assert builder.source_text(CELLS, '"""Notebook 99: a docstring, not a cell."""') == SOURCE.replace(
        "print(x);\n\n\n", "print(x);\n\n")  # blank lines between cells: one when written, any when read


@pytest.mark.parametrize("text, error", [
    ('from cells import md\n\nCELLS = [md("""# Title""")]\n', "no '# %%' cell"),
    ("# %% [markdown]\n# Title\nText without its '# '\n", "has a line without '# '"),
    ("# %% A title\nx = 1\n", "a cell header this builder does not read"),
    ("# %%% deeper\nx = 1\n", "a cell header this builder does not read"),
])
def test_a_source_it_cannot_read_exactly_is_an_error(text, error):
    with pytest.raises(ValueError, match=error):
        _builder().read_source(text, "nb99.py")


@pytest.mark.parametrize("notebook", BUILT, ids=lambda p: p.stem)
def test_every_notebook_cell_survives_the_source_format(notebook):
    builder = _builder()
    cells = _cells(nbformat.read(notebook, as_version=4))
    assert builder.read_source(builder.source_text(cells)) == cells


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_jupytext_reads_a_source_as_the_builder_does(source):
    import jupytext  # the test extra installs it
    cells = _cells(jupytext.read(source, fmt="py:percent"))
    first, *rest = cells
    assert first["kind"] == "code" and first["source"].startswith('"""'), "the docstring, as jupytext's first cell"
    assert rest == _builder().load_source(source)


def test_jupytext_reads_the_example_as_the_builder_does():
    import jupytext
    assert _cells(jupytext.reads(SOURCE, fmt="py:percent"))[1:] == CELLS
