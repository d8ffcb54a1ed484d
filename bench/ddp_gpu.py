"""DDP on one multi-GPU machine, through the engine: scaling, NCCL bus bandwidth, GPU binding, buckets.

One command on a machine with 2 or 4 GPUs (no Slurm needed; about 5 minutes on 2-4 H100/H200):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python bench/ddp_gpu.py

(a) ResNet-50 bf16 + channels_last, synthetic GPU-resident data, ``torchrun -m coursekit.train`` on 1, 2
    (and 4) GPUs: fixed batch per GPU (weak scaling) and fixed global batch (strong) -> images/s,
    speed-up, efficiency; (b) NCCL all-reduce bus bandwidth from 1 MiB to 1 GiB (busbw = algbw x
    2(n-1)/n, as nccl-tests); (c) "node" binding (every process sees every GPU, picks by local rank) vs
    "task" binding (CUDA_VISIBLE_DEVICES = its own GPU), bus bandwidth, NCCL's transports and ResNet-50
    images/s for both; (d) bucket_cap_mb sweep and gradient accumulation with and without no_sync, step
    time; (e) an NCCL_DEBUG=INFO log per binding (rings, trees, transports) for the notebook; and lab 06's
    participant script (lab06_data_parallel/train_ddp.py: its solution in coursekit/labs/lab06_data_parallel/scripts/, plain
    PyTorch DDP) on the same GPU counts.
Throughputs are medians over step windows after the warm-up steps. Writes bench/results/ddp_gpu.json, the
run logs next to it (``ddp_gpu_logs/``, not kept in git), and bench/REPORT-ddp.md (bench/report_ddp.py);
``--publish`` also copies the JSON to lab 06's recording, coursekit/labs/recordings/ddp_gpu.json. ``--cpu-smoke``: the same on CPU
processes with gloo and tiny sizes, to check this script anywhere (not a measurement).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, save_text  # noqa: E402

from coursekit.launch import held_ports  # noqa: E402

RESULTS = ROOT / "bench" / "results"
RECORDING = "ddp_gpu"  # --publish: coursekit/labs/recordings/ddp_gpu.json
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV"}
RUN_TIMEOUT_S = 420
MIB = 2**20
FLOAT_BYTES = 4
TRANSPORTS = ("P2P", "SHM", "NET", "CollNet", "NVLS")
TARGET_EFFICIENCY = {2: 0.93, 4: 0.90, 8: 0.85}
PARTS = ("scaling", "busbw", "binding", "buckets", "script")
SCRIPT = ROOT / "coursekit" / "labs" / "lab06_data_parallel" / "scripts" / "lab06_data_parallel" / "train_ddp.py"  # its solution
EPOCH_LINE = re.compile(r"^epoch (\d+)/\d+ .*val_acc ([\d.]+)\s+([\d.]+) img/s", re.MULTILINE)


@dataclass(frozen=True)
class Profile:
    """What one kind of machine runs."""

    name: str
    device: str
    model: str
    image_size: int
    precision: str
    batch_per_gpu: int  # weak scaling; strong scaling keeps batch_per_gpu x 1 as the global batch
    steps: int
    warmup_steps: int
    log_every: int
    bucket_mbs: tuple[float, ...]
    accumulation: int
    busbw_sizes: tuple[int, ...]  # bytes
    busbw_iters: int
    script_args: tuple[str, ...]  # lab 06's participant script (lab06_data_parallel/train_ddp.py)


GPU = Profile("gpu", "cuda", "resnet50", 224, "bf16", 256, 50, 10, 5, (1.0, 25.0, 1000.0), 4,
              tuple(MIB * 2**k for k in range(11)), 20,
              ("--epochs", "4", "--batch-size", "256", "--data-size", "65536"))
# the smoke checks the launches, not the model: the engine's own airbench net, not a torchvision ResNet (whose
# import, with torch._dynamo, costs every process seconds of CPU in CI)
CPU_SMOKE = Profile("cpu-smoke", "cpu", "airbench", 32, "fp32", 8, 6, 2, 2, (0.1, 25.0), 2,
                    tuple(64 * 1024 * 4**k for k in range(3)), 2, ("--epochs", "2", "--data-size", "512"))


def base_env(profile: Profile) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name, value in NCCL_ENV.items():
        env.setdefault(name, value)
    if profile.device == "cpu":
        env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


# ---------------------------------------------------------------- launching


def torchrun(world: int, words: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node",
            str(world), *words]


def launch(name: str, world: int, words: list[str], env: dict[str, str], logs: Path, binding: str | None = None,
           ) -> dict[str, Any]:
    """Run ``words`` (after ``python``) on ``world`` processes: torchrun, or one process per GPU like srun
    with ``binding`` "node" (all GPUs visible) or "task" (CUDA_VISIBLE_DEVICES = its own GPU)."""
    log = logs / f"{name}.log"
    started = time.perf_counter()
    with log.open("w") as out, held_ports(1) as (port,):  # held until the ranks end
        if binding is None:
            command = torchrun(world, words)
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            processes = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)]
        else:
            processes = []
            visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d] or [str(i) for i in range(world)]
            for rank in range(world):
                rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                            "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
                if binding == "task" and env.get("CUDA_VISIBLE_DEVICES") != "":
                    rank_env["CUDA_VISIBLE_DEVICES"] = visible[rank]
                command = [sys.executable, "-u", *words]
                out.write(f"$ RANK={rank} CUDA_VISIBLE_DEVICES={rank_env.get('CUDA_VISIBLE_DEVICES', '')} "
                          f"{' '.join(command)}\n")
                out.flush()
                processes.append(subprocess.Popen(command, env=rank_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
        codes = _wait_all(processes)
    seconds = time.perf_counter() - started
    ok = all(code == 0 for code in codes)
    print(f"  {name}: {'ok' if ok else f'FAILED {codes}'} in {seconds:.0f} s (log {log.name})", flush=True)
    return {"ok": ok, "exit_codes": codes, "wall_s": seconds, "log": log.name}


def _wait_all(processes: list[subprocess.Popen]) -> list[int | None]:
    """Wait for every process; when one fails (or time runs out) stop the others."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        codes = [p.poll() for p in processes]
        if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
            break
        time.sleep(0.2)
    for p in processes:
        if p.poll() is None:
            p.terminate()
    return [p.wait() for p in processes]


