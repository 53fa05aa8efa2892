"""Jinja filter ``slurm_min_node_cpus``: the CPUs a Slurm job holds on its smallest node, from ``scontrol --oneliner
--details show job <id>`` (roles/train_launch launch_slurm.yml: srun --cpus-per-task of a run inside an allocation,
as the batch script of a job of its own takes the smallest of SLURM_JOB_CPUS_PER_NODE).

    "{{ __train_launch_alloc_cpus.stdout | slurm_min_node_cpus }}"
"""

from __future__ import annotations

import re

# scontrol --details prints, for each group of the job's nodes laid out alike, "Nodes=<hostlist> CPU_IDs=<ids> Mem=..."
_CPU_IDS = re.compile(r"\bCPU_IDs=([0-9][0-9,-]*)")


def _count(ids: str) -> int:
    total = 0
    for part in ids.split(","):
        first, _, last = part.partition("-")
        total += int(last or first) - int(first) + 1
    return total


def slurm_min_node_cpus(text):
    """The fewest CPUs the job holds on any of its nodes (int), from ``scontrol -o -d show job`` output.

    Args: text: that command's stdout (one job). Its ``CPU_IDs=0-3,8-11`` fields are counted (8 there).
    Raises: ValueError when the text has no CPU_IDs (not a running job's details: a pending job has no nodes yet).
    """
    counts = [_count(ids) for ids in _CPU_IDS.findall(str(text or ""))]
    if not counts:
        raise ValueError("slurm_min_node_cpus: no CPU_IDs in the job's details (is the job running? scontrol -d "
                         "show job lists them for each node of a running job)")
    return min(counts)


class FilterModule:
    def filters(self):
        return {"slurm_min_node_cpus": slurm_min_node_cpus}
