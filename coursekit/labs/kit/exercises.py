"""Exercises: the notebooks hold the solutions; participants get copies with the solutions stripped.

In a code cell, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` are the instructor's
answer; ``strip`` replaces them with a placeholder at the same indentation::

    # YOUR CODE HERE
    raise NotImplementedError("Exercise: fill in this cell")

A markdown cell tagged ``solution`` (an answer in words) becomes "*Your answer here.*". A participant
copy holds no outputs at all: the solved notebook's results, claims and checker verdicts would look like
the participant's own before anything ran (and after Run All stops at an exercise).

The scripts participants complete (``lab06_data_parallel/train_ddp.py``: a script, not a cell) have one copy, in the
package: ``labs/<lab>/scripts/<folder>/<name>.py`` is ``<folder>/<name>.py`` beside the notebooks
(``kit_scripts``; the checkers read the same files as their solutions). A participant's copy gets them
stripped, their solution blocks replaced by::

    # YOUR CODE HERE
    raise NotImplementedError("Exercise: write this part (see the TODO above)")

with the scripts of the notebook folder's own sub-folders, if it has any. The solved notebooks (CI's nbval
runs, an instructor's) find theirs in the notebook folder as links to the package's files, git-ignored, made by
``link_kit_scripts`` (``notebooks/build_notebooks.py`` and ``notebooks/conftest.py`` call it). The folder's own
tooling (top-level ``*.py``) and the notebooks' sources (``src/``) are not handed out. CI runs the solved
notebooks; instructors hand out the stripped ones::

    python -m coursekit.labs.kit.exercises strip notebooks/     # -> notebooks/participant/
    python -m coursekit.labs.kit.exercises check notebooks/
    python -m coursekit.labs.kit.exercises link notebooks/      # the solved scripts beside the notebooks

The copies go by default into ``participant/`` inside the source folder, git-ignored. Participants are
served that folder alone (``jupyter lab notebooks/participant/``): JupyterLab shows nothing above the
folder it serves, so the solutions are not one click away. Their jobs land in the same course folder
(``notebooks/coursekit.toml``, found above the copies, marks it), so they share its job registry.
"""

from __future__ import annotations

import argparse
import os
import re
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
LABS_FOLDER = Path(__file__).resolve().parents[1]  # coursekit/labs
KIT_SCRIPT_GLOB = "*/scripts/*/*.py"  # <lab>/scripts/<folder>/<name>.py: <folder>/<name>.py for participants
NOT_HANDED_OUT = frozenset({"src", "__pycache__", PARTICIPANT_SUBDIR})  # sources, caches, copies

# What a participant must not read, in a markdown cell or in what the gpu profile prints: the kit's own jargon,
# the developers' tools and reports (text for one profile goes through ``profile.explain``). Case matters: the
# engine's "DATASET STAND-IN" warning is for the instructor who forgot to stage the data, and stays.
NOT_FOR_PARTICIPANTS = {
    "the stand-in": re.compile(r"\bstand-in\b"),
    "the cpu profile": re.compile(r"\b[Cc]pu profile\b"),
    "this kernel's profile": re.compile(r"\bnot in this kernel\b"),
    "a bench script": re.compile(r"\bbench/\w|\bpython3? bench\b"),
    "a development report": re.compile(r"\bREPORT-[\w-]+\.md\b"),
}
# written text only: a path of the developers' machines (what a notebook prints of the participant's own machine,
# their data folder or their Python, is theirs to see)
WRITTEN_NOT_FOR_PARTICIPANTS = {"a machine's path": re.compile(r"(?<![\w~.])/(tmp|root|work|check|opt)/\S+")}


