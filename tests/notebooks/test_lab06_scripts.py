"""The scripts participants complete exist twice: their copies in the notebook folder (``notebooks/lab06_ddp/``,
``lab04_amp/``, ``lab07_rules/``, ``lab08_fsdp/``, handed out stripped by ``coursekit instructor setup``) and the
package's (each lab's ``scripts/``, what its checker's tests and ``horovod_table`` read from a wheel). They must
not drift apart."""

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK_COPIES = NOTEBOOKS / "lab06_ddp"
# lab package -> (its folder of participant copies, the scripts it holds)
SCRIPT_FOLDERS = {
    "lab04_mixed_precision": ("lab04_amp", ["train_amp.py", "train_fp32.py"]),
    "lab06_data_parallel": ("lab06_ddp", ["show_ranks.py", "train_ddp.py", "train_serial.py"]),
    "lab07_large_batch": ("lab07_rules", ["my_rules.py"]),
    "lab08_model_parallel": ("lab08_fsdp", ["train_fsdp.py"]),
}


@pytest.mark.parametrize("lab", sorted(SCRIPT_FOLDERS))
def test_the_notebook_folder_and_the_package_hold_the_same_scripts(lab: str) -> None:
    import importlib

    folder, expected = SCRIPT_FOLDERS[lab]
    packaged = Path(importlib.import_module(f"coursekit.labs.{lab}").__file__).parent / "scripts"
    copies = NOTEBOOKS / folder
    names = sorted(p.name for p in copies.glob("*.py"))
    assert names == expected
    assert sorted(p.name for p in packaged.glob("*.py")) == names
    for name in names:
        assert (copies / name).read_text() == (packaged / name).read_text(), (
            f"notebooks/{folder}/{name} differs from its packaged copy: cp notebooks/{folder}/{name} {packaged}/")


def test_the_lab_settings_name_the_notebook_copies():
    from coursekit.labs import lab_settings

    for script in lab_settings("06", "cpu").scripts.values():
        assert (NOTEBOOK_COPIES.parent / script).is_file(), script
