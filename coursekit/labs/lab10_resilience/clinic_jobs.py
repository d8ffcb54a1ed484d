"""Lab 10's failure clinic: four broken 2-rank distributed jobs, one module.

``python -m coursekit.labs.lab10_resilience.clinic_jobs <case> [options]`` runs one rank of ``<case>``; the kit
starts one process per task (``submit_jobs(..., n_gpu=2)``: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR/PORT`` from
``coursekit.jobs.tasks.torch_env_variables``). gloo on a CPU, NCCL on GPUs. Each case is a small training loop
(a linear model, its gradients all-reduced by hand, so the collective is in plain sight) with one planted fault:

- ``rank_raises``: rank 1 raises at step ``FAIL_AT_STEP``; rank 0 goes on to its next all-reduce. The process
  group's timeout is long (``--stop-timeout-s``): what ends rank 0 early is the kit's launcher (Slurm: ``srun
  --kill-on-bad-exit``; the local site: ``coursekit.launch.stop_local_peer_tasks``) or, on gloo, the closed socket;
- ``mismatched_collectives``: rank 1 skips a step's all-reduces ("its batch was empty"), so rank 0's all-reduce of
  that step's weight meets rank 1's barrier: both wait until the process group's timeout, set short
  (``--hang-timeout-s``: seconds, not torch's default: 10 minutes with NCCL, 30 with gloo); with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` torch compares
  the collectives and names the mismatch;
- ``rendezvous_fails``: the script hard-codes a world size of 3 for a job of 2 processes (``--wrong world_size``)
  or rank 1 dials another port (``--wrong port``): the rendezvous never forms and fails at its own timeout
  (``--rendezvous-timeout-s``);
- ``oom_one_rank``: rank 1 alone asks for too much memory at step ``FAIL_AT_STEP``. GPU: more than the GPU holds
  (``torch.OutOfMemoryError``). CPU: rank 1's address space is first capped (``RLIMIT_AS``, its own process
  only, ``CPU_OOM_HEADROOM_MB`` above what it maps) and the request is larger, so torch's CPU allocator refuses it;
  the memory is never touched, so neither the cap nor the request can hurt the machine.

``--label A --seed <pseudonym>`` picks the case the clinic dealt that participant as job ``A`` (the command line of
a clinic job does not name its fault). Every line the job writes itself is ``[clinic rank R t=<unix time>] ...``,
so that ``clinic.symptoms`` can order what each rank did in time.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

CASES = ("rank_raises", "mismatched_collectives", "rendezvous_fails", "oom_one_rank")
LABELS = ("A", "B", "C", "D")
FAULTY_RANK = 1  # the rank the fault is planted on (rendezvous_fails: every rank)
STEPS = 5  # training steps of a healthy run
FAIL_AT_STEP = 2  # the step at which rank 1 raises, skips its all-reduce or runs out of memory
FEATURES, BATCH = 16, 8  # the linear model's inputs and the batch: a step takes microseconds
LEARNING_RATE = 0.01  # plain SGD on the linear model
STOP_TIMEOUT_S = 60.0  # rank_raises / oom_one_rank: process-group timeout, far above the launcher's stop
HANG_TIMEOUT_S = 5.0  # mismatched_collectives: the short timeout a clinic job sets (torch's default: 30 min)
RENDEZVOUS_TIMEOUT_S = 5.0  # rendezvous_fails: how long rank 0 waits for the missing processes
WRONG_CHOICES = ("world_size", "port")
WRONG_WORLD_EXTRA = 1  # rendezvous_fails: the script asks for one process more than the job has
WRONG_PORT_OFFSET = 1  # rendezvous_fails --wrong port: rank 1 dials rank 0's port + this
OTHER_RANKS_WAIT = 2.0  # rendezvous_fails: the ranks whose error names nothing wait this many times longer
CPU_OOM_HEADROOM_MB = 256  # CPU: rank 1 may map this much more than it already maps ...
CPU_OOM_REQUEST_MB = 1024  # ... and then asks for this much in one tensor (> the headroom: refused)
GPU_OOM_FACTOR = 2  # GPU: rank 1 asks for this many times its GPU's whole memory
MIB = 2**20
LINE_PREFIX = "[clinic rank"  # every line a clinic job writes itself starts so: [clinic rank 1 t=...] ...
SHUFFLE_SALT = "coursekit lab 10 clinic"  # the per-participant order of the cases


def case_order(seed: str) -> dict[str, str]:
    """The clinic's deal for ``seed`` (a pseudonym): ``{"A": case, "B": case, ...}``, a shuffle of CASES that is
    the same every time for one seed and differs between participants."""
    if not isinstance(seed, str) or not seed:
        raise ValueError(f"seed={seed!r}: give the participant's pseudonym, e.g. 'kim'")
    digest = hashlib.sha256(f"{SHUFFLE_SALT}:{seed}".encode()).digest()
    cases = list(CASES)
    random.Random(digest).shuffle(cases)
    return dict(zip(LABELS, cases, strict=True))


def say(rank: int, text: str) -> None:
    """One line of this rank's log, stamped with the rank and the time."""
    print(f"{LINE_PREFIX} {rank} t={time.time():.6f}] {text}", flush=True)


