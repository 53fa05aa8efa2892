#!/usr/bin/env python
"""Pre-train a transformers model (masked or causal LM) from a prepared data artifact with the HF Trainer.

The shape of transformers' examples/pytorch/language-modeling/run_mlm.py (argument dataclasses parsed with
HfArgumentParser together with TrainingArguments; the Trainer does the loop), minus what staging makes unnecessary:
no downloading and no tokenizing at start-up -- every rank loads ARTIFACT/tokenizer and ARTIFACT/dataset
(train/prepare_data.py) from node-local disk.

Launched on every node by DeepSpeed, from the directory that contains train/:

    deepspeed --hostfile H --no_ssh_check --master_addr A --master_port P train/pretrain.py \\
        --task mlm --model_type bert --config_overrides '{"hidden_size": 128, ...}' --dataset_dir ARTIFACT \\
        --output_dir OUT --deepspeed ds_config.json --per_device_train_batch_size 16 --max_steps 100 ...

Rank 0 writes OUT/progress.jsonl (as it goes), OUT/metrics.json, OUT/loss_curve.png and OUT/model/ (model +
tokenizer, loadable with from_pretrained). Every rank prints ``[rank R/W] host=<hostname> local_rank=<L>`` first.

Two things the stock stack gets wrong on CPU, fixed here (see init_cpu_deepspeed_distributed and
fix_loss_kwargs_flag): accelerate leaves the process-group backend unset under DeepSpeed on CPU (the Trainer then
believes world size is 1), and the Trainer multiplies the loss by the world size for models that take **kwargs
but ignore ``num_items_in_batch`` (BERT).
"""

from __future__ import annotations

import os
import socket
import sys
import time

_START = time.monotonic()


def _early_environment() -> tuple[int, int, int, str]:
    """Before torch is imported: thread count, offline hub, single-process launcher variables; print the rank."""
    local_size = int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1)
    if not os.environ.get("OMP_NUM_THREADS"):
        # ranks on one node share its cores; torch would otherwise start one thread per core in every rank
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, local_size)))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at start-up (DESIGN.md)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    host = socket.gethostname()
    sys.stdout.flush()
    # one write(2), so lines of ranks sharing the launcher's stdout don't interleave
    os.write(sys.stdout.fileno(), f"[rank {rank}/{world}] host={host} local_rank={local_rank}\n".encode())
    return rank, world, local_rank, host


RANK, WORLD, LOCAL_RANK, HOST = _early_environment()

import copy
import dataclasses
import hashlib
import inspect
import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a file (the deepspeed launcher does): import train.* from the repository
    # root, and drop train/ itself from the path so its modules (job, progress, ...) can't shadow other packages
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

from train.callbacks import LOSS_CURVE, ProgressCallback, plot_loss_curve

logger = transformers.logging.get_logger("train.pretrain")
RECORDED_BATCHES = 3  # per rank: sha256 of the first few batches, to show the ranks see different data
ROBERTA_LIKE = {"roberta", "xlm-roberta", "camembert", "longformer"}  # positions start after padding_idx


class UsageError(Exception):
    """Bad input the user can fix; printed as one line ``error: ...; fix`` with exit status 2."""


@dataclass
class ModelArguments:
    task: str = field(default="mlm", metadata={"help": "mlm (masked LM) or clm (causal LM)", "choices": ["mlm", "clm"]})
    model_type: str | None = field(
        default=None, metadata={"help": "transformers CONFIG_MAPPING key (bert, roberta, gpt2, ...) to build from"}
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": 'JSON dict of config fields, e.g. {"hidden_size": 128, "num_hidden_layers": 2}'}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "local directory of a saved model to continue from (instead of a config)"}
    )


@dataclass
class DataArguments:
    dataset_dir: str = field(metadata={"help": "prepared artifact directory (tokenizer/, dataset/, prepare.json)"})
    mlm_probability: float = field(default=0.15, metadata={"help": "share of tokens masked (task mlm)"})


