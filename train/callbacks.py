"""The Trainer callbacks of the rank runtime (train/runtime.py attaches them, for train/pretrain.py and users'
scripts alike). What rank 0 writes while and after it trains (see the contract):

* ``progress.jsonl`` -- one JSON object per logging step, flushed as it is written:
  {"step", "max_steps", "loss", "learning_rate", "samples_per_second", "elapsed_s", "eta_s", "epoch"}
  (samples_per_second = global batch x steps / elapsed; eta_s = steps left x mean step time, the first step --
  which includes DeepSpeed's and the dataloader's warm-up -- left out of the mean once there are others)
  The last step is always logged, whether or not it is a multiple of logging_steps.
* ``loss_curve.png`` -- loss against step, from those records.
* ``metrics.json`` -- train/runtime.py's build_metrics, written by MetricsCallback when training ends (every
  rank takes part: it gathers each rank's host) and again after each later evaluation, with its eval_* metrics.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback

PROGRESS = "progress.jsonl"
LOSS_CURVE = "loss_curve.png"


class ProgressCallback(TrainerCallback):
    """Writes progress.jsonl on the world's process zero; keeps the records for metrics and the loss curve.

    Args:
        output_dir: the Trainer's output directory (progress.jsonl goes there).
        global_batch_size: samples per optimizer step over all ranks (micro x accumulation x world size), for
            samples_per_second.

    ``records`` holds the progress records (rank 0), ``summary`` the numbers of the Trainer's other logs (the
    final train_loss / train_runtime / train_samples_per_second, eval_* of evaluations).
    """

    def __init__(self, output_dir: str | Path, global_batch_size: int):
        self.path = Path(output_dir) / PROGRESS
        self.global_batch_size = global_batch_size
        self.records: list[dict] = []
        self.summary: dict = {}
        self._file = None
        self._t0: float | None = None
        self._t_first_step: float | None = None

    # -- timing
    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = time.monotonic()
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def on_step_end(self, args, state, control, **kwargs):
        if self._t_first_step is None:
            self._t_first_step = time.monotonic()
        if state.max_steps and state.global_step >= state.max_steps and args.logging_strategy != "no":
            control.should_log = True  # log the last step too, so the last record (and last_loss) is the end

    def _eta(self, step: int, max_steps: int, now: float) -> float:
        left = max(0, max_steps - step)
        if step > 1 and self._t_first_step is not None:
            mean = (now - self._t_first_step) / (step - 1)
        else:
            mean = (now - self._t0) / max(1, step)
        return left * mean

    # -- records
    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "loss" not in logs:
            self.summary.update({k: v for k, v in logs.items() if isinstance(v, (int, float))})
            return
        now = time.monotonic()
        elapsed = now - (self._t0 if self._t0 is not None else now)
        step = state.global_step
        record = {
            "step": step,
            "max_steps": state.max_steps,
            "loss": _num(logs.get("loss")),
            "learning_rate": _num(logs.get("learning_rate")),
            "samples_per_second": round(self.global_batch_size * step / elapsed, 3) if elapsed > 0 else None,
            "elapsed_s": round(elapsed, 3),
            "eta_s": round(self._eta(step, state.max_steps, now), 1),
            "epoch": _num(logs.get("epoch", state.epoch)),
        }
        self.records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self._file is not None:
            self._file.close()
            self._file = None


class MetricsCallback(TrainerCallback):
    """Writes metrics.json and loss_curve.png on the world's process zero at the end of training, and again with
    the eval metrics after an evaluation that follows it (``trainer.evaluate()`` / ``--do_eval`` in run_mlm.py).

    Args:
        progress: the ProgressCallback of the same Trainer (its records and the Trainer's train_* summary).
        script: the user's script in script mode, None for train/pretrain.py.
        extra: metrics.json values only the caller knows (train.runtime.build_metrics' ``extra``).
        rank_extra: optional callable () -> dict added to this rank's entry of ``ranks``.

    After training, ``metrics`` holds the dict last written (rank 0; None elsewhere).
    """

    def __init__(self, progress: ProgressCallback, script: str | None = None, extra: dict | None = None,
                 rank_extra=None):
        self.progress = progress
        self.script = script
        self.extra = dict(extra or {})
        self.rank_extra = rank_extra
        self.trainer = None  # set by train.runtime.attach: the unwrapped model is read from it
        self.eval_metrics: dict | None = None
        self.metrics: dict | None = None
        self._ranks: list[dict] | None = None

    def on_train_end(self, args, state, control, model=None, **kwargs):
        from train import runtime

        info = runtime.rank_info()
        mine = {"rank": args.process_index, "hostname": info.host, "local_rank": info.local_rank,
                "first_batches_sha256": None}
        if self.rank_extra is not None:
            mine.update(self.rank_extra())
        ranks = runtime.gather_objects(mine)  # a collective: every rank, before the rank-0 check
        if not state.is_world_process_zero:
            return
        self._ranks = sorted(ranks, key=lambda r: r["rank"])
        self._write(args, state, model)

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        if metrics:
            self.eval_metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if state.is_world_process_zero and self._ranks is not None:  # after training: add the eval metrics
            self._write(args, state, model)

    def _write(self, args, state, model):
        from train import runtime

        model = getattr(self.trainer, "model", None) or model
        if type(model).__name__ == "DeepSpeedEngine":
            model = model.module
        identity = runtime.run_identity(args.output_dir, args.run_name, self.script)
        self.metrics = runtime.build_metrics(
            args=args, state=state, model=model, progress=self.progress, ranks=self._ranks, identity=identity,
            eval_metrics=self.eval_metrics, extra={"script": self.script, **self.extra})
        out = runtime.write_metrics(args.output_dir, self.metrics).parent
        m = self.metrics
        what = m["run_name"] or (Path(self.script).name if self.script else m["model"]) or "training"
        plot_loss_curve(self.progress.records, out / LOSS_CURVE,
                        title=f"{what}: {m['model_type'] or ''} {m['task'] or ''}, world size {m['world_size']}")


def _num(v):
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def plot_loss_curve(records: list[dict], path: str | Path, title: str = "") -> Path:
    """Draw training loss against step (progress records with a loss) into a PNG at ``path``; returns the path.
    Raises OSError when the file can't be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(r["step"], r["loss"]) for r in records if r.get("loss") is not None]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 40 else None, linewidth=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title or "training loss")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
