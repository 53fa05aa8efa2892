"""Render the DeepSpeed config of a job from templates/deepspeed/zero<stage>.json (stdlib only + train.common.job).

    python -m train.controller.dsconfig render --job JOB.json --world-size N --templates templates/deepspeed --out DS.json

The templates are short ZeRO-stage presets with "auto" wherever the HF Trainer fills the value from its
TrainingArguments (transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process and
trainer_config_finalize: batch sizes, gradient clipping, optimizer lr/betas/eps/weight_decay, scheduler
warmup_min_lr/warmup_max_lr/warmup_num_steps/total_num_steps, fp16/bf16 enabled, ZeRO-3 bucket sizes). Rendering
keeps those "auto"s and only makes the file agree with the job and the cluster:

- batch: a concrete train_batch_size (template or job key) must equal micro x accumulation x world size, and
  concrete micro/accumulation values must equal the job's (the Trainer would stop on a mismatch much later);
- precision: fp16.enabled / bf16.enabled become true for the job's precision only (fp16/bf16 refused on cpu);
- offload: zero_optimization.offload_optimizer comes from the job key offload_optimizer (none|cpu), never from
  the deprecated `cpu_offload` keys, which are refused; a partial offload (job key offload_ratio < 1, ZeRO-3)
  adds its "ratio" and sub-groups of at most PARTIAL_OFFLOAD_SUB_GROUP elements;
- optimizer: on accelerator cpu without offload, optimizer.params.torch_adam = true, so DeepSpeed uses
  torch.optim.AdamW instead of JIT-compiling its FusedAdam op at every start (slow on CPU nodes:
  docs/developers/architecture.md, "Known facts"); a job whose optimizer is the Trainer's (adamw_torch_fused /
  adamw_torch) gets no "optimizer" block and no "scheduler" block: the Trainer builds torch's AdamW and its linear
  warm-up/decay schedule and hands both to DeepSpeed (transformers' deepspeed_optim_sched, "HF scheduler + HF
  optimizer"; it sets zero_allow_untested_optimizer itself);
- autocast: job autocast true -> "torch_autocast": {"enabled": true, "dtype": "bfloat16"} and the bf16/fp16 blocks
  off (the Trainer runs without --bf16): DeepSpeed autocasts the forward and keeps fp32 weights, gradients and
  optimizer state, skipping its bf16 optimizer wrapper (the faster of the two: docs/benchmarks/h200-early-findings.md);
  With float8 on (job key float8), its "lower_precision_safe_modules" are DeepSpeed's own list plus torchao's
  Float8Linear (FLOAT8_SAFE_MODULES): DeepSpeed matches the classes exactly, and the converted layers' gradients
  would otherwise be reduced between ranks in fp32 instead of bf16;
- scheduler (the warm-up trap): see _scheduler();
- timers: "timers": {"throughput": {"enabled": false}} unless the template sets "timers": DeepSpeed's throughput
  timer synchronises the GPU at every micro batch's forward and at every step, only for a log line (the run's own
  progress reports samples/s; docs/benchmarks/gpu-2026-12-01c.md).
A bad job, template or world size raises train.common.job.JobError; the CLI prints it as one line and exits 2.
"""

import copy
import json
import sys
from pathlib import Path

from train.common import cli
from train.common.job import JobError, check_precision, load_job
from train.common.jsonio import write_json_atomic

AUTO = "auto"

# zero_optimization keys DeepSpeed deprecated in favour of offload_optimizer / offload_param.
DEPRECATED_ZERO_KEYS = ("cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory")

# zero_optimization.sub_group_size with a partial optimizer offload (elements; _offload)
PARTIAL_OFFLOAD_SUB_GROUP = 100_000_000

# torch_autocast's lower_precision_safe_modules for a float8 job: DeepSpeed's default list (deepspeed/runtime/
# torch_autocast.py, LOWER_PRECISION_SAFE_MODULES, 0.19.8) and the class torchao's float8 conversion puts in place of
# nn.Linear (train/rank/kernels.py)
FLOAT8_SAFE_MODULES = ("torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d",
                       "torch.nn.modules.conv.Conv3d", "torchao.float8.float8_linear.Float8Linear")


