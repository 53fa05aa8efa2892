"""Tests for templates/deepspeed/*.json and train/controller/dsconfig.py, checked against the real transformers + DeepSpeed.

The HF Trainer's own auto-filling (HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize) is run
on TrainingArguments parsed from `train.controller.resolve argv`, then DeepSpeed's own DeepSpeedConfig and lr_schedules consume
the result, so a template or rendering mistake that would stop a real run fails here.
"""

import copy
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

# the torch tier (pytest.ini): the node venv's torch stack; skipped where it is not installed (make unit-fast)
pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
from deepspeed.runtime import config as ds_config_module
from deepspeed.runtime import lr_schedules
from deepspeed.runtime.config import DeepSpeedConfig
from transformers import CONFIG_MAPPING, HfArgumentParser, TrainingArguments, get_scheduler
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

from train.controller import dsconfig as D
from train.common import job as J
from train.common.keys import KEYS
from train.common.jsonio import write_json_atomic
from train.controller import resolve as R

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates" / "deepspeed"
# The values HfTrainerDeepSpeedConfig fills when they say "auto" (see the seed table and its source).
HF_AUTO_KEYS = [
    "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "gradient_clipping",
    "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps", "fp16.enabled", "bf16.enabled",
]
# pretrain's ModelArguments and DataArguments flags: the job keys declared to go there, and what the plan adds
MODEL_ARG_FLAGS = {"--config_overrides", "--dataset_dir",
                   *(f"--{k.rank_flag()}" for k in KEYS if k.rank_flag() and {"model", "rank_data"} & set(k.goes))}


def make_job(model="bert", **overrides):
    """A tiny job; DeepSpeed's own optimizer, precision blocks and ZeRO-2 unless given (the GPU defaults,
    client optimizer + torch_autocast + ZeRO-0, have their own tests below)."""
    return R.resolve(model, {"model_size": "tiny", "accelerator": "cpu", "run_name": "t", "zero_stage": 2,
                             "optimizer": "deepspeed", "autocast": False, **overrides})


def training_args(job, tmp_path):
    """TrainingArguments exactly as train/rank/pretrain.py will get them from `train.controller.resolve argv` (minus --deepspeed)."""
    args = R.argv(job, "/nonexistent/dataset", str(tmp_path / "out"), "unused.json")
    i = args.index("--deepspeed")
    args = args[:i] + args[i + 2:]
    if job["accelerator"] == "cuda":
        args += ["--use_cpu", "true"]  # this machine has no GPU; the filled values don't depend on the device
    parsed, rest = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(args,
                                                                                   return_remaining_strings=True)
    assert set(rest[::2]) <= MODEL_ARG_FLAGS, rest  # every other flag is a real TrainingArguments field
    return parsed


class WorldSize:
    """TrainingArguments with world_size replaced (it is a property computed from the distributed state)."""

    def __init__(self, args, world_size):
        self._args, self.world_size = args, world_size

    def __getattr__(self, name):
        return getattr(self._args, name)


def hf_fill(job, config, args, world_size=1):
    """Fill the "auto"s the way the HF Trainer does; raises ValueError on a Trainer/DeepSpeed mismatch."""
    hf = HfTrainerDeepSpeedConfig(copy.deepcopy(config))
    try:
        hf.trainer_config_process(WorldSize(args, world_size))
        model_config = CONFIG_MAPPING[job["model_type"]](**{**job["model_config"], "vocab_size": job["vocab_size"]})
        hf.trainer_config_finalize(args, types.SimpleNamespace(config=model_config), job["max_steps"])
        return hf.config
    finally:
        unset_hf_deepspeed_config()


def ds_scheduler(config, optimizer):
    """What DeepSpeedEngine._scheduler_from_config builds."""
    return getattr(lr_schedules, config["scheduler"]["type"])(optimizer, **config["scheduler"]["params"])


def dummy_optimizer(lr):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(4))], lr=lr)


def dotted(config, key):
    return D._get(config, key)


