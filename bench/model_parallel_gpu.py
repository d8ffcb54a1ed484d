"""Lab 08's GPU record: model-parallel strategies of the engine on 2 (or 4) GPUs; writes JSON + the report.

    python bench/model_parallel_gpu.py              # on a machine with >= 2 GPUs; <= 6 min on 2 x H100
    python bench/model_parallel_gpu.py --cpu-smoke  # gloo on 2 CPU processes, tiny sizes (checks the script)

1. **Too large for DDP**: a GPT sized from the GPU's memory so that its fp32 AdamW training state
   (16 bytes per parameter: weights, gradients, m, v) exceeds one GPU by ``OVERSIZE`` — DDP over two GPUs
   (a full copy on each) runs out of memory — while FSDP2 (ZeRO-3, 8 bytes per parameter on each of two)
   fits. Both runs are recorded, the OOM included.
2. **Per strategy** on a course-size GPT (``COURSE``): memory per GPU (the engine's per-rank local
   state and ``max_memory_allocated``) and tokens/s for DDP, ZeRO-1, FSDP2 zero2 / zero3, tensor parallel,
   pipeline GPipe / 1F1B over a sweep of micro-batches, and activation checkpointing; with 4 GPUs visible
   also the 2-D fsdp_tp mesh.

Every run is ``torchrun -m coursekit.train`` (the engine the lab uses); a run that does not finish within its
time limit is stopped and recorded as such. New runs stop being launched after ``BUDGET_S``.
Results: bench/results/model_parallel_gpu.json (``--cpu-smoke``: model_parallel_cpu_smoke.json) and
bench/REPORT-model-parallel.md (bench/report_model_parallel.py); ``--publish`` also copies the JSON to lab 08's
recording, coursekit/labs/recordings/model_parallel_gpu.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, read_json, save_text  # noqa: E402

RECORDING = "model_parallel_gpu"  # --publish: coursekit/labs/recordings/model_parallel_gpu.json
STATE_BYTES_PER_PARAM_DDP = 16  # fp32 weights 4 + gradients 4 + Adam m 4 + v 4
OVERSIZE = 1.15  # the large model's DDP state is this many times one GPU's memory
BIG_DIM, BIG_HEADS, BIG_SEQ, BIG_VOCAB, BIG_BATCH = 4096, 32, 1024, 8192, 2
BUDGET_S = 330.0  # no new run after this (the lead's command budget is 10 min; the target is <= 6)
BIG_TIMEOUT_S, RUN_TIMEOUT_S = 150.0, 75.0
COURSE = {"gpt_layers": 8, "gpt_dim": 2048, "gpt_heads": 16, "seq_len": 1024, "vocab_size": 8192,
          "batch_size": 16, "num_samples": 65_536, "steps": 12, "precision": "bf16"}  # about 0.4 B parameters
GPU_INIT_THREADS = "8"  # CPU threads per process while the large model is built and initialised
SMOKE = {"gpt_layers": 4, "gpt_dim": 64, "gpt_heads": 4, "seq_len": 32, "vocab_size": 32, "batch_size": 16,
         "num_samples": 2048, "steps": 4, "precision": "fp32"}
MICROBATCHES = (1, 2, 4, 8)
# the formula of coursekit.train.memory per --parallel (FSDP2's zero2 holds ZeRO-3's shares between steps, where
# the engine measures); autocast keeps fp32 weights, gradients and Adam state: the fp32 formula
FORMULA = {"ddp": "ddp", "zero1": "zero1", "zero2": "zero3", "zero3": "zero3", "tensor": "tp", "pipeline": "pp",
           "fsdp_tp": "zero3"}
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")
GIB = 2**30


def params_of(layers: int, dim: int, vocab: int, seq: int) -> int:
    """Ψ of the engine's GPT (coursekit/train/models/gpt.py): per block 12 D² + 10 D (attention 4 D² + D: q, k, v
    without bias; MLP 8 D² + 5 D; 2 norms 4 D), token and position embeddings, final norm, head without bias."""
    return layers * (12 * dim * dim + 10 * dim) + vocab * dim * 2 + seq * dim + 2 * dim


def tp_split_of(layers: int, dim: int) -> int:
    """Parameters tensor parallelism splits: per block q, k, v, o (4 D²) and fc1 with its bias, fc2 (8 D² + 4 D);
    embeddings, norms, the head and the row-wise biases stay whole (as coursekit.labs.lab08_model_parallel counts)."""
    return layers * (12 * dim * dim + 4 * dim)


def big_layers(gpu_bytes: int, dim: int = BIG_DIM) -> int:
    """Blocks (even: two pipeline stages would split them) so that 16 Ψ ≈ OVERSIZE x one GPU's memory."""
    layers = OVERSIZE * gpu_bytes / STATE_BYTES_PER_PARAM_DDP / (12 * dim * dim)
    return max(2, 2 * round(layers / 2))