def render(job, world_size, templates_dir):
    """Return the DeepSpeed config dict for `job` (a resolved job dict) on `world_size` ranks.

    `templates_dir` holds zero0.json .. zero3.json; job["zero_stage"] picks one. "auto" values stay for the HF
    Trainer to fill. Raises JobError when the world size is not a positive int, the template is missing or
    invalid, or the job, template and world size disagree (batch arithmetic, precision, offload, scheduler).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise JobError(f"world size must be a positive integer, got {world_size!r}", "--world-size",
                       "pass the sum of the inventory's slots")
    path = Path(templates_dir) / f"zero{job['zero_stage']}.json"
    config = _load_template(path)
    where = str(path)
    zero = config.setdefault("zero_optimization", {})
    if not isinstance(zero, dict) or zero.get("stage", job["zero_stage"]) != job["zero_stage"]:
        raise JobError(f"zero_optimization.stage is {zero.get('stage') if isinstance(zero, dict) else zero!r}, "
                       f"the job asks for stage {job['zero_stage']}", where,
                       f"set zero_optimization.stage to {job['zero_stage']} in that template")
    zero["stage"] = job["zero_stage"]
    for key in DEPRECATED_ZERO_KEYS:
        if key in zero:
            raise JobError(f"zero_optimization.{key} is deprecated", where,
                           "remove it; use the job key offload_optimizer (-e offload_optimizer=cpu)")
    _batch(config, job, world_size, where)
    _precision(config, job, where)
    _offload(config, zero, job, where)
    _optimizer(config, job, where)
    _scheduler(config, job, where)
    if job.get("optimizer", "deepspeed") != "deepspeed":
        config.pop("optimizer", None)
        config.pop("scheduler", None)
    if job.get("autocast"):
        for name in ("bf16", "fp16"):
            if isinstance(config.get(name), dict):
                config[name]["enabled"] = False
        config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
        if job.get("float8", "none") != "none":
            config["torch_autocast"]["lower_precision_safe_modules"] = list(FLOAT8_SAFE_MODULES)
    config.setdefault("timers", {"throughput": {"enabled": False}})  # no host sync per micro batch and step
    return config


def _load_template(path):
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise JobError(f"cannot read DeepSpeed template: {exc.strerror or exc}", str(path),
                       "pass --templates templates/deepspeed (it holds zero0.json .. zero3.json)") from None
    except ValueError as exc:
        raise JobError(f"DeepSpeed template is not valid JSON ({exc})", str(path), "fix the JSON") from None
    if not isinstance(config, dict):
        raise JobError("DeepSpeed template is not a JSON object", str(path), "see templates/deepspeed/zero2.json")
    return copy.deepcopy(config)


def _get(config, dotted):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _must_match(config, dotted, expected, job_key, where):
    """A concrete (non-"auto") template value must equal the job's: the Trainer refuses mismatches at start."""
    value = _get(config, dotted)
    if value is None or value == AUTO:
        return
    if isinstance(expected, list):
        same = (isinstance(value, list) and len(value) == len(expected)
                and all(_number(a) and a == b for a, b in zip(value, expected)))  # noqa: B905 (lengths checked; py3.9)
    else:
        same = _number(value) and value == expected
    if not same:
        raise JobError(f"{dotted} is {value!r} but the job's {job_key} is {expected!r}", where,
                       f'set {dotted} to "auto" in the template (the Trainer fills it from the job)')


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _batch(config, job, world_size, where):
    micro, accum = job["per_device_train_batch_size"], job["gradient_accumulation_steps"]
    _must_match(config, "train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size", where)
    _must_match(config, "gradient_accumulation_steps", accum, "gradient_accumulation_steps", where)
    computed = micro * accum * world_size
    for source, value in ((where, config.get("train_batch_size")), ("job train_batch_size", job["train_batch_size"])):
        if value is None or value == AUTO:
            continue
        if not _number(value) or value != computed:
            per_step = micro * world_size
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and value % per_step == 0:
                fix = f"set -e gradient_accumulation_steps={value // per_step} (or leave train_batch_size unset)"
            else:
                fix = f"set train_batch_size to {computed} or leave it unset (null / \"auto\")"
            raise JobError(f"train_batch_size {value!r} != per_device_train_batch_size {micro} x "
                           f"gradient_accumulation_steps {accum} x world size {world_size} = {computed}", source, fix)
    if job["train_batch_size"] is not None:
        config["train_batch_size"] = job["train_batch_size"]


