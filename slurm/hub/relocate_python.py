"""Make a copied Python prefix runnable by other users: ``python relocate_python.py OLD NEW``.

pyenv builds Python with a shared libpython and the absolute RUNPATH ``OLD/lib`` (under /root, mode 700):
the copy's executables would look for libpython there. Each ELF file under ``NEW/bin`` whose RUNPATH is
``OLD/lib`` gets ``$ORIGIN/../lib`` instead (same length or shorter, NUL-padded: the dynamic section keeps its
layout); the file is written anew first, so a hard-linked copy never changes the original.
"""

from __future__ import annotations

import sys
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
RELATIVE_LIB = b"$ORIGIN/../lib"


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
        new = data.replace(old_runpath, RELATIVE_LIB + b"\0" * (len(old_runpath) - len(RELATIVE_LIB)))
        mode = path.stat().st_mode
        path.unlink()  # a hard link: the original keeps its bytes
        path.write_bytes(new)
        path.chmod(mode)
        patched.append(path)
    return patched


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python relocate_python.py OLD_PREFIX NEW_PREFIX", file=sys.stderr)
        return 2
    old, new = (Path(a) for a in argv)
    for path in relocate(old, new):
        print(f"[slurm/hub/relocate_python.py] RUNPATH of {path.name}: {RELATIVE_LIB.decode()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
