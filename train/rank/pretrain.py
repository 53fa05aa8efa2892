#!/usr/bin/env python
"""Pre-train a transformers model (masked or causal LM) from a prepared data artifact with the HF Trainer.

The shape of transformers' examples/pytorch/language-modeling/run_mlm.py (argument dataclasses parsed with
HfArgumentParser together with TrainingArguments; the Trainer does the loop), minus what staging makes unnecessary:
no downloading and no tokenizing at start-up -- every rank loads ARTIFACT/tokenizer and ARTIFACT/dataset
(train/data/prepare_data.py) from node-local disk.

Launched on every node by DeepSpeed, as a module, from the directory that contains train/:

    deepspeed --hostfile H --no_ssh_check --master_addr A --master_port P --module train.rank.pretrain \\
        --task mlm --model_type bert --config_overrides '{"hidden_size": 128, ...}' --dataset_dir ARTIFACT \\
        --output_dir OUT --deepspeed ds_config.json --per_device_train_batch_size 16 --max_steps 100 ...

Rank 0 writes OUT/progress.jsonl (as it goes), OUT/metrics.json, OUT/loss_curve.png and OUT/model/ (model +
tokenizer, loadable with from_pretrained). Every rank prints ``[rank R/W] host=<hostname> local_rank=<L>`` first.

The rank runtime (train.rank.bootstrap, .patches, .metrics, .hooks) does the rest, as for a user's script: bootstrap (thread count, offline hub,
the rank line), the two CPU fixes (accelerate's process-group backend under DeepSpeed on CPU, the Trainer's loss
scaling for models that ignore ``num_items_in_batch``), progress.jsonl, metrics.json and the loss curve. Importing
this module changes nothing; running it bootstraps the rank before torch is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from train.common import keys  # noqa: E402  (standard library only)
from train.rank import bootstrap  # noqa: E402  (standard library only: importing it changes nothing)

if __name__ == "__main__":
    bootstrap.bootstrap()  # before torch is imported: thread count, HF_HUB_OFFLINE, "[rank R/W] host=..."

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
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
from transformers.integrations import is_deepspeed_zero3_enabled  # noqa: E402

from train.rank import hooks, kernels, metrics, mlm_head, patches, perf  # noqa: E402  (importing them changes nothing)

#: start-up phases of this rank (Unix times, s), written to perf.json's "startup" by PerfCallback
STARTUP = {"process_start": bootstrap.process_start_unix_s(), "imports_done": time.time()}

logger = transformers.logging.get_logger("train.rank.pretrain")
RECORDED_BATCHES = 3  # per rank: sha256 of the first few batches, to show the ranks see different data
ROBERTA_LIKE = {"roberta", "xlm-roberta", "camembert", "longformer"}  # positions start after padding_idx


class UsageError(Exception):
    """Bad input the user can fix; printed as one line ``error: ...; fix`` with exit status 2."""


#: What to train: the task and a model built from a transformers config type or a saved model directory, and the
#: kernels it runs. One field per job key the rank gets (train.common.keys: the key's flag, type, default -- what the
#: rank runs when the flag is absent --, choices and help), plus config_overrides, which the controller builds from
#: the job's model_config and vocab_size.
ModelArguments = dataclasses.make_dataclass("ModelArguments", [
    *keys.model_fields(),
    ("config_overrides", str | None, field(
        default=None, metadata={"help": 'JSON dict of config fields, e.g. {"hidden_size": 128, "num_hidden_layers": 2}'})),
])
ModelArguments.__module__ = __name__


@dataclass
class DataArguments:
    """Where the prepared data artifact is (train/data/prepare_data.py) and the masking rate."""

    dataset_dir: str = field(metadata={"help": "prepared artifact directory (tokenizer/, dataset/, prepare.json)"})
    mlm_probability: float = field(default=0.15, metadata={"help": "share of tokens masked (task mlm)"})


def parse_arguments(argv: list[str] | None = None):
    """Parse the command line into (ModelArguments, DataArguments, TrainingArguments).

    HfArgumentParser over the three dataclasses, with the rank runtime's CPU fix applied between parsing and
    building TrainingArguments (whose __post_init__ sets up devices): bootstrap.bootstrap with the --deepspeed value
    (a single process becomes rank 0 of 1), non-blocking batch copies on CUDA (pinned
    batches, no --accelerator_config given), then patches.init_cpu_deepspeed_distributed. Unknown arguments are an
    error (argparse exits 2), as with parse_args_into_dataclasses.
    """
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    namespace = parser.parse_args(argv)
    values = vars(namespace)
    bootstrap.bootstrap(values.get("deepspeed"))
    from train.rank.callbacks import usable_report_to  # TensorBoard left out, with a warning, where it can't be imported

    values["report_to"] = usable_report_to(values.get("report_to"), bootstrap.rank_info().rank)
    if torch.cuda.is_available() and values.get("accelerator_config") is None and values.get("dataloader_pin_memory"):
        # batches go to the GPU from pinned memory without a sync each (a blocking copy waits for the GPU's queue)
        values["accelerator_config"] = {"non_blocking": True}
    if patches.init_cpu_deepspeed_distributed(values.get("deepspeed"), values.get("ddp_timeout") or 1800):
        values["accelerator_config"] = patches.configured_state(values.get("accelerator_config"))
    out = []
    for dtype in parser.dataclass_types:
        keys = {f.name for f in dataclasses.fields(dtype) if f.init}
        out.append(dtype(**{k: v for k, v in values.items() if k in keys}))
    return tuple(out)


# --------------------------------------------------------------------------------------------------------- trainer
def batch_digest(inputs: dict, mlm: bool) -> str:
    """sha256 (64 hex chars) of a batch's original token ids, shape (micro batch, block length); masked positions
    are restored from the labels for mlm."""
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
        self.samples_seen = 0  # micro-batch rows this rank trained on (PerfCallback's throughput counts these)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.samples_seen += int(inputs["input_ids"].shape[0])
        if len(self.batch_digests) < RECORDED_BATCHES:
            self.batch_digests.append(batch_digest(inputs, self.task == "mlm"))
        return super().training_step(model, inputs, num_items_in_batch)


def load_artifact(data_args: DataArguments, task: str):
    """Load ARTIFACT/tokenizer and ARTIFACT/dataset (train/data/prepare_data.py's) from node-local disk.

    Returns:
        (tokenizer, datasets.Dataset of blocks, prepare.json dict or {} when absent).

    Raises:
        UsageError: a missing part, a task other than the one the data was prepared for, no rows, or a tokenizer
            without a mask token for task mlm.
    """
    import datasets

    root = Path(data_args.dataset_dir)
    for part in ("tokenizer", "dataset"):
        if not (root / part).is_dir():
            raise UsageError(f"{root / part} not found; run `python -m train.data.prepare_data --job JOB.json "
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


def padded_vocab_size(tokens: int, multiple: int) -> int:
    """``tokens`` (the tokenizer's size) rounded up to a multiple of ``multiple`` (>= 1): the model's vocabulary,
    e.g. 50,257 -> 50,304 for 128 (Megatron-LM's make-vocab-size-divisible-by; llm.c's GPT-2 vocabulary). The rows
    past ``tokens`` are never an input or a target. Raises ValueError for a multiple below 1."""
    if multiple < 1:
        raise ValueError(f"a vocabulary multiple must be >= 1, got {multiple}")
    return -(-tokens // multiple) * multiple


def build_model(model_args: ModelArguments, tokenizer, block_length: int, device=None):
    """The model to train: from --model_name_or_path (embeddings grown to the tokenizer when smaller), or a fresh
    --model_type config with --config_overrides, its vocab_size set to the tokenizer's real size (len(tokenizer),
    whatever vocab_size the job asked for) rounded up to a multiple of --pad_vocab_to_multiple_of
    (:func:`padded_vocab_size`), and its special-token ids from the tokenizer.

    ``device`` (a torch.device, e.g. the rank's cuda:N): a fresh model is built and initialised there (torch's device
    context) instead of on the CPU and moved later (start-up phase "model" of BERT-base on an H200: 1.2-2.3 s in
    docs/benchmarks/gpu-2026-12-02b.md, 0.3-0.6 s in gpu-2026-12-02c.md, which also had the venv's bytecode). The
    initial weights come from that device's generator, seeded by set_seed like the CPU's. None: the CPU.

    Returns:
        (model, config).

    Raises:
        UsageError: a model directory that isn't local, bad --config_overrides, an unknown model type, or blocks
            longer than the model's position embeddings.
    """
    auto = AutoModelForMaskedLM if model_args.task == "mlm" else AutoModelForCausalLM
    if model_args.model_name_or_path:
        if not Path(model_args.model_name_or_path).is_dir():
            raise UsageError(f"--model_name_or_path {model_args.model_name_or_path} is not a local directory "
                             "(nothing is downloaded); save the model there first or build from --model_type")
        extra = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
        model = auto.from_pretrained(model_args.model_name_or_path, **extra)
        weight = model.get_input_embeddings().weight
        if getattr(weight, "ds_shape", weight.shape)[0] < len(tokenizer):  # ds_shape: ZeRO-3 partitioned
            model.resize_token_embeddings(padded_vocab_size(len(tokenizer), model_args.pad_vocab_to_multiple_of))
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
        config.vocab_size = padded_vocab_size(len(tokenizer), model_args.pad_vocab_to_multiple_of)
        config.pad_token_id = tokenizer.pad_token_id
        for name in ("bos_token_id", "eos_token_id"):
            if getattr(tokenizer, name, None) is not None:
                setattr(config, name, getattr(tokenizer, name))
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        need = block_length + (config.pad_token_id + 1 if config.model_type in ROBERTA_LIKE else 0)
        if positions is not None and positions < need:
            raise UsageError(f"the model has {positions} position embeddings but blocks of {block_length} tokens "
                             f"need {need}; raise max_position_embeddings/n_positions or lower max_seq_length")
        extra = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
        with device if device is not None else contextlib.nullcontext():
            model = auto.from_config(config, **extra)
    if model_args.mlm_head == "masked":
        if model_args.task != "mlm":
            raise UsageError("--mlm_head masked applies to --task mlm only; use --mlm_head full")
        try:
            mlm_head.use_masked_positions_head(model)
        except TypeError as e:
            raise UsageError(f"{e}") from None
    try:
        if model_args.unpadded_attention:
            kernels.use_unpadded_attention(model)
        if model_args.fused_cross_entropy:
            if model_args.task != "clm":
                raise UsageError("--fused_cross_entropy applies to --task clm only (the masked LM head has its own "
                                 "loss); leave it false")
            kernels.use_fused_cross_entropy(model)
        if model_args.float8 != "none":
            converted = kernels.use_float8(model, model_args.float8, device)
            if bootstrap.rank_info().rank == 0:
                print(f"[pretrain] float8 ({model_args.float8}): {converted} nn.Linear layers of the blocks",
                      flush=True)
    except (ValueError, TypeError, ImportError) as e:
        raise UsageError(f"{e}") from None
    return model, config


def main(argv: list[str] | None = None) -> int:
    """Train from the command line (see the module docstring); returns the exit status (0).

    Raises:
        UsageError: a missing or mismatched artifact, a bad --config_overrides or --model_name_or_path.
    """
    model_args, data_args, training_args = parse_arguments(argv)
    STARTUP["arguments_parsed"] = time.time()  # TrainingArguments set up the device and the process group
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
    STARTUP["data_loaded"] = time.time()
    block_length = len(dataset[0]["input_ids"])
    set_seed(training_args.seed)  # before the model is built, as run_mlm.py does: same initial weights everywhere
    # built on the rank's GPU (not under ZeRO-3: zero.Init partitions the parameters as they are made)
    on_gpu = training_args.device.type == "cuda" and not is_deepspeed_zero3_enabled()
    model, config = build_model(model_args, tokenizer, block_length, training_args.device if on_gpu else None)
    uses_num_items = patches.fix_loss_kwargs_flag(model, len(tokenizer))
    STARTUP["model_built"] = time.time()

    world = training_args.world_size
    global_batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world
    n_params = metrics.count_parameters(model)
    requested = meta.get("vocab_size_requested")
    if training_args.process_index == 0:
        padded = (f" {len(tokenizer)} padded to a multiple of {model_args.pad_vocab_to_multiple_of}"
                  if config.vocab_size != len(tokenizer) else "")
        print(f"[pretrain] {config.model_type} {model_args.task}: {n_params / 1e6:.2f}M parameters, vocabulary "
              f"{config.vocab_size} (the tokenizer's{padded}{f'; {requested} asked' if requested else ''}), "
              f"{len(dataset)} blocks of {block_length}, world size {world}, global batch {global_batch}, "
              f"model uses num_items_in_batch: {uses_num_items}", flush=True)

    collator = DataCollatorForLanguageModeling(
        tokenizer=tokenizer, mlm=model_args.task == "mlm", mlm_probability=data_args.mlm_probability
    )
    if model_args.mlm_head == "masked":
        collator = mlm_head.MaskedPositionsCollator(collator, data_args.mlm_probability)
    if model_args.unpadded_attention:
        collator = kernels.UnpaddedCollator(collator)
    if model_args.regional_compilation and training_args.torch_compile:
        # accelerate's TorchDynamoPlugin, which the Trainer builds, reads its regional-compilation switch from here
        # (accelerate/utils/dataclasses.py; what `accelerate config` writes); under DeepSpeed it compiles the
        # engine's module in place with compile_regions_deepspeed
        os.environ["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "1"
    trainer = PretrainTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=collator,
        processing_class=tokenizer,
        task=model_args.task,
    )
    STARTUP["trainer_built"] = time.time()
    _progress, metrics_cb = hooks.attach(
        trainer,
        extra={"task": model_args.task, "block_length": block_length, "dataset_blocks": len(dataset),
               "vocab_size_requested": requested, "model_uses_num_items_in_batch": uses_num_items,
               "source_fingerprint": meta.get("source", {}).get("fingerprint")},
        rank_extra=lambda: {"first_batches_sha256": list(trainer.batch_digests)},
        tokens_per_sample=block_length,
    )
    trainer.add_callback(perf.PerfCallback(training_args.output_dir, global_batch, block_length,
                                      samples_seen=lambda: trainer.samples_seen, world_size=world,
                                      startup=STARTUP, engine=lambda: trainer.model_wrapped))
    # -e resume=<run>: train.yml staged the run's newest complete checkpoint and passes it here
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)  # metrics.json and loss_curve.png are written when training ends (train.rank.callbacks.MetricsCallback)
    out = Path(training_args.output_dir)
    kernels.restore_sdpa_name(model)  # the saved config names sdpa, which any loader knows
    trainer.save_model(str(out / "model"))  # every rank (ZeRO-3 gathers); rank 0 writes model + tokenizer
    if training_args.process_index == 0:
        for f in (out / "model").iterdir():
            if f.is_file():
                f.chmod(0o644)  # safetensors leaves 0600; the results are fetched and read by other users
        m = metrics_cb.metrics or {}
        print(f"[pretrain] done: {m.get('steps')} steps, loss {m.get('first_loss')} -> {m.get('last_loss')}, "
              f"{m.get('train_samples_per_second')} samples/s, wrote {out}", flush=True)
    bootstrap.barrier()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        print(f"error: [rank {bootstrap.rank_info().rank}] {e}", file=sys.stderr, flush=True)
        sys.exit(2)
