"""What nbval compares: no output that depends on the machine (the policy of notebooks/README.md).

nbval compares every code cell's stored outputs with a fresh run, after ``notebooks/sanitize.cfg``'s
replacements, unless the cell is tagged ``nbval-ignore-output`` or ``nbval-skip``. A value that comes from
training, timing, the CPU model, the thread count, the torch version or the host would make that comparison
pass only on the machine that stored it. So every number left in a compared output must be one the source
fixes, and the cell says why with a tag (``EXACT_TAGS``):

- run-dependent values are printed after ``measured:`` (sanitize.cfg masks the rest of the line), or the
  cell's output is ignored and what matters in it is asserted in code (``labs.check_claim``, a tolerance);
- job ids, seconds, paths, hashes are masked by sanitize.cfg wherever they appear;
- the kit's own formats print numbers the source fixes (``KIT_LINES``: claim verdicts and exit tickets, whose
  measured values sit after ``measured:``; predictions as typed; the lab's settings and the command lines they
  make; a figure's size);
- any other number needs an ``exact-*`` tag naming why it is the same on every machine; a decimal number
  (a float, a percentage) only with ``exact-settings`` or ``exact-arithmetic``.

This test reads the built notebooks (their sources are checked equal to them by test_sources.py) and fails on
a compared cell that prints a number without saying why; ``test_planted_*`` show that it can.
"""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
BUILT = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
NOT_COMPARED_TAGS = {"nbval-ignore-output", "nbval-skip"}
NOT_COMPARED_KEYS = {"image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json"}  # nbval skips these
# why a number in a compared output is the same on every machine
EXACT_TAGS = {
    "exact-settings": "the profile's settings, the command lines they make, and text the source writes",
    "exact-arithmetic": "arithmetic on sizes, shapes, formats and seeded data, printed to digits that hold "
                        "everywhere (no training, no timing)",
    "exact-counts": "counts the settings fix (jobs, runs, records, seeds, steps, questions)",
    "exact-verdicts": "claim verdicts and exit-ticket scores: their thresholds come from the source and what "
                      "they measured sits after 'measured:'",
}
DECIMAL_TAGS = {"exact-settings", "exact-arithmetic"}
# lines in the kit's own formats (coursekit/labs/kit: claims, ticket, predict, settings): their numbers come
# from the source; what was measured in them sits after "measured:", which sanitize.cfg masks
KIT_LINES = re.compile("|".join([
    r"^(CLAIM HOLDS|NOT CHECKED HERE): .*", r"^\s+why: .*",  # labs.check_claim (a failing claim stops the run)
    r"^Exit ticket, lab \d\d: .*", r"^  \w+: .*[?\])]$", r"^Answer them in the next cell.*",  # labs.exit_ticket
    r"^\s+(RIGHT|WRONG|NOT ANSWERED)\s+\w+: .*", r"^Score: \d+/\d+\..*",  # its grading of solved answers
    r"^Prediction( vs measurement)?: .*", r"^\s+yours: .*",  # labs.predict and labs.reveal: the typed guess
    r"^(cpu|gpu) profile: .*", r"^Lab \d\d settings \((cpu|gpu) profile\):$",  # labs.settings(...) printed
    r"^(python )?-m coursekit\.train(\.sweep)? .*",  # a command line made from the settings
    r"<Figure size \d+x\d+ with \d+ Axes>",  # matplotlib's repr of a figure: its size is set in code
]), re.MULTILINE)
SETTINGS_HEADER = re.compile(r"^Lab \d\d settings \((cpu|gpu) profile\):$", re.MULTILINE)
SETTING_LINE = re.compile(r"^(  \w+ = .*|REAL DATA: .*)$", re.MULTILINE)  # under that header
# a number as printed: not the digits inside a name (resnet18, fp32, lab06_data_parallel, 2^-24's exponent counts)
NUMBER = re.compile(r"(?<![A-Za-z_\d.^])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?(?:\s*%)?")
DECIMAL = re.compile(r"\d\.\d|\d[eE][-+]?\d|%")
HTML_TAG = re.compile(r"<[^>]*>")
STORED_VIEW_TEXT = "(a live view: run the cell to see it)"  # build_notebooks.py's stored widget


def sanitize_patterns(cfg: Path = NOTEBOOKS / "sanitize.cfg") -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of a sanitize file, in nbval's order."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg)
    return [(parser[section]["regex"], parser[section]["replace"]) for section in parser.sections()]


def compared_text(cell: dict, patterns: list[tuple[str, str]]) -> str:
    """What nbval compares of a code cell's outputs, sanitized as nbval does (tags and markup aside)."""
    texts = []
    for output in cell.get("outputs", []):
        if "text" in output:
            texts.append(output["text"] if isinstance(output["text"], str) else "".join(output["text"]))
        for key, value in output.get("data", {}).items():
            if key not in NOT_COMPARED_KEYS and isinstance(value, (str, list)):
                text = value if isinstance(value, str) else "".join(value)
                texts.append(HTML_TAG.sub(" ", text) if key == "text/html" else text)
    sanitized = []
    for text in texts:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        sanitized.append(text)
    return "\n".join(sanitized)


def without_kit_lines(text: str) -> str:
    """``text`` without the lines in the kit's own formats (``KIT_LINES``, settings under their header)."""
    if SETTINGS_HEADER.search(text):
        text = SETTING_LINE.sub("", text)
    return KIT_LINES.sub("", text)


