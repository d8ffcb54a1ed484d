"""A lab declared in one place: ``LAB = Lab(...)`` in its module (``labs/lab02_batch_size.py``) or folder
(``labs/lab05_data_loading/__init__.py``); every list of labs derives from these declarations.

``declared_labs()`` reads the declarations from the modules' text (``ast``), without running them: most lab
modules import torch, and ``import coursekit.labs`` should not. So a declaration's arguments are literals
(strings, numbers, tuples of strings), given by keyword; the module itself holds the same object as ``LAB``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, fields
from pathlib import Path

LABS_FOLDER = Path(__file__).resolve().parents[1]  # coursekit/labs
LAB_NAME = re.compile(r"lab(\d\d)_\w+")  # a lab is a numbered module or folder: lab02_batch_size
DECLARATION = "LAB"  # the module-level name of a lab's declaration
DECLARED = re.compile(rf"{DECLARATION}\s*=")  # its line, at module level (no indentation)
MAX_DECLARATION_LINES = 12


@dataclass(frozen=True)
class Lab:
    """One lab: its number, its module or folder, its notebook, what it needs and what it ships.

    - ``number``: "00" ... "10"; ``slug``: the module or folder in ``coursekit/labs/`` (``lab05_data_loading``);
    - ``title``: one line (``Data loading``), the notebook's first heading after the dash;
    - ``notebook``: the file in ``notebooks/`` (``05_data_loading.ipynb``); its source is ``source``;
    - ``gpus``: GPUs the notebook needs at once in the gpu profile (the module's ``GPUS``);
    - ``script_folders``: the participants' script folders it ships, ``coursekit/labs/<slug>/scripts/<folder>/``;
    - ``recordings``: the packaged GPU recordings (``coursekit/labs/recordings/<name>.json``) it reads;
    - ``exercises``: its code exercises' checkers, each ``<module>.<function>`` in the lab's folder
      (``"loader_check.check_loader_script"``): ``labs.<function>`` imports it when first used.
    """

    number: str
    slug: str
    title: str
    notebook: str
    gpus: int = 1
    script_folders: tuple[str, ...] = ()
    recordings: tuple[str, ...] = ()
    exercises: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d\d", self.number):
            raise ValueError(f"Lab number={self.number!r}: two digits, as '05'")
        if not re.fullmatch(rf"lab{self.number}_[a-z0-9_]+", self.slug):
            raise ValueError(f"Lab {self.number} slug={self.slug!r}: must start with 'lab{self.number}_' "
                             "(the module or folder name in coursekit/labs/)")
        if not re.fullmatch(rf"{self.number}_[a-z0-9_]+\.ipynb", self.notebook):
            raise ValueError(f"Lab {self.number} notebook={self.notebook!r}: must be '{self.number}_<name>.ipynb'")
        if not self.title or "\n" in self.title:
            raise ValueError(f"Lab {self.number} title={self.title!r}: one line, not empty")
        if not isinstance(self.gpus, int) or self.gpus < 1:
            raise ValueError(f"Lab {self.number} gpus={self.gpus!r}: a whole number of GPUs, at least 1")
        for name in ("script_folders", "recordings", "exercises"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"Lab {self.number} {name}={value!r}: a tuple of names")
        if bad := [e for e in self.exercises if not re.fullmatch(r"[a-z0-9_]+\.check_[a-z0-9_]+", e)]:
            raise ValueError(f"Lab {self.number} exercises={bad!r}: each '<module>.check_<name>', a checker "
                             "in the lab's folder, e.g. 'loader_check.check_loader_script'")

    @property
    def source(self) -> str:
        """The notebook's source in ``notebooks/src/`` (``nb05_data_loading.py``)."""
        return f"nb{self.notebook.removesuffix('.ipynb')}.py"

    @property
    def checkers(self) -> dict[str, str]:
        """Its exercises' checkers: ``labs`` name -> the module that defines it
        (``{"check_loader_script": "coursekit.labs.lab05_data_loading.loader_check"}``)."""
        return {e.rsplit(".", 1)[1]: f"{self.module}.{e.rsplit('.', 1)[0]}" for e in self.exercises}

    @property
    def module(self) -> str:
        """The lab's module (``coursekit.labs.lab05_data_loading``)."""
        return f"coursekit.labs.{self.slug}"


def lab_files(folder: Path = LABS_FOLDER) -> dict[str, Path]:
    """The file that holds each lab's declaration: slug -> ``<slug>.py`` or ``<slug>/__init__.py``."""
    found = {p.stem: p for p in folder.glob("lab[0-9][0-9]_*.py")}
    found |= {p.parent.name: p for p in folder.glob("lab[0-9][0-9]_*/__init__.py")}
    return {slug: found[slug] for slug in sorted(found) if LAB_NAME.fullmatch(slug)}


def read_declaration(path: Path) -> Lab:
    """The ``LAB = Lab(...)`` of the module at ``path``, read from its text (the module is not run)."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if DECLARED.match(line)]
    if len(starts) != 1:
        raise ValueError(f"{path}: declare the lab once, at module level: {DECLARATION} = Lab(number=..., ...)")
    call = _statement(lines, starts[0], path).value
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Lab" and not call.args):
        raise ValueError(f"{path}: {DECLARATION} must be Lab(...) called with keyword arguments only")
    known = {f.name for f in fields(Lab)}
    values: dict[str, object] = {}
    for keyword in call.keywords:
        if keyword.arg not in known:
            raise ValueError(f"{path}: Lab has no field {keyword.arg!r} (fields: {', '.join(sorted(known))})")
        try:
            values[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError):
            raise ValueError(f"{path}: Lab({keyword.arg}=...) must be a literal: "
                             "the declarations are read without importing the lab") from None
    return Lab(**values)  # type: ignore[arg-type]  # literals, checked by Lab.__post_init__


def _statement(lines: list[str], start: int, path: Path) -> ast.Assign:
    """The assignment that starts at ``lines[start]`` (parsed alone: the rest of the module is not read)."""
    for end in range(start + 1, min(start + MAX_DECLARATION_LINES, len(lines)) + 1):
        try:
            statement = ast.parse("\n".join(lines[start:end])).body
        except SyntaxError:
            continue
        if len(statement) == 1 and isinstance(statement[0], ast.Assign):
            return statement[0]
    raise ValueError(f"{path}, line {start + 1}: {DECLARATION} = Lab(...) is not one statement of at most "
                     f"{MAX_DECLARATION_LINES} lines")


def declared_labs(folder: Path = LABS_FOLDER) -> dict[str, Lab]:
    """Every lab declared in ``folder`` (``coursekit/labs``): number -> :class:`Lab`, in order."""
    labs: dict[str, Lab] = {}
    for slug, path in lab_files(folder).items():
        lab = read_declaration(path)
        if lab.slug != slug:
            raise ValueError(f"{path}: declares slug={lab.slug!r}, but the lab is {slug!r}")
        if lab.number in labs:
            raise ValueError(f"lab {lab.number} is declared twice: {labs[lab.number].slug} and {slug}")
        labs[lab.number] = lab
    return dict(sorted(labs.items()))
