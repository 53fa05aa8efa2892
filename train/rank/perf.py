"""perf.json: what a run's speed was, for the GPU benchmark (train.tools.bench) and anyone timing a run.

Rank 0's PerfCallback writes it at the end of training: start-up phases, the first step, the steady-state
throughput and peak GPU memory. Importing it changes nothing (it imports torch and transformers, which the rank has
imported already).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import transformers

from train.common.jsonio import write_json_atomic


def idle_gaps(busy: list[tuple[float, float]], cpu_ops: list[tuple[float, float, str, list[str]]],
              min_gap: float = 20.0, top: int = 8) -> dict:
    """Where the GPU sat idle in a profiled window, and what the host was doing then.

    Args:
        busy: (start, end) of every device event (kernels, copies, sets) on the GPU, microseconds, any order;
            overlapping events (several streams) count once.
        cpu_ops: (start, end, name, python stack frames innermost first) of the host's ops, microseconds, on the
            same clock as ``busy`` (torch.profiler's FunctionEvents give both).
        min_gap: idle stretches shorter than this (microseconds) are launch latency, not counted.
        top: how many of the longest gaps to describe.

    Returns:
        ``{"idle_us": total idle between the first and the last device event in gaps >= min_gap, "gaps": count,
        "by_host_op": [[outermost host op at each gap's middle, idle microseconds], ...] largest first,
        "longest": [{"start_us", "idle_us", "host": [op names outermost -> innermost at the gap's middle],
        "stack": [frames]}, ...]}`` (the start relative to the first device event).
    """
    spans = sorted(busy)
    gaps = []
    if spans:
        end = spans[0][1]
        for start, stop in spans[1:]:
            if start - end >= min_gap:
                gaps.append((end, start))
            end = max(end, stop)
    origin = spans[0][0] if spans else 0.0

    def active(t):
        # the host ops running at time t, outermost (longest) first
        return sorted((op for op in cpu_ops if op[0] <= t < op[1]), key=lambda op: op[0] - op[1])

    by_op: dict[str, float] = {}
    described = []
    for a, b in gaps:
        ops = active((a + b) / 2)
        outer = ops[0][2] if ops else "(no host op: the host was between ops)"
        by_op[outer] = by_op.get(outer, 0.0) + (b - a)
        described.append({"start_us": round(a - origin, 1), "idle_us": round(b - a, 1),
                          "host": [op[2] for op in ops], "stack": list(ops[-1][3])[:6] if ops else []})
    described.sort(key=lambda g: -g["idle_us"])
    return {"idle_us": round(sum(b - a for a, b in gaps), 1), "gaps": len(gaps),
            "by_host_op": [[k, round(v, 1)] for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])],
            "longest": described[:top]}


def idle_text(gaps: dict, top_ops: int = 12) -> str:
    """profile.txt's idle section from :func:`idle_gaps`'s result (milliseconds)."""
    lines = [f"GPU idle: {gaps['idle_us'] / 1e3:.1f} ms in {gaps['gaps']} gaps, by the outermost host op at each "
             f"gap's middle:"]
    lines += [f"    {us / 1e3:8.2f} ms  {name}" for name, us in gaps["by_host_op"][:top_ops]]
    lines.append("longest gaps (start after the window's first kernel; host ops outermost -> innermost; stack):")
    for g in gaps["longest"]:
        lines.append(f"  +{g['start_us'] / 1e3:.2f} ms: {g['idle_us'] / 1e3:.2f} ms idle; " + " > ".join(g["host"]))
        lines += [f"      {frame}" for frame in g["stack"]]
    return "\n".join(lines)


class PerfCallback(transformers.TrainerCallback):
    """Rank 0 writes OUT/perf.json at the end of training: wall-clock times (time.time(), seconds) of training
    start and of the end of the first optimizer step, the steady-state throughput between the end of step
    ``s0 + max(1, (max_steps - s0) // 4)`` and the last step (s0: the step training starts from, 0 or after
    ``-e resume=`` the checkpoint's; the GPU synchronised at both ends, nowhere else), peak GPU memory
    (torch.cuda.max_memory_allocated / max_memory_reserved, bytes), the GPU's name, the gradient clipping the
    DeepSpeed engine applies itself (``engine``: a callable giving it; 0 where the optimizer's step clips, see
    patches.clip_without_host_sync), and ``startup``: the Unix times
    of this rank's start-up phases (``startup`` given: process_start, imports_done, arguments_parsed, data_loaded,
    model_built, trainer_built; then train_begin -- after DeepSpeed's initialisation -- and first_step_end).

    With DSC_PROFILE_STEPS=A:B in the environment, steps A..B run under torch.profiler and OUT/profile.txt gets
    its table of the 30 ops with the most CUDA time (a step's time per op; no effect otherwise), the host syncs, and
    where the GPU sat idle (:func:`idle_gaps`).
    """

    def __init__(self, output_dir, global_batch: int, block_length: int, samples_seen=None, world_size: int = 1,
                 startup: dict | None = None, engine=None):
        self.samples_seen, self.world_size, self.engine = samples_seen, world_size, engine
        self.engine_clipping = None
        self.startup = dict(startup or {})
        self.out = Path(output_dir)
        self.global_batch, self.block_length = global_batch, block_length
        self.times: dict = {}
        self.start_step = 0  # the step training starts from (on_train_begin)
        self.profile = None
        spec = os.environ.get("DSC_PROFILE_STEPS", "")
        self.profile_steps = tuple(int(x) for x in spec.split(":")) if ":" in spec else None

    def _seen(self):
        return self.samples_seen() * self.world_size if self.samples_seen else None

    @staticmethod
    def _now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.times["train_begin"] = time.time()
        engine = self.engine() if self.engine else None
        if hasattr(engine, "gradient_clipping"):  # the DeepSpeed engine: the clipping it applies itself
            self.engine_clipping = engine.gradient_clipping()
        # the steps this attempt trains: all of them, or after -e resume= those after the checkpoint's step (the
        # Trainer has restored global_step by now); the window and the first step are this attempt's
        self.start_step = state.global_step
        self.window_start = self.start_step + max(1, (state.max_steps - self.start_step) // 4)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.profile_steps and state.global_step + 1 == self.profile_steps[0] and args.process_index == 0:
            acts = [torch.profiler.ProfilerActivity.CPU] + (
                [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self.profile = torch.profiler.profile(activities=acts, with_stack=True)  # stacks: where host syncs are
            self.profile_t0 = self._now()
            self.profile.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step == self.start_step + 1:
            self.times["first_step_end"] = self._now()
        if step == self.window_start:
            self.times["window_start"] = (step, self._now(), self._seen())
        if step == state.max_steps:
            self.times["window_end"] = (step, self._now(), self._seen())
        if self.profile is not None and self.profile_steps and step == self.profile_steps[1]:
            wall = self._now() - self.profile_t0
            self.profile.__exit__(None, None, None)
            averages = self.profile.key_averages()
            key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
            table = averages.table(sort_by=key, row_limit=30)
            cpu_table = averages.table(sort_by="self_cpu_time_total", row_limit=15)
            syncs = [e for e in self.profile.key_averages(group_by_stack_n=12)
                     if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize")]
            sync_text = "\n".join(
                f"{e.key} x{e.count}, {e.cpu_time_total / 1e3:.1f} ms waiting, from:\n    " + "\n    ".join(e.stack)
                for e in sorted(syncs, key=lambda e: -e.cpu_time_total)) or "none"
            # kernel time (one stream at world size 1) against the wall time: the share the GPU sat idle
            cuda = torch.autograd.DeviceType.CUDA  # device events only, as the table's "Self CUDA time total"
            busy = sum(e.self_device_time_total for e in averages
                       if e.device_type == cuda and not getattr(e, "is_user_annotation", False)) / 1e6
            steps = self.profile_steps[1] - self.profile_steps[0] + 1
            events = self.profile.events()
            device = [(e.time_range.start, e.time_range.end) for e in events
                      if e.device_type == cuda and not getattr(e, "is_user_annotation", False)]
            host = [(e.time_range.start, e.time_range.end, e.name, e.stack or []) for e in events
                    if e.device_type != cuda]
            gaps = idle_gaps(device, host)
            self.times["profile"] = {"steps": list(self.profile_steps), "wall_s": round(wall, 4),
                                     "gpu_kernel_s": round(busy, 4), "gpu_idle_s": round(gaps["idle_us"] / 1e6, 4),
                                     "idle_by_host_op": gaps["by_host_op"][:12]}
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "profile.txt").write_text(
                f"torch.profiler, steps {self.profile_steps[0]}..{self.profile_steps[1]} ({steps} optimizer steps): "
                f"{wall:.3f} s wall, {busy:.3f} s of GPU kernels ({100 * busy / wall:.0f} % busy)\n{table}\n"
                f"by CPU time (self):\n{cpu_table}\n"
                f"host syncs (the CPU waits for the GPU; PerfCallback's own two cudaDeviceSynchronize among them), "
                f"by Python stack:\n{sync_text}\n{idle_text(gaps)}\n", encoding="utf-8")
            self.profile = None

    def on_train_end(self, args, state, control, **kwargs):
        if args.process_index != 0:
            return
        perf = {"train_begin_unix_s": self.times.get("train_begin"),
                "first_step_end_unix_s": self.times.get("first_step_end"),
                "global_batch": self.global_batch, "block_length": self.block_length,
                "per_device_train_batch_size": args.per_device_train_batch_size,
                "gradient_accumulation_steps": args.gradient_accumulation_steps,
                "profile": self.times.get("profile"),
                "deepspeed_gradient_clipping": self.engine_clipping,
                "startup": {**self.startup, "train_begin": self.times.get("train_begin"),
                            "first_step_end": self.times.get("first_step_end")}}
        if "window_start" in self.times and "window_end" in self.times:
            (s0, t0, n0), (s1, t1, n1) = self.times["window_start"], self.times["window_end"]
            if s1 > s0 and t1 > t0:
                # samples really trained (rank 0's rows x world size): a data set that ends an epoch inside an
                # accumulation cycle makes shorter optimizer steps than the nominal global batch
                samples = n1 - n0 if n0 is not None and n1 is not None else self.global_batch * (s1 - s0)
                sps = samples / (t1 - t0)
                perf["steady_samples"] = samples
                perf.update({"steady_steps": [s0, s1], "steady_seconds": round(t1 - t0, 4),
                             "steady_samples_per_second": round(sps, 2),
                             "steady_tokens_per_second": round(sps * self.block_length, 1)})
        if torch.cuda.is_available():
            perf.update({"gpu": torch.cuda.get_device_name(),
                         "peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
                         "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(),
                         "gpu_memory_bytes": torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory})
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.out / "perf.json", perf)


# ----------------------------------------------------------------------------------------------------------- setup
