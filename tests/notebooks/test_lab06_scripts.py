"""Lab 06's scripts exist twice: the participants' copies in the notebook folder (``notebooks/lab06_ddp/``, handed
out stripped by ``coursekit instructor setup``) and the package's (``coursekit/labs/lab06_data_parallel/scripts/``,
what ``check_ddp_script``'s tests and ``horovod_table`` read from a wheel). They must not drift apart."""

from pathlib import Path

from coursekit.labs.lab06_data_parallel import SCRIPTS

NOTEBOOK_COPIES = Path(__file__).resolve().parents[2] / "notebooks" / "lab06_ddp"


def test_the_notebook_folder_and_the_package_hold_the_same_scripts():
    names = sorted(p.name for p in NOTEBOOK_COPIES.glob("*.py"))
    assert names == ["show_ranks.py", "train_ddp.py", "train_serial.py"]
    assert sorted(p.name for p in SCRIPTS.glob("*.py")) == names
    for name in names:
        assert (NOTEBOOK_COPIES / name).read_text() == (SCRIPTS / name).read_text(), (
            f"notebooks/lab06_ddp/{name} differs from its packaged copy: cp notebooks/lab06_ddp/{name} {SCRIPTS}/")


def test_the_lab_settings_name_the_notebook_copies():
    from coursekit.labs import lab_settings

    for script in lab_settings("06", "cpu").scripts.values():
        assert (NOTEBOOK_COPIES.parent / script).is_file(), script
