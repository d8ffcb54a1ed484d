"""train_serial.py made data parallel with DistributedDataParallel (DDP): one process per GPU (or CPU slot).

    torchrun --standalone --nproc_per_node 2 train_ddp.py --epochs 3     # one node, torchrun starts 2
    srun --ntasks 2 python train_ddp.py --epochs 3                        # in a Slurm job: srun starts 2
    python train_ddp.py --epochs 3                                        # one process

Same options as train_serial.py, but --batch-size is the batch of ONE process: the global batch is
--batch-size x number of processes. N processes at --batch-size B give the weights train_serial.py
gives at --batch-size N*B (same --lr, --seed and --data-size), up to float rounding.
Check it with ``labs.check_ddp_script("lab06_data_parallel/train_ddp.py")``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

IMAGE_SIZE = 12
N_CLASSES = 4
STRIPE_FREQUENCY = 1.3  # radians per pixel
NOISE = 1.5  # standard deviation of the pixel noise; the stripes have amplitude 1
VALIDATION_SHARE = 4  # one validation image for every 4 training images
VALIDATION_BATCH = 256
MOMENTUM = 0.9
CHECKPOINT = "checkpoint.pt"
# (rank, local rank, world size) as each launcher names them, first match wins
LAUNCHER_VARIABLES = (("RANK", "LOCAL_RANK", "WORLD_SIZE"),  # torchrun
                      ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),  # srun
                      ("SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_LOCALID", "SUBMITIT_LOCAL_NTASKS"))  # no Slurm
PORT_BASE, PORT_SPAN = 20000, 20000  # without MASTER_PORT: a port derived from the job id


def make_datasets(size: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """`size` training images and `size // 4` validation images with their labels (0..3)."""
    g = torch.Generator().manual_seed(seed)
    n = size + size // VALIDATION_SHARE
    labels = torch.randint(N_CLASSES, (n,), generator=g)
    angle = (labels * math.pi / N_CLASSES)[:, None, None]
    phase = (torch.rand(n, generator=g) * 2 * math.pi)[:, None, None]
    coords = torch.arange(IMAGE_SIZE, dtype=torch.float32)
    y, x = torch.meshgrid(coords, coords, indexing="ij")
    stripes = torch.sin(STRIPE_FREQUENCY * (x * torch.cos(angle) + y * torch.sin(angle)) + phase)
    images = (stripes + NOISE * torch.randn(n, IMAGE_SIZE, IMAGE_SIZE, generator=g)).unsqueeze(1)
    return TensorDataset(images[:size], labels[:size]), TensorDataset(images[size:], labels[size:])


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, N_CLASSES))


def setup() -> tuple[int, int, int, torch.device]:
    """Join the other processes; return (rank, local rank, world size, this process's device)."""
    # TODO 1: read rank, local rank and world size from the launcher (LAUNCHER_VARIABLES; alone: 0, 0, 1).
    #   torchrun sets MASTER_ADDR/MASTER_PORT, srun does not: then use the job's first node and a port
    #   derived from SLURM_JOB_ID. Start the process group (NCCL on GPUs, gloo on CPUs) and return the
    #   device of this process's local rank.
    ### BEGIN SOLUTION
    found = [names for names in LAUNCHER_VARIABLES if names[0] in os.environ and names[2] in os.environ]
    rank, local_rank, world_size = (int(os.environ.get(name, 0)) for name in found[0]) if found else (0, 0, 1)
    if "MASTER_ADDR" not in os.environ and int(os.environ.get("SLURM_JOB_NUM_NODES", "1")) > 1:
        hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                               capture_output=True, text=True, check=True).stdout.split()
        os.environ["MASTER_ADDR"] = hosts[0]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    job_id = int(os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or 9500)
    os.environ.setdefault("MASTER_PORT", str(PORT_BASE + job_id % PORT_SPAN))
    if torch.cuda.is_available():  # each rank sees the node's GPUs (or only its own: then index 0)
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world_size)
    ### END SOLUTION
    return rank, local_rank, world_size, device