# ---------------------------------------------------------------- the process group and the training loop


def _device(preference: str, local_rank: int) -> Any:
    import torch

    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def _join(rank: int, world_size: int, addr: str, port: int, timeout_s: float, device: Any) -> None:
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    say(rank, f"rank {rank} of world size {world_size} joins the process group ({backend}) at tcp://{addr}:{port}, "
              f"timeout {timeout_s:g} s")
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=device if device.type == "cuda" else None)
    say(rank, "process group formed")


def _prepare(rank: int, device: Any) -> tuple[Any, Any]:
    """The model and this rank's data generator, made (and one backward run) before the rendezvous: what that
    loads must not eat into the process group's short timeout. Plain SGD by hand: ``torch.optim`` alone takes
    1.5 s of CPU to import (torch 2.14, measured), times 8 ranks on CI's 2 cores."""
    import torch

    generator = torch.Generator().manual_seed(rank)
    model = torch.nn.Linear(FEATURES, 1).to(device)
    model(torch.zeros(1, FEATURES, device=device)).sum().backward()
    model.zero_grad()
    return model, generator


def _train(rank: int, world_size: int, device: Any, prepared: tuple[Any, Any],
           fault: Callable[[int], bool] | None = None) -> None:
    """STEPS steps of a linear model, gradients all-reduced by hand; ``fault(step)`` runs before each step's
    all-reduce and returns True to skip it; a barrier before the (imaginary) checkpoint ends the run."""
    import torch
    import torch.distributed as dist

    model, generator = prepared
    for step in range(STEPS):
        inputs = torch.randn(BATCH, FEATURES, generator=generator).to(device)
        loss = (model(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        model.zero_grad()
        loss.backward()
        if fault is not None and fault(step):
            say(rank, f"step {step}: loss {loss.item():.4f}, this rank's batch was empty: step skipped")
            continue
        say(rank, f"step {step}: loss {loss.item():.4f}, all-reducing the gradients")
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= world_size
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= LEARNING_RATE * parameter.grad
    say(rank, "every step done: waiting at the barrier before saving the checkpoint")
    dist.barrier()
    say(rank, "checkpoint saved")


# ---------------------------------------------------------------- the four cases


def _raise_at(rank: int) -> Callable[[int], bool]:
    def fault(step: int) -> bool:
        if rank == FAULTY_RANK and step == FAIL_AT_STEP:
            raise ValueError(f"step {step}: sample 1713 of this rank's shard has label -1, not one of 0..9 "
                             "(a corrupt record)")
        return False
    return fault


def _skip_at(rank: int) -> Callable[[int], bool]:
    return lambda step: rank == FAULTY_RANK and step == FAIL_AT_STEP


def cap_address_space(headroom_mb: int) -> int:
    """Lower this process's soft address-space limit to what it maps now + ``headroom_mb``; the new limit in
    bytes. Only this process (and children it starts) is bound; the hard limit is left as it is."""
    with open("/proc/self/status") as handle:
        mapped_kb = next(int(line.split()[1]) for line in handle if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped_kb * 1024 + headroom_mb * MIB
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def _oom_at(rank: int, device: Any, request_mb: int, headroom_mb: int) -> Callable[[int], bool]:
    import torch

    def fault(step: int) -> bool:
        if rank != FAULTY_RANK or step != FAIL_AT_STEP:
            return False
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            # torch.OutOfMemoryError; no comment on the line itself: the traceback shows that line
            torch.empty(GPU_OOM_FACTOR * total, dtype=torch.uint8, device=device)
        else:
            cap_address_space(headroom_mb)  # after the process group formed: gloo's threads are there already
            # torch's "DefaultCPUAllocator: can't allocate memory" (no comment on the line the traceback shows)
            torch.empty(request_mb * MIB, dtype=torch.uint8)
        return False
    return fault


def run_case(case: str, *, rank: int, world_size: int, local_rank: int, addr: str, port: int, device: str = "auto",
             timeout_s: float | None = None, wrong: str = "world_size", request_mb: int = CPU_OOM_REQUEST_MB,
             headroom_mb: int = CPU_OOM_HEADROOM_MB, stop_timeout_s: float = STOP_TIMEOUT_S,
             hang_timeout_s: float = HANG_TIMEOUT_S, rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
    """Run rank ``rank`` of ``case`` (see the module docstring); it raises where the case fails. The process
    group's timeout: ``timeout_s`` if given, else the case's own (``stop_``, ``hang_``, ``rendezvous_timeout_s``)."""
    if case not in CASES:
        raise ValueError(f"case={case!r}: use one of {', '.join(CASES)}")
    if wrong not in WRONG_CHOICES:
        raise ValueError(f"wrong={wrong!r}: use one of {', '.join(WRONG_CHOICES)}")
    if world_size < 2:
        raise ValueError(f"world_size={world_size}: a clinic job needs 2 processes (submit it with n_gpu=2)")
    import torch.distributed as dist

    default_timeout = {"rank_raises": stop_timeout_s, "mismatched_collectives": hang_timeout_s,
                       "rendezvous_fails": rendezvous_timeout_s, "oom_one_rank": stop_timeout_s}[case]
    timeout = float(timeout_s) if timeout_s is not None else default_timeout
    the_device = _device(device, local_rank)
    prepared = _prepare(rank, the_device)
    if case == "rendezvous_fails":
        asked, dialled = world_size, port
        if wrong == "world_size":
            asked = world_size + WRONG_WORLD_EXTRA  # the script was written for 3 GPUs
        elif rank == FAULTY_RANK:
            dialled = port + WRONG_PORT_OFFSET
        # the rank whose error names the mistake times out first (rank 0 counts the clients that joined; the
        # rank dialling the wrong port says where it dialled): the launcher then stops the other one, which
        # would otherwise race it and sometimes end first with an error that names nothing
        naming = 0 if wrong == "world_size" else FAULTY_RANK
        _join(rank, asked, addr, dialled, timeout * (1 if rank == naming else OTHER_RANKS_WAIT), the_device)
        _train(rank, asked, the_device, prepared)
    else:
        _join(rank, world_size, addr, port, timeout, the_device)
        fault = {"rank_raises": lambda: _raise_at(rank), "mismatched_collectives": lambda: _skip_at(rank),
                 "oom_one_rank": lambda: _oom_at(rank, the_device, request_mb, headroom_mb)}[case]()
        _train(rank, world_size, the_device, prepared, fault)
    dist.destroy_process_group()


# ---------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m coursekit.labs.lab10_resilience.clinic_jobs",
                                     description="One rank of a broken distributed job (lab 10's clinic).")
    parser.add_argument("case", nargs="?", choices=CASES, help="the fault; or --label with --seed")
    parser.add_argument("--label", choices=LABELS, help="the clinic job's label (with --seed: the case dealt)")
    parser.add_argument("--seed", help="the participant's pseudonym (with --label)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="the process group's timeout, whatever the case (default: the case's own, below)")
    parser.add_argument("--stop-timeout-s", type=float, default=STOP_TIMEOUT_S, help="rank_raises, oom_one_rank")
    parser.add_argument("--hang-timeout-s", type=float, default=HANG_TIMEOUT_S, help="mismatched_collectives")
    parser.add_argument("--rendezvous-timeout-s", type=float, default=RENDEZVOUS_TIMEOUT_S, help="rendezvous_fails")
    parser.add_argument("--wrong", choices=WRONG_CHOICES, default="world_size",
                        help="rendezvous_fails: a hard-coded world size or a wrong port")
    parser.add_argument("--request-mb", type=int, default=CPU_OOM_REQUEST_MB, help="oom_one_rank on a CPU")
    parser.add_argument("--headroom-mb", type=int, default=CPU_OOM_HEADROOM_MB, help="oom_one_rank on a CPU")
    args = parser.parse_args(argv)
    if (args.case is None) == (args.label is None or args.seed is None):
        parser.error("give a case, or --label and --seed (not both)")
    for option in ("timeout_s", "stop_timeout_s", "hang_timeout_s", "rendezvous_timeout_s"):
        value = getattr(args, option)
        if value is not None and not value > 0:
            parser.error(f"--{option.replace('_', '-')} {value}: give a positive number of seconds")
    if not 0 < args.headroom_mb < args.request_mb:
        parser.error(f"--headroom-mb {args.headroom_mb} --request-mb {args.request_mb}: the request must exceed "
                     "a positive headroom, or nothing runs out of memory")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from coursekit.launch import launch_info

    args = parse_args(argv)
    case = args.case or case_order(args.seed)[args.label]
    info = launch_info()
    try:
        run_case(case, rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                 addr=info.master_addr, port=info.master_port, device=args.device, timeout_s=args.timeout_s,
                 wrong=args.wrong, request_mb=args.request_mb, headroom_mb=args.headroom_mb,
                 stop_timeout_s=args.stop_timeout_s, hang_timeout_s=args.hang_timeout_s,
                 rendezvous_timeout_s=args.rendezvous_timeout_s)
    except BaseException as error:
        first = (str(error).strip().splitlines() or [""])[0]
        say(info.rank, f"failed: {type(error).__name__}: {first}")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
