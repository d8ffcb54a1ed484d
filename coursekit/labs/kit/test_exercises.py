"""The solution stripper: participants' copies lose the answers, keep everything else."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from coursekit.labs.kit import exercises

SOLVED = """\
setup = 1
def fit(x):
    ### BEGIN SOLUTION
    slope = x * 2
    return slope
    ### END SOLUTION
print(fit(3))"""


def solved_notebook() -> nbformat.NotebookNode:
    code = new_code_cell(SOLVED, execution_count=3, outputs=[new_output("stream", name="stdout", text="6\n")])
    plain = new_code_cell("print('kept')", execution_count=4,
                          outputs=[new_output("stream", name="stdout", text="kept\n")])
    answer = new_markdown_cell("Because the batch is larger.", metadata={"tags": ["solution"]})
    prose = new_markdown_cell("## Exercise 1")
    return new_notebook(cells=[prose, code, plain, answer])


def test_strip_source_replaces_the_block_at_its_indentation():
    stripped, blocks = exercises.strip_source(SOLVED)
    assert blocks == 1
    assert stripped.splitlines() == [
        "setup = 1", "def fit(x):", "    # YOUR CODE HERE",
        '    raise NotImplementedError("Exercise: fill in this cell")', "print(fit(3))"]
    assert "slope" not in stripped
    compile(stripped, "<stripped>", "exec")  # still valid Python


@pytest.mark.parametrize("source, words", [
    ("### BEGIN SOLUTION\nx = 1", "never closed"),
    ("x = 1\n### END SOLUTION", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside an open"),
])
def test_bad_markup_is_an_error(source, words):
    with pytest.raises(exercises.ExerciseMarkupError, match=words):
        exercises.strip_source(source)


def test_a_participant_copy_holds_no_outputs_of_the_solved_run():
    nb = solved_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    report = exercises.strip_notebook(nb)
    assert (report.code_blocks, report.answers) == (1, 1)
    prose, code, plain, answer = nb.cells
    assert prose.source == "## Exercise 1"
    assert code.outputs == [] and code.execution_count is None
    assert plain.outputs == [] and plain.execution_count is None  # no exercise in it: still the solved run's
    assert "widgets" not in nb.metadata
    assert answer.source == exercises.ANSWER_PLACEHOLDER
    assert answer.metadata["tags"] == ["answer"]


def test_strip_folder_writes_copies_and_never_overwrites_sources(tmp_path):
    source, target = tmp_path / "solved", tmp_path / "handout"
    source.mkdir()
    nbformat.write(solved_notebook(), source / "01_lab.ipynb")
    assert exercises.main(["strip", str(source), str(target)]) == 0
    handout = nbformat.read(target / "01_lab.ipynb", as_version=4)
    nbformat.validate(handout)
    assert "BEGIN SOLUTION" not in handout.cells[1].source
    assert "slope" in nbformat.read(source / "01_lab.ipynb", as_version=4).cells[1].source
    assert exercises.main(["strip", str(source), str(source)]) == 1  # refuses to strip in place
    assert exercises.main(["check", str(target)]) == 0  # a stripped copy is still well formed


def test_check_reports_broken_markup(tmp_path, capsys):
    nbformat.write(new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1")]), tmp_path / "bad.ipynb")
    assert exercises.main(["check", str(tmp_path)]) == 1
    assert "bad.ipynb, cell 0" in capsys.readouterr().err


SCRIPT = """\
import os
def setup():
    # TODO 1: the rank
    ### BEGIN SOLUTION
    rank = int(os.environ.get("RANK", 0))
    ### END SOLUTION
    return rank
