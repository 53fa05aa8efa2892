"""metrics.json: one set of keys for train.rank.pretrain and users' scripts, and its only writer.

Run identity in metrics.json (``run_name``, ``model``, ``model_size``, ``job_file``), first found wins:

* ``run_name``: the environment variable ``DSC_RUN_NAME``; the job file's ``run_name``; ``--run_name`` of the
  TrainingArguments; null.
* job file: the environment variable ``DSC_JOB_FILE`` (path of the run's job.json on the node), else ``job.json``
  in the output directory or its parent (where the playbook keeps ``<run_dir>/job.json`` beside ``<run_dir>/output``).

Importing it changes nothing (torch and transformers are imported inside the functions).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from train.common.stragglers import node_medians
from train.rank.bootstrap import JOB_FILE_ENV, RUN_NAME_ENV, rank_info


METRICS = "metrics.json"


#: the keys of metrics.json, the same for train/rank/pretrain.py and users' scripts (null when unknown; build_metrics)
METRICS_KEYS = (
    "run_name", "model", "model_size", "job_file", "mode", "script", "model_type", "task",
    "world_size", "trainer_world_size", "ranks", "steps", "max_steps", "first_loss", "last_loss", "train_loss",
    "train_samples_per_second", "steady_samples_per_second", "steady_tokens_per_second", "steady_steps", "steady_mfu",
    "mfu_peak", "node_step_s", "train_runtime_s", "wall_time_s", "global_batch_size", "per_device_train_batch_size",
    "gradient_accumulation_steps", "block_length", "dataset_blocks", "vocab_size", "vocab_size_requested",
    "n_parameters", "model_uses_num_items_in_batch", "eval", "eval_loss", "perplexity", "deepspeed_config",
    "source_fingerprint", "versions", "attempts",
)


def read_attempts(job_file: str | None = None) -> list[dict]:
    """The faults that restarted the run so far, oldest first: ``attempts.json`` beside the run's job.json
    (``$DSC_JOB_FILE`` by default; written by train.yml's restart, train/controller/restart.py's records:
    attempt, fault {kind, node, rank, step, detail}, noticed_at (epoch s), detect_s, checkpoint_step, steps_lost,
    nodes, world_size, next_nodes, next_world_size). [] for a run that was not restarted or an unreadable file."""
    job_file = job_file or os.environ.get(JOB_FILE_ENV)
    if not job_file:
        return []
    try:
        found = json.loads((Path(job_file).parent / "attempts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [dict(r) for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def read_job_file(output_dir: str | Path | None) -> tuple[dict | None, str | None]:
    """The run's job (train/common/job.py's dict) and its path: ``$DSC_JOB_FILE``, else job.json in ``output_dir`` or its
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
            defaults), None for train/rank/pretrain.py.
    """
    job, path = read_job_file(output_dir)
    job = job or {}
    name = os.environ.get(RUN_NAME_ENV) or job.get("run_name") or run_name or None
    preset = script is None
    return {"run_name": name, "model": job.get("model") if preset else None,
            "model_size": job.get("model_size") if preset else None, "job_file": path,
            "mode": "preset" if preset else "script"}


def finite_number(value):
    """``value`` as a JSON number: an int or float as it is, anything float() takes (a 0-dim tensor, a numeric
    string) as a float; None for None, NaN, +-inf and what is not a number. A bool is returned unchanged."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def steady_rate(records: list[dict], global_batch_size: int, tokens_per_sample: int | None = None) -> dict:
    """The rate a run sustained: from the first logged step at or after a quarter of max_steps (the window
    train/rank/perf.py's GPU benchmark measures) to the last logged step, leaving out start-up, DeepSpeed's
    initialisation, compilation and recompilation, and the first steps' warm-up; when no record is that late (a
    short run), from the second record (the first logging interval left out).

    Args:
        records: progress.jsonl's step records of one attempt, in order ({"step", "elapsed_s", ...}; events and
            records without both keys are skipped).
        global_batch_size: samples per optimizer step over all ranks.
        tokens_per_sample: tokens in one sample (block length); None leaves tokens/s out.

    Returns:
        {"steady_samples_per_second", "steady_tokens_per_second", "steady_steps": [first, last]} -- samples (tokens)
        per second over all ranks between the two records, rounded; every value None when there are not two records
        with distinct steps and times to measure between (a run shorter than a few logging intervals).
    """
    rows = [r for r in records if isinstance(r.get("step"), int) and isinstance(r.get("elapsed_s"), (int, float))]
    none = {"steady_samples_per_second": None, "steady_tokens_per_second": None, "steady_steps": None}
    if len(rows) < 2:
        return none
    max_steps = next((r["max_steps"] for r in reversed(rows) if isinstance(r.get("max_steps"), int)), 0)
    late = [r for r in rows[1:-1] if r["step"] >= max_steps // 4]
    first, last = (late[0] if late else rows[min(1, len(rows) - 2)]), rows[-1]
    steps, seconds = last["step"] - first["step"], last["elapsed_s"] - first["elapsed_s"]
    if steps <= 0 or seconds <= 0:
        return none
    sps = global_batch_size * steps / seconds
    return {"steady_samples_per_second": round(sps, 3),
            "steady_tokens_per_second": round(sps * tokens_per_sample, 1) if tokens_per_sample else None,
            "steady_steps": [first["step"], last["step"]]}


def count_parameters(model) -> int:
    """Number of parameters of ``model`` (ZeRO-3 partitioned ones counted whole, via ``ds_numel``)."""
    return int(sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()))


