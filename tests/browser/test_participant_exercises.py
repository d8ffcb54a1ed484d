"""Labs 04, 05 and 10 as a participant meets them, on the local site: the stripped copy (no solutions, no outputs)
opened in JupyterLab, the lab's script completed in JupyterLab's editor, spelled differently from the
solution (what a participant who reads the TODOs may write), the notebook's exercises answered by typing,
Run All.

Checks: the copy and its script start without the solution; Run All goes to the end with no error output;
the lab's checker passes the participant's script; the exit ticket is graded; no claim fails. This is these
labs' run in CI: it replaced the nbval run of their solved notebooks (notebooks/conftest.py, IN_THE_BROWSER),
which ran the same cells but not the participant's path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from lab_page import (
    CELL_TEXTS,
    ERROR_OUTPUTS,
    MS,
    NOTEBOOK_READY,
    NOTEBOOKS,
    OUTPUT_COUNT,
    PLACEHOLDER_CELLS,
    SOURCE_OF,
    completed_script,
    paste_script,
    run_all,
    type_over_placeholder,
)

from coursekit.labs.kit import exercises

OPEN_TIMEOUT_S = 45
RUN_ALL_TIMEOUT_S = 420  # the cpu profile's jobs and the checker's runs, on a busy 2-core machine


@dataclass(frozen=True)
class Exercise:
    """One lab's participant path: its notebook, the script the participant completes, what they write."""

    notebook: str
    script: str
    solution_mark: str  # a line of the solution that the stripped script must not hold
    script_answers: tuple[str, ...]  # one per TODO block of the script, in order
    answers: dict[str, str]  # a line of an exercise cell's source that tells it -> the answer typed there
    passed: str  # what the checker prints when every check passes


AMP = Exercise(
    notebook="04_mixed_precision.ipynb", script="lab04_mixed_precision/train_amp.py", solution_mark="scaler.scale(loss)",
    script_answers=(
        'scaler = torch.amp.GradScaler(device.type, enabled=(args.dtype == "float16"))',
        """with torch.autocast(device_type=device.type, dtype=dtype):
    logits = model(features[batch])
    loss = nn.functional.cross_entropy(logits, labels[batch])""",
        """scaled = scaler.scale(loss)
scaled.backward()
scaler.step(optimizer)
scaler.update()""",
        "scale = scaler.get_scale() if scaler.is_enabled() else 1.0",
    ),
    answers={"labs.check_amp_script(": 'my_script = "lab04_mixed_precision/train_amp.py"',
             "labs.predict(": "my_guess = 2",
             "share_of_peak.items()": 'share_of_peak = {row["rung"]: row["tflops"] / peaks[row["rung"].split("+")[0]] '
                                      'for row in (ladder or []) if peaks[row["rung"].split("+")[0]]}',
             "ticket.grade(": 'answers = {"lowest_loss": min(losses, key=losses.get), "skipped_steps": 0}'},
    passed="all checks pass")
LOADER = Exercise(
    notebook="05_data_loading.ipynb", script="lab05_data_loading/train_fed.py", solution_mark="num_workers=4",
    script_answers=(
        """loader = DataLoader(dataset, batch_size, shuffle=True, drop_last=True,
                    num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=4)
return loader""",
        """images = images.to(device, non_blocking=True)
labels = labels.to(device, non_blocking=True)
return images, labels""",
    ),
    answers={"labs.predict(": "my_guess = 50",
             "labs.check_loader_script(": 'my_script = "lab05_data_loading/train_fed.py"',
             "from_trace:": 'from_trace = trace["dataloader_share"]\nfrom_metrics = table[0]["data_fraction"]',
             "ticket.grade(": 'answers = {"least_waiting": least["loader"], "profiled_steps": trace["steps"]}'},
    passed="all checks pass")


RESUME = Exercise(
    notebook="10_resilience.ipynb", script="lab10_resilience/train_resume.py",
    solution_mark='scheduler.load_state_dict(state["scheduler"])',
    script_answers=(
        """checkpoint = dict(model=model.state_dict(), optimizer=optimizer.state_dict(),
                  scheduler=scheduler.state_dict(), rng=rng_states(), epoch=progress["epoch"],
                  position=progress["position"], step=progress["step"])
partial = path.with_name(path.name + ".partial")
torch.save(checkpoint, partial)
os.replace(partial, path)""",
        """saved = torch.load(path, map_location="cpu", weights_only=True)
model.load_state_dict(saved["model"])
optimizer.load_state_dict(saved["optimizer"])
scheduler.load_state_dict(saved["scheduler"])
set_rng_states(saved["rng"])
return {key: saved[key] for key in ("epoch", "position", "step")}""",
    ),
    answers={"labs.check_resume_script(": 'my_script = "lab10_resilience/train_resume.py"',
             "clinic.diagnose(": "my_diagnoses = clinic.solution(pseudo)",
             "ticket.grade(": 'answers = {"starts": comparison.starts, "steps_redone": 3940 - 3750}'},
    passed="all checks pass")


@pytest.mark.parametrize("exercise", [AMP, LOADER, RESUME], ids=["lab04", "lab05", "lab10"])
def test_participant_copy_runs_with_a_script_of_its_own(page, jupyter_lab, exercise: Exercise):
    exercises.strip_folder(NOTEBOOKS, jupyter_lab.root)
    path = jupyter_lab.root / exercise.script
    stripped = path.read_text()
    assert exercises.SCRIPT_PLACEHOLDER_RAISE in stripped and exercise.solution_mark not in stripped, \
        "the participant's script holds the solution"
    mine = paste_script(page, jupyter_lab.notebook_url(exercise.script), path,
                        completed_script(stripped, exercise.script_answers))

    page.goto(jupyter_lab.notebook_url(exercise.notebook))
    page.wait_for_function(NOTEBOOK_READY, timeout=OPEN_TIMEOUT_S * MS)
    assert page.evaluate(OUTPUT_COUNT) == 0, "the participant copy shows outputs of the solved notebook"
    cells = page.evaluate(PLACEHOLDER_CELLS, exercises.PLACEHOLDER_RAISE)
    assert len(cells) == len(exercise.answers), f"exercise cells: {cells}"
    for index in cells:
        source = page.evaluate(SOURCE_OF, index)
        answer = next(answer for marker, answer in exercise.answers.items() if marker in source)
        type_over_placeholder(page, index, source, answer)

    run_all(page, RUN_ALL_TIMEOUT_S)
    errors = page.evaluate(ERROR_OUTPUTS)
    assert errors == [], f"error or stderr outputs: {errors}"
    text = "\n".join(page.evaluate(CELL_TEXTS))
    assert f"{exercise.script}" in text and exercise.passed in text, text[-3000:]
    assert path.read_text() == mine  # the check ran the participant's own script, untouched
    score = re.search(r"Score: (\d+)/(\d+)\.", text)  # two questions answered, both right; the others not
    assert score and score[1] == "2" and int(score[2]) > 2, text[-3000:]
    assert "CLAIM HOLDS" in text and "CLAIM DOES NOT HOLD" not in text
