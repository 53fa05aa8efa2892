"""train/tools/bench.py's readers of what a benchmark run leaves: the playbook's profile_tasks lines and importtime."""

from __future__ import annotations

import subprocess
import sys

import pytest

from train.tools import bench

from .conftest import REPO

pytestmark = pytest.mark.torch  # test tiers: pytest.ini (it imports train.rank.pretrain)

# the shape ansible.posix.profile_tasks gives train.yml's output (header, then the time line under it)
PLAYBOOK_LOG = """
PLAY [Plan the run (controller)] ***********************************************

TASK [train_plan : Plan the run (job, DeepSpeed config, ranks, launch commands)] ***
Wednesday 02 December 2026  00:54:09 +0000 (0:00:00.120)       0:00:01.250 ****
ok: [localhost]

TASK [cluster_check : Describe this node (venv, NCCL, GPUs, pdsh, disks and file locks)] ***
Wednesday 02 December 2026  00:54:10 +0000 (0:00:00.400)       0:00:01.650 ****
ok: [localhost]

TASK [train_stage : Write the job and the DeepSpeed config into the run directory] ***
Wednesday 02 December 2026  00:54:15 +0000 (0:00:04.350)       0:00:06.000 ****
changed: [localhost]

TASK [train_launch : Launch deepspeed from the head node, logging to /x/train.log] ***
Wednesday 02 December 2026  00:54:17 +0000 (0:00:01.500)       0:01:07.500 ****
changed: [localhost]

TASK [train_launch : Follow the training (step, loss, samples/s, ETA)] *********
Wednesday 02 December 2026  00:54:18 +0000 (0:00:00.500)       0:01:08.000 ****
"""


def test_prelaunch_tasks_reads_profile_tasks_lines():
    pre = bench.prelaunch_tasks(PLAYBOOK_LOG, top=2)
    assert pre == {"prelaunch_s": 67.5, "tasks": 3, "slowest": [
        ["train_stage : Write the job and the DeepSpeed config into the run directory", 61.5],
        ["cluster_check : Describe this node (venv, NCCL, GPUs, pdsh, disks and file locks)", 4.35]]}
    assert bench.prelaunch_tasks(PLAYBOOK_LOG.replace("Launch deepspeed", "Start something")) is None
    assert bench.prelaunch_tasks("TASK [a] ***\nok: [localhost]\n") is None  # profile_tasks was off


def test_import_profile_of_a_real_importtime_log():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import train.rank.pretrain"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    profile = bench.import_profile(proc.stderr)
    names = [name for name, _ in profile["top"]]
    assert "torch" in names and any(n.startswith("transformers") for n in names), profile
    seconds = [sec for _, sec in profile["top"]]
    assert seconds == sorted(seconds, reverse=True) and 0 < sum(seconds) <= profile["total_s"] + 0.05
    assert profile["total_s"] > 0.5  # torch and transformers take more than that anywhere
    assert bench.import_profile(proc.stderr, root="no.such.module") is None


def test_scaling_rounds_once_where_it_is_shown():
    """The efficiency is kept whole and rounded only where shown: 0.613495 is "61.3 %" in the table and in the
    target line alike (rounded to 4 places first, it became 0.6135 and "61.4 %" beside a raw "61.3 %")."""
    rows = [{"series": "s", "label": f"{n} rank(s)", "world_size": n, "samples_per_second": sps, "micro_batch": 8,
             "accumulation": 1} for n, sps in ((1, 100.0), (2, 122.699))]
    top = bench.scaling(rows)[-1]
    assert top["efficiency"] == 122.699 / 2 / 100.0
    assert f"{100 * top['efficiency']:.1f}" == "61.3" and f"{100 * round(top['efficiency'], 4):.1f}" == "61.4"


def _row(label, **kw):
    row = {"label": label, "samples_per_second": None, "tokens_per_second": None, "precision": "bf16",
           "zero_stage": 0, "offload_optimizer": "none", "playbook_start_to_first_step_s": None,
           "launcher_start_to_first_step_s": None, "startup_phases": [], "progress_last_samples_per_second": None}
    return {**row, **kw}


