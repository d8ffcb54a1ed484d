"""Train a small stack of blocks with FSDP2 (``fully_shard``): every rank keeps half of each weight.

    torchrun --standalone --nproc_per_node 2 train_fsdp.py --steps 5     # one node, torchrun starts 2
    srun --ntasks 2 python train_fsdp.py --steps 5                        # in a Slurm job: srun starts 2

The model (an input layer, BLOCKS residual MLP blocks, a head) and the data are made here from --seed alone.
Each step takes --batch-size samples; each of the N processes computes its own 1/N of them. Sharded over N
processes, training must give the weights one process gives on the whole batch: ``train_serially`` below is
that one process. Check it with ``labs.check_fsdp_script("lab08_model_parallel/train_fsdp.py")``.
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard

INPUTS = 16
DIM = 64  # even sizes: each weight splits into two equal halves along its first dimension
HIDDEN = 128
BLOCKS = 4
OUTPUTS = 8
WEIGHT_DECAY = 0.01
CHECKPOINT = "weights.pt"


class Block(nn.Module):
    """x + MLP(LayerNorm(x)): the unit FSDP gathers, computes and frees, one after the other."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inputs = nn.Linear(INPUTS, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, OUTPUTS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inputs(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_model(seed: int) -> Model:
    torch.manual_seed(seed)
    return Model()


def make_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets (a fixed random function of the inputs, plus noise)."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(samples, INPUTS, generator=g)
    teacher = torch.randn(INPUTS, OUTPUTS, generator=g)
    return x, torch.tanh(x @ teacher) + 0.1 * torch.randn(samples, OUTPUTS, generator=g)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, data: tuple[torch.Tensor, torch.Tensor],
          steps: int, batch_size: int, rank: int, world_size: int, device: torch.device) -> float:
    """`steps` steps of `batch_size` samples, of which this rank computes its 1/world_size; the last loss."""
    x, y = data
    for step in range(steps):
        start = step * batch_size % len(x)
        share = slice(start + rank * batch_size // world_size, start + (rank + 1) * batch_size // world_size)
        loss = nn.functional.mse_loss(model(x[share].to(device)), y[share].to(device))
        loss.backward()  # FSDP averages the gradients over the ranks: the mean over the whole batch
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()


def train_serially(args: argparse.Namespace) -> Model:
    """The same training on one process and the whole batch: the weights FSDP must give."""
    model = make_model(args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=WEIGHT_DECAY)
    train(model, optimizer, make_data(args.samples, args.seed), args.steps, args.batch_size, 0, 1,
          torch.device("cpu"))
    return model


def local_bytes(tensors) -> int:
    """Bytes this rank holds of `tensors`: of a sharded tensor (a DTensor) only its local shard."""
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors if t is not None)


def setup() -> tuple[int, int, torch.device]:
    """Join the other processes (torchrun's or srun's variables); (rank, world size, device)."""
    for names in (("RANK", "LOCAL_RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")):
        if all(name in os.environ for name in names):
            rank, local_rank, world_size = (int(os.environ[name]) for name in names)
            break
    else:
        raise SystemExit("start this script with 2 or more processes: torchrun --nproc_per_node 2 train_fsdp.py")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world_size)
    return rank, world_size, device


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step, all processes together")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--out", default="checkpoints", help="folder of the saved weights")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rank, world_size, device = setup()
    if args.batch_size % world_size:
        raise SystemExit(f"--batch-size {args.batch_size} does not split over {world_size} processes")
    model = make_model(args.seed).to(device)  # the same initial weights on every rank (same seed)
    full_bytes = local_bytes(model.parameters())
    # TODO 1: make each block of model.blocks its own FSDP unit: fully_shard(block). Its weights are then
    #   split over the ranks, and gathered only while that block computes.
    ### BEGIN SOLUTION
    for block in model.blocks:
        fully_shard(block)
    ### END SOLUTION
    # TODO 2: shard the rest (the input layer and the head) with the whole model: fully_shard(model).
    ### BEGIN SOLUTION
    fully_shard(model)
    ### END SOLUTION
    # TODO 3: build the optimizer, torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=WEIGHT_DECAY).
    #   Build it after sharding: fully_shard replaces the model's parameters by sharded ones.
    ### BEGIN SOLUTION
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=WEIGHT_DECAY)
    ### END SOLUTION
    loss = train(model, optimizer, make_data(args.samples, args.seed), args.steps, args.batch_size, rank,
                 world_size, device)
    print(f"rank {rank}: holds {local_bytes(model.parameters())} of the {full_bytes} bytes of weights, "
          f"last loss {loss:.4f}", flush=True)
    # TODO 4: gather the whole weights: get_model_state_dict(model, options=StateDictOptions(
    #   full_state_dict=True, cpu_offload=True)). Every rank must call it (it all-gathers); rank 0 gets the
    #   full tensors, the others an empty dict. Then save them on rank 0 alone with torch.save(weights, path).
    path = Path(args.out) / CHECKPOINT
    ### BEGIN SOLUTION
    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(weights, path)
    ### END SOLUTION
    if rank == 0:
        print(f"saved {path}", flush=True)
    dist.barrier()  # leave together: a rank that leaves while another still uses the group can abort it
    dist.destroy_process_group()
    gc.collect()


if __name__ == "__main__":
    main()
