"""The two kinds of cell a notebook source is made of (see notebooks/build_notebooks.py)."""

from __future__ import annotations

import textwrap


def md(text: str, tags: tuple[str, ...] = ()) -> dict:
    """A markdown cell (the text is dedented and stripped)."""
    return {"kind": "markdown", "source": textwrap.dedent(text).strip(), "tags": tags}


def code(text: str, tags: tuple[str, ...] = ()) -> dict:
    """A code cell (the text is dedented and stripped)."""
    return {"kind": "code", "source": textwrap.dedent(text).strip(), "tags": tags}
