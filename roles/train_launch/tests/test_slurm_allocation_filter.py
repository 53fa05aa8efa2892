"""roles/train_launch/filter_plugins/slurm_allocation.py: the CPUs a run inside an allocation gives each node's srun
task, from the details scontrol prints of a running job (the layout of Slurm 22.05's `scontrol -o -d show job`)."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "slurm_allocation_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "slurm_allocation.py")
_MOD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MOD)

DETAILS = ("JobId=57 JobName=interactive UserId=root(0) JobState=RUNNING Reason=None NodeList=worker-[1-3] "
           "BatchHost=worker-1 NumNodes=3 NumCPUs=40 NumTasks=3 CPUs/Task=1 TRES=cpu=40,mem=0,node=3 "
           "JOB_GRES=(null) Nodes=worker-[1-2] CPU_IDs=0-15 Mem=0 GRES= Nodes=worker-3 CPU_IDs=0-3,8-11 Mem=0 GRES= "
           "MinCPUsNode=1 Features=(null)")


def test_the_smallest_nodes_cpus_are_counted_from_its_cpu_ids():
    assert _MOD.slurm_min_node_cpus(DETAILS) == 8
    assert _MOD.slurm_min_node_cpus("Nodes=worker-1 CPU_IDs=0-1 Mem=0 Nodes=worker-2 CPU_IDs=0-1 Mem=0") == 2
    assert _MOD.slurm_min_node_cpus("Nodes=head-1 CPU_IDs=3 Mem=0") == 1


def test_a_job_without_node_details_is_an_error():
    with pytest.raises(ValueError, match="no CPU_IDs"):
        _MOD.slurm_min_node_cpus("JobId=58 JobState=PENDING Reason=Resources NodeList=(null)")
