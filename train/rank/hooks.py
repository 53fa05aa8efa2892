"""The project's additions to a built Trainer (:func:`attach`) and, for a user's script the project does not edit,
the wrappers that apply them and the library fixes where the script builds its TrainingArguments and Trainer
(:func:`install_hooks`; train.rank.run_script calls it just before running the script).
"""

from __future__ import annotations

import os

from train.rank.callbacks import STOP_FILE_ENV, MetricsCallback, ProgressCallback, StopRequestCallback
from train.rank.patches import (clip_without_host_sync, configured_state, fix_loss_kwargs_flag,
                                init_cpu_deepspeed_distributed, release_after_deepspeed_init)


def attach(trainer, *, script: str | None = None, extra: dict | None = None, rank_extra=None,
           tokens_per_sample: int | None = None):
    """Add the project's callbacks to a built Trainer: progress.jsonl, metrics.json and loss_curve.png, and with
    ``$DSC_STOP_FILE`` (-e launcher=slurm) the save-and-stop before the job's time limit (StopRequestCallback).

    Args:
        trainer: a transformers.Trainer (after __init__: its args know the world size).
        script: the user's script (script mode), None for train/rank/pretrain.py.
        extra: metrics.json values only the caller knows (see :func:`build_metrics`).
        rank_extra: optional callable () -> dict of this rank's additions to its ``ranks`` entry.
        tokens_per_sample: tokens in one sample (the block length) for tokens/s; None when unknown (a script).

    Returns:
        (ProgressCallback, MetricsCallback), both already added to the trainer.
    """
    a = trainer.args
    progress = ProgressCallback(a.output_dir, a.per_device_train_batch_size * a.gradient_accumulation_steps
                                * a.world_size, tokens_per_sample)
    metrics = MetricsCallback(progress, script=script, extra=extra, rank_extra=rank_extra)
    metrics.trainer = trainer
    trainer.add_callback(progress)
    trainer.add_callback(metrics)
    if os.environ.get(STOP_FILE_ENV):
        # -e launcher=slurm: save and stop when Slurm signals the job before its time limit (slurm-node.sh)
        every = int(a.logging_steps) if (a.logging_steps or 0) >= 1 else 10
        trainer.add_callback(StopRequestCallback(os.environ[STOP_FILE_ENV], progress, every))
    clip_without_host_sync(trainer)
    return progress, metrics


_HOOKED = "_dsc_runtime_hooks"


def is_under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it (both made absolute, symlinks not resolved)."""
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return os.path.commonpath([path, directory]) == directory


def install_hooks(script: str) -> None:
    """Wrap ``TrainingArguments.__post_init__`` and ``Trainer.__init__`` for a user's script (idempotent).

    TrainingArguments: on a CPU node under DeepSpeed, :func:`init_cpu_deepspeed_distributed` first (and
    :func:`configured_state`). Trainer: :func:`fix_loss_kwargs_flag` on the model when it has a vocab_size (a
    model that isn't a language model is left to the Trainer), then :func:`attach` with ``script``. DeepSpeed's
    init_distributed, on a CPU node: :func:`release_after_deepspeed_init` (a script that builds no Trainer).
    """
    import transformers

    if getattr(transformers.Trainer, _HOOKED, False):
        return
    release_after_deepspeed_init()
    orig_post_init = transformers.TrainingArguments.__post_init__

    def post_init(self):
        if init_cpu_deepspeed_distributed(self.deepspeed, self.ddp_timeout or 1800):
            self.accelerator_config = configured_state(self.accelerator_config)
        orig_post_init(self)
        job_file = os.environ.get("DSC_JOB_FILE")
        if job_file and self.output_dir and is_under(self.output_dir, os.path.dirname(job_file)):
            # the output_dir train.yml gave is on each node's own disk: every node saves (and rotates) its part of
            # each checkpoint, which train/node/checkpoints.py gathers on the head (a shared output_dir is left alone)
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
