"""roles/train_launch/filter_plugins/slurm_refusal.py: why a -e launcher=slurm job is not submitted, from sinfo's
result on the head as Ansible registers it (the lines are sinfo's real --Node "%N %P %t" output)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "slurm_refusal_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "slurm_refusal.py")
_MOD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MOD)
slurm_refusal = _MOD.slurm_refusal

SINFO = {"rc": 0, "stdout": "head-1 main* idle\nworker-1 main* idle\nworker-1 debug idle\nworker-2 main* alloc\n",
         "stderr": ""}
HOSTS = ["head-1", "worker-1", "worker-2"]


def test_nothing_stops_a_job_on_known_nodes_and_partitions():
    assert slurm_refusal(SINFO, HOSTS, "head-1") == ""
    assert slurm_refusal(SINFO, HOSTS, "head-1", "main") == ""  # "main*" is the default partition named main
    assert slurm_refusal(SINFO, ["worker-1"], "head-1", "debug") == ""


def test_a_head_without_slurm_says_what_to_install():
    gone = {"rc": 2, "cmd": ["sinfo"], "msg": "[Errno 2] No such file or directory: b'sinfo'", "stdout": ""}
    said = slurm_refusal(gone, HOSTS, "head-1")
    assert said.startswith("head-1 cannot run Slurm's commands (sinfo: [Errno 2] No such file or directory: b'sinfo')")
    assert "slurm-client" in said and "slurm_enabled: true" in said
    down = {"rc": 1, "stdout": "", "stderr": "slurm_load_partitions: Unable to contact slurm controller\n"}
    assert "(sinfo: slurm_load_partitions: Unable to contact slurm controller)" in slurm_refusal(down, HOSTS, "h")


def test_nodes_slurm_does_not_know_are_named_with_the_ones_it_does():
    assert slurm_refusal(SINFO, HOSTS + ["worker-3"], "head-1").startswith(
        "worker-3 is not a Slurm node (sinfo on head-1 lists head-1, worker-1, worker-2). The inventory's node names "
        "must be Slurm's NodeNames")
    assert slurm_refusal(SINFO, ["gpu-1", "head-1", "gpu-2"], "head-1", "nosuch").startswith(
        "gpu-1, gpu-2 are not Slurm nodes")  # before the partition: the nodes are the first thing to mend
    assert slurm_refusal({"rc": 0, "stdout": ""}, ["n1"], "h").startswith("n1 is not a Slurm node (sinfo on h lists "
                                                                         "none)")


def test_a_missing_partition_names_the_existing_ones():
    assert slurm_refusal(SINFO, HOSTS, "head-1", "gpu") == \
        "there is no partition gpu (-e train_slurm_partition); Slurm has main, debug."
