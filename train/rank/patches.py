"""Fixes and speed-ups of the libraries a rank runs, applied explicitly where TrainingArguments and the Trainer
are built (torch, transformers, accelerate and deepspeed are imported inside the functions):

* :func:`init_cpu_deepspeed_distributed` (and :func:`configured_state`): accelerate leaves the process-group
  backend unset under DeepSpeed on CPU, so the Trainer would believe world size is 1; and DeepSpeed's shared-memory
  all-reduce buffers would outlive the run in /dev/shm (:func:`release_cpu_allreduce_buffer`, and
  :func:`release_after_deepspeed_init` for a script that calls deepspeed.init_distributed itself);
* :func:`fix_loss_kwargs_flag`: the Trainer multiplies the loss by the world size for models that take
  ``**kwargs`` but ignore ``num_items_in_batch`` (BERT);
* :func:`clip_without_host_sync`: on ZeRO-0 with the Trainer's optimizer, gradient clipping in the optimizer's
  step, without DeepSpeed's host syncs;
* :func:`mix_in`: a model's forward replaced by a mixin's, the model's class kept by name (mlm_head's head at
  masked positions, kernels' fused cross-entropy).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from datetime import timedelta
from pathlib import Path

#: (mixin, model class) -> the subclass :func:`mix_in` made: one per pair, whatever the number of models
_MIXED: dict[tuple[type, type], type] = {}


def init_cpu_deepspeed_distributed(deepspeed_config: str | None, ddp_timeout: int) -> bool:
    """Create accelerate's PartialState with DeepSpeed's CPU backend before TrainingArguments is built.

    Args:
        deepspeed_config: TrainingArguments.deepspeed (path or None); nothing is done without it.
        ddp_timeout: TrainingArguments.ddp_timeout, seconds.

    accelerate 1.15 ``PartialState._prepare_backend`` (accelerate/state.py) picks a backend only for an accelerator
    device (cncl/tccl/mccl/hccl/nccl/xccl/neuron) or when ``cpu=True`` (gloo/mpi, MULTI_CPU); DeepSpeed on a CPU
    node is neither, so it returns ``backend=None``. ``PartialState.__init__`` still lets DeepSpeed initialise
    torch.distributed (``dist.init_distributed(dist_backend=self.backend, ...)`` under ACCELERATE_USE_DEEPSPEED),
    but then ``if self.backend is None: ... self.num_processes = 1; self.process_index = 0`` -- so TrainingArguments
    (``_setup_devices``) and the Trainer believe world size is 1 on every rank: DeepSpeed's batch-size check fails
    (train_batch_size != micro x GA x 2), or, without train_batch_size, every rank trains on the same batches.

    Passing the backend explicitly makes ``_prepare_backend`` return it, so ``num_processes =
    torch.distributed.get_world_size()``. The backend is the one DeepSpeed itself uses on this accelerator:
    ``get_accelerator().communication_backend_name()`` (gloo, or ccl with oneCCL). TrainingArguments would reset
    this state unless ``accelerator_config.use_configured_state`` is set: see :func:`configured_state`.

    Returns:
        True when the state was created (CPU node, under a launcher, with a DeepSpeed config); False otherwise
        (nothing changed: GPU nodes, where accelerate finds nccl itself, or no DeepSpeed).

    Raises:
        RuntimeError: accelerate's process count differs from the launcher's WORLD_SIZE.
    """
    if not deepspeed_config or int(os.environ.get("LOCAL_RANK", "-1")) == -1:
        return False
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator()
    if accel.device_name() != "cpu":
        return False
    from accelerate import PartialState

    backend = accel.communication_backend_name()
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"  # as TrainingArguments._setup_devices does around PartialState
    try:
        state = PartialState(backend=backend, timeout=timedelta(seconds=ddp_timeout))
    finally:
        os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
    expected = int(os.environ.get("WORLD_SIZE", "1"))
    if state.num_processes != expected:
        raise RuntimeError(f"accelerate sees {state.num_processes} processes, the launcher started {expected}")
    release_cpu_allreduce_buffer()
    return True


def release_cpu_allreduce_buffer() -> str | None:
    """Unlink this rank's DeepSpeed CPU all-reduce buffer from /dev/shm once every rank of the node has mapped it.

    On a CPU accelerator DeepSpeed's TorchBackend (deepspeed/comm/torch.py) builds its shm op, and when all ranks are
    on one node (WORLD_SIZE == LOCAL_SIZE: shm_interface.cpp ``all_ranks_local_p``) each rank creates a ~67 MB
    POSIX shared-memory object and maps every other rank's (shm.cpp ``shm_initialize``, which waits until each
    exists). Nothing unlinks them (``shared_close`` is never called), so every run -- a test, ``make demo`` -- left
    its ranks' buffers in /dev/shm, RAM that only a reboot gave back; a machine that ran the tests for a day had
    21 GB of them, and its ranks slowed to a crawl. Once every rank is past the barrier here every rank has mapped
    every buffer (a rank reaches the barrier only after its own ``shm_initialize`` returned), so the names can go:
    the memory stays mapped while a rank lives and is freed when the last one exits, however it ends (SIGKILL too).

    Call it on every rank, after torch.distributed is up (the barrier is collective): it does nothing when the ranks
    span several nodes (no buffer, and the condition is the same on every rank, so no rank waits alone). Called by
    :func:`init_cpu_deepspeed_distributed` and, for scripts that call DeepSpeed's init_distributed themselves, after
    it (:func:`release_after_deepspeed_init`).

    Returns:
        The path unlinked, or None (ranks on several nodes, or no buffer: DeepSpeed without its shm op).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()  # the size DeepSpeed's shm op was initialised with
    if world != int(os.environ.get("LOCAL_SIZE") or 0):
        return None
    from train.rank.bootstrap import barrier, unlink_cpu_allreduce_buffer

    barrier()
    return unlink_cpu_allreduce_buffer(dist.get_rank())


