"""Lab 05's part of ``coursekit instructor data``: its synthetic JPEG tree (``data jpeg``), written once in a
shared folder."""

from __future__ import annotations

from pathlib import Path

from coursekit.instructor.common import EXIT_OK


def data_jpeg(folder: Path, profile: str, workers: int) -> int:
    """Lab 05's JPEG tree (its ``profile`` settings), written once in ``folder`` under the name lab 05 looks for."""
    from coursekit.labs import lab_settings
    from coursekit.labs.lab05_data_loading import jpeg_tree_name
    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    s = lab_settings("05", profile)
    root = Path(folder).expanduser() / jpeg_tree_name(s.jpeg_classes, s.jpeg_images_per_class, s.jpeg_size)
    done = root / ".complete"
    if done.exists():
        print(f"lab 05's JPEG tree is already in {root}")
        return EXIT_OK
    info = write_synthetic_jpeg_tree(root, s.jpeg_classes, s.jpeg_images_per_class, size=tuple(s.jpeg_size),
                                     workers=workers)
    done.write_text("written by coursekit instructor data jpeg\n")
    print(f"lab 05's JPEG tree ({profile} profile) in {root}: {info['images']:,} images, "
          f"{info['bytes'] / 1e6:.1f} MB, written in {info['seconds']:.0f} s")
    return EXIT_OK
