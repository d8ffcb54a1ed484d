"""The package runs from its wheel, without the source tree: every module imports, every lab recording
and packaged script loads, the engine trains and `coursekit` submits a job through the local executor.

The wheel is installed into a folder of its own and run from a folder outside the checkout, so a path
into ``bench/`` or ``notebooks/`` (a source checkout) fails here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300

FROM_THE_WHEEL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    from pathlib import Path

    import coursekit
    installed = Path(sys.argv[1]).resolve()
    assert installed in Path(coursekit.__file__).resolve().parents, coursekit.__file__

    names = [m.name for m in pkgutil.walk_packages(coursekit.__path__, "coursekit.")
             if not m.name.rsplit(".", 1)[-1].startswith(("test_", "conftest", "__main__"))]
    for name in names:
        importlib.import_module(name)

    from coursekit.labs.kit import recorded
    for name in recorded.RECORDINGS:
        assert recorded.load_recording(name), name

    from coursekit.labs import lab_settings, LABS
    for lab in LABS:
        for profile in ("cpu", "gpu"):
            lab_settings(lab, profile)

    from coursekit.labs.lab06_data_parallel import ddp_check, horovod
    assert ddp_check.SOLUTION.is_file() and installed in ddp_check.SOLUTION.resolve().parents
    from coursekit.labs.kit import exercises  # every participant script ships: setup hands them out from here
    assert len(exercises.kit_scripts()) == 11, exercises.kit_scripts()
    assert all(installed in path.resolve().parents for path in exercises.kit_scripts().values())
    print(json.dumps({"modules": len(names)}))
""")


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout installed alone (no dependencies: they are this environment's)."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(work / "dist"), str(ROOT)], check=True, timeout=BUILD_TIMEOUT_S,
                   capture_output=True)
    (wheel,) = (work / "dist").glob("coursekit-*.whl")
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, timeout=BUILD_TIMEOUT_S, capture_output=True)
    return target


def _run(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(installed), "COURSEKIT_COURSE_DIR": str(cwd / "course")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


def test_every_module_recording_and_lab_setting_loads_from_the_wheel(installed_wheel: Path, tmp_path: Path) -> None:
    done = _run(installed_wheel, tmp_path, "-c", FROM_THE_WHEEL, str(installed_wheel))
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"modules"' in done.stdout


def test_a_job_runs_the_engine_from_the_wheel(installed_wheel: Path, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        from coursekit import submit_jobs
        (job,) = submit_jobs(["-m coursekit.train --model mlp --dataset generated --num-samples 256"
                              " --batch-size 32 --epochs 1 --image-size 8 --progress off"], n_gpu=1, name="wheel",
                             site="local")
        print(job.wait(timeout=240), job.folder)
        assert job.state == "COMPLETED", job.tail(20, stream="err")
        import coursekit, pathlib
        assert "site" in pathlib.Path(coursekit.__file__).parts
    """)
    done = _run(installed_wheel, tmp_path, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
