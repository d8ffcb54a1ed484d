"""The Horovod -> DDP table points at real lines of the DDP solution, and those lines are the exercise."""

import pytest

from coursekit.labs.kit import exercises
from coursekit.labs.lab06_data_parallel import horovod

DDP_LINES = ("dist.init_process_group(", "train_sampler = DistributedSampler(", "train_sampler.set_epoch(epoch)",
             "model = DDP(", "dist.all_reduce(sums", "save_checkpoint(model.module", "dist.destroy_process_group()")


def test_every_horovod_step_points_at_a_line_of_the_solution():
    table = horovod.horovod_table()
    lines = horovod.DDP_SCRIPT.read_text().splitlines()
    assert len(table.rows) == len(horovod.HOROVOD_TO_DDP)
    for step, row in zip(horovod.HOROVOD_TO_DDP, table.rows, strict=True):
        assert step.anchor in lines[row.line - 1] and row.code == lines[row.line - 1].strip()
    assert "hvd.init()" in str(table) and table._repr_html_().count("<tr>") == len(table.rows) + 1


def test_the_ddp_lines_are_what_participants_write():
    stripped, blocks = exercises.strip_source(horovod.DDP_SCRIPT.read_text())
    assert blocks >= 6
    anchors = {step.anchor for step in horovod.HOROVOD_TO_DDP}
    for anchor in DDP_LINES:
        assert anchor in anchors
        assert anchor not in stripped, f"{anchor!r} should sit in a solution block"


def test_a_missing_line_is_named(tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text("print('no DDP here')\n")
    with pytest.raises(ValueError, match="no line with 'torchrun"):
        horovod.horovod_table(script)
    with pytest.raises(FileNotFoundError, match="script='nowhere.py'"):
        horovod.horovod_table("nowhere.py")
