"""The two kinds of cell a notebook source is made of (see notebooks/build_notebooks.py).

nbval's comment markers (``# NBVAL_IGNORE_OUTPUT`` ...) may start a code cell's source here, where they
are easy to review; participants never see them: ``code`` moves them into the cell's tags, which nbval
reads the same way (``nbval-ignore-output``, ``raises-exception``, ...).
"""

from __future__ import annotations

import textwrap

# nbval's comment markers and the cell tags it reads for each (nbval/plugin.py: metadata_tags)
MARKER_TAGS = {
    "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "NBVAL_CHECK_OUTPUT": "nbval-check-output",
    "NBVAL_RAISES_EXCEPTION": "raises-exception",
    "NBVAL_SKIP": "nbval-skip",
}


def split_markers(source: str) -> tuple[str, tuple[str, ...]]:
    """The source without its leading nbval marker lines, and the tags they stand for."""
    lines = source.splitlines()
    tags: list[str] = []
    while lines and lines[0].strip().lstrip("#").strip() in MARKER_TAGS and lines[0].lstrip().startswith("#"):
        tags.append(MARKER_TAGS[lines.pop(0).strip().lstrip("#").strip()])
    return "\n".join(lines), tuple(tags)


def md(text: str, tags: tuple[str, ...] = ()) -> dict:
    """A markdown cell (the text is dedented and stripped)."""
    return {"kind": "markdown", "source": textwrap.dedent(text).strip(), "tags": tags}


def code(text: str, tags: tuple[str, ...] = ()) -> dict:
    """A code cell (the text is dedented and stripped; leading nbval markers become tags)."""
    source, marker_tags = split_markers(textwrap.dedent(text).strip())
    return {"kind": "code", "source": source, "tags": (*marker_tags, *(t for t in tags if t not in marker_tags))}