def test_targets_compare_with_the_blogs_recipe_only():
    """The 15x target is checked against a row that ran fp16 + ZeRO-2 + the whole optimizer on the CPU; a row the
    memory plan turned into ZeRO-3 (offload_optimizer=cpu with zero_stage auto) is named, not counted."""
    bert = _row("bert defaults", samples_per_second=1083.7)
    blog2 = _row("bert, the blog's recipe", samples_per_second=70.0, precision="fp16", zero_stage=2,
                 offload_optimizer="cpu")
    assert ">= 15x the blog's recipe: 15.5x — met" in bench.targets_of([bert, blog2])
    assert ">= 15x the blog's recipe: 10.8x — missed" in bench.targets_of(
        [bert, dict(blog2, samples_per_second=100.0)])
    zero3 = dict(blog2, zero_stage=3, samples_per_second=34.3)
    lines = [t for t in bench.targets_of([bert, zero3]) if "blog" in t]
    assert lines == [">= 15x the blog's recipe: 31.6x against a row that ran zero_stage 3, not the blog's precision "
                     "fp16, zero_stage 2, offload_optimizer cpu — not checked"], lines


def test_start_up_targets_of_round_two():
    """Warm compile caches: playbook start -> first step <= 20 s, launcher start -> first step <= 10 s; a cold bert
    compile (its first optimizer step) <= 20 s; runs with a cold compile get no playbook/launcher target."""
    rows = [_row("bert defaults", samples_per_second=1083.7, playbook_start_to_first_step_s=50.2,
                 launcher_start_to_first_step_s=27.2,
                 startup_phases=[["imports", 6.2], ["first optimizer step", 15.7]]),
            _row("bert defaults, second run (compile caches warm)", playbook_start_to_first_step_s=19.5,
                 launcher_start_to_first_step_s=18.1)]
    got = bench.targets_of(rows)
    assert "bert defaults, second run (compile caches warm): playbook start -> first step end <= 20 s: 19.5 s — met" \
        in got
    assert "bert defaults, second run (compile caches warm): launcher start -> first step end <= 10 s: 18.1 s — " \
        "missed" in got
    assert "bert defaults, cold compile: first optimizer step <= 20 s: 15.7 s — met" in got
    assert not [t for t in got if t.startswith("bert defaults: playbook") or t.startswith("bert defaults: launcher")]


def test_a_resumed_runs_progress_line_is_held_against_the_rate_before_the_stop(tmp_path):
    """run_row reads the first attempt's steady rate from attempt-1/perf.json (where train_launch moves it) and the
    target compares the resumed attempt's last progress line with it."""
    out = tmp_path / "outputs" / "r"
    (out / bench.RESUMED_FROM).mkdir(parents=True)
    (out / bench.RESUMED_FROM / "perf.json").write_text('{"steady_samples_per_second": 1100.0}')
    (out / "perf.json").write_text('{"steady_samples_per_second": 1090.0}')
    (out / "progress.jsonl").write_text('{"step": 70, "samples_per_second": 1000.0}\n'
                                        '{"step": 80, "samples_per_second": 1050.5}\n{"event": "end"}\n')
    row = bench.run_row({"label": "bert defaults, resumed", "command": "c", "run_name": "r",
                         "run_dirs": [str(out), str(tmp_path / "none")]})
    assert row["before_resume_samples_per_second"] == 1100.0 and row["progress_last_samples_per_second"] == 1050.5
    got = bench.targets_of([row])
    assert "bert defaults, resumed: the progress line's samples/s at the last step after the resume within 10 % of " \
        "the rate before the stop: 1,050.5 vs 1,100.0 — met" in got
    slow = bench.targets_of([{**row, "progress_last_samples_per_second": 950.0}])
    assert any(t.endswith("950.0 vs 1,100.0 — missed") for t in slow)
    assert not [t for t in bench.targets_of([_row("bert defaults", samples_per_second=1.0,
                                                  progress_last_samples_per_second=1.0)]) if "resume" in t]


def test_the_profiled_steps_line_names_where_the_gpu_sat_idle():
    window = {"steps": [12, 13], "wall_s": 0.49, "gpu_kernel_s": 0.423, "gpu_idle_s": 0.061,
              "idle_by_host_op": [["Optimizer.step#AdamW.step", 21000.0], ["CompiledFunction", 9500.0]]}
    assert bench._idle(window) == ("; idle 0.061 s, while the host ran: Optimizer.step#AdamW.step 21.0 ms, "
                                   "CompiledFunction 9.5 ms")
    assert bench._idle({"steps": [12, 13], "wall_s": 0.49, "gpu_kernel_s": 0.423}) == ""  # an older perf.json
