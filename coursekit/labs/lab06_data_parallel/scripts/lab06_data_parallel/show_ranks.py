"""What each process of a data-parallel job sees: run it with 2 processes (lab 06, section 1).

    gpu_jobs_submitter("lab06_data_parallel/show_ranks.py", n_gpu=2)                        # srun: one task per GPU
    gpu_jobs_submitter("lab06_data_parallel/show_ranks.py", n_gpu=2, launcher="torchrun")   # torchrun: one process per GPU

Every process prints the variables its launcher set, the rank coursekit reads from them, its device,
then the processes join one process group and add up their ranks with an all-reduce: each one prints
the same total, which proves they talk to each other. Output goes to one log per process.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from coursekit import launch
from coursekit.train.parallel import process_group as distributed

# What the launchers set: torchrun (env:// variables), srun (SLURM_*), submitit's local executor.
LAUNCHER_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_JOB_NODELIST",
    "SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_LOCALID", "SUBMITIT_LOCAL_NTASKS",
    "CUDA_VISIBLE_DEVICES",
)


def main() -> None:
    seen = {name: os.environ[name] for name in LAUNCHER_VARIABLES if name in os.environ}
    info = launch.launch_info()
    tag = f"[rank {info.rank}/{info.world_size}]"
    print(f"{tag} host {socket.gethostname()}, pid {os.getpid()}, launcher: {info.launcher}")
    for name, value in seen.items():
        print(f"{tag}   {name}={value}")
    print(f"{tag} coursekit reads: rank {info.rank}, local_rank {info.local_rank}, world_size {info.world_size}, "
          f"master {info.master_addr}:{info.master_port}")
    ctx = distributed.init_distributed()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"{tag} device {ctx.device} (this process sees {gpus} GPU(s)), backend {ctx.backend}")
    total = torch.tensor([float(info.rank)], device=ctx.device)
    if dist.is_initialized():
        dist.all_reduce(total)  # every rank sends its rank and receives the sum
    expected = info.world_size * (info.world_size - 1) / 2
    print(f"{tag} all_reduce(sum of ranks) = {total.item():g} (expected {expected:g})", flush=True)
    distributed.barrier(ctx)  # leave together: a rank that leaves while another still uses the group can abort it
    distributed.cleanup()


if __name__ == "__main__":
    main()
