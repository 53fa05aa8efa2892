"""Resolve a training job on the controller: preset + size + `-e` overrides + the ``auto`` policy -> one validated
job dict; and pretrain's command line for a job (stdlib + PyYAML only: the controller has no torch).

    python -m train.controller.resolve keys
    python -m train.controller.resolve resolve --model bert --overrides '{"model_size": "tiny", "accelerator": "cpu"}' --out JOB.json
    python -m train.controller.resolve argv JOB.json --dataset-dir D --output-dir O --deepspeed C

A preset (train/presets/<model>.yml; its schema is documented in the header of bert.yml) gives every job key;
its `sizes.<model_size>` block overrides some of them; the user's overrides come last. Dict-valued keys
(`model_config`) are merged key by key, everything else is replaced. The result is validated once
(train.common.job.validate); a user mistake gives exit status 2 and one line on stderr:
`error: <what is wrong> (<where>); <how to fix>`.
"""

import datetime
import json
import sys
from pathlib import Path

import yaml

from train.common.job import (CHOICES, FIXED_KEYS, SCHEMA, JobError, coerce, data_key, float8_refusal,
                              load_job, resolve_precision, validate)
from train.common import cli, flops, keys
from train.common.jsonio import write_json_atomic
from train.controller import memory

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


# Keys that also take the value "auto" (declared with an auto policy in train.common.keys): resolve() replaces it with
# a concrete value for the job's accelerator, model size and world size (precision in resolve_precision, the others
# in _resolve_auto; the rules are in its docstring). A resolved job holds no "auto".
AUTO_KEYS = tuple(key.name for key in keys.KEYS if key.auto)


# The micro batch "auto" picks on cuda: the largest power of two with at most this many tokens per micro batch.
# On one H200 (BERT-base, seq 512) micro 128 (65,536 tokens) was the fastest (docs/benchmarks/h200-early-findings.md);
# GPT-2 small at seq 1024 gets 64, llm.c's micro batch for it.
AUTO_MICRO_TOKENS = 65536


# regional_compilation "auto": from this many transformer layers on, each layer is compiled once and reused (a
# whole-model compile of GPT-2 XL's 48 layers made its first step take minutes; docs/benchmarks/gpu-2026-12-03c.md).
REGIONAL_LAYERS = 24


# pad_vocab_to_multiple_of "auto" on cuda: the model's vocabulary (embedding rows, LM-head columns) rounded up to a
# multiple of this (Megatron-LM's make-vocab-size-divisible-by, default 128; llm.c's 50,304 for GPT-2): matmul
# shapes the tensor cores tile evenly. GPT-2 small on one H200: 409 k tokens/s against 389 k with 50,257
# (docs/benchmarks/gpu-2026-12-04b.md).
AUTO_VOCAB_MULTIPLE = 128


# fused_cross_entropy "auto" for causal LMs on cuda. Liger Kernel's fused linear cross-entropy cut GPT-2 small's
# peak GPU memory from 36.2 to 24.5 GiB but made it slower on one H100: 418 k tokens/s against 452 k without it,
# same machine and losses (docs/benchmarks/gpu-2026-12-05.md). Opt-in, for memory.
AUTO_FUSED_CROSS_ENTROPY = False


# float8 "auto": none. torchao's float8 training made BERT-base slower on one H100, the same loss
# (docs/benchmarks/gpu-2026-12-06b.md, which says why). Opt-in, e.g. to measure a wider model.
AUTO_FLOAT8 = "none"


# ... and on cpu (the old preset default: CUDA-sized batches would only make a CPU run slower to report).
AUTO_MICRO_CPU = 16


# Defaults for keys a preset may leave out (train.common.keys: a key's default, unless PRESET; no numbers there: those
# live in the presets). `accelerator` has no default on purpose: it is an inventory fact the playbook must pass.
DEFAULTS = {key.name: key.default for key in keys.KEYS if not key.fixed and key.default != keys.PRESET}


#: The job keys that apply to a user's script (script mode, recorded in its job.json; train.common.keys: script=True):
#: the run, the cluster and the DeepSpeed config's inputs (the script's TrainingArguments give the batch, optimizer and
#: schedule values). The preset's model, tokenizer, data and logging keys do not apply: the script has its own.
SCRIPT_KEYS = tuple(key.name for key in keys.KEYS if key.script)


