"""Build the lab notebooks from their sources: ``notebooks/src/nbXX_*.py`` -> ``notebooks/XX_*.ipynb``.

The sources are the truth (reviewable as code); the .ipynb files are built from them and, for nbval,
carry the outputs of one run in the cpu profile (the profile CI runs)::

    python notebooks/build_notebooks.py                 # rebuild, keep outputs of unchanged cells
    python notebooks/build_notebooks.py --execute 01    # rebuild and run notebook 01, storing its outputs
    python notebooks/build_notebooks.py --check         # exit 1 when a notebook differs from its source

A source is a Python script in jupytext's percent format, which ruff checks like the rest of the code
(this builder reads it without jupytext)::

    # Notebook NN: what the lab is about (a docstring or comments before the first cell: not a cell)

    # %% [markdown] tags=["exercise"]
    # ## A markdown cell
    #
    # Every line commented with "# ", an empty line as "#".

    # %% tags=["nbval-ignore-output"]
    # %matplotlib inline
    print("a code cell: tags in its header, IPython magics and shell escapes commented out")

A cell ends at the next ``# %%`` line; the blank lines around its text are not part of it. The tags are
those nbval reads (``nbval-ignore-output``, ``raises-exception``, ``nbval-skip``) and the exercises'
(``exercise``, ``solution``); nbval's comment markers (``# NBVAL_IGNORE_OUTPUT`` ...) on the first lines
of a code cell become tags too. Magics are commented out and back with jupytext's rules, so
``jupytext --to ipynb`` reads a source as this builder does (plus a first cell: the docstring).

Runs use the local site and a temporary course folder, like notebooks/conftest.py does under nbval.
Every run also links the participants' scripts into this folder (``lab06_data_parallel/train_ddp.py`` -> the package's
``labs/lab06_data_parallel/scripts/lab06_data_parallel/train_ddp.py``, their only copy; git-ignored), as the notebooks
open them. What participants open in JupyterLab is cleaned on the way: nbval's comment markers become cell tags,
the temporary course folder reads ``~/course``, and a live widget (the queue view, a progress bar),
whose state JupyterLab does not restore, is stored as its last rendering.
"""

from __future__ import annotations

import argparse
import html
import json
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


# nbval's comment markers and the cell tags it reads for each (nbval/plugin.py: metadata_tags)
MARKER_TAGS = {
    "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "NBVAL_CHECK_OUTPUT": "nbval-check-output",
    "NBVAL_RAISES_EXCEPTION": "raises-exception",
    "NBVAL_SKIP": "nbval-skip",
}
# A cell's first line, as jupytext reads it (cell_reader.py: DoublePercentScriptCellReader.start_code_re);
# this builder knows the options jupytext writes for our cells: [markdown], then tags=<JSON list>
CELL_HEADER = re.compile(r"^\s*#\s*%%(%*)(\s.*)?$")
HEADER_OPTIONS = re.compile(r"^(?P<markdown>\[markdown\])?\s*(?:tags=(?P<tags>\[.*\]))?$")
# IPython magics and shell escapes, commented out in a source ("# %matplotlib inline"): jupytext's rules for
# Python (magics.py: is_magic, for a cell with an explicit marker), so that both read a source the same way
_MAGIC = re.compile(r"^\s*(# |#)*(%|%%|%%%)[a-zA-Z]")
_MAGIC_FORCE_ESCAPE = re.compile(r"^\s*(# |#)*(%|%%|%%%)[a-zA-Z](.*)#\s*escape")
_MAGIC_NO_ESCAPE = re.compile(r"^\s*(# |#)*(%|%%|%%%)[a-zA-Z](.*)#\s*noescape")
_HELP_OR_SHELL = re.compile(r"^\s*(?:(?:# |#)+\s*)?(\?|!)\s*[A-Za-z\.\~\$\\\/\{\}]")
_MAGIC_ASSIGN = re.compile(r"^(# |#)*\s*([a-zA-Z_][a-zA-Z_$0-9]*)\s*=\s*(%|%%|%%%|!)[a-zA-Z](.*)")
_HELP = re.compile(r"^\s*(# )*[^\s]*\?\s*$")
_SHELL_COMMAND = re.compile(r"^(# |#)*(cat|cd|cp|mv|rm|rmdir|mkdir|copy|ddir|echo|ls|ldir|ren)($|\s$|\s[^=,])")
_CONTINUED = re.compile(r".*\\\s*$")


