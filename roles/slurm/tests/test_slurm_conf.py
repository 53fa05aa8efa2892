"""roles/slurm's slurm.conf and gres.conf, rendered for an inventory the CI cluster cannot be (GPU nodes, one with
more GPUs, a head without ranks) and read back the way Slurm reads them (one `Key=Value` record per line)."""

import json
import os
import re
import socket
import sys

import pytest

yaml = pytest.importorskip("yaml")

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)


def render(run_playbook, tmp_path, hosts, accelerator="cuda", **role_vars):
    """Render for ``hosts`` ({name: host vars}, gpu-head the head); ``role_vars`` as -e (the playbook loads the
    role's defaults with include_vars, above the inventory). Returns (slurm.conf records, gres.conf text)."""
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "accelerator": accelerator, "slots": 2},
                         "children": {"head": {"hosts": {"gpu-head": hosts["gpu-head"]}},
                                      "workers": {"hosts": {n: v for n, v in hosts.items() if n != "gpu-head"}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = run_playbook("roles/slurm/tests/render.yml", "-i", str(tmp_path / "hosts.yml"), "-e",
                        json.dumps({"out_dir": str(tmp_path), **role_vars}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return [dict(kv.split("=", 1) for kv in line.split()) for line in
            (tmp_path / "slurm.conf").read_text().splitlines() if line and not line.startswith("#")], \
        (tmp_path / "gres.conf").read_text()


def test_gpu_nodes_get_their_gres_and_the_head_without_ranks_runs_no_slurmd(run_playbook, tmp_path):
    hosts = {"gpu-head": {"cluster_address": "10.1.0.1", "slots": 0},
             "gpu-1": {"cluster_address": "10.1.0.2"},
             "gpu-2": {"cluster_address": "10.1.0.3", "slots": 4}}
    records, gres = render(run_playbook, tmp_path, hosts)
    conf = {k: v for r in records for k, v in r.items() if "NodeName" not in r and "PartitionName" not in r}
    # the head's own host name (all nodes are this machine here), its cluster address
    assert conf["SlurmctldHost"] == f"{socket.gethostname().split('.')[0]}(10.1.0.1)" and conf["GresTypes"] == "gpu"
    assert conf["ProctrackType"] == "proctrack/cgroup" and conf["JobCompType"] == "jobcomp/filetxt"
    nodes = {r["NodeName"]: r for r in records if "NodeName" in r}
    assert sorted(nodes) == ["gpu-1", "gpu-2"]  # the head holds no ranks: no slurmd there
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    for name, gpus, addr in (("gpu-1", 2, "10.1.0.2"), ("gpu-2", 4, "10.1.0.3")):
        n = nodes[name]
        assert n["NodeAddr"] == addr and n["Gres"] == f"gpu:{gpus}" and n["CPUs"] == str(os.cpu_count())
        assert abs(int(n["RealMemory"]) - int(mem_mb * 0.95)) <= 0.01 * mem_mb, (n, mem_mb)
    partition = [r for r in records if "PartitionName" in r]
    assert partition == [{"PartitionName": "main", "Nodes": "gpu-1,gpu-2", "Default": "YES", "MaxTime": "INFINITE",
                          "State": "UP"}]
    lines = [l for l in gres.splitlines() if l and not l.startswith("#")]
    assert lines == [f"NodeName=gpu-1 Name=gpu File=/dev/nvidia{i}" for i in range(2)] + \
        [f"NodeName=gpu-2 Name=gpu File=/dev/nvidia{i}" for i in range(4)]


def test_cpu_nodes_get_no_gres_and_the_variables_reach_the_file(run_playbook, tmp_path):
    hosts = {"gpu-head": {"cluster_address": "10.1.0.1"}, "gpu-1": {"cluster_address": "10.1.0.2"}}
    records, gres = render(run_playbook, tmp_path, hosts, accelerator="cpu", slurm_partition="train",
                           slurm_proctrack_type="proctrack/linuxproc", slurm_task_plugin="task/none",
                           slurm_conf_extra=["MaxJobCount=5000"])
    text = (tmp_path / "slurm.conf").read_text()
    assert "GresTypes" not in text and "Gres=" not in text
    assert not [l for l in gres.splitlines() if l and not l.startswith("#")]
    assert re.search(r"^ProctrackType=proctrack/linuxproc$", text, re.M) and "TaskPlugin=task/none" in text
    assert "PartitionName=train Nodes=gpu-head,gpu-1 Default=YES" in text and text.rstrip().endswith("MaxJobCount=5000")