def available_models(presets_dir=PRESETS_DIR):
    """Sorted preset names (the stems of `presets_dir/*.yml`), e.g. ['bert', 'gpt2', 'llama', 'roberta']."""
    return sorted(p.stem for p in Path(presets_dir).glob("*.yml"))


def load_preset(model, presets_dir=PRESETS_DIR):
    """Read `presets_dir/<model>.yml` -> (preset dict without `sizes`, sizes dict, path shown in messages).

    Raises JobError for an unknown model (listing the presets), unreadable YAML, or a preset whose top-level keys
    or `sizes` blocks aren't job keys.
    """
    models = available_models(presets_dir)
    if not isinstance(model, str) or model not in models:
        raise JobError(f"unknown model {model!r}", "model", f"choose one of: {', '.join(models)}")
    path = Path(presets_dir) / f"{model}.yml"
    shown = _shown(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise JobError(f"cannot read preset: {' '.join(str(exc).split())}", shown, "fix the YAML") from None
    if not isinstance(data, dict):
        raise JobError("preset is not a YAML mapping", shown, "write `key: value` lines as in bert.yml")
    data = dict(data)
    sizes = data.pop("sizes", None) or {"base": {}}
    allowed = set(FIXED_KEYS) | set(SCHEMA)
    for key in data:
        if key not in allowed:
            raise JobError(f"unknown preset key {key!r}", shown, f"use only job keys: {', '.join(_all_keys())}")
    for key in FIXED_KEYS:
        if key not in data:
            raise JobError(f"preset lacks {key}", shown, f"add `{key}:` (one of {', '.join(CHOICES.get(key, ()))})"
                           if key in CHOICES else f"add `{key}:`")
    if not isinstance(sizes, dict) or not all(isinstance(v, dict) or v is None for v in sizes.values()):
        raise JobError("`sizes` must map size names to blocks of job keys", shown, "see the sizes block of bert.yml")
    sizes = {str(name): dict(block or {}) for name, block in sizes.items()}
    for name, block in sizes.items():
        for key in block:
            if key not in SCHEMA or key == "model_size":
                raise JobError(f"unknown key {key!r} in size {name!r}", f"{shown}: sizes.{name}",
                               f"use only overridable job keys: {', '.join(k for k in SCHEMA if k != 'model_size')}")
    return data, sizes, shown


def _shown(path):
    """`path` relative to the current directory when below it (shorter messages), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _all_keys():
    return list(FIXED_KEYS) + list(SCHEMA)


def override_keys():
    """The job keys a user may set with `-e key=value` (`model` included: it picks the preset)."""
    return ["model"] + list(SCHEMA)


def resolve(model, overrides=None, presets_dir=PRESETS_DIR, now=None, world_size=1, gpu_memory_bytes=None,
            host_memory_bytes=None, ranks_per_node=1):
    """Build the validated job dict for preset `model` with `overrides` (a dict; values may be `-e` strings).

    `model` may be None when overrides carry "model". `now` (an aware datetime) is only used for the default
    run_name `<model>-<size>-<YYYYmmddTHHMMSSZ>` (UTC). `world_size` (ranks, >= 1) sizes the "auto" micro batch and
    gradient accumulation against the global batch; `gpu_memory_bytes` (the smallest GPU's memory, on cuda) lets the
    memory plan choose the ZeRO stage, offload, activation checkpointing and micro batch (train.controller.memory;
    `host_memory_bytes`, the smallest node's memory, and `ranks_per_node` bound the optimizer offload).
    Returns a plain JSON-able dict: `model`, `data_key`,
    FIXED_KEYS and every SCHEMA key, with precision resolved (auto -> bf16 on cuda, fp32 on cpu) and every
    AUTO_KEYS "auto" replaced (_resolve_auto).
    Raises JobError (one-line message naming the key and the preset file or override) on any user mistake.
    """
    overrides = dict(overrides or {})
    if "model" in overrides:
        given = overrides.pop("model")
        if model is None:
            model = given
        elif given != model:
            raise JobError(f"override model={given!r} contradicts --model {model!r}", "override model",
                           "give the model once")
    if model is None:
        raise JobError("no model given", "model", f"pass -e model=<one of: {', '.join(available_models(presets_dir))}>")
    allowed = override_keys()
    for key in overrides:
        if key in FIXED_KEYS:
            raise JobError(f"{key} is fixed by the preset and can't be overridden", f"override {key}",
                           f"pick another model instead (one of: {', '.join(available_models(presets_dir))})")
        if key not in SCHEMA:
            raise JobError(f"unknown override key {key!r}", f"override {key}",
                           f"allowed keys: {', '.join(allowed)}")

    preset, sizes, shown = load_preset(model, presets_dir)
    job, origin = {}, {}

    def apply(layer, where_prefix):
        for key, value in layer.items():
            where = f"{where_prefix}{key}"
            if key in FIXED_KEYS or (key in AUTO_KEYS and isinstance(value, str)
                                     and value.strip().lower() == "auto"):
                job[key], origin[key] = (value.strip().lower() if key in AUTO_KEYS else value), where
                continue
            value = coerce(key, value, where)
            if SCHEMA[key][0] == "dict" and isinstance(job.get(key), dict):
                value = {**job[key], **value}
            job[key], origin[key] = value, where

    apply(DEFAULTS, "default ")
    apply(preset, f"{shown}: ")
    size = coerce("model_size", overrides.get("model_size", job["model_size"]),
                  origin["model_size"] if "model_size" not in overrides else "override model_size")
    if size not in sizes:
        raise JobError(f"unknown model_size {size!r} for model {model}", f"{shown}: sizes",
                       f"choose one of: {', '.join(sizes)}")
    apply(sizes[size], f"{shown}: sizes.{size}.")
    apply(overrides, "override ")
    job["model_size"] = size

    for key in SCHEMA:
        if key not in job:
            if key == "accelerator":
                raise JobError("accelerator not given", "override accelerator",
                               "pass -e accelerator=cpu or cuda (the playbook sets it from the inventory)")
            raise JobError(f"preset lacks {key}", shown, f"add `{key}:` to the preset")

    job["model"] = model
    resolve_precision(job, origin)
    _resolve_auto(job, origin, world_size, gpu_memory_bytes, host_memory_bytes, ranks_per_node)
    validate(job, origin)
    if job["run_name"] is None:
        now = now or datetime.datetime.now(datetime.timezone.utc)
        job["run_name"] = f"{model}-{size}-{now.astimezone(datetime.timezone.utc):%Y%m%dT%H%M%SZ}"
    job["data_key"] = data_key(job)
    return _ordered(job)


def for_script(job, max_steps_applies=True):
    """The part of a resolved ``job`` that applies to a user's script: its SCRIPT_KEYS, in that order.

    Args:
        job: a job from :func:`resolve` (the preset's defaults under the script's own TrainingArguments).
        max_steps_applies: False when the script trains by epochs and nothing reads the job's max_steps (an HF
            Trainer script without ``--max_steps``): then max_steps is left out too.
    """
    return {key: job[key] for key in SCRIPT_KEYS if key in job and (key != "max_steps" or max_steps_applies)}


def _ordered(job):
    order = ("run_name", "model", "model_size", "data_key", *FIXED_KEYS, *SCHEMA)
    return {key: job[key] for key in dict.fromkeys(order) if key in job}


def _auto_micro(job, per_rank):
    """The micro batch "auto" wants before memory is considered: on cuda the largest power of two p with
    p x max_seq_length <= AUTO_MICRO_TOKENS, on cpu AUTO_MICRO_CPU; lowered until it divides ``per_rank`` (samples a
    rank takes per optimizer step) when that is known."""
    seq = job["max_seq_length"] if isinstance(job["max_seq_length"], int) else 512
    cap = max(1, AUTO_MICRO_TOKENS // max(1, seq)) if job["accelerator"] == "cuda" else AUTO_MICRO_CPU
    micro = 1 << (cap.bit_length() - 1)
    if per_rank is not None:
        micro = min(micro, per_rank)
        while per_rank % micro:
            micro -= 1
    return micro


def _resolve_auto(job, origin, world_size, gpu_memory_bytes=None, host_memory_bytes=None, ranks_per_node=1):
    """Replace every "auto" of AUTO_KEYS with a concrete value (in place). The CUDA defaults apply on cuda only;
    on cpu "auto" keeps what the CPU path always ran (ZeRO-2, DeepSpeed's optimizer, bf16 nowhere, no compile,
    the full MLM head, no offload, no activation checkpointing, micro batch AUTO_MICRO_CPU).

    Rules, in this order (each may read the ones before):
      mlm_head: masked (the LM head at masked positions only, train/rank/mlm_head.py) for task mlm on cuda; full else.
      zero_stage, offload_optimizer, offload_ratio, gradient_checkpointing, per_device_train_batch_size on cuda with
        the GPU's memory known (``gpu_memory_bytes``, the smallest GPU of the run): train.controller.memory.plan --
        the first of ZeRO 0/1/2, then with activation checkpointing, ZeRO-3, then ZeRO-3 with a partial optimizer
        offload (a quarter, a half, three quarters), then the whole optimizer offloaded, whose estimate fits the
        GPU with a micro batch of at least MIN_MICRO_TOKENS tokens (or the one wanted); keys the user set are kept.
        Otherwise (cpu, or the memory not given, or a model whose shape is unknown): zero_stage 2 on cpu or with
        offload, else 0; offload none (offload_ratio 1.0: all of it, when offloaded); checkpointing off; the micro
        batch below.
      per_device_train_batch_size: cuda -> the largest power of two p with p x max_seq_length <= AUTO_MICRO_TOKENS
        that divides train_batch_size / world_size (when a global batch is given); cpu -> AUTO_MICRO_CPU likewise;
        the memory plan may lower it.
      gradient_accumulation_steps: train_batch_size / (micro x world_size) when a global batch is given, else 1.
      optimizer: cuda without offload -> adamw_torch_fused (the Trainer's client optimizer: torch.optim.AdamW with
        fused=True); otherwise deepspeed (DeepSpeedCPUAdam needs DeepSpeed's own optimizer block).
      autocast: true (DeepSpeed's "torch_autocast" bf16 instead of its "bf16" block) when precision is bf16, the
        optimizer is the client one and zero_stage is 0 (faster than the bf16 block: docs/benchmarks/
        h200-early-findings.md); false otherwise.
      torch_compile: true on cuda, false on cpu and with ZeRO-3 (its parameters are gathered by module hooks
        around each forward, which torch.compile's graphs do not see).
      pad_vocab_to_multiple_of: AUTO_VOCAB_MULTIPLE on cuda, 1 (the tokenizer's size, no padding) on cpu. The rows
        past the tokenizer are never an input or a target: their logits only learn to stay low.
      unpadded_attention: true on cuda with sdpa attention, false otherwise (train/rank/kernels.py: the blocks are
        full, so attention runs with SDPA's causal flag or no mask instead of a 4-D mask built from an all-ones one;
        GPT-2 small on one H100: 452 k tokens/s against 386 k, the same losses, docs/benchmarks/gpu-2026-12-05.md).
      fused_cross_entropy: AUTO_FUSED_CROSS_ENTROPY for a causal LM on cuda (Liger Kernel's fused linear
        cross-entropy: less memory, slower); false for masked LMs (their head runs at the masked positions only) and
        on cpu (Triton).
      float8: AUTO_FLOAT8 on cuda (none: slower for BERT-base) where train.common.job.float8_refusal allows it (not
        for Conv1D blocks, not with ZeRO-3); none on cpu (torch only emulates float8 there).
      regional_compilation: torch_compile with the masked MLM head, for llama, or for a model of REGIONAL_LAYERS
        layers or more; false otherwise. Regional compilation (accelerate's: each repeated block class -- a
        BertLayer -- compiled once and reused, the other modules one by one) leaves the model's own forward, with its
        LM-head loss, uncompiled: faster for BERT with the masked head, slower for GPT-2 small, whose full head's
        cross-entropy then runs eager (docs/benchmarks/gpu-2026-12-02.md and gpu-2026-12-02b.md); faster for Llama
        1B (66.6 against 61.4 % MFU) and a first step of 12 s instead of 40 s, and for GPT-2 XL's 48 layers a first
        step of 12 s instead of minutes (docs/benchmarks/gpu-2026-12-03c.md).

    Returns the MemoryPlan behind the choice (train.controller.memory), or None when none was made.

    Raises:
        JobError: a global batch that the world size (times a given micro batch) does not divide; a model that fits
            the GPUs in no way (memory.MemoryPlanError).
    """
    cuda = job["accelerator"] == "cuda"
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise JobError(f"world size must be a positive integer, got {world_size!r}", "world size",
                       "pass the number of ranks")
    if job["mlm_head"] == "auto":
        job["mlm_head"] = "masked" if cuda and job["task"] == "mlm" else "full"
    glob = job["train_batch_size"]
    per_rank = None
    if isinstance(glob, int) and not isinstance(glob, bool):
        if glob < world_size or glob % world_size:
            raise JobError(f"train_batch_size {glob} is not a multiple of the world size {world_size}",
                           origin.get("train_batch_size", "train_batch_size"),
                           f"set -e train_batch_size= to a multiple of {world_size}, or null")
        per_rank = glob // world_size
    wanted = _auto_micro(job, per_rank)
    planned = None
    if cuda and gpu_memory_bytes:
        planned = memory.plan(job, world_size, gpu_memory_bytes, wanted, per_rank, host_memory_bytes, ranks_per_node)
    if planned is not None:
        auto = {"zero_stage": planned.zero_stage, "offload_optimizer": "cpu" if planned.offload else "none",
                "offload_ratio": planned.ratio, "gradient_checkpointing": planned.checkpointing,
                "per_device_train_batch_size": planned.micro}
        for key, value in auto.items():
            if job[key] == "auto":
                job[key] = value
    if job["offload_optimizer"] == "auto":
        job["offload_optimizer"] = "none"
    offload = job["offload_optimizer"] != "none"
    if job["zero_stage"] == "auto":
        job["zero_stage"] = 2 if not cuda or offload else 0
    if job["offload_ratio"] == "auto":
        job["offload_ratio"] = 1.0
    if job["gradient_checkpointing"] == "auto":
        job["gradient_checkpointing"] = False
    if job["per_device_train_batch_size"] == "auto":
        job["per_device_train_batch_size"] = wanted
    if job["gradient_accumulation_steps"] == "auto":
        micro = job["per_device_train_batch_size"]
        if per_rank is None:
            job["gradient_accumulation_steps"] = 1
        elif isinstance(micro, int) and micro >= 1 and per_rank % micro == 0:
            job["gradient_accumulation_steps"] = per_rank // micro
        else:
            raise JobError(f"train_batch_size {glob} is not per_device_train_batch_size {micro} x world size "
                           f"{world_size} x a whole number of accumulation steps",
                           origin.get("per_device_train_batch_size", "per_device_train_batch_size"),
                           f"pick a micro batch that divides {per_rank}, or -e per_device_train_batch_size=auto")
    if job["optimizer"] == "auto":
        job["optimizer"] = "adamw_torch_fused" if cuda and not offload else "deepspeed"
    if job["autocast"] == "auto":
        job["autocast"] = (job["precision"] == "bf16" and job["optimizer"] != "deepspeed"
                           and job["zero_stage"] == 0)
    if job["torch_compile"] == "auto":
        job["torch_compile"] = cuda and job["zero_stage"] != 3
    if job["pad_vocab_to_multiple_of"] == "auto":
        job["pad_vocab_to_multiple_of"] = AUTO_VOCAB_MULTIPLE if cuda else 1
    if job["unpadded_attention"] == "auto":
        job["unpadded_attention"] = cuda and job["attention"] == "sdpa"
    if job["fused_cross_entropy"] == "auto":
        job["fused_cross_entropy"] = AUTO_FUSED_CROSS_ENTROPY and cuda and job["task"] == "clm"
    if job["float8"] == "auto":
        job["float8"] = AUTO_FLOAT8 if cuda and float8_refusal(job) is None else "none"
    if job["regional_compilation"] == "auto":
        layers, _ = flops.model_shape(job["model_config"] or {})
        deep = isinstance(layers, int) and layers >= REGIONAL_LAYERS
        job["regional_compilation"] = bool(job["torch_compile"]) and (
            job["mlm_head"] == "masked" or job["model_type"] == "llama" or deep)
    return planned


def argv(job, dataset_dir, output_dir, deepspeed):
    """Command-line arguments (list of str) for train/rank/pretrain.py's HfArgumentParser (its dataclasses' flags).

    `dataset_dir` is the staged artifact dir (tokenizer/ + dataset/), `output_dir` the run dir, `deepspeed` the
    rendered DeepSpeed config path. The job keys' own arguments come from their declarations
    (train.common.keys.rank_argv: --bf16/--fp16 only when the job's precision asks for them, a flag left out where
    its value is what the rank runs without it); the rest is the run's layout and settings every run has.
    """
    return [
        "--dataset_dir", str(dataset_dir), "--output_dir", str(output_dir), "--deepspeed", str(deepspeed),
        *keys.rank_argv(job),
        "--lr_scheduler_type", "linear", "--save_strategy", "steps", "--logging_first_step", "true",
        # output_dir is on each node's own disk: every node saves (and rotates) its part of each checkpoint,
        # which train/node/checkpoints.py gathers on the head
        "--save_on_each_node", "true",
    ]


def summary(job, out=None):
    """One line describing a resolved job (what `resolve` prints)."""
    accum = f" x accum {job['gradient_accumulation_steps']}" if job["gradient_accumulation_steps"] > 1 else ""
    compiled = ((", torch.compile (regional)" if job.get("regional_compilation") else ", torch.compile")
                if job["torch_compile"] else "")
    line = (f"job {job['run_name']}: {job['model']}/{job['model_size']} {job['task']} {job['max_steps']} steps, "
            f"micro {job['per_device_train_batch_size']}{accum}, seq {job['max_seq_length']}, "
            f"lr {job['learning_rate']:g}, warm-up {job['warmup_steps']}, zero {job['zero_stage']}"
            f"{', optimizer offload ' + job['offload_optimizer'] if job['offload_optimizer'] != 'none' else ''}"
            f"{' (' + format(job['offload_ratio'], '.0%') + ' of it)' if job['offload_optimizer'] != 'none' and job.get('offload_ratio', 1.0) < 1.0 else ''}"
            f"{', activation checkpointing' if job['gradient_checkpointing'] else ''}, "
            f"{job['precision']}{' (torch_autocast)' if job['autocast'] else ''} on {job['accelerator']}, "
            f"optimizer {job['optimizer']}, {job['attention']} attention"
            f"{compiled}"
            f"{', MLM head at masked positions' if job['mlm_head'] == 'masked' and job['task'] == 'mlm' else ''}, "
            f"data_key {job['data_key']}")
    return f"{line} -> {out}" if out else line


def _parser():
    parser = cli.Parser(prog="python -m train.controller.resolve", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    sub.add_parser("keys", help="print the JSON list of keys a user may override with -e key=value")
    res = sub.add_parser("resolve", help="preset + size + overrides -> validated job JSON (atomic write)")
    res.add_argument("--model", help=f"preset name (train/presets/<model>.yml): {', '.join(available_models())}")
    res.add_argument("--overrides", default="{}", help="JSON object of overrides; string values are coerced")
    res.add_argument("--out", required=True, help="job JSON to write")
    res.add_argument("--world-size", type=int, default=1, help="ranks (sizes the auto micro batch; default 1)")
    res.add_argument("--gpu-memory-gib", type=float, default=None,
                     help="memory of the smallest GPU, GiB (cuda: the memory plan chooses ZeRO, offload, activation "
                          "checkpointing and the micro batch; without it they follow the model-size-free rules)")
    arg = sub.add_parser("argv", help="print the JSON list of train.rank.pretrain's arguments for a job")
    arg.add_argument("job", help="job JSON written by resolve")
    arg.add_argument("--dataset-dir", required=True)
    arg.add_argument("--output-dir", required=True)
    arg.add_argument("--deepspeed", required=True)
    return parser


def main(args=None):
    """CLI entry point; returns the exit status (0 ok, 2 user mistake with one line on stderr)."""
    opts = _parser().parse_args(args)
    return cli.run(lambda: _command(opts), JobError)


def _command(opts):
    """The work of one sub-command (keys, resolve, argv); JobError for a user mistake."""
    if opts.command == "keys":
        print(json.dumps(override_keys()))
    elif opts.command == "resolve":
        try:
            overrides = json.loads(opts.overrides)
        except ValueError as exc:
            raise JobError(f"--overrides is not valid JSON ({exc})", "command line",
                           """pass a JSON object, e.g. '{"max_steps": 100}'""") from None
        if not isinstance(overrides, dict):
            raise JobError("--overrides must be a JSON object", "command line",
                           """pass e.g. '{"max_steps": 100}'""")
        gpu = int(opts.gpu_memory_gib * 2**30) if opts.gpu_memory_gib else None
        job = resolve(opts.model, overrides, world_size=opts.world_size, gpu_memory_bytes=gpu)
        try:
            write_json_atomic(opts.out, job)
        except OSError as exc:
            raise JobError(f"cannot write job file: {exc.strerror or exc}", opts.out,
                           "check that its directory exists and is writable") from None
        print(summary(job, opts.out))
    elif opts.command == "argv":
        job = load_job(opts.job)
        print(json.dumps(argv(job, opts.dataset_dir, opts.output_dir, opts.deepspeed)))


if __name__ == "__main__":
    sys.exit(main())
