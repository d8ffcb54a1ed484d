"""Make a copied Python prefix runnable by other users: ``python relocate_python.py OLD NEW [FINAL]``.

pyenv builds Python with a shared libpython and the absolute RUNPATH ``OLD/lib`` (under /root, mode 700):
the copy's executables would look for libpython there. Each ELF file under ``NEW/bin`` whose RUNPATH is
``OLD/lib`` gets ``$ORIGIN/../lib`` instead (same length or shorter, NUL-padded: the dynamic section keeps its
layout); the file is written anew first, so a hard-linked copy never changes the original.

The console scripts under ``NEW/bin`` (``coursekit``, ``jupyter``, ``pip``...) name their interpreter in their
first line, ``#!OLD/bin/python`` (or, for a long path, in pip's ``#!/bin/sh`` + ``exec`` preamble of three
lines): each gets ``FINAL/bin/...`` instead (FINAL: where NEW will live, default NEW), written anew in the same
way. Without it every user but root gets "bad interpreter: Permission denied".
"""

from __future__ import annotations

import sys
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
RELATIVE_LIB = b"$ORIGIN/../lib"
SHEBANG = b"#!"
PREAMBLE_LINES = 3  # a script's lines that may name its interpreter (pip's long-path preamble has three)


def _rewrite(path: Path, data: bytes) -> None:
    """Write ``path`` anew with ``data``, its mode kept (a hard link: the original keeps its bytes)."""
    mode = path.stat().st_mode
    path.unlink()
    path.write_bytes(data)
    path.chmod(mode)


def relocate(old_prefix: Path, new_prefix: Path) -> list[Path]:
    """Patch the RUNPATH of every executable under ``new_prefix/bin``; the patched files."""
    old_runpath = str(old_prefix / "lib").encode() + b"\0"
    if len(RELATIVE_LIB) + 1 > len(old_runpath):
        raise ValueError(f"old_prefix: {old_prefix} is too short to hold {RELATIVE_LIB.decode()} in its place")
    patched = []
    for path in sorted((new_prefix / "bin").iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if not data.startswith(ELF_MAGIC) or old_runpath not in data:
            continue
        _rewrite(path, data.replace(old_runpath, RELATIVE_LIB + b"\0" * (len(old_runpath) - len(RELATIVE_LIB))))
        patched.append(path)
    return patched


def fix_shebangs(old_prefix: Path, new_prefix: Path, final_prefix: Path | None = None) -> list[Path]:
    """Point every script under ``new_prefix/bin`` whose interpreter is ``old_prefix/bin/...`` at
    ``final_prefix/bin/...`` (default ``new_prefix``); the rewritten files."""
    old_bin = str(old_prefix).rstrip("/").encode() + b"/bin/"
    new_bin = str(final_prefix or new_prefix).rstrip("/").encode() + b"/bin/"
    fixed = []
    for path in sorted((new_prefix / "bin").iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if not data.startswith(SHEBANG):
            continue
        lines = data.split(b"\n", PREAMBLE_LINES)
        head, rest = lines[:PREAMBLE_LINES], lines[PREAMBLE_LINES:]
        if not any(old_bin in line for line in head):
            continue
        _rewrite(path, b"\n".join([line.replace(old_bin, new_bin) for line in head] + rest))
        fixed.append(path)
    return fixed


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python relocate_python.py OLD_PREFIX NEW_PREFIX [FINAL_PREFIX]", file=sys.stderr)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    final = Path(argv[2]) if len(argv) == 3 else new
    for path in relocate(old, new):
        print(f"[slurm/hub/relocate_python.py] RUNPATH of {path.name}: {RELATIVE_LIB.decode()}")
    fixed = fix_shebangs(old, new, final)
    print(f"[slurm/hub/relocate_python.py] {len(fixed)} script(s) in {final}/bin now name its own Python")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