# ----------------------------------------------------------------------------------------------- trap a: world size
def init_cpu_deepspeed_distributed(deepspeed_config: str | None, ddp_timeout: int) -> bool:
    """Create accelerate's PartialState with DeepSpeed's CPU backend before TrainingArguments is built.

    accelerate 1.15 ``PartialState._prepare_backend`` (accelerate/state.py) picks a backend only for an accelerator
    device (cncl/tccl/mccl/hccl/nccl/xccl/neuron) or when ``cpu=True`` (gloo/mpi, MULTI_CPU); DeepSpeed on a CPU
    node is neither, so it returns ``backend=None``. ``PartialState.__init__`` still lets DeepSpeed initialise
    torch.distributed (``dist.init_distributed(dist_backend=self.backend, ...)`` under ACCELERATE_USE_DEEPSPEED),
    but then ``if self.backend is None: ... self.num_processes = 1; self.process_index = 0`` -- so TrainingArguments
    (``_setup_devices``) and the Trainer believe world size is 1 on every rank: DeepSpeed's batch-size check fails
    (train_batch_size != micro x GA x 2), or, without train_batch_size, every rank trains on the same batches.

    Passing the backend explicitly makes ``_prepare_backend`` return it (``return backend, distributed_type`` with
    the given backend), so ``num_processes = torch.distributed.get_world_size()``. The backend is the one DeepSpeed
    itself uses on this accelerator: ``get_accelerator().communication_backend_name()`` (gloo, or ccl with oneCCL).
    TrainingArguments would reset this state (``AcceleratorState._reset_state(reset_partial_state=True)``) unless
    ``accelerator_config.use_configured_state`` is set, which the caller does when this returns True.
    Nothing is changed on GPU nodes, where accelerate finds nccl itself.
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


def _single_process_defaults(deepspeed_config: str | None) -> None:
    """`python train/pretrain.py --deepspeed ...` without a launcher: DeepSpeed would look for MPI; be rank 0 of 1."""
    if deepspeed_config and "LOCAL_RANK" not in os.environ and "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def parse_arguments(argv: list[str] | None = None):
    """HfArgumentParser over (ModelArguments, DataArguments, TrainingArguments), with the trap-a fix applied
    between parsing the command line and building TrainingArguments (whose __post_init__ sets up devices)."""
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    namespace = parser.parse_args(argv)  # unknown arguments are an error, as with parse_args_into_dataclasses
    values = vars(namespace)
    _single_process_defaults(values.get("deepspeed"))
    configured = init_cpu_deepspeed_distributed(values.get("deepspeed"), values.get("ddp_timeout") or 1800)
    if configured:
        acc = values.get("accelerator_config") or {}
        if isinstance(acc, str):
            acc = json.loads(Path(acc).read_text()) if Path(acc).is_file() else json.loads(acc)
        values["accelerator_config"] = {**acc, "use_configured_state": True}
    out = []
    for dtype in parser.dataclass_types:
        keys = {f.name for f in dataclasses.fields(dtype) if f.init}
        out.append(dtype(**{k: v for k, v in values.items() if k in keys}))
    return tuple(out)


# --------------------------------------------------------------------------------------------- trap b: loss scale
def model_uses_num_items_in_batch(model, vocab_size: int) -> bool:
    """Whether ``model(..., num_items_in_batch=n)`` actually changes the loss (one tiny no-grad forward, twice).

    The Trainer decides from the forward signature alone: ``model_accepts_loss_kwargs = any(VAR_KEYWORD)``
    (transformers/trainer.py, model introspection) unless the model has an ``accepts_loss_kwargs`` attribute. With
    it True and ``average_tokens_across_devices`` (default True), compute_loss does
    ``loss *= self.accelerator.num_processes`` expecting the model to have divided its summed loss by the
    all-ranks token count. BertForMaskedLM takes ``**kwargs`` but computes ``CrossEntropyLoss()`` (a mean) and
    ignores ``num_items_in_batch``: the logged loss (and the gradient) come out world-size times too big, and with
    gradient accumulation the loss is also not divided by the accumulation steps (``loss_is_scaled_for_ga``).
    GPT-2 passes the kwargs to ``self.loss_function`` and does honour it. So ask the model itself.
    """
    params = inspect.signature(model.forward).parameters
    if "num_items_in_batch" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return False
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        # from_config partitioned the parameters (zero.Init): they can't run a forward before deepspeed.initialize.
        # The answer depends on the class's code, not its size: ask a one-layer twin built without zero.Init
        # (plain construction; transformers only wraps from_config / from_pretrained in zero.Init).
        twin_config = copy.deepcopy(model.config)
        for name in ("num_hidden_layers", "n_layer", "num_layers"):
            if isinstance(getattr(twin_config, name, None), int):
                setattr(twin_config, name, 1)
        model = type(model)(twin_config)
    was_training = model.training
    model.eval()
    try:
        ids = torch.randint(0, vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            a = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(ids.numel())).loss
            b = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(4 * ids.numel())).loss
        return not torch.allclose(a, b, rtol=1e-4, atol=0.0)
    except TypeError:
        return False
    finally:
        model.train(was_training)


def fix_loss_kwargs_flag(model, vocab_size: int) -> bool:
    """Tell the Trainer the truth about ``num_items_in_batch`` via the ``accepts_loss_kwargs`` attribute it reads."""
    uses = model_uses_num_items_in_batch(model, vocab_size)
    model.accepts_loss_kwargs = uses
    return uses


# --------------------------------------------------------------------------------------------------------- trainer
def batch_digest(inputs: dict, mlm: bool) -> str:
    """sha256 of a batch's original token ids (masked positions restored from the labels for mlm)."""
    ids = inputs["input_ids"]
    if mlm and "labels" in inputs:
        labels = inputs["labels"]
        ids = torch.where(labels != -100, labels, ids)
    return hashlib.sha256(ids.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()).hexdigest()