# Loss-scaling keys of DeepSpeed's fp16 block (deepspeed/runtime/precision_config.py) that mean nothing for bf16.
FP16_ONLY_KEYS = {"loss_scale", "loss_scale_window", "initial_scale_power", "hysteresis", "consecutive_hysteresis",
                  "min_loss_scale", "auto_cast", "fp16_master_weights_and_grads"}


def _precision(config, job, where):
    precision = job["precision"]
    check_precision(precision, job["accelerator"], "job precision")
    blocks = {name: config.get(name) for name in ("fp16", "bf16")}
    for name, block in blocks.items():
        if block is not None and not isinstance(block, dict):
            raise JobError(f"{name} must be a JSON object", where, f'write "{name}": {{"enabled": "auto"}}')
    concrete = {name: block.get("enabled") for name, block in blocks.items()
                if block is not None and block.get("enabled") not in (None, AUTO)}
    if all(concrete.get(name) is True for name in ("fp16", "bf16")):
        raise JobError("fp16.enabled and bf16.enabled are both true (DeepSpeed runs one of them)", where,
                       'write "enabled": "auto" in both blocks and choose with -e precision=fp16|bf16')
    for name, enabled in concrete.items():
        if bool(enabled) != (precision == name):
            raise JobError(f"{name}.enabled is {json.dumps(enabled)} but the job's precision is {precision} (the "
                           f"Trainer runs {'without' if enabled else 'with'} --{name}, and the HF integration refuses the "
                           "mismatch)", where, 'write "enabled": "auto" and choose with -e precision=...')
    stray = sorted(set(blocks["bf16"] or {}) & FP16_ONLY_KEYS)
    if stray:
        raise JobError(f"bf16 block has fp16-only keys {', '.join(stray)} (bf16 needs no loss scaling)", where,
                       "move them into the fp16 block or delete them")
    for name, block in blocks.items():
        if block is None:
            if precision == name:
                config[name] = {"enabled": True}
            continue
        block["enabled"] = precision == name


def _offload(config, zero, job, where):
    current = zero.get("offload_optimizer")
    if job["offload_optimizer"] == "none":
        if isinstance(current, dict) and current.get("device", "none") != "none":
            raise JobError(f"zero_optimization.offload_optimizer offloads to {current.get('device')!r} but the job's "
                           "offload_optimizer is none", where,
                           "remove it from the template and use -e offload_optimizer=cpu when wanted")
        zero.pop("offload_optimizer", None)
        return
    zero["offload_optimizer"] = {"device": job["offload_optimizer"], "pin_memory": job["accelerator"] == "cuda"}
    ratio = job.get("offload_ratio", 1.0)
    if ratio < 1.0:
        # ZeRO-3's partial offload ("Twin-Flow") puts the last `ratio` of the optimizer's sub-groups on the CPU
        # (deepspeed/runtime/zero/stage3.py): sub-groups of PARTIAL_OFFLOAD_SUB_GROUP elements make that share
        # close to `ratio` (1e9, the template's, leaves 8 sub-groups for 8 B parameters: a share off by 1/8)
        zero["offload_optimizer"]["ratio"] = ratio
        size = zero.get("sub_group_size")
        if not isinstance(size, (int, float)) or size > PARTIAL_OFFLOAD_SUB_GROUP:
            zero["sub_group_size"] = PARTIAL_OFFLOAD_SUB_GROUP