def train_one_epoch(model, loader, optimizer, device) -> tuple[float, int]:
    """Sum of the batch losses and number of steps (of this process)."""
    model.train()
    loss_sum, steps = 0.0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum, steps = loss_sum + loss.item(), steps + 1
    return loss_sum, steps


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[int, int]:
    """Correct predictions and number of images (of this process)."""
    model.eval()
    correct = total = 0
    for images, labels in loader:
        predicted = model(images.to(device)).argmax(dim=1)
        correct += (predicted == labels.to(device)).sum().item()
        total += len(labels)
    return correct, total


def print_epoch(epoch: int, epochs: int, train_loss: float, val_acc: float, images_per_s: float) -> None:
    print(f"epoch {epoch + 1}/{epochs}  train_loss {train_loss:.4f}  val_acc {val_acc:.4f}"
          f"  {images_per_s:.0f} img/s", flush=True)


def save_checkpoint(model: nn.Module, out: str, epochs: int, val_acc: float) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "epochs": epochs, "val_acc": val_acc}, folder / CHECKPOINT)
    print(f"saved {folder / CHECKPOINT}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="batch of one process")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of the global batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-size", type=int, default=2048, help="training images (validation: a quarter)")
    parser.add_argument("--out", default="checkpoints", help="folder of the checkpoint")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rank, local_rank, world_size, device = setup()
    train_set, val_set = make_datasets(args.data_size, args.seed)
    torch.manual_seed(args.seed)
    model = make_model().to(device)
    # TODO 2: wrap the model in DistributedDataParallel. Its constructor copies rank 0's weights to every
    #   rank; each backward then averages the gradients over the ranks.
    ### BEGIN SOLUTION
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    ### END SOLUTION
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM)
    # TODO 3: give each rank its share of the data: a DistributedSampler over the training set (shuffled,
    #   seeded with --seed) as `train_sampler`, and one over the validation set (not shuffled) as `val_sampler`.
    ### BEGIN SOLUTION
    train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    val_sampler = DistributedSampler(val_set, num_replicas=world_size, rank=rank, shuffle=False)
    ### END SOLUTION
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=VALIDATION_BATCH, sampler=val_sampler)
    global_batch = args.batch_size * world_size
    header = (f"device {device}  world size {world_size}  global batch {global_batch} ({args.batch_size} per "
              f"process)  {len(train_set)} training / {len(val_set)} validation images")
    # TODO 4: print `header` on rank 0 only.
    ### BEGIN SOLUTION
    if rank == 0:
        print(header, flush=True)
    ### END SOLUTION
    for epoch in range(args.epochs):
        # TODO 5: a new order every epoch: tell the training sampler which epoch this is.
        ### BEGIN SOLUTION
        train_sampler.set_epoch(epoch)
        ### END SOLUTION
        start = time.perf_counter()
        loss_sum, steps = train_one_epoch(model, train_loader, optimizer, device)
        images_per_s = len(train_set) / (time.perf_counter() - start)
        correct, total = evaluate(model, val_loader, device)
        # TODO 6: every rank has its own sums: add them up over the ranks with one all_reduce, so that
        #   loss and accuracy below are those of the whole data, not of this rank's share.
        ### BEGIN SOLUTION
        sums = torch.tensor([loss_sum, steps, correct, total], dtype=torch.float64, device=device)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        loss_sum, steps, correct, total = sums.tolist()
        ### END SOLUTION
        # TODO 7: print_epoch(epoch, args.epochs, loss_sum / steps, correct / total, images_per_s) on rank 0 only.
        ### BEGIN SOLUTION
        if rank == 0:
            print_epoch(epoch, args.epochs, loss_sum / steps, correct / total, images_per_s)
        ### END SOLUTION
    # TODO 8: save the checkpoint on rank 0 only, without DDP's wrapper (its state_dict would prefix
    #   every name with "module."): save_checkpoint(<the plain model>, args.out, args.epochs, correct / total).
    #   Then leave the process group.
    ### BEGIN SOLUTION
    if rank == 0:
        save_checkpoint(model.module, args.out, args.epochs, correct / total)
    dist.barrier()  # leave together: a rank that leaves while another still uses the group can abort it
    dist.destroy_process_group()
    gc.collect()  # free the tensors gloo's threads still hold now, not while Python shuts down (it can abort)
    ### END SOLUTION


if __name__ == "__main__":
    main()
