"""Model FLOPs and MFU, the one formula of the project (train.rank.metrics for metrics.json, train.tools.bench for
the GPU benchmark). Standard library only.

Model FLOPs per token = 6 N + 12 L h s (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1; the
PaLM paper, appendix B): 6 N for the dense weights' forward and backward pass, 12 L h s for the attention scores and
values; N counts every parameter (embeddings included), L layers, h width, s tokens per sample.
MFU = FLOPs per token x tokens/s / the GPU's peak rate. The peak is the GPU's dense (no sparsity) bf16/fp16 matrix
rate from :data:`PEAKS`: *measured* on the GPU where the project measured one (a large bf16 matmul on the device
machine's H200; docs/benchmarks/ states it with each GPU run), else the vendor's datasheet figure; a GPU not in the
table has no MFU. Which peak was used is said with every MFU (:func:`peak_of`: metrics.json's ``mfu_peak``, the
summary's MFU, the benchmark report).
"""

from __future__ import annotations

#: Dense bf16 (= fp16) tensor-core FLOP/s per GPU, matched against the GPU's name as the driver gives it (NVML's
#: nvmlDeviceGetName, the same string as torch.cuda.get_device_name(): "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
#: "NVIDIA A100-SXM4-80GB"): (name substring, FLOP/s, source). The first entry whose substring is in the name wins,
#: so the more specific names come first ("GH200" and "H200 NVL" before "H200", "H100 PCIe" before "H100").
#: Datasheets give the bf16 figure "with sparsity" (2:4 structured); the dense rate is half of it.
PEAKS = (
    ("GH200", 989.4e12, "datasheet: NVIDIA GH200 Grace Hopper Superchip, FP16/BF16 Tensor Core 1,979 TFLOPS with "
                        "sparsity, half without"),
    ("H200 NVL", 835.5e12, "datasheet: NVIDIA H200 NVL, BF16 Tensor Core 1,671 TFLOPS with sparsity, half without"),
    ("H200", 790e12, "measured: a large bf16 matmul on the device machine's H200 SXM (docs/benchmarks/README.md; "
                     "the datasheet's 989.4 dense is not reached)"),
    ("H100 PCIe", 756.5e12, "datasheet: NVIDIA H100 PCIe, BF16 Tensor Core 1,513 TFLOPS with sparsity, half without"),
    ("H100 NVL", 835.5e12, "datasheet: NVIDIA H100 NVL, BF16 Tensor Core 1,671 TFLOPS with sparsity, half without"),
    ("H100", 989.4e12, "datasheet: NVIDIA H100 SXM5, BF16 Tensor Core 1,979 TFLOPS with sparsity, half without"),
    ("GB200", 2.5e15, "datasheet: NVIDIA GB200 NVL72, FP16/BF16 Tensor Core 360 PFLOPS with sparsity for 72 GPUs, "
                      "half without"),
    ("B200", 2.25e15, "datasheet: NVIDIA HGX B200, FP16/BF16 Tensor Core 36 PFLOPS with sparsity for 8 GPUs, half "
                      "without"),
    ("A100", 312e12, "datasheet: NVIDIA A100 Tensor Core GPU, BF16 Tensor Core 312 TFLOPS (624 with sparsity), SXM "
                     "and PCIe alike"),
    ("A30", 165e12, "datasheet: NVIDIA A30, BF16 Tensor Core 165 TFLOPS (330 with sparsity)"),
    ("L40S", 362.05e12, "datasheet: NVIDIA L40S, BF16 Tensor Core 362.05 TFLOPS (733 with sparsity)"),
    ("L40", 181.05e12, "datasheet: NVIDIA L40, BF16 Tensor Core 181.05 TFLOPS (362.1 with sparsity)"),
    ("L4", 121e12, "datasheet: NVIDIA L4, BF16 Tensor Core 121 TFLOPS (242 with sparsity)"),
    ("A10", 125e12, "datasheet: NVIDIA A10, BF16 Tensor Core 125 TFLOPS (250 with sparsity)"),
)
MFU_FORMULA = ("MFU = (6*N + 12*L*h*s) * tokens_per_s / the GPU's dense bf16 peak (train/common/flops.py PEAKS: "
               "measured on the H200, the vendor's datasheet for other GPUs)")


def peak_of(gpu_name: str | None) -> dict | None:
    """The dense bf16 peak of the GPU named ``gpu_name`` (the driver's name, as NVML and torch give it):
    ``{"gpu": name, "flops": FLOP/s, "source": where the figure comes from}`` (:data:`PEAKS`), or None for a GPU not
    in the table (or no GPU). "NVIDIA A10G" is not an A10 (a different clock): it is matched only by a name holding
    "A10" followed by nothing or a blank."""
    for key, value, source in PEAKS:
        if not gpu_name or key not in gpu_name:
            continue
        rest = gpu_name.split(key, 1)[1]
        if rest[:1].isalnum():  # "A10G" is not "A10", "L40S" is not "L40", "L4" in "L40S"
            continue
        return {"gpu": gpu_name, "flops": value, "source": source}
    return None


def peak_flops(gpu_name: str | None) -> float | None:
    """The dense bf16 FLOP/s of the GPU named ``gpu_name`` (:func:`peak_of`), None when it is not in :data:`PEAKS`
    (or there is no GPU)."""
    peak = peak_of(gpu_name)
    return peak["flops"] if peak else None


def model_flops_per_token(n_params: int, layers: int, hidden: int, seq: int) -> float:
    """Training FLOPs per token, 6 N + 12 L h s (module docstring): ``n_params`` parameters, ``layers`` transformer
    blocks of width ``hidden``, ``seq`` tokens per sample. Returns FLOPs (a float)."""
    return 6.0 * n_params + 12.0 * layers * hidden * seq


def mfu(tokens_per_second: float | None, n_params: int | None, layers: int | None, hidden: int | None,
        seq: int | None, gpu_name: str | None) -> float | None:
    """Model FLOPs utilisation, a fraction (0.527 for 52.7 %), of one GPU at ``tokens_per_second`` per GPU; None
    when a value is missing or the GPU's peak is not known (:func:`peak_of`: a GPU not in :data:`PEAKS`)."""
    peak = peak_flops(gpu_name)
    if peak is None or not all(isinstance(v, (int, float)) and v > 0
                               for v in (tokens_per_second, n_params, layers, hidden, seq)):
        return None
    return model_flops_per_token(n_params, layers, hidden, seq) * tokens_per_second / peak


def model_shape(config: dict) -> tuple[int | None, int | None]:
    """(layers, width) of a Hugging Face model config as a dict: ``num_hidden_layers`` / ``n_layer`` and
    ``hidden_size`` / ``n_embd``; None for what it does not name."""
    return (config.get("num_hidden_layers", config.get("n_layer")),
            config.get("hidden_size", config.get("n_embd")))