def problems_of(notebook: dict, patterns: list[tuple[str, str]]) -> list[str]:
    """Every compared cell of ``notebook`` that breaks the policy, in a sentence each."""
    found = []
    code_index = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        code_index += 1
        tags = set(cell.get("metadata", {}).get("tags", []))
        where = f"code cell {code_index} ({''.join(cell['source'])[:60]!r}...)"
        unknown = {tag for tag in tags if tag.startswith("exact-")} - set(EXACT_TAGS)
        if unknown:
            found.append(f"{where}: unknown tag(s) {sorted(unknown)}: use {sorted(EXACT_TAGS)}")
        if tags & NOT_COMPARED_TAGS:
            continue
        text = compared_text(cell, patterns)
        if STORED_VIEW_TEXT in text:
            found.append(f"{where}: a live view (a widget) is stored as its last rendering, which a fresh run's "
                         "widget never equals: tag the cell nbval-ignore-output")
            continue
        numbers = NUMBER.findall(without_kit_lines(text))
        if not numbers:
            continue
        exact = tags & set(EXACT_TAGS)
        if not exact:
            found.append(f"{where}: nbval compares its output and it prints {numbers[:5]}: print run-dependent "
                         "values after 'measured:', or tag the cell nbval-ignore-output (and assert what matters "
                         f"in code), or say why they hold on every machine with one of {sorted(EXACT_TAGS)}")
            continue
        decimals = [number for number in numbers if DECIMAL.search(number)]
        if decimals and not exact & DECIMAL_TAGS:
            found.append(f"{where}: decimal values {decimals[:5]} with only {sorted(exact)}: a decimal value "
                         f"holds on every machine only as {sorted(DECIMAL_TAGS)}, else print it after "
                         "'measured:' or ignore the output")
    return found


@pytest.mark.parametrize("path", BUILT, ids=[path.stem for path in BUILT])
def test_compared_outputs_hold_on_every_machine(path):
    problems = problems_of(json.loads(path.read_text()), sanitize_patterns())
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def _notebook(*cells: dict) -> dict:
    return {"cells": [{"cell_type": "code", "source": "print(x)", **cell} for cell in cells]}


def _printed(text: str, *tags: str) -> dict:
    return {"metadata": {"tags": list(tags)}, "outputs": [{"output_type": "stream", "name": "stdout",
                                                            "text": text}]}


def test_planted_unguarded_cell_fails():
    """A new cell that prints a training result as text, untagged: caught (the way lab 09 broke elsewhere)."""
    planted = _printed("ada/tuned seed 0: stopping half 68.8%, held-out half 67.3% (+1.5%)\n")
    problems = problems_of(_notebook(planted), sanitize_patterns())
    assert len(problems) == 1 and "68.8%" in problems[0]


def test_planted_html_table_and_counts_tag_on_decimals_fail():
    """A results table (HTML) is read too, and a decimal value cannot pass as a count."""
    table = {"metadata": {"tags": []}, "outputs": [{"output_type": "execute_result", "data": {
        "text/html": "<table><tr><td>val_acc</td><td>0.688</td></tr></table>"}}]}
    counts = _printed("val_acc 0.396 at batch 1024\n", "exact-counts")
    problems = problems_of(_notebook(table, counts), sanitize_patterns())
    assert len(problems) == 2
    assert "0.688" in problems[0] and "decimal values ['0.396']" in problems[1]


def test_guarded_cells_pass():
    """The three ways to guard a value, and a tag with its reason: no problem."""
    measured = _printed("CLAIM HOLDS: the clock counts training only\n    measured: timed / wall: 8% to 36%\n",
                        "exact-verdicts")
    ignored = _printed("compute alone 46.2 ms\n", "nbval-ignore-output")
    masked = _printed("job 1234 ended after 3.2 s in /tmp/coursekit-nbval-abc/jobs\n")
    settings = _printed("  lr = 0.05\n", "exact-settings")
    assert problems_of(_notebook(measured, ignored, masked, settings), sanitize_patterns()) == []


def test_planted_live_view_fails():
    """A widget stored as its last rendering never equals a fresh run's widget (lab 06's prediction box)."""
    view = {"metadata": {"tags": []}, "outputs": [{"output_type": "display_data", "data": {
        "text/plain": STORED_VIEW_TEXT}}]}
    problems = problems_of(_notebook(view), sanitize_patterns())
    assert len(problems) == 1 and "live view" in problems[0]


def test_unknown_exact_tag_is_named():
    problems = problems_of(_notebook(_printed("3 runs\n", "exact-because")), sanitize_patterns())
    assert any("exact-because" in problem for problem in problems)


@pytest.mark.parametrize("path", BUILT, ids=[p.stem for p in BUILT])
def test_every_exit_ticket_asks_a_transfer_question_and_shows_its_answer_as_computed(path: Path) -> None:
    """Each lab's ticket has a question answered with the lab's idea, not read in a cell (issue 36): its graded line
    says "computed:", never "measured:" (the kit's ticket, ``Question(computed=True)``)."""
    texts = ["".join(o.get("text", "")) for cell in json.loads(path.read_text())["cells"]
             for o in cell.get("outputs", []) if "text" in o]
    graded = [t for t in texts if re.search(r"^Exit ticket, lab \d\d: \d+/\d+ right", t, re.MULTILINE)]
    assert graded, f"{path.name}: no graded exit ticket in its stored outputs"
    assert any(re.search(r"^      computed: ", t, re.MULTILINE) for t in graded), \
        f"{path.name}: no transfer question (labs.Question(..., computed=True)) in its exit ticket"
