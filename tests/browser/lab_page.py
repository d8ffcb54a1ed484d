"""What the browser tests ask a JupyterLab page, as JavaScript run in it (``page.evaluate``)."""

import shutil
import subprocess
import time
from pathlib import Path

import pytest

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
# Run All stopped on an exception (an error output, the kernel idle): it will not go on
STOPPED_ON_ERROR = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (panel.sessionContext.session.kernel.status !== 'idle') return null;
    const cells = panel.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        const error = (cell.toJSON().outputs || []).find(output => output.output_type === 'error');
        if (error) return `cell ${i}: ${error.ename}: ${error.evalue}`;
    }
    return null;
}"""
# the first code cell Run All has not finished: its index, source and what it has shown so far
RUNNING_CELL = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code' || cell.executionCount) continue;
        const shown = (cell.toJSON().outputs || []).map(o => [].concat(o.text || (o.data && o.data['text/plain']) || '').join(''));
        return {index: i, source: cell.sharedModel.getSource(), outputs: shown.join('').slice(-2000)};
    }
    return null;
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


def _scheduler_state() -> str:
    """The local Slurm's queue and drained nodes (what a hung run waits on), or why they could not be read."""
    lines = []
    for command in (["squeue", "-a", "-o", "%i %j %u %T %M %R"], ["sinfo", "-R"], ["sinfo", "-N", "-o", "%N %T"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=20)
            lines.append(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.TimeoutExpired) as error:
            lines.append(f"$ {' '.join(command)}: {error}")
    return "\n".join(lines)


def run_all(page, timeout_s: float) -> None:  # noqa: ANN001 - playwright's Page
    """Run All in the open notebook and wait until every code cell ran. Fails at once when a cell raised (Run
    All stops there), and on timeout says which cell was still running, what it showed and what the
    scheduler holds: a hung run must explain itself in CI's log."""
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if page.evaluate(ALL_RUN):
            return
        error = page.evaluate(STOPPED_ON_ERROR)
        if error:
            pytest.fail(f"Run All stopped on an error, {error}")
        time.sleep(1)
    running = page.evaluate(RUNNING_CELL) or {}
    pytest.fail(f"Run All did not end in {timeout_s:.0f} s; still running cell {running.get('index')}:\n"
                f"{running.get('source', '')[:600]}\n--- shown so far:\n{running.get('outputs', '')}\n"
                f"--- scheduler:\n{_scheduler_state()}")


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
