"""``coursekit doctor`` and the labs agree on where each data set comes from (``labs.kit.datasets.resolve``):
in each case (the course's data folder holds it, only Debian's system copy does, nothing does, a copy is
incomplete) the doctor's line names what lab 09's settings train on. The files are empty stand-ins: which
copy is chosen depends on which files are there, and no data is read here."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit import cli
from coursekit.labs import lab09_race
from coursekit.labs.kit import datasets
from coursekit.train.data import fashion_mnist

LABELS = datasets.WANTED  # the doctor's line per data set the labs ask for


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A course whose data folder is empty, on a machine whose system copy is ``tmp_path/system`` (empty)."""
    folder = tmp_path / "course"
    folder.mkdir()
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(folder))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    monkeypatch.delenv("COURSEKIT_DATA_DIR", raising=False)
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "system")
    return folder


def put_fashion(folder: Path, files: int = len(fashion_mnist.FILES)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in list(fashion_mnist.FILES)[:files]:
        (folder / f"{name}.gz").write_bytes(b"")
    return folder


def doctor_lines(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The doctor's line (with its fix, if any) for each data set the labs ask for."""
    assert cli.main(["doctor", "--site", "local"]) == 0  # data never fails the doctor
    lines = capsys.readouterr().out.splitlines()
    found = {}
    for wanted, label in LABELS.items():
        index = next(i for i, line in enumerate(lines) if f" {label} -> " in line)
        fix = lines[index + 1] if index + 1 < len(lines) and lines[index + 1].startswith("    fix:") else ""
        found[wanted] = lines[index] + "\n" + fix
    return found


def labs_train_on() -> dict[str, object]:
    """What lab 09 trains on: its gpu baseline asks for CIFAR-10, its cpu race for Fashion-MNIST."""
    return {datasets.CIFAR10: lab09_race.settings("gpu")["baseline"],
            datasets.FASHION_MNIST: lab09_race.settings("cpu")["baseline"]}


def assert_agree(line: str, config: object) -> None:
    """The doctor's line says what ``config`` (a lab's) trains on, and warns only about the stand-in."""
    if config.dataset == "generated":
        assert line.startswith("!") and "-> the generated stand-in: accuracy claims are smoke tests only" in line
        return
    name = {"cifar10": "CIFAR-10", "fashion-mnist": "Fashion-MNIST"}[config.dataset]
    folder = Path(config.data_dir) / (datasets.CIFAR10_FOLDER if config.dataset == "cifar10" else "")
    assert f"-> {name}: " in line and f" {folder} (real data)" in line, (line, config)


def test_course_folder_first(course: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    put_fashion(tmp_path / "system")
    staged = put_fashion(course / "data" / fashion_mnist.FOLDER)
    lines, configs = doctor_lines(capsys), labs_train_on()
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])
        assert lines[wanted].startswith("✓") and f"Fashion-MNIST: the course's data folder {staged} " in lines[wanted]
    assert configs[datasets.FASHION_MNIST].data_dir == str(staged)
    batches = course / "data" / datasets.CIFAR10_FOLDER
    batches.mkdir()
    for name in ("data_batch_1", "test_batch"):
        (batches / name).write_bytes(b"")
    lines, configs = doctor_lines(capsys), labs_train_on()
    assert configs[datasets.CIFAR10].dataset == "cifar10" and "-> CIFAR-10: the course's data folder" in \
        lines[datasets.CIFAR10]
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])


def test_only_the_system_copy(course: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: the data folder is empty, lab 09 reads Debian's Fashion-MNIST; the doctor says that, no warning."""
    system = put_fashion(tmp_path / "system")
    lines, configs = doctor_lines(capsys), labs_train_on()
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])
        assert lines[wanted].startswith("✓") and f"Fashion-MNIST: Debian's system copy {system} (real data)" in \
            lines[wanted] and "fix:" not in lines[wanted]
    assert configs[datasets.FASHION_MNIST].data_dir == str(system)
    assert configs[datasets.FASHION_MNIST].dataset == configs[datasets.CIFAR10].dataset == "fashion-mnist"


def test_nothing_anywhere(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, configs = doctor_lines(capsys), labs_train_on()
    for wanted in LABELS:
        assert configs[wanted].dataset == "generated"
        assert_agree(lines[wanted], configs[wanted])
        assert f"fix: coursekit instructor data fashion-mnist --dir {course / 'data'}" in lines[wanted]
    notice = lab09_race.settings("cpu")["dataset_notice"]
    assert notice.startswith(datasets.STANDIN_MARK) and str(course / "data") in notice


def test_an_incomplete_copy_is_the_one_warning(course: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """3 of 4 files in the course's folder: the labs pass over it to the system copy; the doctor names both."""
    system = put_fashion(tmp_path / "system")
    partial = put_fashion(course / "data" / fashion_mnist.FOLDER, files=3)
    lines, configs = doctor_lines(capsys), labs_train_on()
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])
        assert configs[wanted].data_dir == str(system)
        assert lines[wanted].startswith("!") and f"Fashion-MNIST in {partial} is incomplete" in lines[wanted]
        assert f"fix: coursekit instructor data fashion-mnist --dir {course / 'data'}" in lines[wanted]


def test_the_data_folder_setting_moves_both(course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """coursekit.toml's data_dir, then $COURSEKIT_DATA_DIR: the doctor and the labs look in the same folder."""
    shared = put_fashion(tmp_path / "shared" / fashion_mnist.FOLDER)
    (course / "coursekit.toml").write_text(f'data_dir = "{shared.parent}"\n')
    lines, configs = doctor_lines(capsys), labs_train_on()
    assert configs[datasets.FASHION_MNIST].data_dir == str(shared)
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])
    monkeypatch.setenv("COURSEKIT_DATA_DIR", str(tmp_path / "elsewhere"))
    lines, configs = doctor_lines(capsys), labs_train_on()
    assert configs[datasets.FASHION_MNIST].dataset == "generated"
    for wanted in LABELS:
        assert_agree(lines[wanted], configs[wanted])