def _optimizer(config, job, where):
    optimizer = config.get("optimizer")
    if optimizer is None:
        return
    params = optimizer.setdefault("params", {})
    _must_match(config, "optimizer.params.lr", job["learning_rate"], "learning_rate", where)
    _must_match(config, "optimizer.params.betas", [job["adam_beta1"], job["adam_beta2"]], "adam_beta1/2", where)
    _must_match(config, "optimizer.params.eps", job["adam_epsilon"], "adam_epsilon", where)
    _must_match(config, "optimizer.params.weight_decay", job["weight_decay"], "weight_decay", where)
    _must_match(config, "gradient_clipping", job["max_grad_norm"], "max_grad_norm", where)
    cpu_basic_adam = job["accelerator"] == "cpu" and job["offload_optimizer"] == "none"
    if cpu_basic_adam and str(optimizer.get("type", "")).lower() in ("adam", "adamw"):
        params.setdefault("torch_adam", True)


def _scheduler(config, job, where):
    """The warm-up trap, and how it is avoided.

    DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR (deepspeed/runtime/lr_schedules.py, 0.19.x) raise
    `ValueError: warmup_num_steps must be a positive integer, got 0` for a warm-up of 0, and silently stretch any
    warm-up below 2 steps to 2 (`max(2, warmup_num_steps)`), so no DeepSpeed scheduler can express "no warm-up".
    The HF Trainer fills "auto" from `args.get_warmup_steps()`, which is 0 when no warm-up is set; transformers
    5.24 wraps it in max(1, ...) but older releases pass the 0 straight through, and a concrete value in the
    template has to match the Trainer's number or the Trainer refuses it.

    Chosen: job warmup_steps == 0 -> drop the "scheduler" block. The Trainer then builds its own scheduler around
    DeepSpeed's optimizer (supported by transformers' deepspeed_optim_sched: "HF scheduler + DS optimizer"): the
    `--lr_scheduler_type linear --warmup_steps 0` that train.controller.resolve argv passes, i.e. full learning rate at step 0 and
    linear decay to 0 at max_steps, exactly what the job asks for, with any transformers version.
    warmup_steps >= 1 -> keep WarmupDecayLR (linear warm-up, then linear decay: the DeepSpeed twin of the
    Trainer's "linear"), its params "auto"; concrete params must be positive and match the job.
    """
    scheduler = config.get("scheduler")
    if scheduler is None:
        return
    if not isinstance(scheduler, dict):
        raise JobError("scheduler must be a JSON object", where, "see templates/deepspeed/zero2.json")
    if job["warmup_steps"] == 0:
        del config["scheduler"]
        return
    warmup = _get(config, "scheduler.params.warmup_num_steps")
    if warmup is not None and warmup != AUTO and (isinstance(warmup, bool) or not isinstance(warmup, int)
                                                  or warmup <= 0):
        raise JobError(f"scheduler.params.warmup_num_steps {warmup!r} is not a positive integer (DeepSpeed refuses "
                       "it)", where, 'set it to "auto" (the Trainer fills the job\'s warmup_steps)')
    _must_match(config, "scheduler.params.warmup_num_steps", job["warmup_steps"], "warmup_steps", where)
    _must_match(config, "scheduler.params.total_num_steps", job["max_steps"], "max_steps", where)
    _must_match(config, "scheduler.params.warmup_max_lr", job["learning_rate"], "learning_rate", where)