# ------------------------------------------------------------------------------------------------ templates


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_template_is_a_short_auto_preset(stage):
    config = json.loads((TEMPLATES / f"zero{stage}.json").read_text())
    assert config["zero_optimization"]["stage"] == stage
    for key in HF_AUTO_KEYS:
        assert dotted(config, key) == "auto", key
    assert config["optimizer"]["type"] == "AdamW" and config["scheduler"]["type"] == "WarmupDecayLR"
    assert config["scheduler"]["params"]["warmup_type"] == "linear"  # the Trainer's "linear" warm-up shape
    assert not set(D.DEPRECATED_ZERO_KEYS) & set(config["zero_optimization"])
    assert "offload_optimizer" not in config["zero_optimization"]
    if stage == 3:
        for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"):
            assert config["zero_optimization"][key] == "auto"


def test_zero2_keeps_the_blogs_zero_settings():
    zero = json.loads((TEMPLATES / "zero2.json").read_text())["zero_optimization"]
    assert zero == {"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 60000000, "overlap_comm": True,
                    "reduce_scatter": True, "reduce_bucket_size": 60000000, "contiguous_gradients": True}


# ------------------------------------------------------------------------------------------------ HF + DeepSpeed


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("model,overrides", [
    ("bert", {}), ("gpt2", {"warmup_steps": 0}), ("roberta", {"gradient_accumulation_steps": 2}),
    ("bert", {"accelerator": "cuda"}), ("gpt2", {"accelerator": "cuda", "precision": "fp16"}),
])
def test_rendered_config_passes_hf_filling_and_deepspeed_parsing(tmp_path, stage, model, overrides):
    job = make_job(model, zero_stage=stage, **overrides)
    config = D.render(job, 1, TEMPLATES)
    filled = hf_fill(job, config, training_args(job, tmp_path))
    assert "auto" not in json.dumps(filled)
    parsed = DeepSpeedConfig(filled)  # no process group: DeepSpeedConfig falls back to world size 1
    assert parsed.world_size == 1 and parsed.zero_optimization_stage == stage
    micro, accum = job["per_device_train_batch_size"], job["gradient_accumulation_steps"]
    assert (parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (micro, accum)
    assert parsed.train_batch_size == micro * accum
    assert parsed.gradient_clipping == job["max_grad_norm"]
    assert parsed.optimizer_params["lr"] == job["learning_rate"]
    assert parsed.optimizer_params["betas"] == [job["adam_beta1"], job["adam_beta2"]]
    assert parsed.bfloat16_config.enabled == (job["precision"] == "bf16")
    assert parsed.float16_config.enabled == (job["precision"] == "fp16")
    assert bool(parsed.optimizer_params.get("torch_adam")) == (job["accelerator"] == "cpu")
    if job["warmup_steps"]:
        assert parsed.scheduler_name == "WarmupDecayLR"
        assert parsed.scheduler_params["warmup_num_steps"] == job["warmup_steps"]
        assert parsed.scheduler_params["total_num_steps"] == job["max_steps"]
        ds_scheduler(filled, dummy_optimizer(job["learning_rate"]))
    else:
        assert parsed.scheduler_name is None


def test_rendered_config_parses_for_two_ranks(tmp_path, monkeypatch):
    job = make_job("bert", gradient_accumulation_steps=2)
    config = D.render(job, 2, TEMPLATES)
    args = training_args(job, tmp_path)
    filled = hf_fill(job, config, args, world_size=2)
    assert filled["train_batch_size"] == 8 * 2 * 2
    # DeepSpeedConfig takes the world size from deepspeed.comm; stand in for a 2-rank process group.
    monkeypatch.setattr(ds_config_module, "dist", types.SimpleNamespace(get_rank=lambda: 0,
                                                                        get_world_size=lambda: 2))
    assert DeepSpeedConfig(filled).world_size == 2
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        DeepSpeedConfig(hf_fill(job, config, args, world_size=1))  # filled for 1 rank, parsed for 2: refused


# ------------------------------------------------------------------------------------------------ warm-up trap


def test_warmup_zero_rendered_config_gives_a_working_schedule_without_warmup(tmp_path):
    job = make_job("bert", warmup_steps=0)
    config = D.render(job, 1, TEMPLATES)
    assert "scheduler" not in config and config["optimizer"]["type"] == "AdamW"
    args = training_args(job, tmp_path)
    filled = hf_fill(job, config, args)
    assert DeepSpeedConfig(filled).scheduler_name is None
    # With no DeepSpeed scheduler the Trainer builds its own around DeepSpeed's optimizer
    # (transformers.integrations.deepspeed.deepspeed_optim_sched -> trainer.create_scheduler):
    optimizer = dummy_optimizer(job["learning_rate"])
    total = job["max_steps"]
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(total),
                              num_training_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(job["learning_rate"])  # full rate from the first step: no warm-up
    assert lrs[total // 2] == pytest.approx(job["learning_rate"] / 2)
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


@pytest.mark.parametrize("warmup", [1, 2, 20])
def test_positive_warmup_builds_the_deepspeed_scheduler(tmp_path, warmup):
    job = make_job("gpt2", warmup_steps=warmup)
    filled = hf_fill(job, D.render(job, 1, TEMPLATES), training_args(job, tmp_path))
    optimizer = dummy_optimizer(job["learning_rate"])
    scheduler = ds_scheduler(filled, optimizer)
    used = []  # the rate each optimizer step runs with (the engine steps the scheduler after the optimizer)
    for _ in range(job["max_steps"]):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    peak = used.index(max(used))
    assert used[peak] == pytest.approx(job["learning_rate"])
    assert peak == max(warmup, 2) + 1  # linear warm-up; DeepSpeed stretches one below 2 steps to 2
    assert all(a >= b for a, b in zip(used[peak:], used[peak + 1:], strict=False))  # then linear decay ...
    assert used[-1] <= 2 * job["learning_rate"] / (job["max_steps"] - max(warmup, 2)) + 1e-12  # ... to ~0


def test_raw_template_with_auto_warmup_zero_would_fail(tmp_path):
    """The trap: "auto" warm-up filled from args.get_warmup_steps() (0 without a warm-up) kills WarmupDecayLR."""
    job = make_job("bert", warmup_steps=0)
    args = training_args(job, tmp_path)
    raw = json.loads((TEMPLATES / "zero2.json").read_text())
    filled = hf_fill(job, raw, args)
    # transformers 5.24 fills max(1, get_warmup_steps()); older releases fill get_warmup_steps() itself:
    assert args.get_warmup_steps(job["max_steps"]) == 0
    filled["scheduler"]["params"]["warmup_num_steps"] = args.get_warmup_steps(job["max_steps"])
    with pytest.raises(ValueError, match="warmup_num_steps must be a positive integer"):
        ds_scheduler(filled, dummy_optimizer(job["learning_rate"]))
    # and even the max(1, ...) guard gives 2 warm-up steps, not none: lr 0 at first, below the job's rate
    guarded = hf_fill(job, raw, args)
    optimizer = dummy_optimizer(job["learning_rate"])
    scheduler = ds_scheduler(guarded, optimizer)
    assert scheduler.warmup_num_steps == 2 and optimizer.param_groups[0]["lr"] == 0.0


def test_concrete_bad_warmup_in_a_template_is_refused(tmp_path):
    for value in (0, -3, 1.5):
        raw = json.loads((TEMPLATES / "zero2.json").read_text())
        raw["scheduler"]["params"]["warmup_num_steps"] = value
        (tmp_path / "zero2.json").write_text(json.dumps(raw))
        with pytest.raises(J.JobError, match="warmup_num_steps .* is not a positive integer"):
            D.render(make_job("bert"), 1, tmp_path)
    job = make_job("bert", warmup_steps=20)
    raw["scheduler"]["params"]["warmup_num_steps"] = 5  # positive but not the job's 20: the Trainer would refuse
    (tmp_path / "zero2.json").write_text(json.dumps(raw))
    with pytest.raises(J.JobError, match="warmup_num_steps is 5 but the job's warmup_steps is 20"):
        D.render(job, 1, tmp_path)


# ------------------------------------------------------------------------------------------------ batch, precision


def test_batch_arithmetic_is_checked():
    job = make_job("bert", train_batch_size=32)  # micro 8, accumulation 1
    with pytest.raises(J.JobError) as err:
        D.render(job, 2, TEMPLATES)
    message = str(err.value)
    assert "train_batch_size 32 != per_device_train_batch_size 8 x gradient_accumulation_steps 1 x world size 2 " \
           "= 16" in message
    assert "gradient_accumulation_steps=2" in message
    assert D.render(job, 4, TEMPLATES)["train_batch_size"] == 32
    with pytest.raises(J.JobError, match="set train_batch_size to 24"):
        D.render(job, 3, TEMPLATES)


def test_concrete_template_batch_values_must_agree(tmp_path):
    raw = json.loads((TEMPLATES / "zero1.json").read_text())
    (tmp_path / "zero1.json").write_text(json.dumps({**raw, "train_batch_size": 64}))
    with pytest.raises(J.JobError, match="train_batch_size 64 != .* = 16"):
        D.render(make_job("bert", zero_stage=1), 2, tmp_path)
    (tmp_path / "zero1.json").write_text(json.dumps({**raw, "train_micro_batch_size_per_gpu": 4}))
    with pytest.raises(J.JobError, match="train_micro_batch_size_per_gpu is 4 but the job's"):
        D.render(make_job("bert", zero_stage=1), 2, tmp_path)
    (tmp_path / "zero1.json").write_text(json.dumps({**raw, "train_batch_size": 16}))
    assert D.render(make_job("bert", zero_stage=1), 2, tmp_path)["train_batch_size"] == 16


@pytest.mark.parametrize("accelerator,precision,fp16,bf16", [
    ("cpu", "auto", False, False), ("cpu", "fp32", False, False), ("cuda", "auto", False, True),
    ("cuda", "fp16", True, False), ("cuda", "fp32", False, False),
])
def test_precision_blocks_follow_the_job(accelerator, precision, fp16, bf16):
    config = D.render(make_job("bert", accelerator=accelerator, precision=precision), 1, TEMPLATES)
    assert (config["fp16"]["enabled"], config["bf16"]["enabled"]) == (fp16, bf16)


def test_bf16_on_cpu_is_refused_even_in_a_hand_made_job():
    job = {**make_job("bert"), "precision": "bf16"}
    with pytest.raises(J.JobError, match="precision bf16 needs accelerator cuda"):
        D.render(job, 1, TEMPLATES)


def test_offload_is_a_job_option_not_a_template_edit(tmp_path):
    config = D.render(make_job("bert", offload_optimizer="cpu"), 1, TEMPLATES)
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert "torch_adam" not in config["optimizer"]["params"]  # DeepSpeedCPUAdam does the offloaded step
    filled = hf_fill(make_job("bert", offload_optimizer="cpu"), config,
                     training_args(make_job("bert", offload_optimizer="cpu"), tmp_path))
    assert DeepSpeedConfig(filled).zero_config.offload_optimizer.device == "cpu"
    cuda = D.render(make_job("bert", accelerator="cuda", offload_optimizer="cpu", zero_stage=3), 1, TEMPLATES)
    assert cuda["zero_optimization"]["offload_optimizer"]["pin_memory"] is True
    raw = json.loads((TEMPLATES / "zero2.json").read_text())
    raw["zero_optimization"]["cpu_offload"] = True  # the blog's (deprecated) key
    (tmp_path / "zero2.json").write_text(json.dumps(raw))
    with pytest.raises(J.JobError, match="cpu_offload is deprecated"):
        D.render(make_job("bert"), 1, tmp_path)


def test_a_partial_offload_renders_deepspeeds_ratio_with_small_sub_groups(tmp_path):
    job = make_job("bert", offload_optimizer="cpu", zero_stage=3, offload_ratio=0.5)
    config = D.render(job, 1, TEMPLATES)
    zero = config["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": False, "ratio": 0.5}
    assert zero["sub_group_size"] == D.PARTIAL_OFFLOAD_SUB_GROUP < json.loads(
        (TEMPLATES / "zero3.json").read_text())["zero_optimization"]["sub_group_size"]
    filled = hf_fill(job, config, training_args(job, tmp_path))
    parsed = DeepSpeedConfig(filled).zero_config
    assert (parsed.offload_optimizer.ratio, parsed.sub_group_size) == (0.5, 100_000_000)
    # the whole optimizer offloaded: no ratio key, the template's sub-groups
    whole = D.render(make_job("bert", offload_optimizer="cpu", zero_stage=3), 1, TEMPLATES)["zero_optimization"]
    assert "ratio" not in whole["offload_optimizer"] and whole["sub_group_size"] == 1_000_000_000


def test_bad_world_size_and_missing_template():
    for bad in (0, -1, True, "2"):
        with pytest.raises(J.JobError, match="world size must be a positive integer"):
            D.render(make_job("bert"), bad, TEMPLATES)
    with pytest.raises(J.JobError, match="cannot read DeepSpeed template"):
        D.render(make_job("bert"), 1, TEMPLATES / "nope")


# ------------------------------------------------------------------------------------------------ CLI


def run_render(tmp_path, job, world_size, templates=TEMPLATES):
    job_path, out = tmp_path / "job.json", tmp_path / "ds.json"
    write_json_atomic(job_path, job)
    result = subprocess.run([sys.executable, "-m", "train.controller.dsconfig", "render", "--job", str(job_path),
                             "--world-size", str(world_size), "--templates", str(templates), "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    return result, out


def test_cli_render_writes_the_config(tmp_path):
    result, out = run_render(tmp_path, make_job("bert"), 2)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ds_config: ZeRO-2, world size 2, fp32") and str(out) in result.stdout
    assert json.loads(out.read_text()) == D.render(make_job("bert"), 2, TEMPLATES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.json", "job.json"]


@pytest.mark.parametrize("job,world_size,message", [
    (make_job("bert", train_batch_size=32), 2, "train_batch_size 32 != "),
    (make_job("bert"), 0, "world size must be a positive integer"),
    (make_job("bert"), "two", "invalid int value"),
])
def test_cli_render_bad_input_exits_2_with_one_line(tmp_path, job, world_size, message):
    result, out = run_render(tmp_path, job, world_size)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr and not out.exists()


# --------------------------------------------------------- the batch and precision cases of docs/multi-node.md's table


def test_case8_train_batch_size_32_on_two_nodes_of_8_slots_needs_64():
    job = make_job("bert", accelerator="cuda", per_device_train_batch_size=4, gradient_accumulation_steps=1,
                   train_batch_size=32)
    with pytest.raises(J.JobError) as err:
        D.render(job, 2 * 8, TEMPLATES)
    message = str(err.value)
    assert "train_batch_size 32 != per_device_train_batch_size 4 x gradient_accumulation_steps 1 x world size 16 " \
           "= 64" in message
    assert 'set train_batch_size to 64 or leave it unset (null / "auto")' in message


def _template_with(tmp_path, **blocks):
    raw = json.loads((TEMPLATES / "zero2.json").read_text())
    raw.update(blocks)
    (tmp_path / "zero2.json").write_text(json.dumps(raw))
    return tmp_path


def test_case9_fp16_and_bf16_both_enabled_is_refused(tmp_path):
    templates = _template_with(tmp_path, fp16={"enabled": True}, bf16={"enabled": True})
    with pytest.raises(J.JobError, match="fp16.enabled and bf16.enabled are both true") as err:
        D.render(make_job("bert", accelerator="cuda", precision="bf16"), 1, templates)
    assert "-e precision=fp16|bf16" in str(err.value)


def test_case9_fp16_in_the_config_but_not_on_the_trainer_side_is_refused(tmp_path):
    templates = _template_with(tmp_path, fp16={"enabled": True, "loss_scale": 0})
    with pytest.raises(J.JobError, match="fp16.enabled is true but the job's precision is fp32 .*without --fp16"):
        D.render(make_job("bert", accelerator="cuda", precision="fp32"), 1, templates)
    assert D.render(make_job("bert", accelerator="cuda", precision="fp16"), 1, templates)["fp16"]["enabled"] is True


def test_fp16_only_keys_in_a_bf16_block_are_refused(tmp_path):
    templates = _template_with(tmp_path, bf16={"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16})
    with pytest.raises(J.JobError, match="bf16 block has fp16-only keys initial_scale_power, loss_scale"):
        D.render(make_job("bert", accelerator="cuda", precision="bf16"), 1, templates)


# -------------------------------------------------------------------------------------------------------- GPU defaults


def test_gpu_defaults_render_client_optimizer_and_torch_autocast(tmp_path):
    """bert base on cuda: no optimizer/scheduler block (the Trainer's fused AdamW and linear schedule), bf16 through
    torch_autocast with the bf16/fp16 blocks off, ZeRO-0, the global batch 256; HF fills and DeepSpeed parses it."""
    job = R.resolve("bert", {"accelerator": "cuda", "run_name": "t"})
    config = D.render(job, 1, TEMPLATES)
    assert "optimizer" not in config and "scheduler" not in config
    assert config["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert config["bf16"]["enabled"] is False and config["fp16"]["enabled"] is False
    assert config["zero_optimization"]["stage"] == 0 and config["train_batch_size"] == 256
    assert "torch_autocast bfloat16" in D.describe(config, 1) and "client" in D.describe(config, 1)
    args = training_args(job, tmp_path)
    assert (args.optim, args.bf16, args.torch_compile) == ("adamw_torch_fused", False, True)
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf = HfTrainerDeepSpeedConfig(copy.deepcopy(config))
    hf.trainer_config_process(WorldSize(args, 1))
    assert hf.config["train_micro_batch_size_per_gpu"] == 128 and hf.config["gradient_accumulation_steps"] == 2
    assert hf.config["bf16"]["enabled"] is False


def test_a_float8_job_keeps_its_converted_layers_gradients_in_bf16(monkeypatch):
    """DeepSpeed reduces in bf16 the gradients of the module classes in torch_autocast's lower_precision_safe_modules
    and matches classes exactly: a float8 job's list is DeepSpeed's default plus torchao's Float8Linear, and DeepSpeed
    resolves every name of it."""
    from deepspeed.runtime.torch_autocast import get_default_autocast_lower_precision_modules

    plain = D.render(R.resolve("bert", {"accelerator": "cuda", "run_name": "t"}), 1, TEMPLATES)
    assert "lower_precision_safe_modules" not in plain["torch_autocast"]
    config = D.render(R.resolve("bert", {"accelerator": "cuda", "run_name": "t", "float8": "tensorwise"}), 1, TEMPLATES)
    names = config["torch_autocast"]["lower_precision_safe_modules"]
    assert names[:-1] == get_default_autocast_lower_precision_modules()
    assert names[-1] == "torchao.float8.float8_linear.Float8Linear"
    pytest.importorskip("torchao")
    from deepspeed.runtime import torch_autocast
    from transformers import AutoConfig, AutoModelForMaskedLM

    from train.rank import kernels
    from .conftest import TINY_BERT

    for attr in ("TORCH_AUTOCAST_INITIALIZED", "TORCH_AUTOCAST_DTYPE"):  # init_autocast_params sets them
        monkeypatch.setattr(torch_autocast, attr, getattr(torch_autocast, attr))
    tagged = {}
    for given in (None, ds_config_module.get_lower_precision_safe_modules({"torch_autocast": config["torch_autocast"]})):
        model = AutoModelForMaskedLM.from_config(AutoConfig.for_model("bert", vocab_size=128, **TINY_BERT))
        kernels.use_float8(model, "tensorwise")
        torch_autocast.init_autocast_params(types.SimpleNamespace(module=model, zero_quantized_weights=lambda: False),
                                            torch.bfloat16, given)
        tagged[given is None] = {n for n, p in model.named_parameters() if torch_autocast.has_comm_dtype(p)}
    layer = "bert.encoder.layer.0.intermediate.dense.weight"
    assert layer not in tagged[True] and layer in tagged[False]  # DeepSpeed's default misses the converted layers
    assert tagged[True] < tagged[False]


def test_blog_recipe_renders_deepspeeds_blocks():
    job = R.resolve("bert", {"accelerator": "cuda", "run_name": "t", "precision": "fp16", "offload_optimizer": "cpu",
                             "per_device_train_batch_size": 16, "gradient_accumulation_steps": 1,
                             "train_batch_size": None})
    config = D.render(job, 1, TEMPLATES)
    assert config["optimizer"]["type"] == "AdamW" and config["fp16"]["enabled"] is True
    assert config["zero_optimization"]["stage"] == 2 and config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "torch_autocast" not in config


def test_deepspeed_throughput_timer_is_off_unless_the_template_sets_it(tmp_path):
    """Its synchronize() at every forward and step left the GPU idle (docs/benchmarks/gpu-2026-12-01c.md): the
    rendered config turns it off (DeepSpeed reads it so); a template's own "timers" block is kept."""
    from deepspeed.utils.config import get_timers_config

    job = R.resolve("bert", {"accelerator": "cuda", "run_name": "t"})
    config = D.render(job, 1, TEMPLATES)
    assert config["timers"] == {"throughput": {"enabled": False}}
    assert get_timers_config(config).enabled is False
    assert get_timers_config(D.render(make_job("bert"), 2, TEMPLATES)).enabled is False  # CPU jobs too
    mine = {"throughput": {"enabled": True, "synchronized": False}}
    config = D.render(make_job("bert"), 1, _template_with(tmp_path, timers=mine))
    assert config["timers"] == mine and get_timers_config(config).synchronized is False