def build_metrics(*, args, state, model, progress, ranks: list[dict], identity: dict, eval_metrics: dict | None,
                  extra: dict | None = None) -> dict:
    """The metrics.json dict: one set of keys for train/rank/pretrain.py and users' scripts (null when unknown).

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
    steady = steady_rate(records, progress.global_batch_size, progress.tokens_per_sample)
    eval_loss = finite_number((eval_metrics or {}).get("eval_loss"))
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
        "train_loss": finite_number(summary.get("train_loss")),
        "train_samples_per_second": finite_number(summary.get("train_samples_per_second"))
        or (round(progress.global_batch_size * (steps - progress.start_step) / elapsed, 3) if elapsed else None),
        **steady,
        "steady_mfu": None,
        "mfu_peak": None,
        # each node's median step time (its ranks' own compute per step: train/common/stragglers.py); null on one rank
        "node_step_s": node_medians(records) or None,
        "train_runtime_s": finite_number(summary.get("train_runtime")),
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
        "eval": {k: finite_number(v) for k, v in eval_metrics.items()} if eval_metrics else None,
        "eval_loss": eval_loss,
        "perplexity": finite_number(math.exp(eval_loss)) if eval_loss is not None and eval_loss < 700 else None,
        "deepspeed_config": args.deepspeed if isinstance(args.deepspeed, str) else None,
        "source_fingerprint": None,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "attempts": getattr(progress, "attempts", None) or [],
    }
    for key, value in (extra or {}).items():
        if key not in metrics:
            raise KeyError(f"metrics.json has no key {key!r}")
        metrics[key] = value
    assert tuple(metrics) == METRICS_KEYS, "build_metrics and METRICS_KEYS disagree"
    if torch.cuda.is_available() and metrics["steady_tokens_per_second"] and metrics["world_size"]:
        from train.common import flops

        layers, hidden = flops.model_shape(config.to_dict() if config is not None else {})
        gpu = torch.cuda.get_device_name()  # the driver's name, as NVML gives it
        mfu = flops.mfu(metrics["steady_tokens_per_second"] / metrics["world_size"], metrics["n_parameters"],
                        layers, hidden, metrics["block_length"], gpu)
        metrics["steady_mfu"] = round(mfu, 4) if mfu is not None else None
        metrics["mfu_peak"] = flops.peak_of(gpu)  # {gpu, flops, source}: the peak the MFU is of
    try:
        import deepspeed

        metrics["versions"]["deepspeed"] = deepspeed.__version__
    except ImportError:
        pass
    return metrics


def write_metrics(output_dir: str | Path, metrics: dict) -> Path:
    """Write ``output_dir/metrics.json`` atomically (train.common.jsonio.write_json_atomic); returns its path.
    Raises OSError."""
    from train.common.jsonio import write_json_atomic

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / METRICS, metrics)
    return out / METRICS
