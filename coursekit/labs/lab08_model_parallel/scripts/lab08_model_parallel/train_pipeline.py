"""Train a small stack of blocks as a two-stage pipeline: rank 0 holds the first half of the model, rank 1 the rest.

    torchrun --standalone --nproc_per_node 2 train_pipeline.py --steps 5    # one node, torchrun starts 2
    srun --ntasks 2 python train_pipeline.py --steps 5                       # in a Slurm job: srun starts 2

The model (an input layer, BLOCKS residual MLP blocks, a head) and the data are made here from --seed alone.
Each step cuts the batch of --batch-size samples into --microbatches equal parts. Rank 0 (stage 0: the input
layer and the first half of the blocks) computes each part and sends its activations to rank 1 (stage 1: the
other blocks and the head), which computes the loss. In the backward pass rank 1 sends the gradient of those
activations back to rank 0. Split this way, training must give the weights one process gives on the whole
batch: ``train_serially`` below is that one process. Check it with
``labs.check_pipeline_script("lab08_model_parallel/train_pipeline.py")``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

INPUTS = 16
DIM = 64  # the width of the activations sent from stage 0 to stage 1
HIDDEN = 128
BLOCKS = 4
OUTPUTS = 8
STAGES = 2
FIRST_STAGE_BLOCKS = BLOCKS // STAGES  # stage 0: the input layer and blocks 0, 1; stage 1: blocks 2, 3 and the head
MOMENTUM = 0.9
CHECKPOINT = "stage{}.pt"  # each rank saves the weights of its own stage


class Block(nn.Module):
    """x + MLP(LayerNorm(x))."""

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
        return run_stage(self, run_stage(self, x, 0), 1)


def run_stage(model: Model, x: torch.Tensor, stage: int) -> torch.Tensor:
    """The forward of one stage: stage 0 turns inputs into activations, stage 1 activations into outputs."""
    if stage == 0:
        x = model.inputs(x)
        for block in model.blocks[:FIRST_STAGE_BLOCKS]:
            x = block(x)
        return x
    for block in model.blocks[FIRST_STAGE_BLOCKS:]:
        x = block(x)
    return model.head(x)


def make_model(seed: int) -> Model:
    torch.manual_seed(seed)
    return Model()


def make_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets (a fixed random function of the inputs, plus noise)."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(samples, INPUTS, generator=g)
    teacher = torch.randn(INPUTS, OUTPUTS, generator=g)
    return x, torch.tanh(x @ teacher) + 0.1 * torch.randn(samples, OUTPUTS, generator=g)


def batches(data: tuple[torch.Tensor, torch.Tensor], steps: int, batch_size: int):
    """The batch of each step, the same on every rank."""
    x, y = data
    for step in range(steps):
        start = step * batch_size % len(x)
        yield x[start:start + batch_size], y[start:start + batch_size]


def make_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)


def train_serially(args: argparse.Namespace) -> Model:
    """The same training on one process, the whole batch at once: the weights the pipeline must give."""
    model = make_model(args.seed)
    optimizer = make_optimizer(model, args.lr)
    for x, y in batches(make_data(args.samples, args.seed), args.steps, args.batch_size):
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def keep_stage(model: Model, rank: int) -> Model:
    """This rank's stage of `model`: the layers of the other stage are replaced by nothing (their weights freed),
    the layers kept keep their names (``blocks.2.up.weight`` stays ``blocks.2.up.weight``)."""
    # TODO 1: remove the other stage's layers from the model. On rank 0: model.head = None, and each block from
    #   FIRST_STAGE_BLOCKS on replaced by nn.Identity() (model.blocks[i] = nn.Identity()). On rank 1:
    #   model.inputs = None, and the blocks before FIRST_STAGE_BLOCKS replaced by nn.Identity().
    ### BEGIN SOLUTION
    if rank == 0:
        model.head = None
        for i in range(FIRST_STAGE_BLOCKS, BLOCKS):
            model.blocks[i] = nn.Identity()
    else:
        model.inputs = None
        for i in range(FIRST_STAGE_BLOCKS):
            model.blocks[i] = nn.Identity()
    ### END SOLUTION
    return model


def pipeline_step(model: Model, x: torch.Tensor, y: torch.Tensor, microbatches: int, rank: int,
                  device: torch.device) -> float | None:
    """Forward and backward of one batch, `microbatches` parts one after the other (GPipe: every forward, then
    every backward); the gradients of this rank's stage add up in its weights. Rank 1 returns the batch's loss."""
    if rank == 0:
        outputs = []
        for part in x.chunk(microbatches):
            activations = run_stage(model, part.to(device), 0)
            # TODO 2: send the activations to rank 1: dist.send(activations.detach(), dst=1). Keep
            #   `activations` (append it to outputs): its backward comes later.
            ### BEGIN SOLUTION
            dist.send(activations.detach(), dst=1)
            outputs.append(activations)
            ### END SOLUTION
        for activations in outputs:
            # TODO 3: receive the gradient of these activations from rank 1 into a tensor of their shape
            #   (gradient = torch.empty_like(activations); dist.recv(gradient, src=1)), then go on with the
            #   backward pass through stage 0: activations.backward(gradient).
            ### BEGIN SOLUTION
            gradient = torch.empty_like(activations)
            dist.recv(gradient, src=1)
            activations.backward(gradient)
            ### END SOLUTION
        return None
    received, losses = [], []
    for part in y.chunk(microbatches):
        activations = torch.empty(len(part), DIM, device=device)
        dist.recv(activations, src=0)
        activations.requires_grad_()  # so that the backward computes their gradient, for rank 0
        # TODO 4: the loss of this micro-batch: mse_loss(run_stage(model, activations, 1), part.to(device)).
        #   Serial training takes the mean over the whole batch: divide by the number of micro-batches.
        ### BEGIN SOLUTION
        loss = nn.functional.mse_loss(run_stage(model, activations, 1), part.to(device)) / microbatches
        ### END SOLUTION
        received.append(activations)
        losses.append(loss)
    for activations, loss in zip(received, losses, strict=True):
        loss.backward()
        # TODO 5: send the gradient of the received activations back to rank 0: dist.send(activations.grad, dst=0).
        ### BEGIN SOLUTION
        dist.send(activations.grad, dst=0)
        ### END SOLUTION
    return sum(loss.item() for loss in losses)


def setup() -> tuple[int, int, torch.device]:
    """Join the other process (torchrun's or srun's variables); (rank, world size, device)."""
    for names in (("RANK", "LOCAL_RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")):
        if all(name in os.environ for name in names):
            rank, local_rank, world_size = (int(os.environ[name]) for name in names)
            break
    else:
        raise SystemExit("start this script with 2 processes: torchrun --nproc_per_node 2 train_pipeline.py")
    if world_size != STAGES:
        raise SystemExit(f"this pipeline has {STAGES} stages: start it with {STAGES} processes, not {world_size}")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
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
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step")
    parser.add_argument("--microbatches", type=int, default=4, help="parts each batch is cut into")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--out", default="checkpoints", help="folder of the saved weights")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.batch_size % args.microbatches:
        raise SystemExit(f"--batch-size {args.batch_size} does not split into {args.microbatches} micro-batches")
    rank, _, device = setup()
    model = keep_stage(make_model(args.seed), rank).to(device)  # the same initial weights as serial (same seed)
    optimizer = make_optimizer(model, args.lr)  # this stage's weights only
    loss = None
    for x, y in batches(make_data(args.samples, args.seed), args.steps, args.batch_size):
        loss = pipeline_step(model, x, y, args.microbatches, rank, device)
        optimizer.step()
        optimizer.zero_grad()
    held = sum(p.numel() for p in model.parameters())
    print(f"rank {rank}: stage {rank} holds {held} parameters"
          + (f", last loss {loss:.4f}" if loss is not None else ""), flush=True)
    path = Path(args.out) / CHECKPOINT.format(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({name: value.cpu() for name, value in model.state_dict().items()}, path)
    print(f"saved {path}", flush=True)
    dist.barrier()  # leave together: a rank that leaves while another still uses the group can abort it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