class PretrainTrainer(Trainer):
    """The stock Trainer, plus a record of the first batches this rank trained on."""

    def __init__(self, *args, task: str = "mlm", **kwargs):
        super().__init__(*args, **kwargs)
        self.task = task
        self.batch_digests: list[str] = []

    def training_step(self, model, inputs, num_items_in_batch=None):
        if len(self.batch_digests) < RECORDED_BATCHES:
            self.batch_digests.append(batch_digest(inputs, self.task == "mlm"))
        return super().training_step(model, inputs, num_items_in_batch)


# ----------------------------------------------------------------------------------------------------------- setup
def load_artifact(data_args: DataArguments, task: str):
    import datasets

    root = Path(data_args.dataset_dir)
    for part in ("tokenizer", "dataset"):
        if not (root / part).is_dir():
            raise UsageError(f"{root / part} not found; run `python -m train.prepare_data --job JOB.json "
                             f"--out {root}` (and stage it to this node) before training")
    meta = {}
    if (root / "prepare.json").is_file():
        meta = json.loads((root / "prepare.json").read_text(encoding="utf-8"))
        if meta.get("task") not in (None, task):
            raise UsageError(f"{root} was prepared for task {meta.get('task')}, not {task}; "
                             "prepare the data with the same job you train with")
    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    dataset = datasets.load_from_disk(str(root / "dataset"))
    if len(dataset) == 0:
        raise UsageError(f"{root / 'dataset'} has no rows; prepare it again with more text")
    if task == "mlm" and tokenizer.mask_token is None:
        raise UsageError(f"the tokenizer in {root} has no mask token; task mlm needs one (prepare with task mlm)")
    return tokenizer, dataset, meta


def build_model(model_args: ModelArguments, tokenizer, block_length: int):
    auto = AutoModelForMaskedLM if model_args.task == "mlm" else AutoModelForCausalLM
    if model_args.model_name_or_path:
        if not Path(model_args.model_name_or_path).is_dir():
            raise UsageError(f"--model_name_or_path {model_args.model_name_or_path} is not a local directory "
                             "(nothing is downloaded); save the model there first or build from --model_type")
        model = auto.from_pretrained(model_args.model_name_or_path)
        weight = model.get_input_embeddings().weight
        if getattr(weight, "ds_shape", weight.shape)[0] < len(tokenizer):  # ds_shape: ZeRO-3 partitioned
            model.resize_token_embeddings(len(tokenizer))
        config = model.config
    else:
        if not model_args.model_type:
            raise UsageError("give --model_type (a transformers model type such as bert) or --model_name_or_path")
        try:
            overrides = json.loads(model_args.config_overrides or "{}")
        except json.JSONDecodeError as e:
            raise UsageError(f"--config_overrides is not valid JSON ({e}); pass a JSON object string") from None
        if not isinstance(overrides, dict):
            raise UsageError("--config_overrides must be a JSON object of config fields")
        try:
            config = AutoConfig.for_model(model_args.model_type, **overrides)
        except ValueError as e:
            raise UsageError(f"--model_type {model_args.model_type!r}: {str(e).splitlines()[0][:200]}; "
                             "use a transformers model type such as bert, roberta or gpt2") from None
        config.vocab_size = len(tokenizer)
        config.pad_token_id = tokenizer.pad_token_id
        for name in ("bos_token_id", "eos_token_id"):
            if getattr(tokenizer, name, None) is not None:
                setattr(config, name, getattr(tokenizer, name))
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        need = block_length + (config.pad_token_id + 1 if config.model_type in ROBERTA_LIKE else 0)
        if positions is not None and positions < need:
            raise UsageError(f"the model has {positions} position embeddings but blocks of {block_length} tokens "
                             f"need {need}; raise max_position_embeddings/n_positions or lower max_seq_length")
        model = auto.from_config(config)
    return model, config


