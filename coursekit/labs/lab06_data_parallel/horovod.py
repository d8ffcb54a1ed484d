"""Horovod -> DDP: each step of a Horovod script (NVIDIA DLI's older labs) and the DDP line that does it.

``horovod_table(script)`` finds each DDP line in ``script`` and gives its line number, so the table shown
in lab 06 points at the participant's own script (``lab06_ddp/train_ddp.py``) and cannot drift from it (a
test checks every anchor is found in the lab's ``train_ddp.py``, the default, shipped in ``scripts/``).
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

from coursekit.labs.lab06_data_parallel import SCRIPTS

DDP_SCRIPT = SCRIPTS / "train_ddp.py"  # the packaged copy of notebooks/lab06_ddp/train_ddp.py


@dataclass(frozen=True)
class HorovodStep:
    horovod: str  # the Horovod line
    ddp: str  # what DDP does instead, in words or code
    anchor: str  # a piece of the line of train_ddp.py that does it


HOROVOD_TO_DDP: tuple[HorovodStep, ...] = (
    HorovodStep("horovodrun -np 2 python train.py", "torchrun --nproc_per_node 2 train_ddp.py (or srun --ntasks 2)",
                "torchrun --standalone --nproc_per_node 2 train_ddp.py"),
    HorovodStep("hvd.init()", "read RANK / LOCAL_RANK / WORLD_SIZE (or SLURM_*), then init_process_group",
                "dist.init_process_group("),
    HorovodStep("hvd.rank(), hvd.local_rank(), hvd.size()", "rank, local_rank, world_size from the launcher",
                "rank, local_rank, world_size = "),
    HorovodStep("torch.cuda.set_device(hvd.local_rank())", "the device of the local rank",
                "torch.cuda.set_device(device)"),
    HorovodStep("DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank())", "the same, with world_size and rank",
                "train_sampler = DistributedSampler("),
    HorovodStep("train_sampler.set_epoch(epoch)", "the same", "train_sampler.set_epoch(epoch)"),
    HorovodStep("hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
                "done by the DDP constructor: rank 0's weights are copied to every rank", "model = DDP("),
    HorovodStep("hvd.DistributedOptimizer(optimizer)", "done by DDP: backward averages the gradients (in buckets, "
                "overlapping the backward pass); the optimizer stays plain", "model = DDP("),
    HorovodStep("hvd.broadcast_optimizer_state(optimizer, root_rank=0)",
                "nothing: every rank builds its optimizer from the same weights", "optimizer = torch.optim.SGD("),
    HorovodStep("lr = base_lr * hvd.size()", "--lr is the global batch's rate; the global batch is "
                "batch × world size (scale the rate yourself if you grow it)", "global_batch = args.batch_size * world_size"),
    HorovodStep("hvd.allreduce(metric) (an average)", "dist.all_reduce of the sums (loss, correct, total), then divide",
                "dist.all_reduce(sums"),
    HorovodStep("if hvd.rank() == 0: print(...)", "the same, with rank", "if rank == 0:"),
    HorovodStep("if hvd.rank() == 0: save checkpoint", "the same; save model.module (without DDP's wrapper)",
                "save_checkpoint(model.module"),
    HorovodStep("hvd.shutdown()", "dist.destroy_process_group()", "dist.destroy_process_group()"),
)


@dataclass(frozen=True)
class HorovodRow:
    horovod: str
    ddp: str
    line: int  # 1-based line number in the script
    code: str  # that line, stripped


@dataclass(frozen=True)
class HorovodTable:
    script: str
    rows: tuple[HorovodRow, ...]

    def __str__(self) -> str:
        width = max(len(r.horovod) for r in self.rows)
        lines = [f"Horovod -> DDP, lines of {self.script}"]
        lines += [f"  {r.horovod:<{width}}  line {r.line:>3}: {r.code}   ({r.ddp})" for r in self.rows]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td style='text-align:left'><code>{html.escape(r.horovod)}</code></td>"
                        f"<td style='text-align:left'>{html.escape(r.ddp)}</td><td>{r.line}</td>"
                        f"<td style='text-align:left'><code>{html.escape(r.code)}</code></td></tr>" for r in self.rows)
        return (f"<table><thead><tr><th>Horovod</th><th>DDP</th><th>line</th>"
                f"<th>in {html.escape(self.script)}</th></tr></thead><tbody>{cells}</tbody></table>")


def horovod_table(script: str | os.PathLike = DDP_SCRIPT) -> HorovodTable:
    """Each Horovod step with the line of `script` that does it in DDP (the first line, not a comment, that
    holds the step's anchor)."""
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"script={str(script)!r}: no such file; give the path of train_ddp.py")
    lines = path.read_text().splitlines()
    rows = []
    for step in HOROVOD_TO_DDP:
        found = next((n for n, text in enumerate(lines, start=1)
                      if step.anchor in text and not text.lstrip().startswith("#")), None)
        if found is None:
            raise ValueError(f"{path.name} has no line with {step.anchor!r} (Horovod step {step.horovod!r}): "
                             "update HOROVOD_TO_DDP or the script")
        rows.append(HorovodRow(step.horovod, step.ddp, found, lines[found - 1].strip()))
    return HorovodTable(str(script), tuple(rows))