# ---------------------------------------------------------------- (a), (c), (d): the engine


def engine_words(profile: Profile, batch: int, out: Path, *extra: str) -> list[str]:
    return ["-m", "coursekit.train", "--model", profile.model, "--dataset", "synthetic", "--gpu-resident",
            "--image-size", str(profile.image_size), "--precision", profile.precision, "--channels-last",
            "--batch-size", str(batch), "--test-steps", str(profile.steps), "--log-every", str(profile.log_every),
            "--lr", "0.01", "--progress", "off", "--device", profile.device, "--out", str(out), *extra]


def engine_run(name: str, profile: Profile, world: int, batch: int, env: dict[str, str], logs: Path, scratch: Path,
               *extra: str, binding: str | None = None) -> dict[str, Any]:
    """One engine run; images/s (global and per process: images / wall time, coursekit/metrics.py) and step time
    after the warm-up."""
    from coursekit.metrics import read_metrics, steps, throughput, with_window_fields

    out = scratch / name
    words = engine_words(profile, batch, out, *extra)
    row: dict[str, Any] = {"name": name, "world_size": world, "batch_per_gpu": batch, "global_batch": batch * world,
                           "options": list(extra), "binding": binding or "node (torchrun)",
                           **launch(name, world, words, env, logs, binding)}
    records = [r for r in with_window_fields(steps(read_metrics(out))) if r["first_step"] > profile.warmup_steps] \
        if out.exists() else []
    if row["ok"] and records:
        local, _ = throughput(records, "images_per_s")
        row.update(img_s=throughput(records)[0], img_s_per_gpu=local,
                   step_ms=1000 * batch / local, windows=len(records))
    else:
        row["ok"] = False
    return row


