"""JPEG decoding on the GPU against synthetic data, in one process: torchvision's nvjpeg vs nvImageCodec's
hardware JPEG engines, both decoding in the loader's background thread (overlapping the training step).

ResNet-50 bf16 + channels_last, batch 256, the engine (``--gpu-decode``); the decoder is chosen with
``$COURSEKIT_JPEG_DECODER`` (``coursekit/train/data/jpeg.py``). Target: JPEG / synthetic >= 0.9. On the GPU
machine, with nvImageCodec's wheel in ``.whl-nvimgcodec/`` (``pip download nvidia-nvimgcodec-cu13`` where there
is internet; bench/README.md)::

    source bench/setup_gpu.sh        # installs the wheels of .whl/, and nvImageCodec's when it is there
    python bench/jpeg_decode_gpu.py --jpeg-dir /tmp/jpegs --out bench/results/gpu_jpeg_decode.json   # ~6 min

Each row also says which decoder ran (the summary's ``jpeg_decoder``) and each decoder's rate decoding alone
(the same batches, decode + crop + resize, no training), so that a shortfall reads as decode-bound (alone
below synthetic) or overlap-bound (alone well above it). ``--cpu-smoke`` runs the same script on this CPU
machine with an MLP on a small tree (PIL workers stand in for the GPU decode, which needs CUDA), to try it.
Diagnostics: decoding alone with each nvImageCodec backend by itself (and whether it handed batches to
torchvision), and the synthetic run while a thread, or another process, decodes beside it. Records on an H100
(2026-11-26, bench/REPORT-gpu.md): 0.69x first; 0.86x with the decoding thread; 0.92x (nvjpeg; nvImageCodec
0.89x, 3 runs each) since the thread runs on into the next epoch over an endless train loader.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from robust import check_writable, missing, number, require_cuda, save_text  # noqa: E402

from coursekit.metrics import read_metrics, steps, throughput  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402

BATCH = 256
CLASSES, IMAGES_PER_CLASS = 32, 400  # 12,800 training JPEGs of 500 x 375
WORKERS = 16
WINDOW_STEPS = 20
WARMUP_WINDOWS = 1
WINDOWS = 3
SMOKE_WINDOW = 4
SMOKE_CLASSES, SMOKE_IMAGES_PER_CLASS, SMOKE_SIZE = 4, 24, (160, 120)
SMOKE_DECODE_PROCESS_S = 4.0
DECODE_ALONE_BATCHES = 10
DECODE_PROCESS_S = 60.0  # the decoding process's run: longer than the synthetic run beside it
DECODE_PROCESS_GRACE_S = 120.0
REPEATS = 3
GPU_ROWS = {"torchvision nvjpeg": "torchvision", "nvimgcodec hardware": "nvimgcodec"}  # row -> $COURSEKIT_JPEG_DECODER
NVIMGCODEC_INSTALL = ("pip install nvidia-nvimgcodec-cu13 (its wheel in .whl-nvimgcodec/: bench/README.md), then "
                      "source bench/setup_gpu.sh")
NVIMGCODEC_VARIANTS = {  # decoding alone, nvImageCodec's backends told apart (jpeg.nvimgcodec_decoder's options)
    "nvimgcodec hardware only": {"backends": ("hardware",)},
    "nvimgcodec CUDA only": {"backends": ("cuda",)},
    "nvimgcodec hardware + CUDA, 4 CPU threads": {"cpu_threads": 4},
}


def config(**changes: Any) -> TrainConfig:
    base = TrainConfig(model="resnet50", image_size=224, num_classes=CLASSES, batch_size=BATCH, precision="bf16",
                       channels_last=True, device="cuda", progress="off", log_every=WINDOW_STEPS,
                       test_steps=(WARMUP_WINDOWS + WINDOWS) * WINDOW_STEPS)
    return base.replace(**changes)


def smoke_config(**changes: Any) -> TrainConfig:
    """--cpu-smoke: a tiny MLP on the CPU, same windows."""
    base = TrainConfig(model="mlp", image_size=32, num_classes=4, batch_size=16, device="cpu", progress="off",
                       log_every=SMOKE_WINDOW, test_steps=(WARMUP_WINDOWS + WINDOWS) * SMOKE_WINDOW)
    return base.replace(**changes)


@functools.lru_cache(maxsize=1)
def nvimgcodec_problem() -> str | None:
    """Why nvImageCodec cannot run here ("nvImageCodec not installed"), or None where its package imports."""
    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError:
        return "nvImageCodec not installed"
    return None


def why_not_measured(row: dict[str, Any]) -> str:
    """A row without a rate, in a few words: "nvImageCodec not installed", else its error's last line."""
    text = " ".join(str(row.get(key) or "") for key in ("error", "decoder_stderr")).strip()
    if any(name in text.lower() for name in ("nvimgcodec", "nvimagecodec")) or (
            row.get("decoder") == "nvimgcodec" and not text):
        return nvimgcodec_problem() or "nvImageCodec not usable here"
    last = text.splitlines()[-1].strip() if text else ""
    return (last[:100] + ("..." if len(last) > 100 else "")) or str(row.get("status") or "not measured")


