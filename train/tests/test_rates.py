"""The rates a run reports: progress.jsonl's per-interval samples/s and tokens/s (train/rank/callbacks.py's
ProgressCallback, driven here through its Trainer hooks with a stand-in clock), after a resume too, and metrics.json's
steady rate (train/rank/metrics.py steady_rate) and MFU (train/common/flops.py)."""

import json
from types import SimpleNamespace

import pytest

from train.common import flops
from train.rank.metrics import steady_rate


def test_steady_rate_starts_at_a_quarter_of_the_run_and_leaves_the_compilation_out():
    # a cold compile makes step 1 and the steps after it slow (recompilation): 60 steps, logged at 1 and every 10
    records = [{"step": 1, "max_steps": 60, "elapsed_s": 30.0}, {"event": "save", "step": 5}]
    records += [{"step": s, "max_steps": 60, "elapsed_s": 40.0 + (s - 10) * 0.5} for s in range(10, 61, 10)]
    records[2]["elapsed_s"] = 45.0  # step 10: five more seconds of recompilation in the first interval
    got = steady_rate(records, global_batch_size=64, tokens_per_sample=128)
    # from step 20 (the first record at or after 60 // 4 = 15) to step 60: 40 steps in 20 s
    assert got == {"steady_samples_per_second": 64 * 40 / 20.0, "steady_tokens_per_second": 64 * 40 / 20.0 * 128,
                   "steady_steps": [20, 60]}
    assert steady_rate(records, 64)["steady_tokens_per_second"] is None
    # a short run (no record that late): the first logging interval is left out
    short = [{"step": 1, "elapsed_s": 30.0}, {"step": 10, "elapsed_s": 34.0}, {"step": 20, "elapsed_s": 38.0}]
    assert steady_rate(short, 64)["steady_steps"] == [10, 20]
    assert steady_rate(short[1:], 64)["steady_steps"] == [10, 20]  # two records: the one interval there is
    none = {"steady_samples_per_second": None, "steady_tokens_per_second": None, "steady_steps": None}
    assert steady_rate(short[:1], 64) == none  # one logged step: no steady state
    assert steady_rate([{"step": 3, "elapsed_s": 2.0}, {"step": 3, "elapsed_s": 2.0}], 64) == none


def test_mfu_is_the_formula_over_the_peak_of_the_gpu_named_by_the_driver():
    # BERT-base at seq 512 (N = 109.5 M with the MLM head, L 12, h 768): 6N + 12 L h s FLOPs per token
    per_token = flops.model_flops_per_token(109_514_298, 12, 768, 512)
    assert per_token == 6 * 109_514_298 + 12 * 12 * 768 * 512
    got = flops.mfu(583_787.5, 109_514_298, 12, 768, 512, "NVIDIA H200")
    assert got == pytest.approx(per_token * 583_787.5 / 790e12) and 0.52 < got < 0.53
    assert flops.mfu(583_787.5, 109_514_298, 12, 768, 512, "NVIDIA A10G") is None  # not an A10: not in the table
    assert flops.mfu(None, 109_514_298, 12, 768, 512, "NVIDIA H200") is None
    assert flops.model_shape({"n_layer": 12, "n_embd": 768}) == (12, 768)
    assert flops.model_shape({"num_hidden_layers": 2, "hidden_size": 64}) == (2, 64)
    # the names NVML and torch give (nvmlDeviceGetName): the more specific entry wins, a longer model is not a shorter
    expected = {"NVIDIA H200": 790e12, "NVIDIA H200 NVL": 835.5e12, "NVIDIA GH200 480GB": 989.4e12,
                "NVIDIA H100 80GB HBM3": 989.4e12, "NVIDIA H100 PCIe": 756.5e12, "NVIDIA H100 NVL": 835.5e12,
                "NVIDIA A100-SXM4-80GB": 312e12, "NVIDIA A100 80GB PCIe": 312e12, "NVIDIA L40S": 362.05e12,
                "NVIDIA L40": 181.05e12, "NVIDIA L4": 121e12, "NVIDIA B200": 2.25e15, "NVIDIA GB200": 2.5e15,
                "NVIDIA A10": 125e12, "NVIDIA A10G": None, "NVIDIA GeForce RTX 4090": None, None: None}
    assert {name: flops.peak_flops(name) for name in expected} == expected
    h100 = flops.peak_of("NVIDIA H100 80GB HBM3")
    assert h100["gpu"] == "NVIDIA H100 80GB HBM3" and h100["source"].startswith("datasheet: NVIDIA H100 SXM5")
    assert flops.peak_of("NVIDIA H200")["source"].startswith("measured")
    h100_mfu = flops.mfu(583_787.5, 109_514_298, 12, 768, 512, "NVIDIA H100 80GB HBM3")
    assert h100_mfu == pytest.approx(per_token * 583_787.5 / 989.4e12)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def drive(callback, clock, start_step, steps, step_seconds, log_every, max_steps, first_step_extra=0.0):
    """Run ``callback`` through a Trainer's begin / step / log calls from ``start_step`` for ``steps`` steps of
    ``step_seconds`` each (the first ``first_step_extra`` longer: compilation), logging every ``log_every``."""
    args = SimpleNamespace(logging_strategy="steps")
    state = SimpleNamespace(global_step=start_step, max_steps=max_steps, is_world_process_zero=True, epoch=0.0)
    control = SimpleNamespace(should_log=False)
    callback.on_train_begin(args, state, control)
    for i in range(steps):
        clock.now += step_seconds + (first_step_extra if i == 0 else 0.0)
        state.global_step += 1
        callback.on_step_end(args, state, control)
        if state.global_step % log_every == 0 or state.global_step == max_steps:
            callback.on_log(args, state, control, logs={"loss": 2.0, "learning_rate": 1e-4})
    callback.on_train_end(args, state, control)


