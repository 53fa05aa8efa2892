"""The rank runtime shared by train/pretrain.py and train/run_script.py (users' own HF Trainer scripts).

Nothing happens at import (standard library only; torch, transformers and deepspeed are imported inside the
functions). A rank calls, explicitly:

1. :func:`bootstrap` -- first thing, before torch is imported if it can: OMP_NUM_THREADS (the node's cores shared
   among its ranks), HF_HUB_OFFLINE=1 and TOKENIZERS_PARALLELISM=false unless already set, the rank/world
   variables of a single-process run under ``--deepspeed``; in a run of the playbooks, a copy of everything the
   rank writes to stdout/stderr in ``<run_dir>/logs/<host>.rank<R>.log`` (:func:`tee_rank_output`); prints
   ``[rank R/W] host=<hostname> local_rank=<L>``.
2. The two CPU fixes, where TrainingArguments and the Trainer are built:

   * :func:`init_cpu_deepspeed_distributed` (and :func:`configured_state`): accelerate leaves the process-group
     backend unset under DeepSpeed on CPU, so the Trainer would believe world size is 1;
   * :func:`fix_loss_kwargs_flag`: the Trainer multiplies the loss by the world size for models that take
     ``**kwargs`` but ignore ``num_items_in_batch`` (BERT).

3. :func:`attach` -- on a built Trainer: the ProgressCallback (``progress.jsonl``) and the MetricsCallback, which
   writes ``metrics.json`` (:func:`build_metrics` / :func:`write_metrics`, the only writer) and ``loss_curve.png``
   at the end of training, and again with the eval metrics after every evaluation that follows; and
   :func:`clip_without_host_sync` (ZeRO-0 with the Trainer's optimizer: gradient clipping without a host sync).

:func:`install_hooks` does 2 and 3 for a script the project does not edit: it wraps
``TrainingArguments.__post_init__`` and ``Trainer.__init__`` (run_script.py calls it just before running the script).

Run identity in metrics.json (``run_name``, ``model``, ``model_size``, ``job_file``), first found wins:

* ``run_name``: the environment variable ``DSC_RUN_NAME``; the job file's ``run_name``; ``--run_name`` of the
  TrainingArguments; null.
* job file: the environment variable ``DSC_JOB_FILE`` (path of the run's job.json on the node), else ``job.json``
  in the output directory or its parent (where the playbook keeps ``<run_dir>/job.json`` beside ``<run_dir>/output``).

The launcher sets DSC_JOB_FILE (and may set DSC_RUN_NAME) in ``.deepspeed_env`` so every rank sees them even when
a user's script writes to an ``--output_dir`` of its own.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

METRICS = "metrics.json"
#: the keys of metrics.json, the same for train/pretrain.py and users' scripts (null when unknown; build_metrics)
METRICS_KEYS = (
    "run_name", "model", "model_size", "job_file", "mode", "script", "model_type", "task",
    "world_size", "trainer_world_size", "ranks", "steps", "max_steps", "first_loss", "last_loss", "train_loss",
    "train_samples_per_second", "train_runtime_s", "wall_time_s", "global_batch_size", "per_device_train_batch_size",
    "gradient_accumulation_steps", "block_length", "dataset_blocks", "vocab_size", "vocab_size_requested",
    "n_parameters", "model_uses_num_items_in_batch", "eval", "eval_loss", "perplexity", "deepspeed_config",
    "source_fingerprint", "versions",
)
JOB_FILE_ENV = "DSC_JOB_FILE"
RUN_NAME_ENV = "DSC_RUN_NAME"


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """Who this process is: ``rank`` of ``world_size``, ``local_rank`` of ``local_size`` on ``host``; ``started``
    is time.monotonic() at bootstrap (seconds)."""

    rank: int
    world_size: int
    local_rank: int
    local_size: int
    host: str
    started: float


_INFO: RankInfo | None = None


def bootstrap(deepspeed_config: str | None = None, announce: bool = True) -> RankInfo:
    """Prepare this process to be a rank; call it before importing torch where possible. Idempotent.

    Args:
        deepspeed_config: the ``--deepspeed`` value when known. With it and no launcher variables (a plain
            ``python train/pretrain.py --deepspeed ...``), this process becomes rank 0 of 1 on a free local port
            (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT), so DeepSpeed does not look for MPI.
        announce: print ``[rank R/W] host=<hostname> local_rank=<L>`` (one write(2), so the lines of ranks sharing
            the launcher's stdout don't interleave).

    With ``$DSC_JOB_FILE`` (a run of the playbooks) this rank's output is also copied into its own log file first
    (:func:`tee_rank_output`). Sets, unless already set: OMP_NUM_THREADS = usable cores // ranks on this node (LOCAL_SIZE or
    LOCAL_WORLD_SIZE), HF_HUB_OFFLINE=1 (nothing is downloaded at start-up), TOKENIZERS_PARALLELISM=false. When
    torch is already imported its thread count is set to OMP_NUM_THREADS too.

    Returns:
        RankInfo of this process (the same object on later calls; the single-process variables are still added
        when a later call brings the deepspeed_config).
    """
    global _INFO
    if deepspeed_config and "LOCAL_RANK" not in os.environ and "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if _INFO is not None:
        return _INFO
    local_size = int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1)
    if not os.environ.get("OMP_NUM_THREADS"):
        # ranks on one node share its cores; torch would otherwise start one thread per core in every rank
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, local_size)))
    # nothing is downloaded at start-up (docs/developers/architecture.md, "What flows between the sites")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "torch" in sys.modules:  # imported before us: its OpenMP pool already read the environment
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    info = RankInfo(rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
                    local_rank=int(os.environ.get("LOCAL_RANK", "0")), local_size=local_size,
                    host=socket.gethostname(), started=time.monotonic())
    tee_rank_output(info.rank, info.host)
    if announce:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(),
                 f"[rank {info.rank}/{info.world_size}] host={info.host} local_rank={info.local_rank}\n".encode())
    from train import rank_status  # the rank's status file under the run directory (names a rank that dies)

    rank_status.record_start(info.rank, info.world_size, info.local_rank, info.host)
    _INFO = info
    return info


_TEES: list = []  # the tee processes of tee_rank_output (kept so that they are never collected as garbage)


def process_start_unix_s(pid: int | str = "self") -> float | None:
    """When a process was created, as Unix time in seconds: now minus its age, the age from /proc/<pid>/stat field
    22 (start time in clock ticks after boot, resolution 1/CLK_TCK, usually 10 ms) against CLOCK_BOOTTIME (Linux
    only; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "(comm)": state is field 3, starttime 22
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def tee_rank_output(rank: int, host: str, job_file: str | None = None) -> Path | None:
    """Copy everything this process writes to its stdout and stderr into ``<run_dir>/logs/<host>.rank<R>.log``
    on this node, while it still goes where it went before (the launcher's stream: pdsh prefixes it with the node's
    name and the head keeps it in train.log, which the follower reads to find a node whose ranks died).

    Args:
        rank: this process's global rank; host: this node's name (the file's name says both).
        job_file: the run's job.json on this node (run_dir is its directory); default ``$DSC_JOB_FILE``.

    DeepSpeed's launcher has ``--enable_each_rank_log DIR``, but it redirects each rank's output into its file
    instead of the stream (launch.py: ``Popen(cmd, stdout=log_fd, stderr=log_fd)``), which would leave train.log
    without the ranks' lines. Here fds 1 and 2 themselves become pipes into ``tee -a -p FILE`` (one for each, so
    stdout and stderr stay apart on the stream), so the C libraries', the children's and a traceback's output are
    copied too. A tee ignores SIGINT/SIGTERM and ends when every writer of its pipe is gone: what a rank wrote before
    it was killed is in its file. Appends (a resumed run continues its ranks' files).

    Returns:
        The log file's path; None outside a run (no job file) or when it cannot be set up (no ``tee`` on PATH,
        the directory not writable): the rank then runs as before, output only on the stream. Never raises.
    """
    import shutil
    import subprocess

    job_file = job_file or os.environ.get(JOB_FILE_ENV)
    tee = shutil.which("tee")
    if not job_file or not tee:
        return None
    path = Path(job_file).parent / "logs" / f"{host}.rank{rank}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            read, write = os.pipe()
            try:
                # "$0" is the file: the run directory is in the tee's command line (stop.yml's pattern finds it)
                _TEES.append(subprocess.Popen(["/bin/sh", "-c", f"trap '' INT TERM; exec {tee} -a -p \"$0\"",
                                               str(path)], stdin=read, stdout=fd, close_fds=True))
                os.dup2(write, fd)
            finally:
                os.close(read)
                os.close(write)
    except OSError:
        return None
    return path


def rank_info() -> RankInfo:
    """The RankInfo of this process: bootstrap's, or (without bootstrap) read from the environment, unchanged."""
    if _INFO is not None:
        return _INFO
    return RankInfo(rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
                    local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                    local_size=int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1),
                    host=socket.gethostname(), started=time.monotonic())