def _rate(row: dict[str, Any] | None, spec: str) -> str:
    """A row's images/s with its unit, or n/a and why."""
    row = row or {}
    value = row.get("img_s")
    return f"{value:{spec}} img/s" if isinstance(value, (int, float)) else f"n/a ({why_not_measured(row)})"


def row_line(name: str, row: dict[str, Any]) -> str:
    """The summary line of one row: its rate, its ratio to synthetic, the decoder that ran, its rate decoding
    alone; ``n/a (why)`` in place of any figure that was not measured (a decoder that is not installed)."""
    if not isinstance(row.get("img_s"), (int, float)):
        return f"{name:<30} {_rate(row, '8.0f')}"
    return (f"{name:<30} {_rate(row, '8.0f')}  x{number(row.get('ratio_to_synthetic'), '.2f')}  decoder "
            f"{row.get('decoder')}  decoding alone {_rate(row.get('decode_alone'), ',.0f')}  "
            f"{row.get('error', '')}").rstrip()


def diagnostic_line(name: str, row: dict[str, Any]) -> str:
    """One diagnostic's line: its rate (n/a and why where it did not run) and the whole row."""
    return f"{name:<40} {_rate(row, '8.0f')}  {row}"


def _decoder(decoder: str, device: str, variant: dict[str, Any] | None = None) -> tuple[str, Any]:
    """(name, decode function) as the engine would choose it (``decoder``), or an nvImageCodec ``variant``."""
    import torch

    from coursekit.train.data import jpeg

    if device != "cuda":
        return "torchvision", jpeg.torchvision_decoder(torch.device("cpu"))
    if variant is not None:
        decode = jpeg.nvimgcodec_decoder(torch.device("cuda"), **variant)
        if decode is None:
            raise ValueError("nvImageCodec is not usable here")
        return "nvimgcodec", decode
    os.environ["COURSEKIT_JPEG_DECODER"] = decoder
    try:
        return jpeg.choose_decoder(torch.device("cuda"))
    finally:
        os.environ.pop("COURSEKIT_JPEG_DECODER", None)


def _chunks(root: Path, batch: int, batches: int) -> list[list[Any]]:
    from coursekit.train.data import jpeg

    files = sorted((root / "train").glob("*/*.jpg"))[:batch * (batches + 1)]
    encoded = [jpeg.read_bytes(str(f)) for f in files]
    return [encoded[i:i + batch] for i in range(0, len(encoded), batch)]