def test_progress_rates_are_per_interval_and_honest_after_a_resume(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from train.rank import callbacks

    clock = Clock()
    monkeypatch.setattr(callbacks.time, "monotonic", clock)
    # 60 steps of 0.25 s at a global batch of 64 (256 samples/s), the first step 20 s longer (compilation)
    first = callbacks.ProgressCallback(tmp_path / "a", global_batch_size=64, tokens_per_sample=512)
    drive(first, clock, 0, 60, 0.25, 10, 100, first_step_extra=20.0)
    rates = [r["samples_per_second"] for r in first.records]
    assert rates[0] == pytest.approx(64 * 10 / 22.5, rel=1e-3)  # the first interval holds the compilation
    assert rates[1:] == [pytest.approx(256.0)] * 5  # every later interval: the real rate, not an average since 0
    assert first.records[-1]["tokens_per_second"] == pytest.approx(256.0 * 512)
    assert first.records[-1]["interval_s"] == pytest.approx(2.5)
    on_disk = [json.loads(ln) for ln in (tmp_path / "a" / "progress.jsonl").read_text().splitlines()]
    assert on_disk == first.records
    assert steady_rate(first.records, 64, 512)["steady_samples_per_second"] == pytest.approx(256.0)

    # resumed from step 60 at half the speed (0.5 s a step): the first interval after the resume counts only the
    # steps since the resume, and the ETA the steps left at this attempt's speed
    again = callbacks.ProgressCallback(tmp_path / "b", global_batch_size=64, tokens_per_sample=512)
    drive(again, clock, 60, 40, 0.5, 10, 100, first_step_extra=5.0)
    assert [r["step"] for r in again.records] == [70, 80, 90, 100]
    assert again.records[0]["samples_per_second"] == pytest.approx(64 * 10 / 10.0)
    assert [r["samples_per_second"] for r in again.records[1:]] == [pytest.approx(128.0)] * 3
    assert again.records[1]["eta_s"] == pytest.approx(20 * 0.5, rel=0.05)  # 20 steps left at 0.5 s
    assert again.records[1]["elapsed_s"] == pytest.approx(15.0)  # since this attempt began
    assert steady_rate(again.records, 64, 512)["steady_samples_per_second"] == pytest.approx(128.0)


def test_perf_json_steady_window_and_first_step_are_the_attempts_own_after_a_resume(tmp_path, monkeypatch):
    """make bench's steady rate (perf.json) after -e resume=: the window starts a quarter into the steps this attempt
    trains (not at max_steps // 4, which a run resumed past it never reaches) and the first step is the first one
    after the checkpoint's."""
    pytest.importorskip("torch")  # perf.py synchronises CUDA where there is one
    pytest.importorskip("transformers")
    from train.rank import perf

    clock = Clock()
    monkeypatch.setattr(perf.time, "time", clock)
    args = SimpleNamespace(process_index=0, per_device_train_batch_size=64, gradient_accumulation_steps=1)

    def attempt(out, start_step, max_steps, step_seconds, first_step_extra):
        cb = perf.PerfCallback(out, global_batch=64, block_length=512)
        state = SimpleNamespace(global_step=start_step, max_steps=max_steps)
        cb.on_train_begin(args, state, None)
        begin = clock.now
        for i in range(max_steps - start_step):
            cb.on_step_begin(args, state, None)
            clock.now += step_seconds + (first_step_extra if i == 0 else 0.0)
            state.global_step += 1
            cb.on_step_end(args, state, None)
        cb.on_train_end(args, state, None)
        return json.loads((out / "perf.json").read_text()), begin

    # the first attempt: 60 steps of 0.25 s (256 samples/s), the first one 20 s longer; window from step 15
    got, begin = attempt(tmp_path / "a", 0, 60, 0.25, 20.0)
    assert got["steady_steps"] == [15, 60] and got["steady_samples_per_second"] == pytest.approx(256.0)
    assert got["first_step_end_unix_s"] == pytest.approx(begin + 20.25)
    # resumed from step 60 to 100 at 0.5 s a step (128 samples/s): window from step 60 + 40 // 4 = 70
    got, begin = attempt(tmp_path / "b", 60, 100, 0.5, 5.0)
    assert got["steady_steps"] == [70, 100] and got["steady_samples_per_second"] == pytest.approx(128.0)
    assert got["steady_tokens_per_second"] == pytest.approx(128.0 * 512)
    assert got["first_step_end_unix_s"] == pytest.approx(begin + 5.5)  # step 61, not step 1 (never reached)


@pytest.mark.torch
def test_idle_gaps_adds_the_gpu_idle_stretches_and_names_the_host_op_running_then():
    """make bench's profile.txt says where a step's GPU sat idle (train/rank/perf.py idle_gaps): gaps between
    device events (overlapping events merged, stretches under min_gap left out as launch latency), each charged to
    the outermost host op running at its middle."""
    from train.rank.perf import idle_gaps, idle_text

    # microseconds: kernels 0-100, 105-300 (a 5 us launch gap), 250-400 (overlaps: another stream), 1400-1500,
    # 1500-1600, 1650-2000 (a 50 us gap)
    # (120, 200) lies inside (105, 300): the busy stretch still ends at 300, not 200
    busy = [(1650, 2000), (0, 100), (105, 300), (120, 200), (250, 400), (1400, 1500), (1500, 1600)]
    host = [(350, 1450, "Optimizer.step#AdamW.step", ["optimizer.py(10): step"]),
            (380, 900, "aten::_foreach_add_", ["adamw.py(5): _fused"]),
            (1590, 1700, "Torch-Compiled Region: 1/0", ["bert.py(3): forward"])]
    got = idle_gaps(busy, host, min_gap=20.0)
    assert got["idle_us"] == 1000.0 + 50.0 and got["gaps"] == 2
    assert got["by_host_op"] == [["Optimizer.step#AdamW.step", 1000.0], ["Torch-Compiled Region: 1/0", 50.0]]
    first = got["longest"][0]
    # the gap 400-1400: its middle (900) is at the end of the inner op's range [380, 900): only the step is active
    assert first == {"start_us": 400.0, "idle_us": 1000.0, "host": ["Optimizer.step#AdamW.step"],
                     "stack": ["optimizer.py(10): step"]}
    nested = idle_gaps([(0, 100), (700, 800)], host)["longest"][0]
    assert nested["host"] == ["Optimizer.step#AdamW.step", "aten::_foreach_add_"]
    assert nested["stack"] == ["adamw.py(5): _fused"]  # the innermost op's Python stack
    text = idle_text(got)
    assert text.startswith("GPU idle: 1.1 ms in 2 gaps") and "    1.00 ms  Optimizer.step#AdamW.step" in text
    assert idle_gaps([], host) == {"idle_us": 0.0, "gaps": 0, "by_host_op": [], "longest": []}
    assert idle_gaps(busy, [])["by_host_op"][0][0].startswith("(no host op")
