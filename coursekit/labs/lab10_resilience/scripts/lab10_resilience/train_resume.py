"""A training run that outlives its time limit: it saves a checkpoint, the job is requeued, and it resumes
exactly where it stopped, as if it had never been stopped.

    python train_resume.py --out run --steps 60 --checkpoint-every 10                          # the whole run
    python train_resume.py --out run2 --steps 60 --checkpoint-every 10 --interrupt-at-step 25  # stops after step 25
    python train_resume.py --out run2 --steps 60 --checkpoint-every 10                         # ... and resumes

At its start the run resumes from the checkpoint in --out, if there is one (``resume``). It saves a checkpoint
(``save_checkpoint``) every --checkpoint-every steps, at its end, and when it is told to stop: Slurm's
pre-timeout signal (SIGUSR2, what submitit asks Slurm for) or the SIGTERM that ends a requeued or cancelled job.
Then it saves at the end of the step it is in and exits with code 75 (EX_TEMPFAIL: "try again"); the requeued job
starts the same command, which resumes. ``--interrupt-at-step J`` sends the signal to itself after step J: the
checker's stand-in for Slurm's clock.

Every step appends one line to ``--out/steps.jsonl``: the step, epoch, position in the epoch, the learning rate,
a digest of the batch's sample indices, of the random generator's state and of the optimizer's momentum, and
the loss. Check the script with ``labs.check_resume_script("lab10_resilience/train_resume.py")``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

FEATURES = 32
HIDDEN = 64
N_CLASSES = 4
DROPOUT = 0.2  # dropout draws random numbers every step: the random generator's state is part of the run
MOMENTUM = 0.9  # SGD keeps a momentum buffer per weight: the optimizer's state is part of the run
WEIGHT_DECAY = 5e-4
WARMUP_SHARE = 0.1  # the learning rate rises over the first 10 % of the steps, then follows a cosine to 0
CHECKPOINT = "checkpoint.pt"
STEPS_LOG = "steps.jsonl"
STOPPED_EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): stopped early, run it again to continue
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)  # Slurm's pre-timeout signal (submitit's); the end of a job


class StopRequest:
    """Set by a stop signal; the loop saves and exits at the end of the step it is in."""

    def __init__(self) -> None:
        self.signal: int | None = None
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, self.note)

    def note(self, signum: int, frame: object) -> None:
        self.signal = self.signal or signum

    @property
    def requested(self) -> bool:
        return self.signal is not None


def make_dataset(size: int, seed: int) -> TensorDataset:
    """`size` samples of a noisy 4-class problem, with each sample's index (the batch digest reads them)."""
    g = torch.Generator().manual_seed(seed)
    centres = 2 * torch.randn(N_CLASSES, FEATURES, generator=g)
    labels = torch.randint(N_CLASSES, (size,), generator=g)
    features = centres[labels] + 3 * torch.randn(size, FEATURES, generator=g)
    return TensorDataset(features, labels, torch.arange(size))


def make_model(hidden: int = HIDDEN) -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(DROPOUT),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(hidden, N_CLASSES))


