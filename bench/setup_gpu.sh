#!/usr/bin/env bash
# Prepare a GPU machine for the benchmarks and the notebooks' gpu profile; SOURCE it from the repository root
# (it exports variables for the commands that follow):
#
#   source bench/setup_gpu.sh
#   python bench/notebooks_gpu.py --out bench/results/gpu_notebooks.json --log-dir /tmp/nb-logs
#
# Installs coursekit's extra dependencies from the wheels in .whl/ (no package index: the machine may have no
# internet; bench/README.md says how to fill .whl/), and nvImageCodec's wheel from .whl-nvimgcodec/ when it is
# there (hardware JPEG decoding, bench/jpeg_decode_gpu.py); registers the python3 kernel that nbclient starts;
# exports PYTHONPATH and the NCCL/NVSHMEM settings that keep NVLink multicast off.

_ck_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_ck_wheels="$_ck_root/.whl"
if [ ! -d "$_ck_wheels" ]; then
    echo "setup_gpu: no $_ck_wheels folder (bench/README.md: the wheels to bring)" >&2
    return 1 2>/dev/null || exit 1
fi
python3 -m pip install -q --no-index --find-links "$_ck_wheels" \
    submitit tqdm nbclient nbformat ipykernel ipywidgets matplotlib || {
    echo "setup_gpu: pip install from $_ck_wheels failed" >&2; return 1 2>/dev/null || exit 1; }
# nvImageCodec (25 MB) has its own folder, .whl-nvimgcodec/: only bench/jpeg_decode_gpu.py needs it
if ls "$_ck_root"/.whl-nvimgcodec/nvidia_nvimgcodec_cu*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --find-links "$_ck_wheels" "$(ls "$_ck_root"/.whl-nvimgcodec/nvidia_nvimgcodec_cu*.whl | head -n 1)" \
        || echo "setup_gpu: nvImageCodec did not install; torchvision's nvjpeg decodes instead" >&2
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
print(f"setup_gpu: torch {torch.__version__} (CUDA {torch.version.cuda}), {len(gpus)} GPU(s) {sorted(set(gpus))}, {codec}")
PY
unset _ck_root _ck_wheels
