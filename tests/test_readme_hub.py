"""The README's hub walk-through and the hub tests do not drift apart: every command in a code block of the
README's section "Running a workshop on a JupyterHub" is run by the hub tests (tests/hub/*.py, written there as
the README writes it) or by CI's script that starts the hub (.ci/run). A command the README gains without a test,
or a test that stops running a command the README tells a newcomer to type, fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Running a workshop on a JupyterHub"
EXERCISED_BY = [*sorted((REPO / "tests" / "hub").glob("*.py")), REPO / ".ci" / "run"]
# what the walk-through must at least take a newcomer through, from install to the end of a race
MUST_COVER = ("bash slurm/hub.sh install", "bash slurm/hub.sh start", "coursekit instructor room",
              "coursekit instructor jobs", "coursekit instructor results", "coursekit instructor race verify",
              "coursekit instructor race clear", "coursekit instructor cancel --course")


def hub_section_commands(readme: str) -> list[str]:
    """The commands of the hub section's code blocks: one a line, its comment (`` # ...``) left out."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", section, flags=re.S | re.M):
        for line in block.splitlines():
            command = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
            if command:
                commands.append(command)
    return commands


def test_hub_section_commands_parse() -> None:
    sample = f"x\n{SECTION}\n\n```bash\nbash a.sh go   # say\n       # more\ncoursekit b --c\n```\n## next\n```\nno\n```"
    assert hub_section_commands(sample) == ["bash a.sh go", "coursekit b --c"]


def test_every_command_of_the_readmes_hub_section_is_run_by_the_hub_tests() -> None:
    commands = hub_section_commands((REPO / "README.md").read_text())
    assert all(any(command.startswith(want) for command in commands) for want in MUST_COVER), commands
    tests = "\n".join(path.read_text() for path in EXERCISED_BY)
    missing = [command for command in commands if command not in tests]
    assert not missing, (f"commands of the README's hub section that no hub test runs: {missing}; run them in "
                         f"tests/hub/ (as written in the README) or change the README")