def make_scheduler(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """Linear warm-up, then a cosine to 0 at the last step; stepped once per optimizer step."""
    warmup = max(1, int(WARMUP_SHARE * steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def rng_states() -> dict[str, torch.Tensor]:
    """The random generators' states: the CPU's and, where CUDA runs, each GPU's (dropout on a GPU uses those)."""
    states = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.update({f"cuda:{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    return states


def set_rng_states(states: dict[str, torch.Tensor]) -> None:
    """Restore what :func:`rng_states` returned."""
    torch.set_rng_state(states["cpu"])
    for name, state in states.items():
        if name.startswith("cuda:") and torch.cuda.is_available():
            torch.cuda.set_rng_state(state, int(name.split(":")[1]))


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, progress: dict[str, int]) -> None:
    """Write all the run needs to continue exactly into `path`, atomically."""
    # TODO 1: put in one dict: "model", "optimizer" and "scheduler" (each one's state_dict()), "rng" (rng_states())
    #   and the progress (its "epoch", "position" and "step"). torch.save it to a temporary file beside `path`
    #   (e.g. path.with_suffix(".tmp")), then os.replace(temporary, path): a job killed in the middle of
    #   torch.save then leaves the previous checkpoint whole, never a half-written one.
    ### BEGIN SOLUTION
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "rng": rng_states(), "epoch": progress["epoch"], "position": progress["position"],
             "step": progress["step"]}
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    os.replace(temporary, path)
    ### END SOLUTION


def resume(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
           scheduler: torch.optim.lr_scheduler.LRScheduler) -> dict[str, int]:
    """Restore the run saved in `path` and return its progress; without a checkpoint, the start."""
    if not path.is_file():
        return {"epoch": 0, "position": 0, "step": 0}
    # TODO 2: torch.load the checkpoint (map_location="cpu", weights_only=True), load the model's, the
    #   optimizer's and the scheduler's states into them (load_state_dict), restore the random generators
    #   (set_rng_states), and return {"epoch": ..., "position": ..., "step": ...} as they were saved.
    ### BEGIN SOLUTION
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_states(state["rng"])
    return {"epoch": state["epoch"], "position": state["position"], "step": state["step"]}
    ### END SOLUTION


def digest(*tensors: torch.Tensor) -> str:
    """A short fingerprint of tensors' bytes: equal runs give equal digests."""
    h = hashlib.blake2b(digest_size=8)
    for tensor in tensors:
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def momentum_norm(optimizer: torch.optim.Optimizer) -> float:
    """The size of the optimizer's momentum buffers (0 before the first step, or when they were lost)."""
    buffers = [s["momentum_buffer"] for s in optimizer.state.values() if s.get("momentum_buffer") is not None]
    return math.sqrt(sum(float(b.double().square().sum()) for b in buffers))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder of the checkpoint and steps.jsonl (resumed if there)")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps of the whole run")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="save every this many steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data-size", type=int, default=320, help="training samples (an epoch: size/batch steps)")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help="width of the model's hidden layers")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--interrupt-at-step", type=int, default=0,
                        help="send the stop signal (SIGUSR2) to itself after this step (0: never)")
    parser.add_argument("--step-time", type=float, default=0.0,
                        help="make each step last at least this many seconds (a larger job's pace)")
    args = parser.parse_args(argv)
    for name in ("steps", "checkpoint_every", "batch_size", "data_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.data_size < args.batch_size:
        parser.error("--data-size must be at least --batch-size (an epoch has at least one batch)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopRequest()  # first: the signal may come at any moment
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    dataset = make_dataset(args.data_size, args.seed)
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    scheduler = make_scheduler(optimizer, args.steps)
    # one process here; the same sampler deals each rank its share under DDP. set_epoch(e) picks epoch e's order
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=args.seed)
    # the loader's own generator: each new iterator draws a seed from it, not from the global generator that
    # dropout uses (a resumed run starts its epoch's iterator at another moment than the uninterrupted one)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        generator=torch.Generator())
    progress = resume(out / CHECKPOINT, model, optimizer, scheduler)
    log = open(out / STEPS_LOG, "a")  # noqa: SIM115 - open for the whole run, closed below
    log.write(json.dumps({"event": "start", "pid": os.getpid(), "resumed_at": progress["step"],
                          "epoch": progress["epoch"], "position": progress["position"]}) + "\n")
    log.flush()
    print(f"{'resuming at step ' + str(progress['step']) if progress['step'] else 'starting'}: {args.steps} steps, "
          f"{len(loader)} per epoch, device {device}", flush=True)
    model.train()
    last_loss = float("nan")
    while progress["step"] < args.steps and not stop.requested:
        sampler.set_epoch(progress["epoch"])
        # the batches of this epoch the run already trained on are skipped
        for features, labels, indices in itertools.islice(loader, progress["position"], None):
            started = time.perf_counter()
            record = {"step": progress["step"] + 1, "epoch": progress["epoch"], "position": progress["position"],
                      "lr": optimizer.param_groups[0]["lr"], "batch": digest(indices),
                      "rng": digest(*rng_states().values()), "momentum": momentum_norm(optimizer)}
            loss = nn.functional.cross_entropy(model(features.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            progress["step"] += 1
            progress["position"] += 1
            last_loss = loss.item()
            log.write(json.dumps({**record, "loss": last_loss}) + "\n")
            log.flush()
            if progress["step"] == args.interrupt_at_step:
                os.kill(os.getpid(), signal.SIGUSR2)  # as Slurm does before the time limit
            time.sleep(max(0.0, args.step_time - (time.perf_counter() - started)))
            if stop.requested or progress["step"] % args.checkpoint_every == 0 or progress["step"] == args.steps:
                save_checkpoint(out / CHECKPOINT, model, optimizer, scheduler, progress)
            if stop.requested or progress["step"] == args.steps:
                break
        else:  # the epoch ran out: the next one starts at its first batch
            progress["epoch"] += 1
            progress["position"] = 0
    if stop.requested:
        name = signal.Signals(stop.signal).name
        log.write(json.dumps({"event": "stopped", "signal": name, "step": progress["step"]}) + "\n")
        log.close()
        print(f"{name} received: saved at step {progress['step']} of {args.steps}; run again to resume", flush=True)
        return STOPPED_EXIT_CODE
    log.write(json.dumps({"event": "done", "step": progress["step"]}) + "\n")
    log.close()
    print(f"done: {progress['step']} steps, last loss {last_loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