def job_info(output_dir: Path, model_args: ModelArguments, run_name: str | None) -> dict:
    """model / model_size / run_name for metrics.json, from the job file: $DSC_JOB_FILE, or job.json / JOB.json in
    output_dir or its parent (the playbook keeps <run_dir>/job.json beside <run_dir>/output/)."""
    candidates = [os.environ.get("DSC_JOB_FILE")] + [d / n for d in (output_dir, output_dir.parent)
                                                     for n in ("job.json", "JOB.json")]
    for c in candidates:
        if c and Path(c).is_file():
            try:
                job = json.loads(Path(c).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(job, dict):
                return {"model": job.get("model"), "model_size": job.get("model_size"),
                        "run_name": job.get("run_name") or run_name, "job_file": str(c)}
    fallback = model_args.model_type or Path(model_args.model_name_or_path or "model").name
    return {"model": fallback, "model_size": None, "run_name": run_name, "job_file": None}


def gather_objects(obj) -> list:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        out = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(out, obj)
        return out
    return [obj]


def main(argv: list[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(argv)
    training_args.remove_unused_columns = False  # the collator takes special_tokens_mask and drops it itself
    if not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False  # nothing to pin to on a CPU node
    if not sys.stderr.isatty():
        training_args.disable_tqdm = True  # logs go to files / Ansible: one line per logging step, no bars
    if training_args.process_index == 0:
        transformers.logging.set_verbosity_warning()
    else:
        transformers.logging.set_verbosity_error()

    tokenizer, dataset, meta = load_artifact(data_args, model_args.task)
    block_length = len(dataset[0]["input_ids"])
    set_seed(training_args.seed)  # before the model is built, as run_mlm.py does: same initial weights everywhere
    model, config = build_model(model_args, tokenizer, block_length)
    uses_num_items = fix_loss_kwargs_flag(model, len(tokenizer))

    world = training_args.world_size
    global_batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world
    n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())  # ds_numel: ZeRO-3 partitioned
    if training_args.process_index == 0:
        print(f"[pretrain] {config.model_type} {model_args.task}: {n_params / 1e6:.2f}M parameters, "
              f"{len(dataset)} blocks of {block_length}, world size {world}, global batch {global_batch}, "
              f"model uses num_items_in_batch: {uses_num_items}", flush=True)

    collator = DataCollatorForLanguageModeling(
        tokenizer=tokenizer, mlm=model_args.task == "mlm", mlm_probability=data_args.mlm_probability
    )
    progress = ProgressCallback(training_args.output_dir, global_batch)
    trainer = PretrainTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=[progress],
        task=model_args.task,
    )
    train_result = trainer.train()
    out = Path(training_args.output_dir)
    trainer.save_model(str(out / "model"))  # every rank (ZeRO-3 gathers); rank 0 writes model + tokenizer
    if training_args.process_index == 0:
        for f in (out / "model").iterdir():
            if f.is_file():
                f.chmod(0o644)  # safetensors leaves 0600; the results are fetched and read by other users

    ranks = gather_objects({
        "rank": training_args.process_index,
        "hostname": HOST,
        "local_rank": LOCAL_RANK,
        "first_batches_sha256": trainer.batch_digests,
    })
    if training_args.process_index == 0:
        records = progress.records
        losses = [r["loss"] for r in records if r.get("loss") is not None]
        metrics = {
            **job_info(out, model_args, training_args.run_name),
            "model_type": config.model_type,
            "task": model_args.task,
            "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
            "trainer_world_size": world,
            "ranks": sorted(ranks, key=lambda r: r["rank"]),
            "steps": trainer.state.global_step,
            "max_steps": trainer.state.max_steps,
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "train_loss": train_result.training_loss,
            "train_samples_per_second": train_result.metrics.get("train_samples_per_second"),
            "train_runtime_s": train_result.metrics.get("train_runtime"),
            "wall_time_s": round(time.monotonic() - _START, 2),
            "global_batch_size": global_batch,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
            "block_length": block_length,
            "dataset_blocks": len(dataset),
            "n_parameters": n_params,
            "model_uses_num_items_in_batch": uses_num_items,
            "deepspeed_config": training_args.deepspeed if isinstance(training_args.deepspeed, str) else None,
            "source_fingerprint": meta.get("source", {}).get("fingerprint"),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        try:
            import deepspeed

            metrics["versions"]["deepspeed"] = deepspeed.__version__
        except ImportError:
            pass
        plot_loss_curve(records, out / LOSS_CURVE,
                        title=f"{metrics['model']} {metrics['model_size'] or ''} {model_args.task}, world size {world}")
        tmp = out / "metrics.json.tmp"
        tmp.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out / "metrics.json")
        print(f"[pretrain] done: {metrics['steps']} steps, loss {metrics['first_loss']} -> {metrics['last_loss']}, "
              f"{metrics['train_samples_per_second']} samples/s, wrote {out}", flush=True)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        print(f"error: [rank {RANK}] {e}", file=sys.stderr, flush=True)
        sys.exit(2)
