"""The scripts participants complete have one copy, the package's (``labs/<lab>/scripts/<folder>/``): their
copies (``coursekit instructor setup``, ``exercises.strip_folder``) and the solved notebooks' links
(``exercises.link_kit_scripts``) are made from it, under the paths participants always had."""

from pathlib import Path

from coursekit.labs import lab_declarations
from coursekit.labs.kit import exercises

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# what a participant's copy holds beside the notebooks: these paths are in the notebooks' text and the checkers'
# messages, and participants know them
PARTICIPANT_SCRIPTS = [
    "lab04_mixed_precision/train_amp.py", "lab04_mixed_precision/train_fp32.py",
    "lab05_data_loading/train_fed.py", "lab05_data_loading/train_starving.py",
    "lab06_data_parallel/show_ranks.py", "lab06_data_parallel/train_ddp.py", "lab06_data_parallel/train_serial.py",
    "lab07_large_batch/my_rules.py",
    "lab08_model_parallel/train_fsdp.py", "lab08_model_parallel/train_pipeline.py",
    "lab10_resilience/train_resume.py",
]


def test_participants_get_the_scripts_they_always_had_and_nothing_else(tmp_path):
    assert list(exercises.kit_scripts()) == PARTICIPANT_SCRIPTS
    exercises.strip_folder(NOTEBOOKS, tmp_path)
    handed = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py"))
    assert handed == PARTICIPANT_SCRIPTS
    assert not any(p.is_symlink() for p in tmp_path.rglob("*"))


def test_the_scripts_are_in_the_folders_the_labs_declare():
    declared = sorted(folder for lab in lab_declarations().values() for folder in lab.script_folders)
    assert sorted({name.split("/")[0] for name in PARTICIPANT_SCRIPTS}) == declared


def test_the_scripts_are_not_kept_twice():
    """Beside the notebooks, a script is a link to the package's file (git-ignored), never a second copy."""
    copies = [p for p in NOTEBOOKS.glob("*/**/*.py") if p.parent.name != "src" and not p.is_symlink()
              and exercises.PARTICIPANT_SUBDIR not in p.relative_to(NOTEBOOKS).parts]
    assert not copies, f"scripts in the notebook folder that are not links to the package's: {copies}"


def test_the_lab_settings_name_the_participant_scripts():
    from coursekit.labs import lab_settings
    from coursekit.labs.lab04_mixed_precision import SCRIPT_PATHS as AMP
    from coursekit.labs.lab05_data_loading import SCRIPT_PATHS as LOADER

    named = [*lab_settings("06", "cpu").scripts.values(), *AMP.values(), *LOADER.values()]
    assert set(named) <= set(PARTICIPANT_SCRIPTS), named