def concrete(config, job, world_size):
    """Replace every "auto" of a rendered config with the job's value, for a script that builds no HF Trainer.

    Only the HF Trainer fills "auto" (transformers.integrations.deepspeed); `deepspeed.initialize(config=...)`
    itself compares the strings with numbers and fails (`TypeError: '>' not supported between 'str' and 'int'` in
    deepspeed/runtime/config.py). Values, in the Trainer's own rules: train_batch_size = micro x accumulation x
    world size, train_micro_batch_size_per_gpu, gradient_accumulation_steps, gradient_clipping = max_grad_norm,
    optimizer lr / betas / eps / weight_decay, scheduler warmup_min_lr 0, warmup_max_lr = lr, warmup_num_steps,
    total_num_steps = max_steps. ZeRO-3's "auto" bucket sizes (which the Trainer derives from the model's hidden
    size) are dropped, leaving DeepSpeed's own defaults. Returns a new dict.

    Raises JobError naming any "auto" left that has no value here.
    """
    config = copy.deepcopy(config)
    micro, accum = job["per_device_train_batch_size"], job["gradient_accumulation_steps"]
    values = {
        "train_batch_size": micro * accum * world_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "gradient_clipping": job["max_grad_norm"],
        "optimizer.params.lr": job["learning_rate"],
        "optimizer.params.betas": [job["adam_beta1"], job["adam_beta2"]],
        "optimizer.params.eps": job["adam_epsilon"],
        "optimizer.params.weight_decay": job["weight_decay"],
        "scheduler.params.warmup_min_lr": 0,
        "scheduler.params.warmup_max_lr": job["learning_rate"],
        "scheduler.params.warmup_num_steps": job["warmup_steps"],
        "scheduler.params.total_num_steps": job["max_steps"],
    }
    dropped = ("zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
               "zero_optimization.stage3_param_persistence_threshold")
    left = []

    def walk(node, prefix):
        for key in list(node):
            dotted = f"{prefix}{key}"
            if isinstance(node[key], dict):
                walk(node[key], f"{dotted}.")
            elif node[key] == AUTO:
                if dotted in values:
                    node[key] = values[dotted]
                elif dotted in dropped:
                    del node[key]
                else:
                    left.append(dotted)

    walk(config, "")
    if left:
        raise JobError(f'the DeepSpeed config keeps "auto" in {", ".join(left)}, which only the HF Trainer fills, and '
                       "the script builds no Trainer", f"templates/deepspeed/zero{job['zero_stage']}.json",
                       "write concrete values there, or pass your own --deepspeed <file> in script_args")
    return config


def describe(config, world_size):
    """One line describing a rendered config (what the CLI prints)."""
    zero = config.get("zero_optimization", {})
    precision = next((name for name in ("bf16", "fp16") if _get(config, f"{name}.enabled") is True), "fp32")
    if _get(config, "torch_autocast.enabled") is True:
        precision = f"torch_autocast {_get(config, 'torch_autocast.dtype')}"
    scheduler = config.get("scheduler")
    sched = (f"scheduler {scheduler.get('type')}" if scheduler
             else "no DeepSpeed scheduler (the Trainer's linear schedule)")
    offload = _get(config, "zero_optimization.offload_optimizer.device") or "none"
    torch_adam = " (torch_adam)" if _get(config, "optimizer.params.torch_adam") else ""
    return (f"ds_config: ZeRO-{zero.get('stage', 0)}, world size {world_size}, {precision}, "
            f"optimizer {_get(config, 'optimizer.type') or 'client (the Trainer builds it)'}{torch_adam}, "
            f"offload {offload}, {sched}")


def main(args=None):
    """CLI entry point; returns the exit status (0 ok, 2 user mistake with one line on stderr)."""
    parser = cli.Parser(prog="python -m train.controller.dsconfig", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    ren = sub.add_parser("render", help="write the job's DeepSpeed config atomically")
    ren.add_argument("--job", required=True, help="job JSON written by `python -m train.controller.resolve resolve`")
    ren.add_argument("--world-size", required=True, type=int, help="total ranks (sum of the inventory's slots)")
    ren.add_argument("--templates", required=True, help="dir with zero0.json .. zero3.json")
    ren.add_argument("--out", required=True, help="DeepSpeed config JSON to write")
    opts = parser.parse_args(args)

    def render_to_file():
        config = render(load_job(opts.job), opts.world_size, opts.templates)
        try:
            write_json_atomic(opts.out, config)
        except OSError as exc:
            raise JobError(f"cannot write DeepSpeed config: {exc.strerror or exc}", opts.out,
                           "check that its directory exists and is writable") from None
        print(f"{describe(config, opts.world_size)} -> {opts.out}")

    return cli.run(render_to_file, JobError)


if __name__ == "__main__":
    sys.exit(main())
