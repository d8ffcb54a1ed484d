"""GPU benchmark ladder: coursekit's engine against a bare torch loop, rung by rung.

ResNet-50, 224 px, batch 256, synthetic GPU-resident data:
fp32 -> tf32 -> bf16 -> fp16 -> bf16 + channels_last -> + torch.compile, each rung timed for the engine
(``coursekit.train.engine.train``) and for a minimal loop written here; then a batch sweep 32...512 on
the fastest eager preset and the JPEG-folder throughput with PIL (CPU) and nvjpeg (GPU) decoding.

Run on a GPU machine (the results JSON is what notebooks 02, 04 and 05 plot; ``--publish`` also copies it to
their recording, coursekit/labs/recordings/gpu_ladder.json):

    python bench/ladder_gpu.py --only ladder sweep jpeg --jpeg-dir /tmp/jpegs --out bench/results/gpu_ladder.json --publish
    python bench/ladder_gpu.py --only jpeg --out bench/results/gpu_jpeg.json

Every figure is mean ± std over ``--repeats`` timed windows of ``--steps`` steps after a warm-up.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from robust import check_writable, number, save_text  # noqa: E402

from coursekit.metrics import read_metrics, steps, throughput  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402

RECORDING = "gpu_ladder"  # --publish: coursekit/labs/recordings/gpu_ladder.json
MODEL = "resnet50"
IMAGE_SIZE = 224
NUM_CLASSES = 1000
LADDER_BATCH = 256
BATCH_SWEEP = (32, 64, 128, 256, 512, 1024, 2048)  # up to the out-of-memory error
WARMUP_STEPS = 15
COMPILE_WARMUP_STEPS = 60
COMPILE_WARMUP_WINDOWS = 2
TIMED_STEPS = 30
REPEATS = 3
LR = 0.1
MOMENTUM = 0.9
JPEG_IMAGES_PER_CLASS = 1000
JPEG_CLASSES = 32
JPEG_SIZE = (500, 375)
JPEG_WORKERS = 16
MB = 2**20

RUNGS: list[dict[str, Any]] = [
    {"rung": "fp32", "precision": "fp32", "channels_last": False, "compile": False},
    {"rung": "tf32", "precision": "tf32", "channels_last": False, "compile": False},
    {"rung": "bf16", "precision": "bf16", "channels_last": False, "compile": False},
    {"rung": "fp16", "precision": "fp16", "channels_last": False, "compile": False},
    {"rung": "bf16+channels_last", "precision": "bf16", "channels_last": True, "compile": False},
    {"rung": "bf16+channels_last+compile", "precision": "bf16", "channels_last": True, "compile": True},
]
EAGER_PRESET = RUNGS[4]  # bf16 + channels_last: the fastest preset without compilation
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def training_flop_per_image(image_size: int = IMAGE_SIZE) -> float:
    """FLOPs of one forward + backward of ResNet-50 per image, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    model = torchvision.models.resnet50(num_classes=NUM_CLASSES)
    x = torch.randn(2, 3, image_size, image_size)
    counter = FlopCounterMode(display=False)
    with counter:
        F.cross_entropy(model(x), torch.zeros(2, dtype=torch.long)).backward()
    return counter.get_total_flops() / 2


