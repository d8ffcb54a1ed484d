"""Exercises: the notebooks hold the solutions; participants get copies with the solutions stripped.

In a code cell, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` are the instructor's
answer; ``strip`` replaces them with a placeholder at the same indentation::

    # YOUR CODE HERE
    raise NotImplementedError("Exercise: fill in this cell")

A markdown cell tagged ``solution`` (an answer in words) becomes "*Your answer here.*". A participant
copy holds no outputs at all: the solved notebook's results, claims and checker verdicts would look like
the participant's own before anything ran (and after Run All stops at an exercise). The Python scripts in the notebook folder's sub-folders
(``lab06_ddp/train_ddp.py``: participants complete a script, not a cell) are copied too, their solution
blocks replaced by::

    # YOUR CODE HERE
    raise NotImplementedError("Exercise: write this part (see the TODO above)")

The folder's own tooling (top-level ``*.py``) and the notebooks' sources (``src/``) are not handed out.
CI runs the solved notebooks; instructors hand out the stripped ones::

    python -m coursekit.labs.kit.exercises strip notebooks/     # -> notebooks/participant/
    python -m coursekit.labs.kit.exercises check notebooks/

The copies go by default into ``participant/`` inside the source folder, git-ignored. Participants are
served that folder alone (``jupyter lab notebooks/participant/``): JupyterLab shows nothing above the
folder it serves, so the solutions are not one click away. Their jobs land in the same course folder
(``notebooks/coursekit.toml``, found above the copies, marks it), so they share its job registry.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
PLACEHOLDER_COMMENT = "# YOUR CODE HERE"
PLACEHOLDER_RAISE = 'raise NotImplementedError("Exercise: fill in this cell")'
SCRIPT_PLACEHOLDER_RAISE = 'raise NotImplementedError("Exercise: write this part (see the TODO above)")'
SOLUTION_TAG = "solution"
ANSWER_TAG = "answer"
ANSWER_PLACEHOLDER = "*Your answer here.*"
NOTEBOOK_GLOB = "*.ipynb"
PARTICIPANT_SUBDIR = "participant"  # default target: inside the served folder, git-ignored
SCRIPT_GLOB = "*/**/*.py"  # scripts in sub-folders of the notebook folder
NOT_HANDED_OUT = frozenset({"src", "__pycache__", PARTICIPANT_SUBDIR})  # sources, caches, copies


class ExerciseMarkupError(ValueError):
    """A solution block that is not closed, or closed without being opened."""


@dataclass(frozen=True)
class StripReport:
    notebook: str
    code_blocks: int
    answers: int


def strip_source(source: str, where: str = "cell", raise_line: str = PLACEHOLDER_RAISE) -> tuple[str, int]:
    """The source with each solution block replaced by the placeholder, and how many blocks there were."""
    out: list[str] = []
    blocks = 0
    inside = False
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ExerciseMarkupError(f"{where}, line {number}: {BEGIN} inside an open solution block")
            inside = True
            blocks += 1
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + PLACEHOLDER_COMMENT, indent + raise_line]
        elif marker == END:
            if not inside:
                raise ExerciseMarkupError(f"{where}, line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ExerciseMarkupError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out), blocks


def strip_notebook(nb: nbformat.NotebookNode, name: str = "notebook") -> StripReport:
    """Strip every solution of `nb` in place, and every output (a participant copy starts unrun)."""
    code_blocks = answers = 0
    nb.metadata.pop("widgets", None)  # the solved run's widget state
    for index, cell in enumerate(nb.cells):
        tags = list(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "code":
            source, blocks = strip_source(cell.source, where=f"{name}, cell {index}")
            cell.source = source
            cell.outputs = []
            cell.execution_count = None
            code_blocks += blocks
        elif cell.cell_type == "markdown" and SOLUTION_TAG in tags:
            cell.source = ANSWER_PLACEHOLDER
            cell.metadata["tags"] = [ANSWER_TAG if t == SOLUTION_TAG else t for t in tags]
            answers += 1
    return StripReport(name, code_blocks, answers)


def notebooks_in(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise ValueError(f"source={str(folder)!r} is neither a notebook nor a folder of notebooks")
    return sorted(p for p in folder.glob(NOTEBOOK_GLOB) if not p.name.startswith("."))


def scripts_in(folder: Path) -> list[Path]:
    """The scripts handed out with the notebooks: ``*.py`` in sub-folders, except the notebooks' sources."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(SCRIPT_GLOB) if p.is_file() and not any(
        part in NOT_HANDED_OUT or part.startswith(".") for part in p.relative_to(folder).parts[:-1]))


def strip_script(path: Path, folder: Path) -> tuple[str, StripReport]:
    """The participant's copy of a script (solution blocks replaced) and its report."""
    name = path.relative_to(folder).as_posix()
    text = path.read_text()
    source, blocks = strip_source(text, where=name, raise_line=SCRIPT_PLACEHOLDER_RAISE)
    return source + ("\n" if text.endswith("\n") else ""), StripReport(name, blocks, 0)


def default_target(source: Path) -> Path:
    """Where participants' copies go when no target is given: ``<source folder>/participant``."""
    source = Path(source)
    return (source if source.is_dir() else source.parent) / PARTICIPANT_SUBDIR


def strip_folder(source: Path, target: Path | None = None) -> list[StripReport]:
    """Write a stripped copy of every notebook of `source`, and of the scripts in its sub-folders, into
    `target` (default: ``default_target``; never over the sources)."""
    source = Path(source)
    target = default_target(source) if target is None else Path(target)
    if target.resolve() == (source if source.is_dir() else source.parent).resolve():
        raise ValueError("target must differ from the source folder: stripping would erase the solutions")
    reports = []
    target.mkdir(parents=True, exist_ok=True)
    for path in notebooks_in(source):
        nb = nbformat.read(path, as_version=4)
        reports.append(strip_notebook(nb, name=path.name))
        nbformat.write(nb, target / path.name)
    for path in scripts_in(source):
        if target.resolve() in path.resolve().parents:  # a handout folder inside the source folder
            continue
        text, report = strip_script(path, source)
        reports.append(report)
        copy = target / report.notebook
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
    return reports


def check_folder(source: Path) -> list[StripReport]:
    """Check the solution markup of every notebook and handed-out script without writing anything."""
    reports = []
    for path in notebooks_in(Path(source)):
        nb = nbformat.read(path, as_version=4)
        reports.append(strip_notebook(nb, name=path.name))
    for path in scripts_in(Path(source)):
        reports.append(strip_script(path, Path(source))[1])
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.labs.kit.exercises", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    strip = sub.add_parser("strip", help="write participant copies without the solutions")
    strip.add_argument("source", type=Path)
    strip.add_argument("target", type=Path, nargs="?", default=None,
                       help=f"where the copies go (default: SOURCE/{PARTICIPANT_SUBDIR}/)")
    check = sub.add_parser("check", help="check that every solution block is well formed")
    check.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    try:
        reports = strip_folder(args.source, args.target) if args.command == "strip" else check_folder(args.source)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for report in reports:
        print(f"{report.notebook}: {report.code_blocks} solution block(s), {report.answers} written answer(s)")
    if args.command == "strip":
        target = args.target or default_target(args.source)
        print(f"participants' copies in {target}: serve that folder alone (jupyter lab {target}), "
              "so that the solutions are not in reach")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
