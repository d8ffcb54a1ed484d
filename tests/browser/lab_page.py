"""What the browser tests ask a JupyterLab page, as JavaScript run in it (``page.evaluate``)."""

import shutil
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MS = 1000
NOTEBOOK_READY = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = panel && panel.sessionContext && panel.sessionContext.session
        && panel.sessionContext.session.kernel;
    return Boolean(kernel && kernel.status === 'idle' && panel.content && panel.content.model);
}"""
# every code cell has an execution count and the kernel is idle: Run All went to the end
ALL_RUN = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.model.cells;
    let code = 0, run = 0;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type === 'code') { code++; if (cell.executionCount) run++; }
    }
    return code > 0 && run === code && panel.sessionContext.session.kernel.status === 'idle';
}"""
ERROR_OUTPUTS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    const found = [];
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        for (const output of cell.toJSON().outputs || []) {
            if (output.output_type === 'error' || (output.output_type === 'stream' && output.name === 'stderr')) {
                found.push(`cell ${i}: ${output.ename || ''} ${[].concat(output.text || output.evalue || '').join('')}`);
            }
        }
    }
    return found;
}"""
CELL_TEXTS = """() => [...document.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText)"""
# the code cells whose source holds ``placeholder`` (an exercise left for the participant)
PLACEHOLDER_CELLS = """(placeholder) => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    const found = [];
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type === 'code' && cell.sharedModel.getSource().includes(placeholder)) found.push(i);
    }
    return found;
}"""
SOURCE_OF = "(i) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).sharedModel.getSource()"
OUTPUT_COUNT = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    let n = 0;
    for (let i = 0; i < cells.length; i++) { const c = cells.get(i); if (c.type === 'code') n += c.outputs.length; }
    return n;
}"""
CHROMIUM_NAMES = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    """Debian's chromium (or its older name) on PATH, None when there is none."""
    return next((found for found in map(shutil.which, CHROMIUM_NAMES) if found), None)


# ------------------------------------------------------------------ what a participant does in the page

EDITOR_READY = """() => {
    const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    return Boolean(widget && widget.context && widget.context.isReady && document.querySelector('.jp-FileEditor .cm-content'));
}"""
EDITOR_CLEAN = "() => !window.jupyterapp.shell.currentWidget.context.model.dirty"
EDITOR_TIMEOUT_S = 45


def completed_script(stripped: str, answers: tuple[str, ...]) -> str:
    """A stripped script with each placeholder (comment + raise) replaced by the next answer, indented as it."""
    from coursekit.labs.kit import exercises

    lines, out, given = stripped.splitlines(), [], iter(answers)
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() == exercises.PLACEHOLDER_COMMENT:
            indent = line[: len(line) - len(line.lstrip())]
            assert lines[index + 1].strip() == exercises.SCRIPT_PLACEHOLDER_RAISE, lines[index + 1]
            out += [indent + answer_line for answer_line in next(given).splitlines()]
            index += 2
            continue
        out.append(line)
        index += 1
    assert next(given, None) is None, "the stripped script has fewer TODO blocks than answers"
    return "\n".join(out) + "\n"


def paste_script(page, url: str, path: Path, text: str) -> str:  # noqa: ANN001 - playwright's Page
    """Open ``path`` (at ``url``) in JupyterLab's editor, replace its text with ``text`` as pasted, save;
    returns what was saved."""
    page.goto(url)
    page.wait_for_function(EDITOR_READY, timeout=EDITOR_TIMEOUT_S * MS)
    page.locator(".jp-FileEditor .cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)  # a paste: the editor does not re-indent it
    page.keyboard.press("Control+s")
    # the file on disk, not the editor's dirty flag: right after Ctrl+S the flag may not be set yet
    deadline = time.monotonic() + EDITOR_TIMEOUT_S
    while path.read_text().rstrip("\n") != text.rstrip("\n") and time.monotonic() < deadline:
        time.sleep(0.2)
    page.wait_for_function(EDITOR_CLEAN, timeout=EDITOR_TIMEOUT_S * MS)
    saved = path.read_text()
    assert saved.rstrip("\n") == text.rstrip("\n"), "the editor changed the pasted script"
    return saved


def type_over_placeholder(page, index: int, source: str, answer: str) -> None:  # noqa: ANN001
    """Click into cell ``index``, select the placeholder's two lines and type ``answer`` over them."""
    from coursekit.labs.kit import exercises

    lines = source.splitlines()
    first = lines.index(exercises.PLACEHOLDER_COMMENT)
    assert lines[first + 1] == exercises.PLACEHOLDER_RAISE, source
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    for _ in range(first):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Home")
    page.keyboard.press("Shift+ArrowDown")
    page.keyboard.press("Shift+ArrowDown")
    page.keyboard.type(answer + "\n")
