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
