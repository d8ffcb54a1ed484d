"""Every list of labs the repository keeps agrees with the labs' declarations (``LAB = Lab(...)``, labs/kit/lab.py):
the import rule between labs (checked on grimp's import graph, from the declarations), the notebooks and their sources, the script folders, the recordings and the
``labs.check_*`` exercises. Each check is a function that lists what disagrees; each is shown to report a planted
wrong declaration, then finds nothing in the repository."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from coursekit import labs
from coursekit.labs.kit.lab import LABS_FOLDER, Lab, declared_labs, read_declaration

ROOT = LABS_FOLDER.parents[1]
NOTEBOOKS = ROOT / "notebooks"
RECORDINGS = LABS_FOLDER / "recordings"
LOADS_RECORDING = re.compile(r"""load_recording\(\s*["'](\w+)["']""")
DECLARED = declared_labs()


# ----------------------------------------------------------------- the checks: each lists what disagrees


def lab_import_problems(graph: Any, declared: Iterable[Lab], kit: str = "coursekit.labs.kit") -> list[str]:
    """No declared lab imports another, directly or through any chain of modules (its tests included), and the
    kit imports no lab: a lab is its notebook and its own module or folder, above the shared kit. ``graph``:
    grimp's import graph of the package (what import-linter reads), so that the rule needs no list of labs."""
    packages = [f"coursekit.labs.{lab.slug}" for lab in declared]
    problems = []
    for importer in [*packages, kit]:
        for imported in packages:
            if importer != imported and graph.chain_exists(importer=importer, imported=imported, as_packages=True):
                chain = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
                shown = min((" -> ".join(c) for c in chain), default="?")
                problems.append(f"{importer} imports {imported}: {shown}")
    return problems


def _one_lab_each(kind: str, on_disk: Iterable[str], declared: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """``declared``: (lab number, the names it declares of ``kind``) per lab. Each name on disk is declared by
    exactly one lab; each declared name is on disk."""
    on_disk, declared = set(on_disk), [(number, list(names)) for number, names in declared]
    owners = Counter(name for _, names in declared for name in names)
    problems = [f"{kind} {name} is declared by no lab" for name in sorted(on_disk - set(owners))]
    problems += [f"{kind} {name} is declared by {count} labs" for name, count in sorted(owners.items()) if count > 1]
    problems += [f"lab {number} declares {kind} {name}, which does not exist" for number, names in declared
                 for name in names if name not in on_disk]
    return problems


def notebook_problems(declared: Iterable[Lab], notebooks: Iterable[str], sources: Iterable[str]) -> list[str]:
    """Every ``notebooks/*.ipynb`` and ``notebooks/src/*.py`` belongs to exactly one declared lab, and back."""
    declared = list(declared)
    return (_one_lab_each("notebook", notebooks, [(lab.number, [lab.notebook]) for lab in declared])
            + _one_lab_each("notebook source", sources, [(lab.number, [lab.source]) for lab in declared]))


def script_folder_problems(declared: Iterable[Lab], labs_folder: Path) -> list[str]:
    """Every ``<lab>/scripts/<folder>/`` in ``labs_folder`` is declared by its lab, and back."""
    on_disk = [f"{p.parents[1].name}/{p.name}" for p in labs_folder.glob("*/scripts/*")
               if p.is_dir() and not p.name.startswith(("_", "."))]
    return _one_lab_each("script folder", on_disk,
                         [(lab.number, [f"{lab.slug}/{folder}" for folder in lab.script_folders]) for lab in declared])


def recording_problems(declared: Iterable[Lab], packaged: Iterable[str], loaded: Mapping[str, set[str]]) -> list[str]:
    """Every recording a lab declares is packaged, every packaged one is some lab's, and a lab's notebook loads
    only recordings its lab declares (``loaded``: lab number -> the names its notebook source loads)."""
    declared, packaged = list(declared), set(packaged)
    problems = [f"lab {lab.number} declares recording {name}, which is not packaged" for lab in declared
                for name in lab.recordings if name not in packaged]
    problems += [f"recording {name} is declared by no lab" for name in
                 sorted(packaged - {name for lab in declared for name in lab.recordings})]
    problems += [f"notebook {lab.notebook} loads recording {name}, which lab {lab.number} does not declare"
                 for lab in declared for name in sorted(loaded.get(lab.number, set()) - set(lab.recordings))]
    return problems


def exercise_problems(declared: Iterable[Lab], labs_folder: Path = LABS_FOLDER) -> list[str]:
    """Each declared exercise's checker is defined where its lab says (``<module>.check_*`` in the lab's folder),
    and no two labs declare the same ``labs.check_*`` name."""
    declared = list(declared)
    problems = [f"exercise {name} is declared by {count} labs" for name, count in
                sorted(Counter(n for lab in declared for n in lab.checkers).items()) if count > 1]
    for lab in declared:
        for name, module in lab.checkers.items():
            path = labs_folder / lab.slug / f"{module.rsplit('.', 1)[1]}.py"
            if not path.is_file():
                problems.append(f"lab {lab.number} declares exercise {name} in {path.name}, which does not exist")
            elif not re.search(rf"^def {name}\(", path.read_text(), re.MULTILINE):
                problems.append(f"lab {lab.number} declares exercise {name} in {path.name}, which does not define it")
    return problems


def title_problems(declared: Iterable[Lab], sources: Path) -> list[str]:
    """A lab's title is its notebook's first heading (``# # Lab 05 — <title>``)."""
    problems = []
    for lab in declared:
        path = sources / lab.source
        heading = next((line for line in path.read_text().splitlines() if line.startswith("# # ")), "") \
            if path.exists() else ""
        if not heading.endswith(f"— {lab.title}"):
            problems.append(f"lab {lab.number}'s title {lab.title!r} is not its notebook's heading {heading!r}")
    return problems


# ----------------------------------------------------------------- the repository's lists agree


def _loaded() -> dict[str, set[str]]:
    return {lab.number: set(LOADS_RECORDING.findall((NOTEBOOKS / "src" / lab.source).read_text()))
            for lab in DECLARED.values()}


def test_eleven_labs_are_declared_in_order():
    assert list(DECLARED) == [f"{n:02d}" for n in range(11)]
    assert dict(labs.lab_declarations()) == DECLARED and list(labs.LABS) == list(DECLARED)


def test_no_lab_imports_another_and_the_kit_imports_none():
    import grimp

    assert lab_import_problems(grimp.build_graph("coursekit"), DECLARED.values()) == []


def test_every_notebook_and_source_belongs_to_one_lab():
    assert notebook_problems(DECLARED.values(), [p.name for p in NOTEBOOKS.glob("*.ipynb")],
                             [p.name for p in (NOTEBOOKS / "src").glob("*.py")]) == []


def test_every_script_folder_is_declared():
    assert script_folder_problems(DECLARED.values(), LABS_FOLDER) == []


def test_every_recording_is_declared_and_packaged():
    from coursekit.labs.kit.recorded import RECORDINGS as KNOWN

    packaged = [p.stem for p in RECORDINGS.glob("*.json")]
    assert recording_problems(DECLARED.values(), packaged, _loaded()) == []
    assert sorted(KNOWN) == sorted(packaged), "kit/recorded.py's RECORDINGS are the packaged recordings"


def test_every_exercise_is_defined_where_its_lab_declares_it():
    assert exercise_problems(DECLARED.values()) == []
    assert {"check_ddp_script", "check_resume_script"} <= set(labs.__all__) and "check_claim" in labs.__all__
    assert labs.check_loader_script.__module__ == "coursekit.labs.lab05_data_loading.loader_check"


def test_every_title_is_its_notebooks_heading():
    assert title_problems(DECLARED.values(), NOTEBOOKS / "src") == []


# ----------------------------------------------------------------- planted wrong declarations are reported


def _planted(number: str, **changes: object) -> list[Lab]:
    return [dataclasses.replace(lab, **changes) if lab.number == number else lab for lab in DECLARED.values()]


def test_a_lab_importing_another_is_reported_with_its_chain():
    import grimp

    graph = grimp.ImportGraph()
    for module in ("coursekit.labs.kit", "coursekit.labs.kit.plots", "coursekit.instructor",
                   *(f"coursekit.labs.{lab.slug}" for lab in DECLARED.values()),
                   "coursekit.labs.lab10_resilience.test_clinic", "coursekit.labs.lab06_data_parallel.team"):
        graph.add_module(module)
    graph.add_import(importer="coursekit.labs.lab02_batch_size", imported="coursekit.labs.kit.plots")
    assert lab_import_problems(graph, DECLARED.values()) == []  # a lab on the kit: allowed
    graph.add_import(importer="coursekit.labs.lab10_resilience.test_clinic", imported="coursekit.instructor")
    graph.add_import(importer="coursekit.instructor", imported="coursekit.labs.lab06_data_parallel.team")
    graph.add_import(importer="coursekit.labs.kit.plots", imported="coursekit.labs.lab09_race")
    assert lab_import_problems(graph, DECLARED.values()) == [
        "coursekit.labs.lab02_batch_size imports coursekit.labs.lab09_race: coursekit.labs.lab02_batch_size -> "
        "coursekit.labs.kit.plots -> coursekit.labs.lab09_race",
        "coursekit.labs.lab10_resilience imports coursekit.labs.lab06_data_parallel: "
        "coursekit.labs.lab10_resilience.test_clinic -> coursekit.instructor -> coursekit.labs.lab06_data_parallel.team",
        "coursekit.labs.kit imports coursekit.labs.lab09_race: coursekit.labs.kit.plots -> coursekit.labs.lab09_race"]


def test_an_undeclared_or_doubly_declared_notebook_is_reported():
    notebooks = [lab.notebook for lab in DECLARED.values()]
    sources = [lab.source for lab in DECLARED.values()]
    assert notebook_problems(DECLARED.values(), [*notebooks, "11_new.ipynb"], sources) == [
        "notebook 11_new.ipynb is declared by no lab"]
    assert notebook_problems(_planted("09", notebook="09_racing.ipynb"), notebooks, sources) == [
        "notebook 09_race.ipynb is declared by no lab", "lab 09 declares notebook 09_racing.ipynb, which does not exist",
        "notebook source nb09_race.py is declared by no lab",
        "lab 09 declares notebook source nb09_racing.py, which does not exist"]
    assert notebook_problems([*DECLARED.values(), DECLARED["09"]], notebooks, sources) == [
        "notebook 09_race.ipynb is declared by 2 labs", "notebook source nb09_race.py is declared by 2 labs"]


def test_an_undeclared_or_missing_script_folder_is_reported(tmp_path):
    assert script_folder_problems(_planted("05", script_folders=("lab05_data_loading", "lab05_other")), LABS_FOLDER) == [
        "lab 05 declares script folder lab05_data_loading/lab05_other, which does not exist"]
    assert script_folder_problems(_planted("08", script_folders=()), LABS_FOLDER) == [
        "script folder lab08_model_parallel/lab08_model_parallel is declared by no lab"]
    (tmp_path / "lab00_cluster" / "scripts" / "lab00_new").mkdir(parents=True)
    assert script_folder_problems(DECLARED.values(), tmp_path)[0] == (
        "script folder lab00_cluster/lab00_new is declared by no lab")


def test_a_missing_or_undeclared_recording_is_reported():
    packaged = ["ddp_gpu", "gpu_ladder", "large_batch_gpu", "model_parallel_gpu"]
    assert recording_problems(_planted("09", recordings=("race_gpu",)), packaged, {}) == [
        "lab 09 declares recording race_gpu, which is not packaged"]
    assert recording_problems(_planted("06", recordings=()), packaged, {"06": {"ddp_gpu"}}) == [
        "recording ddp_gpu is declared by no lab",
        "notebook 06_data_parallel.ipynb loads recording ddp_gpu, which lab 06 does not declare"]


def test_an_exercise_declared_in_the_wrong_module_or_twice_is_reported():
    assert exercise_problems(_planted("04", exercises=("loader_check.check_amp_script",))) == [
        "lab 04 declares exercise check_amp_script in loader_check.py, which does not exist"]
    assert exercise_problems(_planted("04", exercises=("amp_check.check_loader_script",))) == [
        "exercise check_loader_script is declared by 2 labs",
        "lab 04 declares exercise check_loader_script in amp_check.py, which does not define it"]
    assert exercise_problems(_planted("05", exercises=("loader_check.check_amp_script",)))[0] == (
        "exercise check_amp_script is declared by 2 labs")


def test_a_title_that_is_not_the_heading_is_reported():
    assert title_problems(_planted("02", title="Batch sizes"), NOTEBOOKS / "src") == [
        "lab 02's title 'Batch sizes' is not its notebook's heading '# # Lab 02 — Batch size'"]


# ----------------------------------------------------------------- a declaration is checked where it is read


@pytest.mark.parametrize(("changes", "error"), [
    ({"number": "5"}, "number='5': two digits"),
    ({"slug": "lab06_data_loading"}, "slug='lab06_data_loading': must start with 'lab05_'"),
    ({"notebook": "5_data.ipynb"}, "must be '05_<name>.ipynb'"),
    ({"gpus": 0}, "gpus=0: a whole number of GPUs"),
    ({"script_folders": "lab05_data_loading"}, "script_folders='lab05_data_loading': a tuple of names"),
    ({"exercises": ("check_loader_script",)}, "each '<module>.check_<name>'"),
])
def test_a_wrong_declaration_says_what_is_wrong(changes, error):
    with pytest.raises(ValueError, match=error):
        dataclasses.replace(DECLARED["05"], **changes)


def test_a_declaration_is_read_from_the_text_alone(tmp_path):
    lab = tmp_path / "lab11_new.py"
    lab.write_text('import torch\n\nLAB = Lab(number="11", slug="lab11_new", title="New",\n'
                   '          notebook="11_new.ipynb", gpus=2)\nraise SystemExit("not run")\n')
    assert declared_labs(tmp_path) == {"11": Lab("11", "lab11_new", "New", "11_new.ipynb", gpus=2)}
    lab.write_text('GPUS = 2\nLAB = Lab(number="11", slug="lab11_new", title="New", notebook="11_new.ipynb", '
                   'gpus=GPUS)\n')
    with pytest.raises(ValueError, match="Lab\\(gpus=...\\) must be a literal"):
        read_declaration(lab)
    lab.write_text('LAB = Lab(number="11", slug="lab11_new", title="New", notebook="11_new.ipynb", colour=1)\n')
    with pytest.raises(ValueError, match="Lab has no field 'colour'"):
        read_declaration(lab)
    lab.write_text("GPUS = 1\n")
    with pytest.raises(ValueError, match="declare the lab once"):
        read_declaration(lab)
    lab.write_text('LAB = Lab(number="12", slug="lab12_other", title="Other", notebook="12_other.ipynb")\n')
    with pytest.raises(ValueError, match="declares slug='lab12_other', but the lab is 'lab11_new'"):
        declared_labs(tmp_path)