# ----------------------------------------------------------------------------------------------- CPU fix: world size
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


# ---------------------------------------------------------------------------------------------- CPU fix: loss scale
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


# ------------------------------------------------------------------------------------------------------- identity
def gather_objects(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` without torch.distributed. A collective: every
    rank must call it."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        out = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(out, obj)
        return out
    return [obj]


def read_job_file(output_dir: str | Path | None) -> tuple[dict | None, str | None]:
    """The run's job (train/job.py's dict) and its path: ``$DSC_JOB_FILE``, else job.json in ``output_dir`` or its
    parent. Returns (None, None) when there is none; an unreadable or non-object file is skipped."""
    candidates = [os.environ.get(JOB_FILE_ENV)]
    if output_dir is not None:
        out = Path(output_dir)
        candidates += [out / "job.json", out.parent / "job.json"]
    for c in candidates:
        if c and Path(c).is_file():
            try:
                job = json.loads(Path(c).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(job, dict):
                return job, str(c)
    return None, None


def run_identity(output_dir: str | Path | None, run_name: str | None = None, script: str | None = None) -> dict:
    """``{"run_name", "model", "model_size", "job_file", "mode"}`` for metrics.json (see the module docstring).

    Args:
        output_dir: the Trainer's output directory (to find job.json beside it).
        run_name: TrainingArguments.run_name, used when neither DSC_RUN_NAME nor the job file names the run.
        script: the user's script in script mode (then model / model_size are null: the job's preset only gave
            defaults), None for train/pretrain.py.
    """
    job, path = read_job_file(output_dir)
    job = job or {}
    name = os.environ.get(RUN_NAME_ENV) or job.get("run_name") or run_name or None
    preset = script is None
    return {"run_name": name, "model": job.get("model") if preset else None,
            "model_size": job.get("model_size") if preset else None, "job_file": path,
            "mode": "preset" if preset else "script"}


# -------------------------------------------------------------------------------------------------------- metrics
def _num(value):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def count_parameters(model) -> int:
    """Number of parameters of ``model`` (ZeRO-3 partitioned ones counted whole, via ``ds_numel``)."""
    return int(sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()))


def build_metrics(*, args, state, model, progress, ranks: list[dict], identity: dict, eval_metrics: dict | None,
                  extra: dict | None = None) -> dict:
    """The metrics.json dict: one set of keys for train/pretrain.py and users' scripts (null when unknown).

    Args:
        args: the TrainingArguments; state: the TrainerState at the end of training; model: the trained model.
        progress: the ProgressCallback (records, summary of the Trainer's final train_* log, global batch size).
        ranks: one dict per rank (rank, hostname, local_rank, first_batches_sha256), in rank order.
        identity: :func:`run_identity`'s dict.
        eval_metrics: the last evaluation's metrics ({"eval_loss": ..., ...}) or None when nothing was evaluated.
        extra: values only the caller knows (task, block_length, dataset_blocks, vocab_size_requested,
            source_fingerprint, script, model_uses_num_items_in_batch); they must be keys of the set below.

    Returns:
        dict with exactly METRICS_KEYS, in that order: vocab_size is the model's real vocabulary (embedding rows,
        config.vocab_size), vocab_size_requested the job's ask (pretrain.py; null for a script), n_parameters
        counts every parameter, eval the last evaluation's metrics (dict or null), perplexity exp(eval_loss);
        losses are per token (nats), times in seconds.

    Raises:
        KeyError: an ``extra`` key outside that set.
    """
    import torch
    import transformers

    records = progress.records
    losses = [r["loss"] for r in records if r.get("loss") is not None]
    summary = progress.summary
    elapsed = records[-1]["elapsed_s"] if records else None
    steps = state.global_step
    config = getattr(model, "config", None)
    eval_loss = _num((eval_metrics or {}).get("eval_loss"))
    metrics = {
        **identity,
        "script": None,
        "model_type": getattr(config, "model_type", None),
        "task": None,
        "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
        "trainer_world_size": args.world_size,
        "ranks": ranks,
        "steps": steps,
        "max_steps": state.max_steps,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_loss": _num(summary.get("train_loss")),
        "train_samples_per_second": _num(summary.get("train_samples_per_second"))
        or (round(progress.global_batch_size * steps / elapsed, 3) if elapsed else None),
        "train_runtime_s": _num(summary.get("train_runtime")),
        "wall_time_s": round(time.monotonic() - rank_info().started, 2),
        "global_batch_size": progress.global_batch_size,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "block_length": None,
        "dataset_blocks": None,
        "vocab_size": getattr(config, "vocab_size", None),
        "vocab_size_requested": None,
        "n_parameters": count_parameters(model) if model is not None else None,
        "model_uses_num_items_in_batch": getattr(model, "accepts_loss_kwargs", None),
        "eval": {k: _num(v) for k, v in eval_metrics.items()} if eval_metrics else None,
        "eval_loss": eval_loss,
        "perplexity": _num(math.exp(eval_loss)) if eval_loss is not None and eval_loss < 700 else None,
        "deepspeed_config": args.deepspeed if isinstance(args.deepspeed, str) else None,
        "source_fingerprint": None,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    for key, value in (extra or {}).items():
        if key not in metrics:
            raise KeyError(f"metrics.json has no key {key!r}")
        metrics[key] = value
    assert tuple(metrics) == METRICS_KEYS, "build_metrics and METRICS_KEYS disagree"
    try:
        import deepspeed

        metrics["versions"]["deepspeed"] = deepspeed.__version__
    except ImportError:
        pass
    return metrics


def write_metrics(output_dir: str | Path, metrics: dict) -> Path:
    """Write ``output_dir/metrics.json`` atomically (train.job.write_json_atomic); returns its path.
    Raises OSError."""
    from train.job import write_json_atomic

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / METRICS, metrics)
    return out / METRICS


# ---------------------------------------------------------------------------------------------------------- hooks
def attach(trainer, *, script: str | None = None, extra: dict | None = None, rank_extra=None):
    """Add the project's callbacks to a built Trainer: progress.jsonl, metrics.json and loss_curve.png.

    Args:
        trainer: a transformers.Trainer (after __init__: its args know the world size).
        script: the user's script (script mode), None for train/pretrain.py.
        extra: metrics.json values only the caller knows (see :func:`build_metrics`).
        rank_extra: optional callable () -> dict of this rank's additions to its ``ranks`` entry.

    Returns:
        (ProgressCallback, MetricsCallback), both already added to the trainer.
    """
    from train.callbacks import MetricsCallback, ProgressCallback

    a = trainer.args
    progress = ProgressCallback(a.output_dir, a.per_device_train_batch_size * a.gradient_accumulation_steps
                                * a.world_size)
    metrics = MetricsCallback(progress, script=script, extra=extra, rank_extra=rank_extra)
    metrics.trainer = trainer
    trainer.add_callback(progress)
    trainer.add_callback(metrics)
    clip_without_host_sync(trainer)
    return progress, metrics


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


_HOOKED = "_dsc_runtime_hooks"


def is_under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it (both made absolute, symlinks not resolved)."""
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return os.path.commonpath([path, directory]) == directory


def install_hooks(script: str) -> None:
    """Wrap ``TrainingArguments.__post_init__`` and ``Trainer.__init__`` for a user's script (idempotent).

    TrainingArguments: on a CPU node under DeepSpeed, :func:`init_cpu_deepspeed_distributed` first (and
    :func:`configured_state`). Trainer: :func:`fix_loss_kwargs_flag` on the model when it has a vocab_size (a
    model that isn't a language model is left to the Trainer), then :func:`attach` with ``script``.
    """
    import transformers

    if getattr(transformers.Trainer, _HOOKED, False):
        return
    orig_post_init = transformers.TrainingArguments.__post_init__

    def post_init(self):
        if init_cpu_deepspeed_distributed(self.deepspeed, self.ddp_timeout or 1800):
            self.accelerator_config = configured_state(self.accelerator_config)
        orig_post_init(self)
        job_file = os.environ.get("DSC_JOB_FILE")
        if job_file and self.output_dir and is_under(self.output_dir, os.path.dirname(job_file)):
            # the output_dir train.yml gave is on each node's own disk: every node saves (and rotates) its part of
            # each checkpoint, which train/checkpoints.py gathers on the head (a shared output_dir is left alone)
            self.save_on_each_node = True

    orig_trainer_init = transformers.Trainer.__init__

    def trainer_init(self, *args, **kwargs):
        model = kwargs.get("model", args[0] if args else None)
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)
        if isinstance(vocab, int) and vocab > 0:
            try:
                fix_loss_kwargs_flag(model, vocab)
            except Exception:  # noqa: BLE001 - not a language model (labels of another shape): leave it to the Trainer
                pass
        orig_trainer_init(self, *args, **kwargs)
        attach(self, script=script)

    transformers.TrainingArguments.__post_init__ = post_init
    transformers.Trainer.__init__ = trainer_init
    setattr(transformers.Trainer, _HOOKED, True)
