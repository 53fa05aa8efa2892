"""GPU memory plan of a preset run, on the controller (standard library only): how many bytes the model states and
the activations of one micro batch take on each rank, and -- for the job keys left ``auto`` -- the ZeRO stage,
optimizer offload, activation checkpointing and micro batch that fit the GPU.

The estimate (bytes per rank, N parameters, W ranks, a micro batch of b samples of s tokens):

* Model states, mixed precision with Adam (Rajbhandari et al. 2020, "ZeRO", sec. 3 and 5, K = 12): 16-bit
  parameters and gradients, and fp32 master weights, Adam m and v -- 2 N + 2 N + 12 N = 16 N unpartitioned
  (autocast's fp32 parameters and gradients with Adam's two states: 4 N + 4 N + 8 N, the same). ZeRO-1 partitions
  the optimizer states (4 N + 12 N / W), ZeRO-2 the gradients too (2 N + 14 N / W), ZeRO-3 everything (16 N / W).
  Optimizer offload to the CPU moves the fp32 states and gradients to host memory (16 N / W per rank there),
  leaving 2 N + 2 N / W on the GPU (4 N / W with ZeRO-3). A partial offload (DeepSpeed's "Twin-Flow",
  ``offload_optimizer.ratio`` r, ZeRO-3 only: deepspeed/runtime/zero/stage3.py puts the last r of the optimizer's
  sub-groups on the CPU) keeps 4 N / W + 16 N (1 - r) / W on the GPU and moves 16 N r / W to the host. With ZeRO-3
  the host holds another 4 N / W besides (HOST_ZERO3_EXTRA): measured, not derived -- Llama 8B with half of the
  optimizer offloaded used 106 GB of the host's memory while it trained, against 64 GB for 16 N r
  (docs/benchmarks/gpu-2026-12-04.md).
* Activations kept for the backward pass, per sample and layer, in 16-bit (Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models", sec. 4.1, whose 34 s h is this for BERT/GPT-2), without
  the attention scores, which SDPA / flash attention recompute: attention 2 s h (input) + 2 s h (queries) + 4 s h
  kv/heads (keys, values) + 2 s h (output-projection input), + s h for a dropout mask; the MLP 2 s h + 4 s i (GELU:
  its input and output at the inner size i) + s h dropout mask, or 2 s h + 8 s i (SwiGLU: gate, up, their
  activation and product); two norms 4 s h. fp32 activations take twice that. With activation checkpointing only
  each layer's input (2 s h) is kept, plus one layer's activations while it is recomputed.
* The LM head: its rows (s, or the masked positions for the masked MLM head) x vocabulary x 10 bytes (16-bit
  logits, their fp32 copy for the loss, its fp32 gradient).
* The budget is MEMORY_SHARE of the GPU's memory less RESERVED_BYTES (CUDA context, allocator fragmentation,
  compile workspaces, NCCL buffers).

``plan`` tries, in order, ZeRO 0/1/2 without and then with activation checkpointing, ZeRO-3, then ZeRO-3 with a
partial optimizer offload (PARTIAL_RATIOS, the least offloaded first), then the whole optimizer offloaded, and takes the first whose micro batch is "good" (the micro batch ``auto`` wants, or at least
MIN_MICRO_TOKENS tokens), else the first that fits at all; a job that fits in none is refused (MemoryPlanError)
with the numbers. ZeRO-1/2/3 partition nothing on one rank and are only tried with W > 1. Keys the user set are
kept and only checked (``MemoryPlan.fits``). docs/training.md ("Bigger models") says the same for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from train.common import flops
from train.common.job import FAMILIES, JobError

#: share of the GPU's memory the estimate may fill, and what is set aside besides (module docstring)
MEMORY_SHARE = 0.85
RESERVED_BYTES = 2 << 30

#: a micro batch of at least this many tokens keeps a GPU's matrix units busy: below it, checkpointing (or a
#: larger ZeRO stage) that allows a larger micro batch is preferred
MIN_MICRO_TOKENS = 8192

#: share of a node's memory the offloaded optimizer states of its ranks may take (the rest: the OS, the data
#: loaders, the ranks' own processes)
HOST_SHARE = 0.75

#: the shares of the optimizer states a partial offload may move to the CPU, tried in this order (the least first:
#: each offloaded parameter costs the CPU's Adam step and a copy over PCIe). Quarters, not finer: the estimate's
#: error (up to 16 %) is larger than a finer step would gain.
PARTIAL_RATIOS = (0.25, 0.5, 0.75)

#: bytes a parameter that ZeRO-3 with optimizer offload keeps on the host beyond its offloaded states, per rank's
#: partition (module docstring: measured)
HOST_ZERO3_EXTRA = 4

GB = 1e9


class MemoryPlanError(JobError):
    """No ZeRO stage, offload and activation checkpointing fit the model on the job's GPUs (the message gives the
    numbers)."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate needs of a model: ``params`` (N), ``layers``, ``hidden`` (h), ``heads``,
    ``kv_heads`` (key/value heads: fewer than heads with grouped-query attention), ``inner`` (MLP width i),
    ``vocab``, ``gated`` (SwiGLU MLP: three matrices) and ``dropout`` (dropout masks are kept)."""

    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    inner: int
    vocab: int
    gated: bool
    dropout: bool


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def model_shape(job: dict) -> ModelShape | None:
    """The ModelShape of a resolved (or resolving) job's model from its ``model_config`` and ``vocab_size``, None
    for a model type not in train.common.job.FAMILIES or a config missing its width, depth or heads.

    Parameters (N): per layer 4 h^2 + 2 h i (BERT, RoBERTa, GPT-2: i = intermediate_size / n_inner, default 4 h) or
    2 h^2 + 2 h^2 kv/heads + 3 h i (Llama: grouped-query attention, SwiGLU); plus the embeddings (vocabulary x h,
    and the learned positions x h of BERT/GPT-2; Llama's untied output layer adds another vocabulary x h). Biases
    and norms (~0.1 %) are left out: BERT-base gives 108.8 M against 109.5 M counted by torch.
    """
    family = FAMILIES.get(job.get("model_type"))
    config = job.get("model_config") or {}
    if family is None:
        return None
    hidden = _int(config.get(family["hidden"]))
    layers = _int(flops.model_shape(config)[0])
    heads = _int(config.get(family["heads"]))
    vocab = _int(job.get("vocab_size"))
    if None in (hidden, layers, heads, vocab):
        return None
    llama = job["model_type"] == "llama"
    kv_heads = _int(config.get("num_key_value_heads")) or heads
    inner = _int(config.get("intermediate_size", config.get("n_inner"))) or 4 * hidden
    if llama:
        per_layer = 2 * hidden * hidden + 2 * hidden * hidden * kv_heads // heads + 3 * hidden * inner
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    else:
        per_layer = 4 * hidden * hidden + 2 * hidden * inner
        embeddings = (vocab + (_int(config.get(family["positions"])) or 0)) * hidden
    return ModelShape(params=layers * per_layer + embeddings, layers=layers, hidden=hidden, heads=heads,
                      kv_heads=kv_heads, inner=inner, vocab=vocab, gated=llama, dropout=not llama)


def layer_activation_bytes(shape: ModelShape, seq: int, half: bool = True) -> int:
    """Bytes one transformer layer keeps for backward for one sample of ``seq`` tokens (module docstring)."""
    s, h, i = seq, shape.hidden, shape.inner
    attention = 2 * s * h + 2 * s * h + 4 * s * h * shape.kv_heads // shape.heads + 2 * s * h
    mlp = 2 * s * h + (8 * s * i if shape.gated else 4 * s * i)
    norms = 4 * s * h
    masks = 2 * s * h if shape.dropout else 0  # one byte an element, after attention and in the MLP
    return (attention + mlp + norms) * (1 if half else 2) + masks


def activation_bytes(shape: ModelShape, seq: int, head_rows: float, *, checkpointing: bool = False,
                     half: bool = True) -> int:
    """Bytes of activations one sample of ``seq`` tokens keeps for backward: every layer's (or, with activation
    checkpointing, every layer's 16-bit input plus one layer's while it is recomputed) and the LM head's
    ``head_rows`` x vocabulary x 10 bytes (module docstring)."""
    layer = layer_activation_bytes(shape, seq, half)
    layers = (shape.layers * 2 * seq * shape.hidden + layer) if checkpointing else shape.layers * layer
    return int(layers + head_rows * shape.vocab * 10)


def state_bytes(params: int, zero_stage: int, world_size: int, offload: bool,
                ratio: float = 1.0) -> tuple[int, int]:
    """(GPU bytes, host bytes) per rank of the parameters, gradients and Adam states of ``params`` parameters
    under ZeRO ``zero_stage`` on ``world_size`` ranks, optimizer offloaded to the CPU or not, and with ZeRO-3 the
    share ``ratio`` (0 < ratio <= 1) of it offloaded (module docstring)."""
    n, w = params, world_size
    if offload:
        if zero_stage == 3:
            return int(4 * n / w + 16 * n * (1 - ratio) / w), int((16 * ratio + HOST_ZERO3_EXTRA) * n / w)
        return int(2 * n + 2 * n / w), int(16 * n / w)
    gpu = {0: 16 * n, 1: 4 * n + 12 * n / w, 2: 2 * n + 14 * n / w, 3: 16 * n / w}[zero_stage]
    return int(gpu), 0


def budget_bytes(gpu_memory_bytes: int) -> int:
    """What the estimate may fill of a GPU of ``gpu_memory_bytes``: MEMORY_SHARE of it less RESERVED_BYTES."""
    return int(MEMORY_SHARE * gpu_memory_bytes) - RESERVED_BYTES


@dataclass
class MemoryPlan:
    """One choice and its estimate, bytes per rank. ``fits``: states + micro x per_sample within the budget.
    ``ratio``: the share of the optimizer states offloaded when ``offload`` (1.0: all of them)."""

    shape: ModelShape
    zero_stage: int
    offload: bool
    checkpointing: bool
    micro: int
    states_gpu: int
    states_host: int
    per_sample: int
    budget: int
    gpu_memory: int
    notes: list = field(default_factory=list)
    ratio: float = 1.0

    @property
    def total(self) -> int:
        return self.states_gpu + self.micro * self.per_sample

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def line(self) -> str:
        """The plan's memory line, e.g. ``memory: model 1.56 B parameters: states 24.9 GB a rank, activations 3.2 GB
        a sample -> ZeRO 0, micro 16, activation checkpointing off: 76.0 of 117.9 GB (0.85 x 141.0 GB - 2 GiB)``."""
        share = "" if self.ratio == 1.0 else f"{self.ratio:.0%} of the "
        offload = (f", {share}optimizer states on the CPU ({self.states_host / GB:.1f} GB a rank)" if self.offload
                   else "")
        return (f"memory: model {self.shape.params / 1e9:.2f} B parameters: states {self.states_gpu / GB:.1f} GB a "
                f"rank, activations {self.per_sample / GB:.2f} GB a sample -> ZeRO {self.zero_stage}{offload}, micro "
                f"{self.micro}, activation checkpointing {'on' if self.checkpointing else 'off'}: "
                f"{self.total / GB:.1f} of {self.budget / GB:.1f} GB ({MEMORY_SHARE} x {self.gpu_memory / GB:.1f} GB"
                f" - 2 GiB)" + "".join(f"; {note}" for note in self.notes))


def _head_rows(job: dict, seq: int) -> float:
    if job.get("task") == "mlm" and job.get("mlm_head") == "masked":
        return 1.2 * float(job.get("mlm_probability") or 0.15) * seq
    return float(seq)


def _options(world_size: int, fixed_stage: int | None, fixed_ratio: float | None = None):
    """(zero_stage, offload, checkpointing, ratio) in the order they are tried (module docstring); only
    ``fixed_stage`` when the user set one (then on one rank too), only ``fixed_ratio`` when the user set one (a
    partial offload, below 1: ZeRO-3 with offload alone)."""
    partial = PARTIAL_RATIOS if fixed_ratio is None else (fixed_ratio,) if fixed_ratio < 1.0 else ()
    if fixed_ratio is not None and fixed_ratio < 1.0:
        if fixed_stage in (None, 3):
            for ckpt in (False, True):
                yield 3, True, ckpt, fixed_ratio
        return
    if fixed_stage is not None:
        for offload in ((False, True) if fixed_stage > 0 else (False,)):
            ratios = (*partial, 1.0) if offload and fixed_stage == 3 else (1.0,)
            for ratio in ratios:
                for ckpt in (False, True):
                    yield fixed_stage, offload, ckpt, ratio
        return
    partitioned = (1, 2) if world_size > 1 else ()
    for ckpt in (False, True):
        for stage in (0, *partitioned):
            yield stage, False, ckpt, 1.0
    if world_size > 1:
        yield 3, False, False, 1.0
        yield 3, False, True, 1.0
    for ratio in partial:
        yield 3, True, False, ratio
        yield 3, True, True, ratio
    for stage in ((2, 3) if world_size > 1 else (2,)):
        yield stage, True, False, 1.0
        yield stage, True, True, 1.0


def plan(job: dict, world_size: int, gpu_memory_bytes: int, wanted_micro: int, per_rank: int | None,
         host_memory_bytes: int | None = None, ranks_per_node: int = 1) -> MemoryPlan | None:
    """Choose what the job left ``auto`` among zero_stage, offload_optimizer, offload_ratio, gradient_checkpointing
    and per_device_train_batch_size so that a rank's estimate fits ``gpu_memory_bytes`` (module docstring).

    Args:
        job: the job being resolved (model_type, model_config, vocab_size, max_seq_length, precision, task,
            mlm_head, mlm_probability; those five keys as given: "auto" or a value the user fixed).
        world_size: ranks (W >= 1).
        gpu_memory_bytes: the smallest GPU's memory, bytes.
        wanted_micro: the micro batch ``auto`` wants (a power of two; the largest one tried).
        per_rank: samples a rank takes each optimizer step (train_batch_size / W), or None without a global batch;
            a micro batch must divide it.
        host_memory_bytes: the smallest node's memory, bytes, or None (not known): optimizer offload is chosen only
            where ``ranks_per_node`` ranks' host states fit HOST_SHARE of it.
        ranks_per_node: the most ranks on one node.

    Returns:
        MemoryPlan (its ``fits`` False when the user's fixed values do not fit: the caller warns), or None when the
        model's shape is not known (a family not in FAMILIES).

    Raises:
        MemoryPlanError: nothing the ``auto`` keys may choose fits; the message gives the smallest estimate.
    """
    shape = model_shape(job)
    if shape is None:
        return None
    seq = job["max_seq_length"]
    half = job.get("precision") in ("bf16", "fp16")
    rows = _head_rows(job, seq)
    budget = budget_bytes(gpu_memory_bytes)
    fixed_stage = None if job["zero_stage"] == "auto" else int(job["zero_stage"])
    fixed_offload = None if job["offload_optimizer"] == "auto" else job["offload_optimizer"] != "none"
    fixed_ckpt = None if job["gradient_checkpointing"] == "auto" else bool(job["gradient_checkpointing"])
    fixed_ratio = None if job.get("offload_ratio", "auto") == "auto" else float(job["offload_ratio"])
    fixed_micro = None if job["per_device_train_batch_size"] == "auto" else int(job["per_device_train_batch_size"])
    if job["offload_optimizer"] not in ("auto", "none", "cpu") or (fixed_offload and fixed_stage == 0):
        return None  # values job validation refuses with its own message (train.common.job.validate)

    def micro_that_fits(free: int, per_sample: int) -> int:
        if fixed_micro is not None:
            return fixed_micro if fixed_micro * per_sample <= free else 0
        micro = wanted_micro
        while micro >= 1:
            if micro * per_sample <= free and (per_rank is None or per_rank % micro == 0):
                return micro
            micro //= 2
        return 0

    def good(micro: int) -> bool:
        return micro >= 1 and (fixed_micro is not None or micro == wanted_micro or micro * seq >= MIN_MICRO_TOKENS)

    candidates = []
    host_needed = []  # host bytes a node would need for each offload skipped for the node's memory, whose GPU part fits
    for stage, offload, ckpt, ratio in _options(world_size, fixed_stage, fixed_ratio):
        if fixed_offload is not None and offload != fixed_offload:
            continue
        if fixed_ckpt is not None and ckpt != fixed_ckpt:
            continue
        gpu, host = state_bytes(shape.params, stage, world_size, offload, ratio)
        if (offload and fixed_offload is None and host_memory_bytes
                and host * ranks_per_node > HOST_SHARE * host_memory_bytes):
            if micro_that_fits(budget - gpu, activation_bytes(shape, seq, rows, checkpointing=True, half=half)):
                host_needed.append(host * ranks_per_node)
            continue  # the optimizer states would not fit the node's memory either
        per_sample = activation_bytes(shape, seq, rows, checkpointing=ckpt, half=half)
        micro = micro_that_fits(budget - gpu, per_sample)
        candidates.append(MemoryPlan(shape, stage, offload, ckpt, micro, gpu, host, per_sample, budget,
                                     gpu_memory_bytes, ratio=ratio if offload else 1.0))
    for cand in candidates:
        if good(cand.micro):
            return cand
    for cand in candidates:
        if cand.micro >= 1:
            return cand
    if not candidates and not host_needed:
        return None  # a ratio the job refuses with its own message (train.common.job.validate)
    host = (f"; an optimizer offload that fits the GPU would need {min(host_needed) / GB:.1f} GB of each node's "
            f"{host_memory_bytes / GB:.1f} GB ({HOST_SHARE:.0%} of it may hold the states)"
            if host_memory_bytes and host_needed else "")
    fix = ("use more GPUs (nodes or slots), a smaller model_size, a shorter -e max_seq_length, or leave zero_stage, "
           "offload_optimizer, offload_ratio and gradient_checkpointing auto")
    if not candidates:  # the user's offload_ratio fits the GPU, not the node's memory
        raise MemoryPlanError(f"model {shape.params / 1e9:.2f} B parameters with offload_ratio {fixed_ratio} does "
                              f"not fit {world_size} GPU(s) of {gpu_memory_bytes / GB:.1f} GB{host}",
                              "offload_ratio", fix)
    smallest = min(candidates, key=lambda c: c.states_gpu + c.per_sample)
    if fixed_micro is not None or (fixed_stage is not None and fixed_offload is not None and fixed_ckpt is not None):
        smallest.micro = fixed_micro or 1
        smallest.notes.append("the estimate exceeds the budget: this run may run out of GPU memory")
        return smallest
    raise MemoryPlanError(
        f"model {shape.params / 1e9:.2f} B parameters does not fit {world_size} GPU(s) of "
        f"{gpu_memory_bytes / GB:.1f} GB: even ZeRO {smallest.zero_stage}"
        f"{' with the optimizer on the CPU' if smallest.offload else ''}"
        f"{' and activation checkpointing' if smallest.checkpointing else ''} needs "
        f"{(smallest.states_gpu + smallest.per_sample) / GB:.1f} GB a rank for one sample of {seq} tokens "
        f"(states {smallest.states_gpu / GB:.1f} GB, activations {smallest.per_sample / GB:.2f} GB) against a budget "
        f"of {budget / GB:.1f} GB{host}",
        "model_size / model_config", fix)


def describe(job: dict, world_size: int, gpu_memory_bytes: int | None, host_memory_bytes: int | None = None,
             ranks_per_node: int = 1) -> MemoryPlan | None:
    """The estimate of a resolved job (every key concrete) on ``world_size`` GPUs of ``gpu_memory_bytes``: its
    MemoryPlan, whose ``line()`` the plan shows and whose ``fits`` is False (with a note) when the estimate exceeds
    the budget. None without the GPU's memory, on cpu, or for a model whose shape is unknown."""
    if not gpu_memory_bytes or job.get("accelerator") != "cuda":
        return None
    return plan(job, world_size, gpu_memory_bytes, int(job["per_device_train_batch_size"]), None, host_memory_bytes,
                ranks_per_node)



#: a checkpoint's files beyond the model and optimizer states: tokenizer, RNG states, trainer state, DeepSpeed's
#: conversion scripts (a 128,256-entry byte-level BPE tokenizer.json is ~9 MB)
CHECKPOINT_EXTRA_BYTES = 32 << 20


def checkpoint_bytes(job: dict, ranks: dict, head: str) -> dict | None:
    """Bytes one checkpoint of a preset run takes on each node's disk (its run directory), the head's after it
    gathered every node's rank files (train.node.checkpoints), or None for a model whose shape is unknown.

    What a HF Trainer + DeepSpeed checkpoint holds (``save_on_each_node``: DeepSpeed's node-local storage, so the
    first rank of every node writes the model files), N parameters of p bytes (4 for fp32 weights, which bf16
    autocast keeps; 2 under DeepSpeed's fp16/bf16 blocks), T of them tied (the output layer that shares the input
    embeddings: vocabulary x h), W ranks, r ranks on the node:

    * ``model.safetensors``: p (N + T) on every node: the tied output layer is written again (seen on CPU runs;
      ZeRO-3 gathers the weights for it).
    * DeepSpeed's ``mp_rank_00_model_states.pt``: the module, p N on every node (tied weights once), except under
      ZeRO-3 (partitioned: each rank's few bytes). Under ZeRO-0 it also holds the optimizer: Adam's two moments,
      8 N, plus fp32 master weights, 4 N, where the module is 16-bit.
    * ZeRO-1/2/3: every rank's ``zero_pp_rank_R_..._optim_states.pt``, its partition of the fp32 weights and Adam's
      moments: 12 N r / W on the node, 12 N on the head once gathered (the ZeRO paper's K = 12).
    * CHECKPOINT_EXTRA_BYTES besides.

    Args:
      job: a resolved preset job (model_type, model_config, vocab_size, zero_stage, precision, autocast).
      ranks: {node: ranks on it}; ``head``: the head's name (it gathers every rank's files).

    Returns:
      {node: bytes of one checkpoint there}.
    """
    shape = model_shape(job)
    if shape is None:
        return None
    n, world, stage = shape.params, sum(int(r) for r in ranks.values()), int(job.get("zero_stage") or 0)
    tied = shape.vocab * shape.hidden if (job.get("model_config") or {}).get("tie_word_embeddings", True) else 0
    p = 4 if job.get("precision") == "fp32" or job.get("autocast") else 2
    model = p * (n + tied) + (p * n if stage < 3 else 0)
    out = {}
    for node, r in ranks.items():
        if stage == 0:
            optim = (8 if p == 4 else 12) * n
        else:
            optim = 12 * n * (world if node == head else int(r)) / world
        out[node] = int(model + optim) + CHECKPOINT_EXTRA_BYTES
    return out


def checkpoints_kept(job: dict) -> int:
    """How many checkpoints a run has on a node's disk at once, at most: the HF Trainer saves every ``save_steps``
    and at the last step (ceil(max_steps / save_steps) saves), and deletes the oldest beyond ``save_total_limit``
    only after the new one is written (limit + 1 while it saves); null keeps every one."""
    saves = -(-int(job["max_steps"]) // max(1, int(job["save_steps"])))
    limit = job.get("save_total_limit")
    return saves if limit is None else min(saves, int(limit) + 1)