def scaling(profile: Profile, worlds: list[int], env: dict[str, str], logs: Path, scratch: Path,
            repeats: int = 1, modes: tuple[str, ...] = ("weak", "strong"),
            strong_global_batch: int | None = None) -> list[dict[str, Any]]:
    """Weak and strong scaling; with ``repeats`` > 1 the configurations are run in turn (1, 2, 4, 1, 2, 4,
    ...) so that drift hits them alike, and each row holds the mean and sample std of its repeats.

    Weak scaling keeps ``profile.batch_per_gpu`` per GPU; strong scaling keeps ``strong_global_batch``
    (default: the same number) as the global batch, with its own 1-GPU run as the base when it differs."""
    strong_global = strong_global_batch or profile.batch_per_gpu
    configs = [("weak", 1)] + [(mode, world) for world in worlds for mode in ("weak", "strong")
                               if mode in modes and world > 1]
    if "strong" in modes and strong_global != profile.batch_per_gpu:
        configs.insert(1, ("strong", 1))
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in configs}
    for repeat in range(repeats):
        for mode, world in configs:
            batch = profile.batch_per_gpu if mode == "weak" else strong_global // world
            suffix = f"_r{repeat + 1}" if repeats > 1 else ""
            runs[(mode, world)].append(engine_run(f"scaling_{mode}_{world}{suffix}", profile, world, batch, env,
                                                  logs, scratch))
    rows = []
    for (mode, world), done in runs.items():
        row = {**done[0], "mode": mode, "name": f"scaling_{mode}_{world}", "repeats": len(done),
               "ok": all(r["ok"] for r in done)}
        if row["ok"]:
            row["img_s_runs"] = [r["img_s"] for r in done]
            row["img_s"] = statistics.fmean(row["img_s_runs"])
            row["img_s_std"] = statistics.stdev(row["img_s_runs"]) if len(done) > 1 else 0.0
            row["img_s_per_gpu"] = statistics.fmean(r["img_s_per_gpu"] for r in done)
            row["step_ms"] = statistics.fmean(r["step_ms"] for r in done)
        rows.append(row)
    bases = {mode: next((r for r in rows if r["world_size"] == 1 and r["ok"] and r["mode"] == mode), None)
             for mode in ("weak", "strong")}
    bases["strong"] = bases["strong"] or bases["weak"]
    for row in rows:
        base = bases[row["mode"]]
        if base and row["ok"]:
            row["speedup"] = row["img_s"] / base["img_s"]
            row["efficiency"] = row["speedup"] / row["world_size"]
            if len(row["img_s_runs"]) > 1:  # efficiency of each repeat against the 1-GPU run of the same round
                per_round = [r / b / row["world_size"] for r, b in zip(row["img_s_runs"], base["img_s_runs"], strict=True)]
                row["efficiency_std"] = statistics.stdev(per_round)
    return rows


def buckets(profile: Profile, world: int, env: dict[str, str], logs: Path, scratch: Path) -> dict[str, Any]:
    """bucket_cap_mb sweep; accumulation with no_sync (default) and with an all-reduce per micro-batch."""
    batch = profile.batch_per_gpu
    sweep = [engine_run(f"bucket_{mb:g}mb_{world}", profile, world, batch, env, logs, scratch,
                        "--bucket-cap-mb", str(mb)) for mb in profile.bucket_mbs]
    accumulation = [engine_run(f"accumulation_{name}_{world}", profile, world, batch, env, logs, scratch,
                               "--accumulation-steps", str(profile.accumulation), *flags)
                    for name, flags in (("no_sync", []), ("sync_every_micro_batch", ["--sync-every-micro-batch"]))]
    return {"world_size": world, "bucket_sweep": sweep, "accumulation_steps": profile.accumulation,
            "accumulation": accumulation}