def release_after_deepspeed_init() -> bool:
    """Make every call of DeepSpeed's ``init_distributed`` release this rank's CPU all-reduce buffer right after it
    (:func:`release_cpu_allreduce_buffer`), for a user's script that calls it itself and builds no TrainingArguments
    (train.rank.hooks.install_hooks). Wraps the names scripts and DeepSpeed itself call it by:
    ``deepspeed.init_distributed`` and ``deepspeed.comm.init_distributed`` (deepspeed.initialize calls the latter).
    Every rank makes the same calls, so the barrier in each is collective. Idempotent.

    Returns:
        True when the wrapper is in place (a CPU accelerator); False otherwise (nothing changed: GPU nodes have no
        such buffer).
    """
    import deepspeed
    import deepspeed.comm
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        return False
    original = deepspeed.comm.init_distributed
    if getattr(original, "_dsc_releases_shm", False):
        return True

    def init_distributed(*args, **kwargs):
        out = original(*args, **kwargs)
        release_cpu_allreduce_buffer()
        return out

    init_distributed.__doc__ = original.__doc__
    init_distributed._dsc_releases_shm = True
    deepspeed.init_distributed = deepspeed.comm.init_distributed = init_distributed
    return True


def configured_state(accelerator_config) -> dict:
    """TrainingArguments.accelerator_config (None, a dict, a JSON string or a JSON file path) with
    ``use_configured_state: true`` added, so TrainingArguments keeps the PartialState made by
    :func:`init_cpu_deepspeed_distributed`. Returns a new dict. Raises ValueError for unreadable JSON."""
    acc = accelerator_config
    if isinstance(acc, str):
        acc = json.loads(Path(acc).read_text(encoding="utf-8")) if Path(acc).is_file() else json.loads(acc)
    if dataclasses.is_dataclass(acc):
        acc = dataclasses.asdict(acc)
    return {**(acc or {}), "use_configured_state": True}