def split_markers(source: str) -> tuple[str, tuple[str, ...]]:
    """The source without its leading nbval marker lines, and the tags they stand for."""
    lines = source.splitlines()
    tags: list[str] = []
    while lines and lines[0].strip().lstrip("#").strip() in MARKER_TAGS and lines[0].lstrip().startswith("#"):
        tags.append(MARKER_TAGS[lines.pop(0).strip().lstrip("#").strip()])
    return "\n".join(lines), tuple(tags)


class _Quotes:
    """Whether the next line starts inside a string literal (jupytext's StringParser, for Python)."""

    def __init__(self) -> None:
        self.single: str | None = None
        self.triple: str | None = None

    def quoted(self) -> bool:
        return bool(self.single or self.triple)

    def read(self, line: str) -> None:
        if not self.quoted() and line.lstrip().startswith("#"):
            return
        triple_start = -1
        for i, char in enumerate(line):
            if self.single is None and self.triple is None and char == "#":
                break
            if char not in "\"'" or line[i - 1:i] == "\\":
                continue
            if self.single == char:
                self.single = None
            elif self.single is not None:
                continue
            elif line[i - 2:i + 1] == 3 * char and i >= triple_start + 3:
                if self.triple == char:
                    self.triple, triple_start = None, i
                elif self.triple is None:
                    self.triple, triple_start = char, i
            elif self.triple is None:
                self.single = char
        self.single = None


def _is_magic(line: str) -> bool:
    if _MAGIC_FORCE_ESCAPE.match(line):
        return True
    if _MAGIC_NO_ESCAPE.match(line):
        return False
    return any(p.match(line) for p in (_MAGIC, _HELP_OR_SHELL, _MAGIC_ASSIGN, _HELP, _SHELL_COMMAND))


def _escape_magics(source: str, escape: bool) -> str:
    """Comment out (escape) or uncomment once the magic lines of a code cell, outside string literals."""
    lines, quotes, continued = source.split("\n"), _Quotes(), False
    for pos, line in enumerate(lines):
        if not quotes.quoted() and (continued or _is_magic(line)):
            text = line if continued and escape else line.lstrip()
            indent = line[:len(line) - len(text)]
            if escape:
                lines[pos] = indent + "# " + text
            else:
                lines[pos] = indent + (text[2:] if text.startswith("# ") else text[1:] if text.startswith("#") else text)
            continued = bool(_CONTINUED.match(line))
        quotes.read(line)
    return "\n".join(lines)


def comment_magics(source: str) -> str:
    """A code cell's source as a source file holds it: magics and shell escapes commented out."""
    return _escape_magics(source, escape=True)


def uncomment_magics(source: str) -> str:
    """A code cell's source from a source file: the commented magics (and shell escapes) restored."""
    return _escape_magics(source, escape=False)