def not_for_participants(text: str, printed: bool = False) -> list[str]:
    """The words of ``text`` (a markdown cell's; ``printed``: what a cell printed) a participant should not read,
    each as ``"<what>: <the words>"``."""
    checks = {**NOT_FOR_PARTICIPANTS, **({} if printed else WRITTEN_NOT_FOR_PARTICIPANTS)}
    return [f"{what}: {match.group(0)[:60]!r}" for what, pattern in checks.items() for match in pattern.finditer(text)]


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


def kit_scripts() -> dict[str, Path]:
    """The participants' scripts as the labs ship them, their only copy: the name in a notebook folder
    (``lab06_data_parallel/train_ddp.py``) -> the package's file (``labs/lab06_data_parallel/scripts/lab06_data_parallel/...``)."""
    found: dict[str, Path] = {}
    for path in sorted(LABS_FOLDER.glob(KIT_SCRIPT_GLOB)):
        name = path.relative_to(path.parents[1]).as_posix()
        if name in found:
            raise ValueError(f"{name} is shipped twice: {found[name]} and {path}")
        found[name] = path
    return found


def scripts_in(folder: Path) -> dict[str, Path]:
    """The scripts handed out with the notebooks of `folder`: the kit's (``kit_scripts``), then the ``*.py`` of
    the folder's own sub-folders, except the notebooks' sources (a name the kit ships is the kit's file)."""
    scripts = kit_scripts()
    if folder.is_dir():
        for path in sorted(folder.glob(SCRIPT_GLOB)):
            parts = path.relative_to(folder).parts
            if path.is_file() and not any(part in NOT_HANDED_OUT or part.startswith(".") for part in parts[:-1]):
                scripts.setdefault("/".join(parts), path)
    return dict(sorted(scripts.items()))


def link_kit_scripts(folder: Path) -> list[Path]:
    """Make each of the kit's scripts reachable from the notebook folder `folder` under its participant name, as
    a relative link to the package's file (what the solved notebooks open); the links made or mended. A file
    there that is not such a link is replaced only when it holds the same text (an edited copy is refused)."""
    made = []
    for name, path in kit_scripts().items():
        link = Path(folder) / name
        target = os.path.relpath(path, link.parent)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.exists() and not link.is_symlink() and link.read_text() != path.read_text():
            raise ValueError(f"{link} differs from {path}, the only copy of that script: make the change there "
                             f"and delete {link}")
        link.parent.mkdir(parents=True, exist_ok=True)
        temporary = link.with_name(f".{link.name}.{os.getpid()}.link")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target)
        os.replace(temporary, link)  # atomic: another process linking at the same time sees one or the other
        made.append(link)
    return made


def strip_script(path: Path, name: str) -> tuple[str, StripReport]:
    """The participant's copy of a script (solution blocks replaced) and its report (``name``: its path in
    the participant's folder)."""
    text = path.read_text()
    source, blocks = strip_source(text, where=name, raise_line=SCRIPT_PLACEHOLDER_RAISE)
    return source + ("\n" if text.endswith("\n") else ""), StripReport(name, blocks, 0)


def default_target(source: Path) -> Path:
    """Where participants' copies go when no target is given: ``<source folder>/participant``."""
    source = Path(source)
    return (source if source.is_dir() else source.parent) / PARTICIPANT_SUBDIR


def strip_folder(source: Path, target: Path | None = None) -> list[StripReport]:
    """Write a stripped copy of every notebook of `source`, and of the scripts handed out with them
    (``scripts_in``), into `target` (default: ``default_target``; never over the sources)."""
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
    for name, path in scripts_in(source).items():
        if target.resolve() in (source / name).resolve().parents:  # a handout folder inside the source folder
            continue
        text, report = strip_script(path, name)
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
    for name, path in scripts_in(Path(source)).items():
        reports.append(strip_script(path, name)[1])
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
    link = sub.add_parser("link", help="link the kit's scripts into a folder of solved notebooks")
    link.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "link":
            made = link_kit_scripts(args.source)
            print(f"{len(kit_scripts())} scripts linked in {args.source} ({len(made)} new)")
            return 0
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