def model_uses_num_items_in_batch(model, vocab_size: int) -> bool:
    """Whether ``model(..., num_items_in_batch=n)`` actually changes the loss (one tiny no-grad forward, twice).

    Args:
        model: a transformers language model (input_ids + labels -> .loss).
        vocab_size: its vocabulary size (token ids of the probe are drawn below it).

    The Trainer decides from the forward signature alone: ``model_accepts_loss_kwargs = any(VAR_KEYWORD)``
    unless the model has an ``accepts_loss_kwargs`` attribute. With it True and ``average_tokens_across_devices``
    (default True), compute_loss does ``loss *= self.accelerator.num_processes`` expecting the model to have
    divided its summed loss by the all-ranks token count. BertForMaskedLM takes ``**kwargs`` but computes
    ``CrossEntropyLoss()`` (a mean) and ignores ``num_items_in_batch``: the logged loss (and the gradient) come out
    world-size times too big, and with gradient accumulation the loss is also not divided by the accumulation
    steps. GPT-2 passes the kwargs to ``self.loss_function`` and does honour it. So ask the model itself.
    Under ZeRO-3 the probe runs on an unpartitioned one-layer twin of the model's class.

    Returns:
        True when the loss depends on num_items_in_batch; False otherwise (also when forward refuses the kwarg).
    """
    import copy

    import torch

    params = inspect.signature(model.forward).parameters
    if "num_items_in_batch" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return False
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        # from_config partitioned the parameters (zero.Init): they can't run a forward before deepspeed.initialize.
        # The answer depends on the class's code, not its size: ask a one-layer twin built without zero.Init.
        twin_config = copy.deepcopy(model.config)
        for name in ("num_hidden_layers", "n_layer", "num_layers"):
            if isinstance(getattr(twin_config, name, None), int):
                setattr(twin_config, name, 1)
        model = type(model)(twin_config)
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device  # a model built on the rank's GPU (pretrain.build_model)
        ids = torch.randint(0, vocab_size, (1, 8), generator=torch.Generator().manual_seed(0)).to(device)
        with torch.no_grad():
            a = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(ids.numel(), device=device)).loss
            b = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(4 * ids.numel(), device=device)).loss
        return not torch.allclose(a, b, rtol=1e-4, atol=0.0)
    except TypeError:
        return False
    finally:
        model.train(was_training)


def fix_loss_kwargs_flag(model, vocab_size: int) -> bool:
    """Tell the Trainer the truth about ``num_items_in_batch``: sets ``model.accepts_loss_kwargs`` (the attribute
    the Trainer reads) to :func:`model_uses_num_items_in_batch`'s answer and returns it."""
    uses = model_uses_num_items_in_batch(model, vocab_size)
    model.accepts_loss_kwargs = uses
    return uses


def deepspeed_clips_fp32_gradients(config: dict) -> bool:
    """Whether DeepSpeed's engine would clip with its ``clip_fp32_gradients`` for this (Trainer-filled) config, in
    the cases where clipping in the optimizer's step (:func:`clip_in_optimizer_step`) is the same computation.

    deepspeed/runtime/engine.py (0.19.x) ``_take_model_step``: ``gradient_clipping > 0`` and none of the fp16 /
    bf16 blocks enabled (``bfloat16`` is bf16's alias) and no ZeRO stage (``zero_optimization()`` is stage > 0) --
    the path of the GPU defaults (ZeRO-0, DeepSpeed's bf16 torch_autocast, the Trainer's fused AdamW). ZeRO's and
    the bf16/fp16 optimizers clip inside their own step: False for them. Also False where the optimizer's step
    would see other gradients than DeepSpeed's clip does: fp16 torch_autocast (DeepSpeed unscales its GradScaler's
    gradients only when it clips) and tensor parallelism (``tensor_parallel.autotp_size`` > 1: DeepSpeed's norm
    spans the model-parallel group, torch's does not).
    """
    def block(name):
        value = config.get(name)
        return value if isinstance(value, dict) else {}

    stage = block("zero_optimization").get("stage", 0)
    clipping = config.get("gradient_clipping", 0)
    half_block = any(block(name).get("enabled") is True for name in ("fp16", "bf16", "bfloat16"))
    fp16_autocast = block("torch_autocast").get("enabled") is True and str(
        block("torch_autocast").get("dtype", "bfloat16")).replace("torch.", "") in ("float16", "half", "fp16")
    tensor_parallel = (block("tensor_parallel").get("autotp_size") or 1) > 1
    return (isinstance(clipping, (int, float)) and clipping > 0 and stage == 0 and not half_block
            and not fp16_autocast and not tensor_parallel)


