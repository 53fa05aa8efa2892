"""The Trainer callbacks of the rank runtime (train.rank.hooks.attach adds them, for train/rank/pretrain.py and users'
scripts alike). What rank 0 writes while and after it trains (docs/training.md lists these files for users):

* ``progress.jsonl`` -- one JSON object per logging step, flushed as it is written:
  {"step", "max_steps", "loss", "learning_rate", "grad_norm", "samples_per_second", "tokens_per_second",
  "interval_s", "elapsed_s", "eta_s", "epoch"} (samples_per_second and tokens_per_second: the rate over the
  interval since the record before -- or since training began, for the first record of a run or of a resumed
  attempt --, interval_s its length; tokens_per_second null when the tokens per sample are not known, as in a
  user's script; eta_s = steps left x mean step time of this attempt, its first step -- which includes DeepSpeed's
  and the dataloader's warm-up -- left out of the mean once there are others); with more than one rank also
  "step_s": {host: [the step time of each of its ranks]} (:class:`StepTimer`: a rank's own compute per optimizer step
  over the interval, which the follower compares to name a straggler: train.controller.progress.stragglers)
  The last step is always logged, whether or not it is a multiple of logging_steps. Events come on lines of their
  own, told apart by their "event" key: {"event": "save", "step", "checkpoint", "elapsed_s", "save_s",
  "size_bytes"} after each checkpoint save (``checkpoint-<step>`` in the output directory; save_s the seconds the
  save took, size_bytes this node's part of it), {"event": "warning", "message"} for what the run must say
  (e.g. TensorBoard left out: :func:`usable_report_to`), {"event": "stop_request", "step", "max_steps", "run",
  "requested_at"} when the run stops early to save before its Slurm job's time limit (:class:`StopRequestCallback`),
  and in an attempt that train.yml started again after a fault (train/controller/restart.py) {"event": "restart",
  **the fault's record} at its start and {"event": "recovered", "attempt", "step", "recover_s"} at its first logged
  step (recover_s: from the fault noticed on the controller to that step; the clocks of the controller and the head).
* ``loss_curve.png`` -- loss and learning rate against step (two panels), from those records.
* ``metrics.json`` -- train.rank.metrics.build_metrics, written by MetricsCallback when training ends (every
  rank takes part: it gathers each rank's host) and again after each later evaluation, with its eval_* metrics.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from train.rank.bootstrap import barrier, gather_objects, rank_info
from train.rank.metrics import build_metrics, finite_number, read_attempts, run_identity, write_metrics

PROGRESS = "progress.jsonl"
LOSS_CURVE = "loss_curve.png"
#: warnings for progress.jsonl noted before the Trainer starts (usable_report_to); ProgressCallback writes them
_PENDING_WARNINGS: list[str] = []


def usable_report_to(report_to, rank: int = 0) -> list[str]:
    """The Trainer's ``report_to`` without "tensorboard" when TensorBoard's writer cannot be imported here.

    Args:
        report_to: TrainingArguments.report_to as parsed (a str, a list of str, None or "none").
        rank: this process's global rank; rank 0 prints the warning (once for the run, not once per rank).

    The Trainer refuses ``report_to tensorboard`` without it (TensorBoardCallback: "requires tensorboard to be
    installed"), which would end every rank at start-up; the run goes on without event files instead, and says so
    on stderr and as a warning event in progress.jsonl (the playbook's follower prints it).

    Returns:
        the integration names to report to (a new list; [] for none).
    """
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [n for n in names if n and n != "none"]
    if "tensorboard" not in names:
        return names
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - what TensorBoardCallback imports
    except ImportError as err:
        try:
            from tensorboardX import SummaryWriter  # noqa: F401,F811 - its fallback
        except ImportError:
            import socket

            message = (f"report_to tensorboard: TensorBoard cannot be imported on {socket.gethostname()} "
                       f"({' '.join(str(err).split())[:160]}), so this run writes no TensorBoard events "
                       f"(progress.jsonl and loss_curve.png still come back); install it with "
                       f"ansible-playbook site.yml (python_env pins tensorboard) or set -e report_to=none")
            if rank == 0:
                print(f"warning: {message}", file=sys.stderr, flush=True)
                _PENDING_WARNINGS.append(message)
            return [n for n in names if n != "tensorboard"]
    return names


class StepTimer:
    """A rank's own step time: the seconds its model's forward passes take per optimizer step, timed on the rank.

    Not the step's wall time, which every rank shares: data parallelism waits for the slowest rank in the gradient
    reduction (inside backward) and the parameter all-gather (after the optimizer step), so a fast rank's step lasts
    as long as a slow one's. The forward pass holds no collective under ZeRO 0-2 (ZeRO-3 gathers parameters in it)
    and is a fixed share of a step's computation, so the ratio of two ranks' forward times is the ratio of their
    compute speed -- what differs on a slow node (a throttled CPU or GPU, a busy host). CPU: wall time of the
    forward call (time.perf_counter). GPU: CUDA events recorded around it, read at the next logging step, whose
    loss the Trainer has already synchronised (no extra synchronisation inside a step). Micro-batches of gradient
    accumulation add up; forward passes outside a training step (evaluation) are not counted.

    ``attach(model, cuda)`` registers the hooks (outside torch.compile's graphs: torch.compiler.disable);
    ``step_begin()`` / ``step_end()`` bracket each optimizer step; ``take()`` returns the mean seconds per step
    since the last take (None when no step was timed) and starts over.
    """

    def __init__(self):
        self.cuda = False
        self._in_step = False
        self._start = None
        self._cpu_s = 0.0
        self._events: list = []  # (start, end) CUDA event pairs of this interval
        self._steps = 0
        self._handles: list = []

    def attach(self, model, cuda: bool) -> None:
        import torch

        self.cuda = bool(cuda)
        disable = getattr(getattr(torch, "compiler", None), "disable", None) or (lambda fn: fn)
        self._handles = [model.register_forward_pre_hook(disable(self._before)),
                         model.register_forward_hook(disable(self._after))]

    def _before(self, module, inputs):
        if not self._in_step:
            return
        if self.cuda:
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def _after(self, module, inputs, output):
        if not self._in_step or self._start is None:
            return
        if self.cuda:
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start, end))
        else:
            self._cpu_s += time.perf_counter() - self._start
        self._start = None

    def step_begin(self) -> None:
        self._in_step = True

    def step_end(self) -> None:
        self._in_step = False
        self._steps += 1

    def take(self) -> float | None:
        seconds = self._cpu_s
        if self._events:
            self._events[-1][1].synchronize()
            seconds += sum(start.elapsed_time(end) for start, end in self._events) / 1e3  # ms -> s
        steps = self._steps
        self._cpu_s, self._events, self._steps = 0.0, [], 0
        return round(seconds / steps, 6) if steps and seconds > 0 else None


class ProgressCallback(TrainerCallback):
    """Writes progress.jsonl on the world's process zero; keeps the records for metrics and the loss curve.

    Args:
        output_dir: the Trainer's output directory (progress.jsonl goes there).
        global_batch_size: samples per optimizer step over all ranks (micro x accumulation x world size), for
            samples_per_second.
        tokens_per_sample: tokens in one sample (the block length), for tokens_per_second; None when unknown.

    ``records`` holds the progress records (rank 0), ``summary`` the numbers of the Trainer's other logs (the
    final train_loss / train_runtime / train_samples_per_second, eval_* of evaluations), ``saves`` the save events.
    """

    def __init__(self, output_dir: str | Path, global_batch_size: int, tokens_per_sample: int | None = None):
        self.path = Path(output_dir) / PROGRESS
        self.global_batch_size = global_batch_size
        self.tokens_per_sample = tokens_per_sample
        self.start_step = 0  # the step this attempt began at (a resumed run's checkpoint step)
        self._last: tuple[int, float] | None = None  # (step, monotonic time) of the record before
        self.records: list[dict] = []
        self.summary: dict = {}
        self.saves: list[dict] = []
        self._file = None
        self._t0: float | None = None
        self._t_first_step: float | None = None
        self._mark: float | None = None  # the last step end or log: a save follows one of them
        self.timer: StepTimer | None = None  # with more than one rank: each rank's own step time
        self.attempts: list[dict] = []  # the faults that restarted the run so far (metrics.read_attempts)

    # -- timing
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.timer is None and model is not None and args.world_size > 1:
            self.timer = StepTimer()
            self.timer.attach(model, getattr(args.device, "type", "") == "cuda")
        self._t0 = time.monotonic()
        self.start_step = state.global_step
        self._last = (state.global_step, self._t0)
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open for the whole run
            while _PENDING_WARNINGS:
                self._write({"event": "warning", "message": _PENDING_WARNINGS.pop(0)})
            self.attempts = read_attempts()
            if self.attempts:
                self._write({"event": "restart", **self.attempts[-1]})

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def on_step_begin(self, args, state, control, **kwargs):
        if self.timer is not None:
            self.timer.step_begin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.timer is not None:
            self.timer.step_end()
        self._mark = time.monotonic()
        if self._t_first_step is None:
            self._t_first_step = self._mark
        if state.max_steps and state.global_step >= state.max_steps and args.logging_strategy != "no":
            control.should_log = True  # log the last step too, so the last record (and last_loss) is the end

    def _eta(self, step: int, max_steps: int, now: float) -> float:
        left = max(0, max_steps - step)
        done = step - self.start_step  # steps of this attempt
        if done > 1 and self._t_first_step is not None:
            mean = (now - self._t_first_step) / (done - 1)
        else:
            mean = (now - self._t0) / max(1, done)
        return left * mean

    def _rates(self, step: int, now: float) -> tuple[float | None, float | None, float | None]:
        """(samples/s, tokens/s, seconds) over the interval since the record before (or since training began)."""
        last_step, last_t = self._last if self._last is not None else (self.start_step, self._t0 or now)
        seconds = now - last_t
        if seconds <= 0 or step <= last_step:
            return None, None, round(seconds, 3)
        sps = self.global_batch_size * (step - last_step) / seconds
        tps = sps * self.tokens_per_sample if self.tokens_per_sample else None
        return round(sps, 3), (round(tps, 1) if tps is not None else None), round(seconds, 3)

    # -- records
    def _step_times(self) -> dict | None:
        """Every rank's step time of the interval, {host: [seconds of each of its ranks, in rank order]} (rank 0),
        or None without a timer or when a rank timed no step. A collective: every rank calls it at the same
        logging step."""
        if self.timer is None:
            return None
        mine = (rank_info().host, self.timer.take())
        every = gather_objects(mine)
        if any(seconds is None for _, seconds in every):
            return None
        out: dict[str, list[float]] = {}
        for host, seconds in every:
            out.setdefault(str(host), []).append(seconds)
        return out

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        # every rank logs the same steps (the Trainer gathers the loss for them): gather their step times first
        step_times = self._step_times() if "loss" in logs else None
        if not state.is_world_process_zero:
            return
        if "loss" not in logs:
            self.summary.update({k: v for k, v in logs.items() if isinstance(v, (int, float))})
            return
        now = time.monotonic()
        elapsed = now - (self._t0 if self._t0 is not None else now)
        step = state.global_step
        sps, tps, interval = self._rates(step, now)
        self._last = (step, now)
        record = {
            "step": step,
            "max_steps": state.max_steps,
            "loss": finite_number(logs.get("loss")),
            "learning_rate": finite_number(logs.get("learning_rate")),
            "grad_norm": finite_number(logs.get("grad_norm")),  # pre-clip total 2-norm; null where DeepSpeed reports none
            "samples_per_second": sps,
            "tokens_per_second": tps,
            "interval_s": interval,
            "elapsed_s": round(elapsed, 3),
            "eta_s": round(self._eta(step, state.max_steps, now), 1),
            "epoch": finite_number(logs.get("epoch", state.epoch)),
        }
        if step_times:
            record["step_s"] = step_times
        self.records.append(record)
        self._write(record)
        last = self.attempts[-1] if self.attempts else None
        if last is not None and "recover_s" not in last and isinstance(last.get("noticed_at"), (int, float)):
            last["recover_s"] = round(time.time() - last["noticed_at"], 1)
            self._write({"event": "recovered", "attempt": int(last.get("attempt", 0)) + 1, "step": step,
                         "recover_s": last["recover_s"]})
        self._mark = time.monotonic()

    def on_save(self, args, state, control, **kwargs):
        """After the Trainer saved ``checkpoint-<global step>``: the event records the save's seconds (since the
        step's end or its log line, which the save follows) and the bytes of this node's part of the checkpoint (with
        save_on_each_node every node holds its ranks' shards). Every rank waits here for the others first: the
        Trainer (transformers 5.24 ``_save_checkpoint``) writes each rank's ``rng_state_<R>.pth`` after the shared
        part with no barrier after it, so rank 0 could count the files before a peer's was there."""
        barrier()
        if not state.is_world_process_zero:
            return
        now = time.monotonic()
        elapsed = now - self._t0 if self._t0 is not None else None
        name = f"checkpoint-{state.global_step}"
        folder = Path(args.output_dir) / name
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else None
        event = {"event": "save", "step": state.global_step, "checkpoint": name,
                 "elapsed_s": round(elapsed, 3) if elapsed is not None else None,
                 "save_s": round(now - self._mark, 3) if self._mark is not None else None, "size_bytes": size}
        self.saves.append(event)
        self._write(event)

    def on_train_end(self, args, state, control, **kwargs):
        if self._file is not None:
            self._file.close()
            self._file = None


class MetricsCallback(TrainerCallback):
    """Writes metrics.json and loss_curve.png on the world's process zero at the end of training, and again with
    the eval metrics after an evaluation that follows it (``trainer.evaluate()`` / ``--do_eval`` in run_mlm.py).

    Args:
        progress: the ProgressCallback of the same Trainer (its records and the Trainer's train_* summary).
        script: the user's script in script mode, None for train/rank/pretrain.py.
        extra: metrics.json values only the caller knows (train.rank.metrics.build_metrics' ``extra``).
        rank_extra: optional callable () -> dict added to this rank's entry of ``ranks``.

    After training, ``metrics`` holds the dict last written (rank 0; None elsewhere).
    """

    def __init__(self, progress: ProgressCallback, script: str | None = None, extra: dict | None = None,
                 rank_extra=None):
        self.progress = progress
        self.script = script
        self.extra = dict(extra or {})
        self.rank_extra = rank_extra
        self.trainer = None  # set by train.rank.hooks.attach: the unwrapped model is read from it
        self.eval_metrics: dict | None = None
        self.metrics: dict | None = None
        self._ranks: list[dict] | None = None

    def on_train_end(self, args, state, control, model=None, **kwargs):
        info = rank_info()
        mine = {"rank": args.process_index, "hostname": info.host, "local_rank": info.local_rank,
                "first_batches_sha256": None}
        if self.rank_extra is not None:
            mine.update(self.rank_extra())
        ranks = gather_objects(mine)  # a collective: every rank, before the rank-0 check
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
        model = getattr(self.trainer, "model", None) or model
        if type(model).__name__ == "DeepSpeedEngine":
            model = model.module
        identity = run_identity(args.output_dir, args.run_name, self.script)
        self.metrics = build_metrics(
            args=args, state=state, model=model, progress=self.progress, ranks=self._ranks, identity=identity,
            eval_metrics=self.eval_metrics, extra={"script": self.script, **self.extra})
        out = write_metrics(args.output_dir, self.metrics).parent
        m = self.metrics
        what = m["run_name"] or (Path(self.script).name if self.script else m["model"]) or "training"
        plot_loss_curve(self.progress.records, out / LOSS_CURVE,
                        title=f"{what}: {m['model_type'] or ''} {m['task'] or ''}, world size {m['world_size']}")


def plot_loss_curve(records: list[dict], path: str | Path, title: str = "") -> Path:
    """Draw training loss (top panel) and learning rate (bottom panel) against step, from the progress records
    (those with a loss / a learning_rate; event lines are left out), into a PNG at ``path``; returns the path.
    Raises OSError when the file can't be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r for r in records if "event" not in r]
    loss = [(r["step"], r["loss"]) for r in steps if r.get("loss") is not None]
    lr = [(r["step"], r["learning_rate"]) for r in steps if r.get("learning_rate") is not None]
    fig, (ax, ax_lr) = plt.subplots(2, 1, figsize=(7, 5.5), dpi=100, sharex=True, height_ratios=(2, 1))
    for axis, pts, colour in ((ax, loss, "tab:blue"), (ax_lr, lr, "tab:orange")):
        if pts:
            axis.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 40 else None,
                      markersize=3, linewidth=1.5, color=colour)
        axis.grid(True, alpha=0.3)
    ax.set_ylabel("training loss")
    ax.set_title(title or "training loss")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


#: the file whose presence asks the run to save and stop (-e launcher=slurm: slurm-node.sh writes it on Slurm's
#: signal before the job's time limit); set by the launch, unset otherwise
STOP_FILE_ENV = "DSC_STOP_FILE"


class StopRequestCallback(TrainerCallback):
    """Saves a checkpoint and stops training, on every rank at the same step, once ``stop_file`` exists on any node.

    Args:
        stop_file: the path (the same on every node, each node's own file) whose presence is the request, e.g.
            written by -e launcher=slurm's slurm-node.sh when Slurm signals the job before its time limit.
        progress: the run's ProgressCallback: rank 0 writes the ``stop_request`` event through it.
        every: check every ``every`` optimizer steps (>= 1; the Trainer's logging_steps: one small all-reduce
            per check, where the loss is read anyway).

    The ranks must save the same step (a DeepSpeed checkpoint is a collective), so each check is a MAX all-reduce
    of "this node's file exists" over the world; when it is set every rank sets ``should_save`` and
    ``should_training_stop`` for this step. Without torch.distributed the local file decides.
    """

    def __init__(self, stop_file: str | Path, progress: ProgressCallback | None = None, every: int = 1):
        self.stop_file = Path(stop_file)
        self.progress = progress
        self.every = max(1, int(every))
        self.stopped_at: int | None = None

    def _requested(self, device) -> bool:
        import torch

        local = 1.0 if self.stop_file.exists() else 0.0
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return bool(local)
        flag = torch.tensor([local], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_at is not None or state.global_step % self.every or state.global_step >= state.max_steps:
            return
        if not self._requested(args.device):
            return
        self.stopped_at = state.global_step
        control.should_save = True
        control.should_training_stop = True
        control.should_log = args.logging_strategy != "no"
        if state.is_world_process_zero and self.progress is not None:
            try:
                at = self.stop_file.read_text(encoding="utf-8").strip()
            except OSError:
                at = ""
            self.progress._write({"event": "stop_request", "step": state.global_step, "max_steps": state.max_steps,
                                  "run": os.environ.get("DSC_RUN_NAME", ""),
                                  "requested_at": int(at) if at.isdigit() else None})