def participant_script(profile: Profile, worlds: list[int], env: dict[str, str], logs: Path, scratch: Path
                       ) -> list[dict[str, Any]]:
    """Lab 06's DDP script (plain PyTorch, a small CNN) through torchrun; the last epoch's images/s."""
    if not SCRIPT.exists():
        return []
    rows = []
    for world in worlds:
        name = f"script_{world}"
        words = [str(SCRIPT), *profile.script_args, "--out", str(scratch / name)]
        row = {"name": name, "world_size": world, "options": list(profile.script_args),
               **launch(name, world, words, env, logs)}
        epochs = EPOCH_LINE.findall((logs / row["log"]).read_text(errors="replace"))
        if row["ok"] and epochs:
            row.update(img_s=float(epochs[-1][2]), val_acc=float(epochs[-1][1]), epochs=len(epochs))
        else:
            row["ok"] = False
        rows.append(row)
    base = next((r for r in rows if r["world_size"] == 1 and r["ok"]), None)
    for row in rows:
        if base and row["ok"]:
            row["speedup"] = row["img_s"] / base["img_s"]
    return rows


# ---------------------------------------------------------------- (b), (c), (e): NCCL


def allreduce_worker(sizes: list[int], iters: int, device: str, out: Path) -> None:
    """In each process: all-reduce each size ``iters`` times after a warm-up; rank 0 writes the times."""
    import torch
    import torch.distributed as dist

    from coursekit.train.parallel.process_group import cleanup, init_distributed

    ctx = init_distributed(device)
    rows = []
    for size in sizes:
        tensor = torch.ones(size // FLOAT_BYTES, device=ctx.device)
        for _ in range(max(2, iters // 4)):
            dist.all_reduce(tensor)
        sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
        sync()
        dist.barrier()
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        sync()
        seconds = (time.perf_counter() - started) / iters
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2 * (ctx.world_size - 1) / ctx.world_size})
        del tensor
    if ctx.is_main:
        out.write_text(json.dumps({"world_size": ctx.world_size, "backend": ctx.backend, "rows": rows}))
    cleanup()


def transports(log: Path) -> dict[str, Any]:
    """What NCCL_DEBUG=INFO says: connections per transport, ring and tree lines, NCCL's version."""
    lines = (log.read_text(errors="replace") if log.exists() else "").splitlines()
    connections = [line for line in lines if re.search(r"Channel \d+/\d+ : .* via ", line)]
    version = re.search(r"NCCL version ([\d.]+\S*)", "\n".join(lines))
    return {"connections": len(connections),
            "via": {name: n for name in TRANSPORTS if (n := sum(f"via {name}" in line for line in connections))},
            "examples": [line.split("NCCL INFO ")[-1] for line in connections[:4]],
            "ring_lines": [line.split("NCCL INFO ")[-1] for line in lines
                           if re.search(r"Channel \d+/\d+ :(\s+\d+)+\s*$", line)][:4],
            "tree_lines": [line.split("NCCL INFO ")[-1] for line in lines if "Trees" in line][:2],
            "nccl_version": version.group(1) if version else None}


def busbw(name: str, profile: Profile, world: int, env: dict[str, str], logs: Path, scratch: Path,
          binding: str | None = None, debug: bool = False) -> dict[str, Any]:
    out = scratch / f"{name}.json"
    words = [str(Path(__file__).resolve()), "--allreduce-worker", str(out), "--device", profile.device,
             "--sizes", ",".join(map(str, profile.busbw_sizes)), "--iters", str(profile.busbw_iters)]
    run_env = {**env, **(NCCL_DEBUG_ENV if debug else {})}
    row = {"name": name, "world_size": world, "binding": binding or "node (torchrun)",
           **launch(name, world, words, run_env, logs, binding)}
    if row["ok"] and out.exists():
        row.update(json.loads(out.read_text()))
    if debug:
        row["nccl_debug"] = transports(logs / row["log"])
    return row


def binding_comparison(profile: Profile, world: int, env: dict[str, str], logs: Path, scratch: Path
                       ) -> dict[str, Any]:
    """Bus bandwidth and the engine under each binding; the CPU smoke, where no GPU binds anything and the engine's
    speed means nothing, runs the engine under task binding only (the one that sets each process's devices)."""
    result: dict[str, Any] = {"world_size": world}
    for binding in ("node", "task"):
        result[binding] = {
            "busbw": busbw(f"busbw_{binding}_{world}", profile, world, env, logs, scratch, binding, debug=True)}
        if profile.device != "cpu" or binding == "task":
            result[binding]["engine"] = engine_run(f"engine_{binding}_{world}", profile, world, profile.batch_per_gpu,
                                                   env, logs, scratch, binding=binding)
    return result


# ---------------------------------------------------------------- the whole benchmark


def machine(profile: Profile) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"profile": profile.name, "hostname": platform.node(), "cpus": os.cpu_count(),
                            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    if profile.device == "cuda":
        try:
            version = torch.cuda.nccl.version()  # a tuple (2, 27, 5); an int in old torch
        except (AttributeError, RuntimeError):  # a torch built without NCCL: the record says so
            version = None
        info.update(gpus=torch.cuda.device_count(), device_name=torch.cuda.get_device_name(0),
                    nccl=".".join(map(str, version)) if isinstance(version, tuple) else
                    (None if version is None else str(version)))
    else:
        info.update(gpus=0, device_name=f"CPU {platform.machine()}", nccl=None)
    return info


def gpu_count(profile: Profile, requested: int | None) -> int:
    if profile.device == "cpu":
        return requested or 2
    import torch

    available = torch.cuda.device_count()
    if available < 2:
        raise SystemExit(f"bench/ddp_gpu.py needs at least 2 GPUs; this machine shows {available} "
                         "(use --cpu-smoke to check the script on CPUs)")
    if requested is not None and requested > min(available, 8):
        print(f"bench/ddp_gpu.py: --gpus {requested} asked, this machine shows {available} GPU(s) (the script uses at "
              f"most 8): the runs go up to {min(available, 8)} GPUs only; run it on a machine with {requested} GPUs for "
              "the larger runs", file=sys.stderr, flush=True)
    return min(requested or available, available, 8)


def binding_logs(result: dict[str, Any], logs: Path) -> dict[str, Path]:
    """The NCCL_DEBUG=INFO log of each binding's bus-bandwidth run (lab 06 shows them), where it was written."""
    runs = {binding: logs / row["busbw"]["log"] for binding, row in (result.get("binding") or {}).items()
            if isinstance(row, dict) and (row.get("busbw") or {}).get("log")}
    return {binding: path for binding, path in runs.items() if path.exists()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="gloo on CPU processes, tiny sizes (a check)")
    parser.add_argument("--gpus", type=int, default=None, help="most GPUs to use (default: all, at most 8)")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (default bench/results/ddp_gpu.json)")
    parser.add_argument("--report", type=Path, default=None, help="Markdown report (default bench/REPORT-ddp.md)")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the JSON to coursekit/labs/recordings/{RECORDING}.json (what the labs read)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run (default all: {','.join(PARTS)})")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each scaling configuration (mean ± std)")
    parser.add_argument("--scaling-modes", default="weak,strong", help="weak, strong or both (default)")
    parser.add_argument("--steps", type=int, default=None, help="engine steps per run (default: the profile's)")
    parser.add_argument("--strong-global-batch", type=int, default=None,
                        help="global batch kept by strong scaling (default: the batch per GPU of weak scaling)")
    parser.add_argument("--allreduce-worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    parser.add_argument("--iters", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.publish and args.cpu_smoke:
        parser.error("--publish writes the labs' recording: not from a --cpu-smoke run")
    if args.allreduce_worker:
        allreduce_worker([int(s) for s in args.sizes.split(",")], args.iters, args.device, args.allreduce_worker)
        return 0
    profile = CPU_SMOKE if args.cpu_smoke else GPU
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: use 1 or more")
    if args.steps is not None:
        if args.steps <= profile.warmup_steps:
            parser.error(f"--steps {args.steps}: use more than the {profile.warmup_steps} warm-up steps")
        profile = replace(profile, steps=args.steps)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not parts or any(part not in PARTS for part in parts):
        parser.error(f"--parts {args.parts!r}: use a comma-separated subset of {','.join(PARTS)}")
    smoke_dir = Path(tempfile.gettempdir()) / "coursekit-ddp-smoke"
    out = args.out or (smoke_dir / "ddp_gpu.json" if args.cpu_smoke else RESULTS / "ddp_gpu.json")
    report = args.report or (smoke_dir / "REPORT-ddp.md" if args.cpu_smoke else ROOT / "bench" / "REPORT-ddp.md")
    check_writable(out)
    check_writable(report, "--report")
    logs = out.parent / f"{out.stem}_logs"
    logs.mkdir(parents=True, exist_ok=True)
    most = gpu_count(profile, args.gpus)
    worlds = [w for w in (1, 2, 4, 8) if w <= most]
    env = base_env(profile)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([f"{k}={os.environ[k]}" for k in NCCL_ENV if k in os.environ]
                            + ["python", "bench/ddp_gpu.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(profile), "nccl_env": {k: env.get(k) for k in NCCL_ENV}, "profile": asdict(profile),
        "targets": {str(k): v for k, v in TARGET_EFFICIENCY.items()}}
    pair = min(2, most)  # binding and buckets: the lab's 2-GPU machine
    steps = {"scaling": ("(a) scaling on {worlds} processes", lambda: scaling(profile, worlds, env, logs, scratch, args.repeats,
                                                                  tuple(args.scaling_modes.split(",")),
                                                                  args.strong_global_batch)),
             "busbw": ("(b) all-reduce bus bandwidth", lambda: [busbw(f"busbw_{w}", profile, w, env, logs, scratch)
                                                            for w in worlds if w > 1]),
             "binding": ("(c, e) node vs task binding, NCCL_DEBUG=INFO",
                         lambda: binding_comparison(profile, pair, env, logs, scratch)),
             "buckets": ("(d) buckets and no_sync", lambda: buckets(profile, pair, env, logs, scratch)),
             "script": ("lab 06's participant script (DDP version) through torchrun",
                        lambda: participant_script(profile, worlds, env, logs, scratch))}
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as scratch_name:
        scratch = Path(scratch_name)
        for part in parts:
            title, work = steps[part]
            print(title.format(worlds=worlds), flush=True)
            result[part] = work()
    result["total_s"] = time.perf_counter() - started
    written = save_text(out, json.dumps(result, indent=2) + "\n")  # first: nothing after it can lose it
    from report_ddp import all_runs, write_report

    try:
        write_report(result, report, logs_dir=logs.relative_to(ROOT) if logs.is_relative_to(ROOT) else logs)
    except Exception as error:  # noqa: BLE001 - the measurements are written: say how to get the report
        print(f"bench/ddp_gpu.py: the report could not be written ({type(error).__name__}: {error}); the results "
              f"are in {written}: python bench/report_ddp.py --json {written} --out {report}", file=sys.stderr)
        return 1
    print(f"wrote {written} and {report} in {result['total_s']:.0f} s", flush=True)
    ok = all(run["ok"] for run in all_runs(result)) and written == out
    if args.publish:
        if ok:
            from publish import publish  # bench/publish.py
            publish(out, RECORDING, logs=binding_logs(result, logs))
        else:
            print("not published: some runs failed (the report lists them)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
