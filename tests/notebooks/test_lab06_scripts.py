"""The scripts participants complete exist twice: their copies in the notebook folder (``notebooks/lab06_ddp/``,
``lab04_amp/``, ``lab07_rules/``, ``lab08_fsdp/``, ``lab08_pipeline/``, handed out stripped by ``coursekit
instructor setup``) and the package's (each lab's ``scripts/``, what its checker's tests and ``horovod_table`` read
from a wheel). They must not drift apart."""

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK_COPIES = NOTEBOOKS / "lab06_ddp"
# lab package -> (its folder of participant copies, the scripts it holds)
SCRIPT_FOLDERS = {
    "lab04_mixed_precision": ("lab04_amp", ["train_amp.py", "train_fp32.py"]),
    "lab05_data_loading": ("lab05_loader", ["train_fed.py", "train_starving.py"]),
    "lab06_data_parallel": ("lab06_ddp", ["show_ranks.py", "train_ddp.py", "train_serial.py"]),
    "lab07_large_batch": ("lab07_rules", ["my_rules.py"]),
    "lab08_model_parallel": ("lab08_fsdp", ["train_fsdp.py"]),
    "lab08_model_parallel/pipeline": ("lab08_pipeline", ["train_pipeline.py"]),  # a lab's second folder: lab/name
}


@pytest.mark.parametrize("lab", sorted(SCRIPT_FOLDERS))
def test_the_notebook_folder_and_the_package_hold_the_same_scripts(lab: str) -> None:
    import importlib

    folder, expected = SCRIPT_FOLDERS[lab]
    package = lab.split("/")[0]
    packaged = Path(importlib.import_module(f"coursekit.labs.{package}").__file__).parent / "scripts"
    copies = NOTEBOOKS / folder
    names = sorted(p.name for p in copies.glob("*.py"))
    assert names == expected
    assert sorted(p.name for p in packaged.glob("*.py")) == sorted(  # the package holds every folder's scripts
        name for key, (_, scripts) in SCRIPT_FOLDERS.items() if key.split("/")[0] == package for name in scripts)
    for name in names:
        assert (copies / name).read_text() == (packaged / name).read_text(), (
            f"notebooks/{folder}/{name} differs from its packaged copy: cp notebooks/{folder}/{name} {packaged}/")


def test_the_lab_settings_name_the_notebook_copies():
    from coursekit.labs import lab_settings

    for script in lab_settings("06", "cpu").scripts.values():
        assert (NOTEBOOK_COPIES.parent / script).is_file(), script
