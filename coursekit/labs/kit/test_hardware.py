import pytest

from coursekit.labs.kit import hardware

V100 = {"device": "cuda", "name": "Tesla V100-SXM2-32GB", "total_memory_gb": 34.1, "capability": (7, 0),
        "bf16": False, "tf32": False}
H100 = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "total_memory_gb": 85.0, "capability": (9, 0),
        "bf16": True, "tf32": True}


def test_v100_drops_bf16_and_tf32_with_a_reason():
    kept, dropped = hardware.usable_precisions(V100, ["fp32", "tf32", "bf16", "fp16"])
    assert kept == ["fp32", "fp16"] and set(dropped) == {"tf32", "bf16"}
    assert "compute capability 7.0" in dropped["bf16"] and "fp16" in dropped["bf16"]
    assert hardware.usable_precisions(H100, ["fp32", "tf32", "bf16"]) == (["fp32", "tf32", "bf16"], {})
    assert hardware.usable_precisions(None, ["bf16"]) == (["bf16"], {})


def test_peaks_come_from_the_gpus_name_and_unknown_is_none():
    assert hardware.peak_tflops(H100["name"]) == 989.0
    assert hardware.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert hardware.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert hardware.peak_tflops(V100["name"], "bf16") is None and hardware.peak_tflops(V100["name"], "fp16") == 125.0
    assert hardware.peak_tflops("Some Future GPU") is None and hardware.peak_tflops(None) is None
    # an fp32 rung is measured against the CUDA cores' peak, not the tensor cores' (15x apart on an H100)
    assert hardware.peak_tflops(H100["name"], "fp32") == 67.0 and hardware.peak_tflops(H100["name"], "tf32") == 494.7
    assert hardware.peak_tflops(V100["name"], "tf32") is None
    with pytest.raises(ValueError, match="precision='int8'"):
        hardware.peak_tflops(H100["name"], "int8")


def test_memory_and_description():
    assert hardware.memory_gb(H100) == 85.0 and hardware.memory_gb(None, default=80) == 80
    assert "compute capability 9.0" in hardware.describe(H100) and hardware.describe(None) == "no GPU"
    assert "(139.7 GiB," in hardware.describe({**H100, "total_memory_gb": 150.0})  # an H200: 150e9 bytes
    info = hardware.gpu_info("cpu")
    assert info["device"] == "cpu" and info["capability"] is None
