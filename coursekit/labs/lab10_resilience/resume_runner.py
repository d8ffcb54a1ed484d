"""Run resumable training scripts for the resume checker, with recorders around them: one server imports torch once
and forks a child per run (``python resume_runner.py``; ``--run REQUEST`` for one run in this process), as every
served runner does (``kit/script_runner.py``, loaded by its path: this file imports nothing from coursekit).

What it records: the files ``torch.save`` wrote and ``torch.load`` read, and every rename (``os.replace``,
``os.rename``, and ``Path.replace``/``Path.rename``, which call them): whether the checkpoint was written to its
final name directly or renamed into place.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any

import torch


def new_record() -> dict[str, Any]:
    return {"saves": [], "loads": [], "renames": [], "cuda": False}


def _name(file: Any) -> str:
    """The path a torch.save/torch.load was given (a path, or an open file's name)."""
    return str(Path(os.fspath(file)).resolve()) if isinstance(file, (str, os.PathLike)) else str(
        getattr(file, "name", "<a file object>"))


def install(record: dict[str, Any]) -> None:
    """Wrappers that fill `record` while the script runs."""
    original_save, original_load = torch.save, torch.load
    original_replace, original_rename = os.replace, os.rename

    def recording_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        record["saves"].append(_name(f))
        return original_save(obj, f, *args, **kwargs)

    def recording_load(f: Any, *args: Any, **kwargs: Any) -> Any:
        record["loads"].append(_name(f))
        return original_load(f, *args, **kwargs)

    def recording(original: Any) -> Any:
        def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            record["renames"].append([_name(src), _name(dst)])
            return original(src, dst, *args, **kwargs)
        return rename

    torch.save, torch.load = recording_save, recording_load
    os.replace, os.rename = recording(original_replace), recording(original_rename)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the scripts' folders take its place in the children
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "kit" / "script_runner.py"))["main"](new_record, install)
