"""What rank 0 of train/pretrain.py writes while and after it trains (see the contract):

* ``progress.jsonl`` -- one JSON object per logging step, flushed as it is written:
  {"step", "max_steps", "loss", "learning_rate", "samples_per_second", "elapsed_s", "eta_s", "epoch"}
  (samples_per_second = global batch x steps / elapsed; eta_s = steps left x mean step time, the first step --
  which includes DeepSpeed's and the dataloader's warm-up -- left out of the mean once there are others)
  The last step is always logged, whether or not it is a multiple of logging_steps.
* ``loss_curve.png`` -- loss against step, from those records.

metrics.json is assembled by pretrain.py (it needs every rank's information).
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
    """Writes progress.jsonl on the world's process zero; keeps the records for metrics and the loss curve."""

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


def _num(v):
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def plot_loss_curve(records: list[dict], path: str | Path, title: str = "") -> Path:
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
