#!/usr/bin/env python
"""Run a user's own HF Trainer script (e.g. transformers' run_mlm.py) on every rank, unchanged, with the project's
progress, metrics and CPU fixes around it.

    deepspeed --hostfile H ... train/run_script.py scripts/run_mlm.py --train_file ... --deepspeed ds_config.json ...

Before the script runs (``runpy.run_path(script, run_name="__main__")`` with ``sys.argv = [script, *args]``, exactly
as ``python script args`` would), hooks are installed on transformers' own classes -- the script is not edited:

* ``TrainingArguments.__post_init__``: on a CPU node under DeepSpeed, give accelerate the process-group backend
  first (pretrain.init_cpu_deepspeed_distributed), or the Trainer believes world size is 1;
* ``Trainer.__init__``: tell the Trainer whether the model really uses ``num_items_in_batch``
  (pretrain.fix_loss_kwargs_flag; otherwise BERT's loss is reported world-size times too big), then add the
  ProgressCallback (``<output_dir>/progress.jsonl``, which train.yml prints as the job runs) and a callback that
  writes ``metrics.json`` and ``loss_curve.png`` when training ends.

A script that builds no Trainer still runs; it just writes no progress.jsonl (train.yml then streams its log).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file by the launcher: import train.* from the directory above train/
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from train import pretrain  # noqa: E402  (prints "[rank R/W] host=...", sets thread count and HF_HUB_OFFLINE)
from train.callbacks import LOSS_CURVE, ProgressCallback, plot_loss_curve  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

_START = time.monotonic()


class MetricsCallback(TrainerCallback):
    """At the end of training: every rank reports its host; rank 0 writes metrics.json and the loss curve."""

    def __init__(self, progress: ProgressCallback, script: str):
        self.progress = progress
        self.script = script

    def on_train_end(self, args, state, control, **kwargs):
        ranks = pretrain.gather_objects({"rank": args.process_index, "hostname": pretrain.HOST,
                                         "local_rank": pretrain.LOCAL_RANK})
        if not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        losses = [r["loss"] for r in self.progress.records if r.get("loss") is not None]
        elapsed = self.progress.records[-1]["elapsed_s"] if self.progress.records else None
        steps = state.global_step
        metrics = {
            "script": self.script,
            "run_name": args.run_name,
            "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
            "trainer_world_size": args.world_size,
            "ranks": sorted(ranks, key=lambda r: r["rank"]),
            "steps": steps,
            "max_steps": state.max_steps,
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "train_samples_per_second": round(self.progress.global_batch_size * steps / elapsed, 3)
            if elapsed else None,
            "wall_time_s": round(time.monotonic() - _START, 2),
            "global_batch_size": self.progress.global_batch_size,
            "deepspeed_config": args.deepspeed if isinstance(args.deepspeed, str) else None,
        }
        out.mkdir(parents=True, exist_ok=True)
        plot_loss_curve(self.progress.records, out / LOSS_CURVE,
                        title=f"{Path(self.script).name}, world size {args.world_size}")
        tmp = out / "metrics.json.tmp"
        tmp.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out / "metrics.json")


def install_hooks(script: str) -> None:
    """Wrap TrainingArguments.__post_init__ and Trainer.__init__ as the module docstring says."""
    orig_post_init = transformers.TrainingArguments.__post_init__

    def post_init(self):
        if pretrain.init_cpu_deepspeed_distributed(self.deepspeed, self.ddp_timeout or 1800):
            acc = self.accelerator_config
            if isinstance(acc, str):
                acc = json.loads(Path(acc).read_text()) if Path(acc).is_file() else json.loads(acc)
            if acc is None or isinstance(acc, dict):
                self.accelerator_config = {**(acc or {}), "use_configured_state": True}
        orig_post_init(self)

    orig_trainer_init = transformers.Trainer.__init__

    def trainer_init(self, *args, **kwargs):
        model = kwargs.get("model", args[0] if args else None)
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)
        if isinstance(vocab, int) and vocab > 0:
            try:
                pretrain.fix_loss_kwargs_flag(model, vocab)
            except Exception:  # noqa: BLE001 - not a language model (labels of another shape): leave it to the Trainer
                pass
        orig_trainer_init(self, *args, **kwargs)
        a = self.args
        progress = ProgressCallback(a.output_dir, a.per_device_train_batch_size * a.gradient_accumulation_steps
                                    * a.world_size)
        self.add_callback(progress)
        self.add_callback(MetricsCallback(progress, script))

    transformers.TrainingArguments.__post_init__ = post_init
    transformers.Trainer.__init__ = trainer_init


def main(argv: list[str] | None = None) -> int:
    """``run_script.py SCRIPT [ARGS...]``: run SCRIPT as ``__main__`` with ARGS, hooks installed."""
    argv = sys.argv[1:] if argv is None else argv
    # the launcher puts --local_rank=N right after the entry point: hand it on to the script, where it would have
    # been had the launcher started the script itself
    launcher_args = [a for a in argv[:1] if a.startswith("--local_rank")]
    argv = argv[len(launcher_args):]
    if not argv or not Path(argv[0]).is_file():
        print(f"error: [rank {pretrain.RANK}] usage: run_script.py SCRIPT [ARGS...]; script "
              f"{argv[0] if argv else '(none)'} not found on {pretrain.HOST}", file=sys.stderr)
        return 2
    script = str(Path(argv[0]).resolve())
    install_hooks(script)
    sys.argv = [script, *launcher_args, *argv[1:]]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