def engine_args(sizes: dict[str, Any], out: Path, **options: Any) -> list[str]:
    args = ["-m", "coursekit.train", "--model", "gpt", "--dataset", "tokens", "--optimizer", "adamw",
            "--lr", "3e-4", "--progress", "off", "--out", str(out)]
    for key, value in {**sizes, **options}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value not in (None, False):
            args += [flag, str(value)]
    return args


def run(name: str, world: int, sizes: dict[str, Any], scratch: Path, env: dict[str, str], timeout_s: float,
        **options: Any) -> dict[str, Any]:
    """One torchrun of the engine; the summary's ``parallel`` block and whether it ran out of memory."""
    out = scratch / name
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
               *engine_args(sizes, out, **options)]
    started = time.perf_counter()
    log = scratch / f"{name}.log"
    with log.open("w") as handle:
        try:
            code = subprocess.run(command, env=env, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                  timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = None
    text = log.read_text(errors="replace")
    summary = {}
    metrics = out / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a line cut short by a run stopped at its time limit
                continue
            if isinstance(record, dict) and record.get("kind") == "summary":
                summary = record
    block = summary.get("parallel") or {}
    ranks = block.get("ranks") or []
    state = [sum(r.get(k) or 0 for k in ("param_bytes", "grad_bytes", "optimizer_bytes")) for r in ranks]
    peaks = [r.get("peak_memory_bytes") for r in ranks if r.get("peak_memory_bytes")]
    sys.path.insert(0, str(ROOT))
    from coursekit.train.memory import sharded_memory

    psi = params_of(sizes["gpt_layers"], sizes["gpt_dim"], sizes["vocab_size"], sizes["seq_len"])
    sharding = FORMULA[options.get("parallel", "ddp")]
    if sharding == "tp":  # only the blocks' matrices are split; the rest is whole on every rank
        split = tp_split_of(sizes["gpt_layers"], sizes["gpt_dim"])
        formula = (sharded_memory(split, "tp", world, "adamw", "fp32").total_bytes
                   + sharded_memory(psi - split, "ddp", 1, "adamw", "fp32").total_bytes) / GIB
    else:
        formula = sharded_memory(psi, sharding, world, "adamw", "fp32").total_bytes / GIB
    row = {"name": name, "n_gpu": world, "formula_gb_per_gpu": formula, "options": options, "command": " ".join(shlex.quote(c) for c in command),
           "ok": code == 0, "exit_code": code, "timed_out": code is None, "wall_s": round(time.perf_counter() - started, 1),
           "oom": any(marker in text for marker in OOM_MARKERS),
           "state_gb_per_gpu": max(state) / GIB if state else None, "peak_mem_gb": max(peaks) / GIB if peaks else None,
           "tokens_per_s": block.get("tokens_per_s"), "step_time_s": block.get("step_time_s"),
           "bubble_measured": block.get("bubble_fraction"), "bubble_theory": block.get("bubble_fraction_theory"),
           "final_loss": block.get("final_loss"), "num_parameters": summary.get("num_parameters"),
           "log_tail": text[-1500:] if code != 0 else ""}
    verdict = "OOM" if row["oom"] else ("ok" if row["ok"] else ("TIMEOUT" if code is None else f"FAILED ({code})"))
    figures = ", ".join(f"{k} {row[k]:.3g}" for k in ("peak_mem_gb", "state_gb_per_gpu", "tokens_per_s")
                        if isinstance(row[k], (int, float)))
    print(f"  {name}: {verdict} in {row['wall_s']:.0f} s{'; ' + figures if figures else ''}", flush=True)
    return row


def machine(cpu: bool) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"hostname": platform.node(), "torch": torch.__version__, "cuda": torch.version.cuda,
                            "python": platform.python_version()}
    if cpu:
        info.update(gpus=0, device_name=f"CPU {platform.machine()} (gloo smoke test)", gpu_memory_gib=None)
    else:
        props = torch.cuda.get_device_properties(0)
        info.update(gpus=torch.cuda.device_count(), device_name=props.name, gpu_memory_gib=props.total_memory / GIB)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="gloo on 2 CPU processes, tiny sizes")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: bench/results/...)")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the JSON to coursekit/labs/recordings/{RECORDING}.json (what the labs read)")
    parser.add_argument("--complete", type=Path, default=None,
                        help="an earlier result JSON: keep its runs and run only those it skipped or lacks")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="no new run after this many seconds")
    args = parser.parse_args(argv)
    if args.publish and args.cpu_smoke:
        parser.error("--publish writes the labs' recording: not from a --cpu-smoke run")
    earlier = {}
    if args.complete is not None:
        earlier = {r["name"]: r for r in read_json(args.complete, "earlier result (--complete)").get("runs", [])
                   if not r.get("skipped")}
    import torch

    cpu = args.cpu_smoke
    path = args.out or RESULTS / ("model_parallel_cpu_smoke.json" if cpu else "model_parallel_gpu.json")
    check_writable(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if cpu:
        env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        gpus = 2
    else:
        gpus = torch.cuda.device_count()
        env.setdefault("OMP_NUM_THREADS", GPU_INIT_THREADS)
        if gpus < 2:
            raise SystemExit(f"bench/model_parallel_gpu.py needs at least 2 GPUs; this machine shows {gpus} "
                             "(use --cpu-smoke to check the script on CPUs)")
    info = machine(cpu)
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": info, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "command": "python bench/model_parallel_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
                              "completed_from": str(args.complete) if args.complete else None,
                              "runs": []}
    sizes = SMOKE if cpu else COURSE

    def left() -> bool:
        return time.perf_counter() - started < args.budget_s

    with tempfile.TemporaryDirectory(prefix="mp_bench_") as tmp:
        scratch = Path(tmp)
        # 1. the model that does not fit DDP
        if cpu:
            big = {**SMOKE, "gpt_layers": 2}
        else:
            layers = big_layers(torch.cuda.get_device_properties(0).total_memory)
            big = {"gpt_layers": layers, "gpt_dim": BIG_DIM, "gpt_heads": BIG_HEADS, "seq_len": BIG_SEQ,
                   "vocab_size": BIG_VOCAB, "batch_size": BIG_BATCH, "num_samples": 4096, "steps": 3,
                   "precision": "bf16"}
        psi = params_of(big["gpt_layers"], big["gpt_dim"], big["vocab_size"], big["seq_len"])
        result["big_model"] = {"sizes": big, "num_parameters": psi, "ddp_state_gib": 16 * psi / GIB,
                               "zero3_state_gib_per_gpu": 8 * psi / GIB, "gpu_memory_gib": info["gpu_memory_gib"]}
        print(f"large GPT: {psi / 1e9:.3g} B parameters; fp32 AdamW state 16 B/param = {16 * psi / GIB:.0f} GiB "
              f"(DDP, per GPU) vs {8 * psi / GIB:.0f} GiB per GPU with FSDP2 over 2", flush=True)
        for name, strategy in (("big-ddp", "ddp"), ("big-zero3", "zero3")):
            result["runs"].append(earlier.get(name) or run(name, 2, big, scratch, env, BIG_TIMEOUT_S, parallel=strategy))
        # 2. per strategy, course-size model
        course_psi = params_of(sizes["gpt_layers"], sizes["gpt_dim"], sizes["vocab_size"], sizes["seq_len"])
        result["course_model"] = {"sizes": sizes, "num_parameters": course_psi}
        print(f"course-size GPT: {course_psi / 1e6:.1f} M parameters", flush=True)
        plan: list[tuple[str, int, dict[str, Any]]] = [
            ("ddp", 2, {"parallel": "ddp"}), ("zero1", 2, {"parallel": "zero1"}), ("zero2", 2, {"parallel": "zero2"}),
            ("zero3", 2, {"parallel": "zero3"}), ("tensor", 2, {"parallel": "tensor"}),
            ("ddp+ckpt", 2, {"parallel": "ddp", "activation_checkpointing": True}),
            ("zero3+ckpt", 2, {"parallel": "zero3", "activation_checkpointing": True})]
        plan += [(f"gpipe m={m}", 2, {"parallel": "pipeline", "pipeline_schedule": "gpipe", "microbatches": m})
                 for m in MICROBATCHES]
        plan += [(f"1f1b m={m}", 2, {"parallel": "pipeline", "pipeline_schedule": "1f1b", "microbatches": m})
                 for m in MICROBATCHES if m >= 2]
        if gpus >= 4 and not cpu:
            plan.append(("fsdp_tp 2x2", 4, {"parallel": "fsdp_tp", "tp": 2}))
        for name, world, options in plan:
            if name in earlier:  # measured by the run given with --complete
                result["runs"].append(earlier[name])
                continue
            if not left():
                print(f"  {name}: skipped (time budget of {args.budget_s:.0f} s spent)", flush=True)
                result["runs"].append({"name": name, "n_gpu": world, "options": options, "ok": False, "skipped": True})
                continue
            result["runs"].append(run(name.replace(" ", "_").replace("=", ""), world, sizes, scratch, env,
                                      RUN_TIMEOUT_S, **options) | {"name": name})
    result["total_s"] = round(time.perf_counter() - started, 1)
    written = save_text(path, json.dumps(result, indent=1))  # first: nothing after it can lose it
    print(f"wrote {written} after {result['total_s']:.0f} s", flush=True)
    from report_model_parallel import write_report

    report_path = ROOT / "bench" / ("REPORT-model-parallel-smoke.md" if cpu else "REPORT-model-parallel.md")
    try:
        report = write_report(result, report_path)
    except Exception as error:  # noqa: BLE001 - the measurements are written: say how to get the report
        print(f"bench/model_parallel_gpu.py: the report could not be written ({type(error).__name__}: {error}); the "
              f"results are in {written}: python bench/report_model_parallel.py --json {written} --out {report_path}",
              file=sys.stderr)
        return 1
    print(f"wrote {report}")
    if written != path:
        return 1
    if args.publish:
        from publish import publish  # bench/publish.py
        publish(path, RECORDING)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