def _strip_blank_lines(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def read_source(text: str, name: str = "<source>") -> list[dict]:
    """The cells of a source in percent format, each ``{"kind", "source", "tags"}``; what comes before the
    first ``# %%`` (the module docstring) is not a cell."""
    found: list[tuple[int, re.Match, list[str]]] = []  # each cell's header: line number, options, lines
    quotes = _Quotes()
    for number, line in enumerate(text.splitlines(), 1):
        header = None if quotes.quoted() else CELL_HEADER.match(line)
        quotes.read(line)
        if header is None:
            if found:
                found[-1][2].append(line)
            continue
        options = HEADER_OPTIONS.match((header.group(2) or "").strip())
        if header.group(1) or options is None:
            raise ValueError(f"{name}:{number}: a cell header this builder does not read: {line!r} "
                             '(write "# %%" or "# %% [markdown]", then tags=["...", ...] if any)')
        found.append((number, options, []))
        quotes = _Quotes()
    if not found:
        raise ValueError(f"{name}: no '# %%' cell (a source is in percent format, see build_notebooks.py)")
    cells = []
    for number, options, lines in found:
        lines = _strip_blank_lines(lines)
        tags = tuple(json.loads(options["tags"])) if options["tags"] else ()
        if options["markdown"]:
            wrong = [line for line in lines if line and line != "#" and not line.startswith("# ")]
            if wrong:
                raise ValueError(f"{name}: the markdown cell at line {number} has a line without '# ': {wrong[0]!r}")
            cells.append({"kind": "markdown", "source": "\n".join(line[2:] for line in lines), "tags": tags})
        else:
            source, marker_tags = split_markers(uncomment_magics("\n".join(lines)))
            tags = (*marker_tags, *(t for t in tags if t not in marker_tags))
            cells.append({"kind": "code", "source": source, "tags": tags})
    return cells


def source_text(cells: list[dict], preamble: str = "") -> str:
    """The source file of `cells` (``read_source`` reads them back), `preamble` (a module docstring) first."""
    parts = [preamble.strip("\n")] if preamble.strip() else []
    for cell in cells:
        header = "# %%" + (" [markdown]" if cell["kind"] == "markdown" else "")
        if cell["tags"]:
            header += f" tags={json.dumps(list(cell['tags']))}"
        if cell["kind"] == "markdown":
            lines = [f"# {line}" if line else "#" for line in cell["source"].split("\n")]
        else:
            lines = comment_magics(cell["source"]).split("\n")
        parts.append("\n".join([header, *lines]) if cell["source"] else header)
    return "\n\n".join(parts) + "\n"


def load_source(path: Path) -> list[dict]:
    """The cells of a source file (see the module's docstring)."""
    return read_source(path.read_text(encoding="utf-8"), str(path))


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
        cell.metadata.pop("execution", None)  # nbclient's timestamps: new at every build, noise in a diff
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if WIDGET_VIEW in output.get("data", {}):
                _static_output(output, widgets)
        cell.outputs = nbformat.from_dict(_without_build_paths(cell.outputs))


def execute(nb: nbformat.NotebookNode, name: str) -> float:
    """Run `nb` in a fresh kernel as nbval does (notebooks/conftest.py: the local site, the pseudonym
    ``ada``, one thread per process), in a throw-away course folder, in place."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="coursekit-build-") as course:
        saved = {k: os.environ.get(k) for k in ("COURSEKIT_SITE", "COURSEKIT_COURSE_DIR", "COURSEKIT_PSEUDONYM",
                                                "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        os.environ.setdefault("COURSEKIT_SITE", "local")
        os.environ.setdefault("COURSEKIT_PSEUDONYM", "ada")  # the stored outputs show the pseudonym nbval sets
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
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
    if not args.check:
        from coursekit.labs.kit.exercises import link_kit_scripts

        for link in link_kit_scripts(HERE):
            print(f"linked {link.relative_to(HERE.parent)} -> {os.readlink(link)}")
    sources = sorted(SOURCES.glob("nb[0-9][0-9]_*.py"))
    if args.only:
        sources = [s for s in sources if s.stem[2:4] in args.only]
    stale = []
    for source in sources:
        target = HERE / notebook_name(source)
        previous = nbformat.read(target, as_version=4) if target.exists() else None
        if previous is not None:
            clean_outputs(previous)  # while its widget state is at hand
        try:
            nb = build(source, previous)
        except ValueError as error:  # a source it cannot read exactly
            print(f"error: {error}", file=sys.stderr)
            return 2
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