def bare_loop(precision: str, channels_last: bool, compile_model: bool, batch: int,
              repeats: int, timed_steps: int) -> dict[str, Any]:
    """The reference: the smallest honest torch training loop for this rung."""
    set_tf32(precision == "tf32")
    torch.manual_seed(0)
    device = torch.device("cuda")
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=NUM_CLASSES).to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    images = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, device=device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, NUM_CLASSES, (batch,), device=device)
    forward = torch.compile(model) if compile_model else model
    dtype = AUTOCAST_DTYPES.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    def step() -> None:
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(forward(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    torch.cuda.reset_peak_memory_stats()
    for _ in range(COMPILE_WARMUP_STEPS if compile_model else WARMUP_STEPS):
        step()
    torch.cuda.synchronize()
    windows = []  # shaped like the engine's step records, measured with the same definition (coursekit/metrics.py)
    for index in range(repeats):
        start = time.perf_counter()
        for _ in range(timed_steps):
            step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        windows.append({"step": (index + 1) * timed_steps, "window_steps": timed_steps, "window_time_s": seconds,
                        "images_per_s_global": batch * timed_steps / seconds})
    rate, spread = throughput(windows)
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return {"img_s": {"mean": rate, "std": spread, "n": len(windows)}, "peak_mem_gb": peak}


def engine_run(config: TrainConfig, repeats: int, timed_steps: int, warmup_windows: int = 1) -> dict[str, Any]:
    """The engine on the same rung; images/s from its own step records, one record per timed window.

    The engine writes a step record every ``timed_steps`` steps; the first ``warmup_windows`` records
    (warm-up, cuDNN autotuning, compilation) are dropped.
    """
    from coursekit.train.engine import train

    with tempfile.TemporaryDirectory() as out:
        total = (warmup_windows + repeats) * timed_steps
        # test mode: no validation pass inside the timed windows; synthetic data sized to one epoch
        config = config.replace(out=out, test_steps=total, log_every=timed_steps, progress="off")
        if config.dataset == "synthetic":
            config = config.replace(num_samples=total * config.batch_size)
        summary = train(config)
        records = steps(read_metrics(out))
    windows = records[warmup_windows:]
    rates = [r["images_per_s_global"] for r in windows]
    rate, spread = throughput(records, skip=warmup_windows)  # images / wall time (coursekit/metrics.py)
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    peaks = [r.get("mem_allocated_peak_mb") or 0.0 for r in windows]
    return {"img_s": {"mean": rate, "std": spread, "n": len(rates)}, "windows_img_s": rates, "peak_mem_gb": max(peaks, default=0.0) / 1024,
            "summary_status": summary.get("status")}


def ladder_config(rung: dict[str, Any], batch: int) -> TrainConfig:
    return TrainConfig(model=MODEL, dataset="synthetic", gpu_resident=True, image_size=IMAGE_SIZE,
                       num_classes=NUM_CLASSES, batch_size=batch, lr=LR, momentum=MOMENTUM, weight_decay=0.0,
                       precision=rung["precision"], channels_last=rung["channels_last"],
                       compile=rung["compile"], device="cuda", seed=0)


def run_ladder(args: argparse.Namespace, flop_per_image: float) -> list[dict[str, Any]]:
    rows = []
    for rung in RUNGS:
        warmup_windows = COMPILE_WARMUP_WINDOWS if rung["compile"] else 1
        bare = bare_loop(rung["precision"], rung["channels_last"], rung["compile"], LADDER_BATCH,
                         args.repeats, args.steps)
        engine = engine_run(ladder_config(rung, LADDER_BATCH), args.repeats, args.steps, warmup_windows)
        ratio = engine["img_s"]["mean"] / bare["img_s"]["mean"]
        row = {**rung, "batch_size": LADDER_BATCH, "engine_img_s": engine["img_s"], "bare_img_s": bare["img_s"],
               "ratio": ratio, "peak_mem_gb": engine["peak_mem_gb"], "bare_peak_mem_gb": bare["peak_mem_gb"],
               "tflops": engine["img_s"]["mean"] * flop_per_image / 1e12}
        rows.append(row)
        print(f"{rung['rung']:<28} engine {engine['img_s']['mean']:8.0f} ± {engine['img_s']['std']:5.0f} img/s   "
              f"bare {bare['img_s']['mean']:8.0f} ± {bare['img_s']['std']:5.0f}   ratio {ratio:.3f}   "
              f"{row['tflops']:.0f} TFLOP/s   {row['peak_mem_gb']:.1f} GB", flush=True)
    return rows


def run_batch_sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    rung = EAGER_PRESET
    rows = []
    for batch in BATCH_SWEEP:
        try:
            engine = engine_run(ladder_config(rung, batch), args.repeats, args.steps)
        except torch.OutOfMemoryError as error:
            torch.cuda.empty_cache()
            rows.append({"batch_size": batch, "oom": True, "error": str(error).splitlines()[0]})
            print(f"batch {batch:4d}: out of memory", flush=True)
            break
        rows.append({"batch_size": batch, "engine_img_s": engine["img_s"], "peak_mem_gb": engine["peak_mem_gb"]})
        print(f"batch {batch:4d}: {engine['img_s']['mean']:8.0f} ± {engine['img_s']['std']:5.0f} img/s  "
              f"{engine['peak_mem_gb']:.1f} GB", flush=True)
    return rows


def run_jpeg(args: argparse.Namespace) -> dict[str, Any]:
    """JPEG folder throughput at bf16 + channels_last: PIL on CPU workers vs nvjpeg on the GPU."""
    root = Path(args.jpeg_dir or tempfile.mkdtemp(prefix="coursekit-jpeg-"))
    start = time.perf_counter()
    if not any(root.glob("train/*/*.jpg")):  # a separate process: no fork after CUDA's initialisation
        subprocess.run([sys.executable, "-m", "coursekit.train.data.jpeg", "--out", str(root), "--classes",
                        str(JPEG_CLASSES), "--images-per-class", str(JPEG_IMAGES_PER_CLASS), "--width",
                        str(JPEG_SIZE[0]), "--height", str(JPEG_SIZE[1]), "--workers", str(JPEG_WORKERS)], check=True)
    print(f"JPEG tree ready in {time.perf_counter() - start:.1f} s at {root}", flush=True)
    base = ladder_config(EAGER_PRESET, LADDER_BATCH)
    results: dict[str, Any] = {"images": JPEG_CLASSES * JPEG_IMAGES_PER_CLASS, "size": list(JPEG_SIZE)}
    variants = {
        "synthetic_img_s": base,
        "pil_cpu_img_s": base.replace(dataset="jpeg_folder", data_dir=str(root), gpu_resident=False,
                                      workers=JPEG_WORKERS, pin_memory=True, non_blocking=True,
                                      persistent_workers=True, prefetch_factor=4, drop_last=True),
        "nvjpeg_gpu_img_s": base.replace(dataset="jpeg_folder", data_dir=str(root), gpu_resident=False,
                                         gpu_decode=True, workers=JPEG_WORKERS, pin_memory=True,
                                         non_blocking=True, persistent_workers=True, prefetch_factor=4,
                                         drop_last=True),
    }
    for key, config in variants.items():
        try:
            engine = engine_run(config, args.repeats, args.steps)
        except Exception as error:  # noqa: BLE001 - a decoder missing here (nvjpeg): the other inputs are measured
            torch.cuda.empty_cache()
            results[key], results[key.replace("_img_s", "_windows_img_s")] = None, []
            results.setdefault("errors", {})[key] = f"{type(error).__name__}: {error}"
            print(f"{key:<18} n/a ({results['errors'][key].splitlines()[0][:200]})", flush=True)
            continue
        results[key] = engine["img_s"]
        results[key.replace("_img_s", "_windows_img_s")] = engine["windows_img_s"]
        print(f"{key:<18} {engine['img_s']['mean']:8.0f} ± {engine['img_s']['std']:5.0f} img/s", flush=True)
    nvjpeg, synthetic = results["nvjpeg_gpu_img_s"], results["synthetic_img_s"]
    results["nvjpeg_over_synthetic"] = nvjpeg["mean"] / synthetic["mean"] if nvjpeg and synthetic else None
    print(f"nvjpeg / synthetic = {number(results['nvjpeg_over_synthetic'], '.2f')}", flush=True)
    return results


def environment() -> dict[str, Any]:
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "cpus": os.cpu_count(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results JSON to write")
    parser.add_argument("--only", choices=("ladder", "sweep", "jpeg"), nargs="*", default=["ladder", "sweep"])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--steps", type=int, default=TIMED_STEPS)
    parser.add_argument("--jpeg-dir", default=None)
    parser.add_argument("--smoke", action="store_true", help="2 windows of 3 steps per figure: checks the script")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the JSON to coursekit/labs/recordings/{RECORDING}.json (what the labs read)")
    args = parser.parse_args(argv)
    if args.publish and (args.smoke or set(args.only) != {"ladder", "sweep", "jpeg"}):
        parser.error("--publish writes the labs' whole recording: --only ladder sweep jpeg --jpeg-dir DIR, not "
                     "--smoke (to merge separate runs: python -m coursekit.labs.kit.recorded gpu_ladder LADDER.json "
                     "--part batch_sweep=SWEEP.json --part jpeg=JPEG.json)")
    if args.smoke:
        global WARMUP_STEPS, JPEG_IMAGES_PER_CLASS, RUNGS, BATCH_SWEEP
        WARMUP_STEPS, JPEG_IMAGES_PER_CLASS = 3, 40
        RUNGS, BATCH_SWEEP = [RUNGS[0], RUNGS[3]], BATCH_SWEEP[:1]
        args.repeats, args.steps = 2, 4
    if not torch.cuda.is_available():
        print("bench/ladder_gpu.py needs a CUDA GPU; CPU figures come from bench/ci_cpu.py", file=sys.stderr)
        return 2
    check_writable(args.out)
    result: dict[str, Any] = {**environment(), "command": "python " + " ".join(["bench/ladder_gpu.py", *sys.argv[1:]]),
                              "model": MODEL, "image_size": IMAGE_SIZE,
                              "protocol": f"bare loop: {WARMUP_STEPS} warm-up steps ({COMPILE_WARMUP_STEPS} with compile); engine: "
                                          f"1 warm-up window ({COMPILE_WARMUP_WINDOWS} with compile); then "
                                          f"{args.repeats} windows of {args.steps} steps; mean ± std over windows"}
    print(json.dumps(environment()), flush=True)
    failed = []
    written = args.out
    for part in ("ladder", "sweep", "jpeg"):
        if part not in args.only:
            continue
        try:
            if part == "ladder":
                result["training_gflop_per_image"] = training_flop_per_image() / 1e9
                result["ladder"] = run_ladder(args, result["training_gflop_per_image"] * 1e9)
            elif part == "sweep":
                result["batch_sweep"] = run_batch_sweep(args)
            else:
                result["jpeg"] = run_jpeg(args)
        except Exception as error:  # noqa: BLE001 - the parts measured before it are kept, and written
            failed.append(part)
            result[f"{part}_error"] = f"{type(error).__name__}: {error}"
            print(f"bench/ladder_gpu.py: the {part} part failed ({type(error).__name__}: "
                  f"{str(error).splitlines()[0][:300] if str(error) else ''}); the other parts go on", file=sys.stderr)
        written = save_text(args.out, json.dumps(result, indent=2) + "\n")  # after each part: none is lost
    print(f"wrote {written}")
    if failed or written != args.out:
        if args.publish:
            print("not published: " + (f"the {', '.join(failed)} part(s) failed" if failed else "the JSON is elsewhere"),
                  file=sys.stderr)
        return 1
    if args.publish:
        from publish import publish  # bench/publish.py
        publish(args.out, RECORDING)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