def clip_in_optimizer_step(optimizer, max_norm: float) -> dict:
    """Clip the gradients of ``optimizer``'s parameters to a total 2-norm of ``max_norm`` at the start of each of
    its ``step()`` calls (a step pre-hook), with ``torch.nn.utils.clip_grad_norm_(foreach=True)``: a few fused
    kernels and no host sync.

    Why: DeepSpeed's ``clip_fp32_gradients`` (deepspeed/runtime/utils.py ``clip_grad_norm_``) launches a norm and a
    scale kernel per parameter (~400 for BERT-base, each a CPU-side launch) and copies two Python floats to the GPU
    at every step; this hook's foreach version is a few fused kernels. The effect measured on one H200, and the host
    syncs that remained, are in docs/benchmarks/gpu-2026-12-02.md. The formula is the same
    (total = ||(||g_i||_2)_i||_2, coefficient min(1, max_norm / (total + 1e-6))).

    Args:
        optimizer: a torch.optim.Optimizer (the Trainer's client optimizer) whose parameters hold the gradients of
            the whole data-parallel group (ZeRO-0 all-reduces them before the step).
        max_norm: the job's max_grad_norm (> 0).

    Returns:
        A dict whose ``"norm"`` is the last pre-clip total norm (a 0-dim tensor on the gradients' device; None
        before the first step), to be read (and synchronised) only when it is logged.
    """
    import torch

    last: dict = {"norm": None}

    def pre_hook(opt, _args, _kwargs):
        params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        if params:
            last["norm"] = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)

    optimizer.register_step_pre_hook(pre_hook)
    return last


def clip_without_host_sync(trainer) -> None:
    """Where DeepSpeed would clip with ``clip_fp32_gradients`` (:func:`deepspeed_clips_fp32_gradients`), clip in the
    client optimizer's step instead (:func:`clip_in_optimizer_step`) and set the DeepSpeed config's
    ``gradient_clipping`` to 0 so that DeepSpeed does not clip a second time; the pre-clip norm is logged as
    ``grad_norm`` at logging steps (the one host sync then, where the loss is read anyway). In place, on a built
    Trainer, before ``train()``; anything else (no DeepSpeed, ZeRO >= 1, a bf16/fp16 block, DeepSpeed's own
    optimizer, max_grad_norm 0) is left as it is.

    How: wraps the instance's ``create_optimizer`` (transformers' deepspeed_optim_sched calls it while the config
    is still a dict, before ``deepspeed.initialize``) and ``log``.
    """
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(plugin, "deepspeed_plugin", None)
    max_norm = float(trainer.args.max_grad_norm or 0)
    if plugin is None or max_norm <= 0:
        return
    state: dict = {}
    create_optimizer, log = trainer.create_optimizer, trainer.log

    def create_optimizer_clipping(*args, **kwargs):
        optimizer = create_optimizer(*args, **kwargs)
        config = plugin.hf_ds_config.config
        if "clip" not in state:  # decided once: a later deepspeed_init (another train()) finds gradient_clipping 0
            state["clip"] = "optimizer" not in config and deepspeed_clips_fp32_gradients(config)
        if state["clip"] and not getattr(optimizer, "_dsc_clip_hook", False):
            config["gradient_clipping"] = 0.0
            state["holder"] = clip_in_optimizer_step(optimizer, max_norm)
            optimizer._dsc_clip_hook = True  # create_optimizer returns the same optimizer when it has one
        return optimizer

    def log_with_norm(logs, *args, **kwargs):
        holder = state.get("holder")
        if holder and holder["norm"] is not None and "loss" in logs and "grad_norm" not in logs:
            logs["grad_norm"] = float(holder["norm"])
        return log(logs, *args, **kwargs)

    trainer.create_optimizer, trainer.log = create_optimizer_clipping, log_with_norm


def mix_in(model, mixin: type):
    """Put ``mixin`` in front of ``type(model)``: ``model.__class__`` becomes a subclass ``(mixin, type(model))``
    of the same name, module and qualname, so the mixin's methods (its ``forward``) run first and reach the model's
    own through ``super()``; ``save_pretrained`` still writes the stock ``architectures``, and the parameters are
    untouched. In place; returns the model. A model whose class already has the mixin is returned as it is; the
    subclass is made once per (mixin, class) pair.
    """
    base = type(model)
    if issubclass(base, mixin):
        return model
    cls = _MIXED.get((mixin, base))
    if cls is None:
        cls = type(base.__name__, (mixin, base), {"__module__": base.__module__, "__qualname__": base.__qualname__})
        _MIXED[(mixin, base)] = cls
    model.__class__ = cls
    return model
