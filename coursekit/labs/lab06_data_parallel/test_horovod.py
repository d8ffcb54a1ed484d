"""The Horovod -> DDP table points at the lines that do each step, in the solution and in a correct
conversion spelled differently; a missing step or a script that does not parse never raises."""

import pytest

from coursekit.labs.kit import exercises
from coursekit.labs.lab06_data_parallel import horovod

# the line of the solution (SOLUTION) each Horovod step must point at
SOLUTION_LINES = ("torchrun --standalone --nproc_per_node 2 train_ddp.py", "dist.init_process_group(",
                  "rank, local_rank, world_size = ", "torch.cuda.set_device(device)",
                  "train_sampler = DistributedSampler(", "train_sampler.set_epoch(epoch)", "model = DDP(",
                  "model = DDP(", "optimizer = torch.optim.SGD(", "global_batch = args.batch_size * world_size",
                  "dist.all_reduce(sums", "if rank == 0:", "save_checkpoint(model.module",
                  "dist.destroy_process_group()")
DDP_LINES = ("dist.init_process_group(", "train_sampler = DistributedSampler(", "train_sampler.set_epoch(epoch)",
             "model = DDP(", "dist.all_reduce(sums", "save_checkpoint(model.module", "dist.destroy_process_group()")

# a correct conversion written another way: other import names, other variable names, other idioms
ANOTHER_SPELLING = '''"""Launch: srun --ntasks 2 python mine.py"""
import os
import torch
import torch.distributed as distributed
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler as Sharder


def main():
    my_rank = int(os.environ["RANK"])
    distributed.init_process_group(backend="gloo")
    world = distributed.get_world_size()
    net = DistributedDataParallel(make_model())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3 * world)
    sampler = Sharder(data, shuffle=True)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        totals = torch.tensor([1.0, 2.0])
        distributed.all_reduce(totals)
        if distributed.get_rank() == 0:
            print(totals)
    if not my_rank:
        torch.save(net.module.state_dict(), "model.pt")
    distributed.destroy_process_group()
'''


def test_every_horovod_step_points_at_its_line_of_the_solution():
    table = horovod.horovod_table()
    lines = horovod.DDP_SCRIPT.read_text().splitlines()
    assert len(table.rows) == len(horovod.HOROVOD_TO_DDP) == len(SOLUTION_LINES) and not table.problem
    for expected, row in zip(SOLUTION_LINES, table.rows, strict=True):
        assert row.line is not None and expected in lines[row.line - 1], (row.horovod, row.line, expected)
        assert row.code == lines[row.line - 1].strip()
    assert "hvd.init()" in str(table) and table._repr_html_().count("<tr>") == len(table.rows) + 1


def test_a_conversion_spelled_differently_is_found_line_by_line(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(ANOTHER_SPELLING)
    rows = {row.horovod: row for row in horovod.horovod_table(script).rows}
    found = {name: row.code for name, row in rows.items() if row.line is not None}
    assert found["horovodrun -np 2 python train.py"].startswith('"""Launch: srun')
    assert found["hvd.init()"].startswith("distributed.init_process_group(")
    assert found["hvd.rank(), hvd.local_rank(), hvd.size()"] == 'my_rank = int(os.environ["RANK"])'
    assert found["hvd.broadcast_parameters(model.state_dict(), root_rank=0)"].startswith("net = DistributedDataParallel(")
    assert found["DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank())"].startswith("sampler = Sharder(")
    assert found["hvd.broadcast_optimizer_state(optimizer, root_rank=0)"].startswith("opt = torch.optim.AdamW(")
    assert found["lr = base_lr * hvd.size()"].startswith("opt = torch.optim.AdamW(")
    assert found["if hvd.rank() == 0: print(...)"] == "if distributed.get_rank() == 0:"
    assert found["if hvd.rank() == 0: save checkpoint"].startswith("torch.save(net.module")
    assert set(found) == set(rows) - {"torch.cuda.set_device(hvd.local_rank())"}  # a CPU script sets no device
    assert "not in this script" in str(horovod.horovod_table(script))


def test_the_ddp_lines_are_what_participants_write():
    stripped, blocks = exercises.strip_source(horovod.DDP_SCRIPT.read_text())
    assert blocks >= 6
    for line in DDP_LINES:
        assert line not in stripped, f"{line!r} should sit in a solution block"


def test_a_missing_step_or_a_broken_script_is_shown_not_raised(tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text("print('no DDP here')\n")
    table = horovod.horovod_table(script)
    assert all(row.line is None for row in table.rows) and "not in this script" in table._repr_html_()
    script.write_text("def main(:\n")
    broken = horovod.horovod_table(script)
    assert "does not parse (line 1" in str(broken) and all(row.line is None for row in broken.rows)
    with pytest.raises(FileNotFoundError, match="script='nowhere.py'"):
        horovod.horovod_table("nowhere.py")
