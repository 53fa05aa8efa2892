"""Model FLOPs and MFU, the one formula of the project (train.rank.metrics for metrics.json, train.tools.bench for
the GPU benchmark). Standard library only.

Model FLOPs per token = 6 N + 12 L h s (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1; the
PaLM paper, appendix B): 6 N for the dense weights' forward and backward pass, 12 L h s for the attention scores and
values; N counts every parameter (embeddings included), L layers, h width, s tokens per sample.
MFU = FLOPs per token x tokens/s / the GPU's peak rate. The peak is the dense bf16 matrix rate *measured* on the
GPU (a large bf16 matmul on the device machine's H200; docs/benchmarks/ states it with each GPU run), not the
datasheet's; a GPU not in :data:`PEAK_FLOPS` has no MFU.
"""

from __future__ import annotations

#: dense bf16 matrix FLOP/s measured on one GPU, by a substring of torch.cuda.get_device_name()
PEAK_FLOPS = {"H200": 790e12}
MFU_FORMULA = "MFU = (6*N + 12*L*h*s) * tokens_per_s / 790e12 (bf16 dense rate measured on one H200)"


def model_flops_per_token(n_params: int, layers: int, hidden: int, seq: int) -> float:
    """Training FLOPs per token, 6 N + 12 L h s (module docstring): ``n_params`` parameters, ``layers`` transformer
    blocks of width ``hidden``, ``seq`` tokens per sample. Returns FLOPs (a float)."""
    return 6.0 * n_params + 12.0 * layers * hidden * seq


def peak_flops(gpu_name: str | None) -> float | None:
    """The measured dense bf16 FLOP/s of the GPU named ``gpu_name`` (torch.cuda.get_device_name()), None when it
    is not in :data:`PEAK_FLOPS` (or there is no GPU)."""
    for key, value in PEAK_FLOPS.items():
        if gpu_name and key in gpu_name:
            return value
    return None


def mfu(tokens_per_second: float | None, n_params: int | None, layers: int | None, hidden: int | None,
        seq: int | None, gpu_name: str | None) -> float | None:
    """Model FLOPs utilisation, a fraction (0.527 for 52.7 %), of one GPU at ``tokens_per_second`` per GPU; None
    when a value is missing or the GPU's peak is not known (:func:`peak_flops`)."""
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
