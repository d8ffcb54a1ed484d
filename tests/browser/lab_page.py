"""What the browser tests ask a JupyterLab page, as JavaScript run in it (``page.evaluate``)."""

import shutil
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
