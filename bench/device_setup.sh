#!/usr/bin/env bash
# Set up a lent GPU machine for the benchmarks and the notebooks' gpu profile; SOURCE it from the repository
# root (it exports variables for the commands that follow):
#
#   source bench/device_setup.sh
#   python bench/gpu_notebooks.py --out bench/results/gpu_notebooks.json --log-dir bench/results
#
# Installs the wheels carried in .whl/ (no index: the machine has no internet), and nvImageCodec's from
# .whl-nvimgcodec/ when carried (hardware JPEG decoding, bench/gpu_jpeg_decode.py), registers the python3 kernel that nbclient
# starts, and exports PYTHONPATH and the NCCL/NVSHMEM settings that keep NVLink multicast off.

_ck_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_ck_wheels="$_ck_root/.whl"
if [ ! -d "$_ck_wheels" ]; then
    echo "device_setup: no $_ck_wheels folder (carry it along: it holds the wheels)" >&2
    return 1 2>/dev/null || exit 1
fi
python3 -m pip install -q --no-index --find-links "$_ck_wheels" \
    submitit tqdm nbclient nbformat ipykernel ipywidgets matplotlib || {
    echo "device_setup: pip install from $_ck_wheels failed" >&2; return 1 2>/dev/null || exit 1; }
# nvImageCodec (25 MB) lives in its own folder, .whl-nvimgcodec/: carry it only for bench/gpu_jpeg_decode.py,
# since a call carries at most 64 MiB with the tracked files
if ls "$_ck_root"/.whl-nvimgcodec/nvidia_nvimgcodec_cu*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --find-links "$_ck_wheels" "$(ls "$_ck_root"/.whl-nvimgcodec/nvidia_nvimgcodec_cu*.whl | head -n 1)" \
        || echo "device_setup: nvImageCodec did not install; torchvision's nvjpeg decodes instead" >&2
fi
python3 -m ipykernel install --sys-prefix >/dev/null
export PYTHONPATH="$_ck_root${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MPLBACKEND=Agg
python3 - <<'PY'
import torch
try:
    from nvidia import nvimgcodec
    codec = f"nvImageCodec {getattr(nvimgcodec, '__version__', '?')}"
except ImportError:
    codec = "no nvImageCodec (torchvision's nvjpeg decodes)"
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
print(f"device_setup: torch {torch.__version__} (CUDA {torch.version.cuda}), {len(gpus)} GPU(s) {sorted(set(gpus))}, {codec}")
PY
unset _ck_root _ck_wheels