"""


def test_strip_folder_hands_out_scripts_of_sub_folders_stripped(tmp_path):
    source, target = tmp_path / "notebooks", tmp_path / "handout"
    (source / "ddp").mkdir(parents=True)
    (source / "src").mkdir()
    nbformat.write(solved_notebook(), source / "01_lab.ipynb")
    (source / "ddp" / "train_ddp.py").write_text(SCRIPT)
    (source / "ddp" / "train_serial.py").write_text("print('serial')\n")
    (source / "src" / "nb01.py").write_text("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n")
    (source / "build_notebooks.py").write_text("print('tooling')\n")
    reports = exercises.strip_folder(source, target)
    own = [(r.notebook, r.code_blocks) for r in reports if not r.notebook.startswith("lab")]  # the kit's: below
    assert own == [("01_lab.ipynb", 1), ("ddp/train_ddp.py", 1), ("ddp/train_serial.py", 0)]
    handed = (target / "ddp" / "train_ddp.py").read_text()
    assert "RANK" not in handed and "# TODO 1: the rank" in handed
    assert exercises.SCRIPT_PLACEHOLDER_RAISE in handed and handed.endswith("return rank\n")
    compile(handed, "train_ddp.py", "exec")
    assert (target / "ddp" / "train_serial.py").read_text() == "print('serial')\n"
    assert not (target / "src").exists() and not (target / "build_notebooks.py").exists()
    assert "RANK" in (source / "ddp" / "train_ddp.py").read_text()  # the solution stays


def test_check_reports_broken_markup_in_a_script(tmp_path, capsys):
    (tmp_path / "ddp").mkdir()
    (tmp_path / "ddp" / "train_ddp.py").write_text("x = 1\n### END SOLUTION\n")
    assert exercises.main(["check", str(tmp_path)]) == 1
    assert "ddp/train_ddp.py, line 2" in capsys.readouterr().err


def test_participants_copies_go_inside_the_served_folder_by_default(tmp_path, capsys):
    nbformat.write(solved_notebook(), tmp_path / "00_lab.ipynb")
    assert exercises.main(["strip", str(tmp_path)]) == 0
    copy = tmp_path / exercises.PARTICIPANT_SUBDIR / "00_lab.ipynb"
    assert exercises.PLACEHOLDER_RAISE in nbformat.read(copy, as_version=4).cells[1].source
    assert "participants' copies in" in capsys.readouterr().out
    assert exercises.main(["strip", str(tmp_path)]) == 0  # again: the copies are not stripped as sources
    assert not (tmp_path / exercises.PARTICIPANT_SUBDIR / exercises.PARTICIPANT_SUBDIR).exists()


def test_the_repositorys_participant_folder_is_ignored_and_shares_the_course_folder(tmp_path, monkeypatch):
    from pathlib import Path

    from coursekit.course import COURSE_CONFIG_FILE, COURSE_DIR_ENV, course_dir

    root = Path(__file__).resolve().parents[3]
    assert f"notebooks/{exercises.PARTICIPANT_SUBDIR}/" in (root / ".gitignore").read_text().splitlines()
    assert (root / "notebooks" / COURSE_CONFIG_FILE).is_file(), "notebooks/ is the course folder of its copies"
    (tmp_path / COURSE_CONFIG_FILE).write_text("")
    (tmp_path / exercises.PARTICIPANT_SUBDIR).mkdir()
    monkeypatch.delenv(COURSE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path / exercises.PARTICIPANT_SUBDIR)  # where a copy's kernel starts
    assert course_dir() == tmp_path.resolve()


def test_the_kits_scripts_are_handed_out_from_the_package_and_linked_for_the_solved_notebooks(tmp_path):
    """The package's ``labs/<lab>/scripts/<folder>/`` is the only copy: participants get ``<folder>/`` stripped,
    the solved notebooks a link to each file; an edited copy in the notebook folder is refused, not lost."""
    kit = exercises.kit_scripts()
    assert "lab06_data_parallel/train_ddp.py" in kit and all(path.is_file() for path in kit.values())
    source, target = tmp_path / "notebooks", tmp_path / "handout"
    source.mkdir()
    reports = {r.notebook: r.code_blocks for r in exercises.strip_folder(source, target)}
    assert reports.keys() == kit.keys() and reports["lab06_data_parallel/train_ddp.py"] > 0
    handed = (target / "lab06_data_parallel" / "train_ddp.py").read_text()
    assert exercises.SCRIPT_PLACEHOLDER_RAISE in handed and exercises.BEGIN not in handed
    assert not any(p.is_symlink() for p in target.rglob("*"))  # participants get files of their own

    assert len(exercises.link_kit_scripts(source)) == len(kit)
    assert exercises.link_kit_scripts(source) == []  # already there
    link = source / "lab06_data_parallel" / "train_ddp.py"
    assert link.is_symlink() and link.resolve() == kit["lab06_data_parallel/train_ddp.py"].resolve()
    again = {r.notebook: r.code_blocks for r in exercises.strip_folder(source, tmp_path / "again")}
    assert again == reports  # the links are the kit's files, not scripts of the folder's own
    link.unlink()
    link.write_text(kit["lab06_data_parallel/train_ddp.py"].read_text())  # an unchanged copy: replaced by the link
    assert exercises.link_kit_scripts(source) == [link] and link.is_symlink()
    link.unlink()
    link.write_text("edited\n")
    with pytest.raises(ValueError, match="differs from .*the only copy"):
        exercises.link_kit_scripts(source)
    assert link.read_text() == "edited\n"