def decode_alone(root: Path, decoder: str, device: str, image_size: int, batch: int, batches: int,
                 variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """Images/s of the decoder by itself (decode, crop, resize, normalise; no training): the ceiling of a row.
    ``fallback_batches``: batches nvImageCodec handed to torchvision (an image its backends could not decode)."""
    import random
    import time

    import torch

    from coursekit.train.data import jpeg

    try:
        name, decode = _decoder(decoder, device, variant)
    except ValueError as error:
        return {"status": "not run", "error": str(error)}
    rng = random.Random(0)
    chunks = _chunks(root, batch, batches)
    jpeg.decode_batch(chunks[0], device, image_size, True, rng, decode)  # warm-up (decoder state, kernels)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for chunk in chunks[1:]:
        jpeg.decode_batch(chunk, device, image_size, True, rng, decode)
    sync()
    state = getattr(decode, "state", None)
    return {"decoder": name, "img_s": sum(map(len, chunks[1:])) / (time.perf_counter() - start),
            **({"fallback_batches": state["fallback_batches"], "batches": state["batches"]} if state else {})}


def _decode_until(done: Any, chunks: list[list[Any]], decode: Any, device: str, image_size: int, rng: Any) -> int:
    """Decode ``chunks`` round and round, one batch at a time (the device synchronised after each), until
    ``done()``; returns the images decoded."""
    import torch

    from coursekit.train.data import jpeg

    decoded = 0
    while not done():
        for chunk in chunks:
            if done():
                break
            jpeg.decode_batch(chunk, device, image_size, True, rng, decode)
            if device == "cuda":
                torch.cuda.current_stream().synchronize()
            decoded += len(chunk)
    return decoded


def decode_for(root: Path, decoder: str, device: str, image_size: int, batch: int, seconds: float) -> float:
    """Decode batches without pause for ``seconds`` (the ``--decode-for`` process); returns images/s."""
    import random
    import time

    from coursekit.train.data import jpeg

    _, decode = _decoder(decoder, device)
    chunks, rng = _chunks(root, batch, DECODE_ALONE_BATCHES), random.Random(0)
    jpeg.decode_batch(chunks[0], device, image_size, True, rng, decode)  # warm-up, then tell the parent
    print("ready", flush=True)
    start = time.perf_counter()
    decoded = _decode_until(lambda: time.perf_counter() - start >= seconds, chunks, decode, device, image_size, rng)
    return decoded / (time.perf_counter() - start)


def synthetic_beside_decoding_process(make: Any, root: Path, decoder: str, image_size: int, device: str = "cuda",
                                      batch: int = BATCH, seconds: float = DECODE_PROCESS_S) -> dict[str, Any]:
    """As ``synthetic_beside_decoding``, the decoding in another process on the same device: no GIL shared.
    A step slowed beside the thread but not beside the process points at the Python thread, not the GPU."""
    command = [sys.executable, str(Path(__file__).resolve()), "--decode-for", str(seconds), "--decoder", decoder,
               "--jpeg-dir", str(root), "--out", os.devnull] + (["--cpu-smoke"] if device == "cpu" else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline() if process.stdout else ""  # "ready": decoding from now on
        row = run(make(dataset="synthetic", gpu_resident=True)) if first.startswith("ready") else {
            "status": "not run", "img_s": None}
    finally:
        try:
            out, err = process.communicate(timeout=seconds + DECODE_PROCESS_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err += f"\nthe decoding process did not end within {seconds + DECODE_PROCESS_GRACE_S:.0f} s: killed"
    rates = [float(line.split()[1]) for line in out.splitlines() if line.startswith("decoded ")]
    return {**row, "decoder": decoder, "decoding_img_s": rates[0] if rates else None,
            **({} if rates else {"decoder_stderr": err[-1000:]})}


def synthetic_beside_decoding(make: Any, root: Path, decoder: str, image_size: int, device: str = "cuda",
                              batch: int = BATCH) -> dict[str, Any]:
    """The synthetic run while another thread decodes JPEG batches without pause on its own CUDA stream: if
    the step slows down as much as in the JPEG rows, decoding and training get in each other's way (SMs,
    the GIL, CPU threads), whatever the loader does; the decoder's own rate meanwhile comes with it."""
    import contextlib
    import random
    import threading
    import time

    import torch


    cuda = device == "cuda"
    try:
        name, decode = _decoder(decoder, device)
    except ValueError as error:
        return {"status": "not run", "error": str(error)}
    chunks = _chunks(root, batch, DECODE_ALONE_BATCHES)
    stop, decoded = threading.Event(), [0]

    def keep_decoding() -> None:  # on its own stream, as the loader's thread decodes
        with torch.cuda.stream(torch.cuda.Stream()) if cuda else contextlib.nullcontext():
            decoded[0] = _decode_until(stop.is_set, chunks, decode, device, image_size, random.Random(0))

    thread = threading.Thread(target=keep_decoding, name="decode-beside", daemon=True)
    start = time.perf_counter()
    thread.start()
    try:
        row = run(make(dataset="synthetic", gpu_resident=True))
    finally:
        stop.set()
        thread.join()
    return {**row, "decoder": name, "decoding_img_s": decoded[0] / (time.perf_counter() - start)}


def run(cfg: TrainConfig, decoder: str | None = None) -> dict[str, Any]:
    """Images/s over the timed windows of one engine run (the first window is warm-up)."""
    import torch

    from coursekit.train.engine import train

    if decoder is not None:
        os.environ["COURSEKIT_JPEG_DECODER"] = decoder
    try:
        with tempfile.TemporaryDirectory() as out:
            summary = train(cfg.replace(out=out))
            records = steps(read_metrics(out))
            rates = [r["images_per_s_global"] for r in records[WARMUP_WINDOWS:]]
            rate, spread = throughput(records, skip=WARMUP_WINDOWS)  # images / wall time (coursekit/metrics.py)
    finally:
        os.environ.pop("COURSEKIT_JPEG_DECODER", None)
        torch.cuda.empty_cache()
    return {"status": summary["status"], "img_s": rate, "img_s_std": spread, "window_img_s": rates,
            "decoder": summary.get("jpeg_decoder"), "loader_phases": summary.get("loader_phases"),
            **({} if rates else {"error": f"no timed window recorded (status {summary['status']})"})}


def repeated(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from runs of the same configuration: images/s as mean ± std over the runs (each run's own
    mean over its windows); the last run's other fields; every run's rate in ``runs_img_s``."""
    done = [r for r in runs if r.get("img_s")]
    if not done:
        return runs[-1]
    rates = [r["img_s"] for r in done]
    return {**done[-1], "img_s": statistics.fmean(rates), "img_s_std": statistics.stdev(rates) if len(rates) > 1 else 0.0,
            "runs_img_s": rates, "window_img_s": [w for r in done for w in r["window_img_s"]]}


def not_run(error: str) -> dict[str, Any]:
    """A row or a diagnostic that could not run here."""
    return {"status": "not run", "img_s": None, "error": error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jpeg-dir", type=Path, help="a JPEG tree (written there when empty)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu-smoke", action="store_true", help="try the script on a CPU (MLP, small tree)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of each GPU row, in turn")
    parser.add_argument("--decode-for", type=float, default=None, help=argparse.SUPPRESS)  # the decoding process
    parser.add_argument("--decoder", default="torchvision", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.decode_for is not None:
        try:
            rate = decode_for(args.jpeg_dir, args.decoder, "cpu" if args.cpu_smoke else "cuda",
                              32 if args.cpu_smoke else 224, 16 if args.cpu_smoke else BATCH, args.decode_for)
        except ValueError as error:  # the decoder is not usable here: one line for the parent's record
            print(f"decoding process: {error}", file=sys.stderr)
            return 2
        print(f"decoded {rate:.1f} img/s", flush=True)
        return 0
    smoke = args.cpu_smoke
    if not smoke:
        require_cuda()
    check_writable(args.out)
    import torch

    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    nvimgcodec_absent = None if smoke else nvimgcodec_problem()
    if nvimgcodec_absent:
        missing("nvImageCodec", "its rows and diagnostics are reported as n/a (the synthetic and torchvision nvjpeg "
                "rows are measured)", NVIMGCODEC_INSTALL)
    root = args.jpeg_dir or Path(tempfile.mkdtemp(prefix="coursekit-jpeg-"))
    if not (root / "train").is_dir():
        if smoke:
            write_synthetic_jpeg_tree(root, SMOKE_CLASSES, SMOKE_IMAGES_PER_CLASS, size=SMOKE_SIZE)
        else:
            write_synthetic_jpeg_tree(root, CLASSES, IMAGES_PER_CLASS, workers=os.cpu_count() or 1)
    make = smoke_config if smoke else config
    loader = dict(dataset="jpeg_folder", data_dir=str(root), workers=1 if smoke else WORKERS,
                  pin_memory=not smoke, non_blocking=not smoke, persistent_workers=True)
    if smoke:  # no CUDA: PIL in the workers stands in for the GPU decode; the decoder alone on the CPU
        rows = {"synthetic": run(make(dataset="synthetic", gpu_resident=True)),
                "jpeg, PIL workers (stand-in)": run(make(**loader))}
        rows["jpeg, PIL workers (stand-in)"]["decode_alone"] = decode_alone(root, "torchvision", "cpu", 32, 16, 2)
        diagnostics = {"synthetic beside torchvision decoding": synthetic_beside_decoding(
            make, root, "torchvision", 32, device="cpu", batch=16),
            "synthetic beside a torchvision decoding process": synthetic_beside_decoding_process(
            make, root, "torchvision", 32, device="cpu", batch=16, seconds=SMOKE_DECODE_PROCESS_S)}
    else:
        runs: dict[str, list[dict[str, Any]]] = {"synthetic": [], **{name: [] for name in GPU_ROWS}}

        def measured(cfg: TrainConfig, decoder: str | None = None) -> dict[str, Any]:
            if decoder == "nvimgcodec" and nvimgcodec_absent:
                return not_run(nvimgcodec_absent)
            try:
                return run(cfg, decoder)
            except Exception as error:  # noqa: BLE001 - the package or the hardware decoder may be absent
                return {"status": "not run", "error": f"{type(error).__name__}: {error}"}

        for repeat in range(args.repeats):  # the rows in turn, so that a slow spell of the machine hits them all
            runs["synthetic"].append(measured(make(dataset="synthetic", gpu_resident=True)))
            for name, decoder in GPU_ROWS.items():
                runs[name].append(measured(make(**loader, gpu_decode=True), decoder))
            print(f"[{repeat + 1}/{args.repeats}] " + "  ".join(f"{name} {row_runs[-1].get('img_s') or 0:,.0f}"
                                                               for name, row_runs in runs.items()), flush=True)
        rows = {name: repeated(row_runs) for name, row_runs in runs.items()}
        for name, decoder in GPU_ROWS.items():
            rows[name]["decode_alone"] = (not_run(nvimgcodec_absent) if decoder == "nvimgcodec" and nvimgcodec_absent
                                          else decode_alone(root, decoder, "cuda", 224, BATCH, DECODE_ALONE_BATCHES))
        diagnostics = {name: not_run(nvimgcodec_absent) if nvimgcodec_absent else
                       decode_alone(root, "nvimgcodec", "cuda", 224, BATCH, DECODE_ALONE_BATCHES, variant)
                       for name, variant in NVIMGCODEC_VARIANTS.items()}
        for decoder in ("torchvision", "nvimgcodec"):
            if decoder == "nvimgcodec" and nvimgcodec_absent:
                diagnostics[f"synthetic beside {decoder} decoding"] = not_run(nvimgcodec_absent)
                diagnostics[f"synthetic beside a {decoder} decoding process"] = not_run(nvimgcodec_absent)
                continue
            diagnostics[f"synthetic beside {decoder} decoding"] = synthetic_beside_decoding(make, root, decoder, 224)
            diagnostics[f"synthetic beside a {decoder} decoding process"] = synthetic_beside_decoding_process(
                make, root, decoder, 224)
    synthetic = rows["synthetic"].get("img_s")
    for row in rows.values():
        if row.get("img_s") and synthetic:
            row["ratio_to_synthetic"] = row["img_s"] / synthetic
    best = max((row.get("ratio_to_synthetic", 0) for name, row in rows.items() if name != "synthetic"), default=0)
    cuda = torch.cuda.is_available() and not smoke
    result = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
              "cuda": torch.version.cuda, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/jpeg_decode_gpu.py " + " ".join(sys.argv[1:]), "batch": BATCH,
              "jpeg_tree": {"classes": CLASSES, "images_per_class": IMAGES_PER_CLASS}, "workers": WORKERS,
              "cpu_smoke": smoke, "repeats": 1 if smoke else args.repeats, "rows": rows, "best_ratio": best,
              "diagnostics": diagnostics, **({"nvimgcodec": nvimgcodec_absent} if nvimgcodec_absent else {})}
    written = save_text(args.out, json.dumps(result, indent=2, default=str) + "\n")  # first: a print cannot lose it
    if not smoke:
        for name, row in diagnostics.items():
            print(diagnostic_line(name, row), flush=True)
    for name, row in rows.items():
        print(row_line(name, row), flush=True)
    print(f"best JPEG / synthetic = {best:.2f} (target >= 0.9: {'met' if best >= 0.9 else 'missed'})")
    print(f"wrote {written}")
    return 0 if written == args.out else 1


if __name__ == "__main__":
    sys.exit(main())
