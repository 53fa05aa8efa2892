"""The inventory rules: a node in two groups, a slot value with a trailing space, GPU indices out of range -> one
hostfile line per host, clean slots=N, the bad index refused. Runs the cluster_check role's inventory entry point and
the real templates/hostfile.j2 through ansible-playbook on fake inventories."""

import json
import os
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def run(run_playbook, tmp_path, inventory):
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = run_playbook("roles/cluster_check/tests/inventory.yml", "-i", str(tmp_path / "hosts.yml"),
                        "-e", "out_dir=%s" % tmp_path, "-e", "ansible_python_interpreter=%s" % sys.executable)
    facts = json.loads((tmp_path / "facts.json").read_text()) if proc.returncode == 0 else None
    return proc, facts


def inventory(head, workers, hostvars, addresses=True):
    """A fake inventory; with addresses, every host without cluster_address/ansible_host gets a 10.9.0.x one."""
    names = sorted(set(head) | set(workers))
    hosts = {name: dict(hostvars.get(name, {}), ansible_connection="local") for name in names}
    for i, name in enumerate(names):
        if addresses and not {"cluster_address", "ansible_host"} & set(hosts[name]):
            hosts[name]["cluster_address"] = f"10.9.0.{i + 10}"
    return {"all": {"hosts": hosts, "children": {"head": {"hosts": {h: None for h in head}},
                                                  "workers": {"hosts": {w: None for w in workers}}}}}


def test_case1_node_in_two_groups_and_a_slot_with_a_trailing_space(run_playbook, tmp_path):
    proc, facts = run(run_playbook, tmp_path, inventory(["head-1"], ["head-1", "worker-1"],
                                          {"head-1": {"slots": "8 "}, "worker-1": {"slots": 8}}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert facts["hosts"] == ["head-1", "worker-1"] and facts["world_size"] == 16 and facts["include"] == ""
    assert facts["master_addr"] == "10.9.0.10"  # the head's cluster_address
    lines = [line for line in (tmp_path / "hostfile").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["head-1 slots=8", "worker-1 slots=8"]


def test_case1_gpu_indices_within_slots_become_the_include_filter(run_playbook, tmp_path):
    proc, facts = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1"],
                                          {"head-1": {"slots": 4, "gpu_indices": "2, 3"},
                                           "worker-1": {"slots": 4}}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert facts["ranks"] == {"head-1": 2, "worker-1": 4} and facts["world_size"] == 6
    assert facts["include"] == "head-1:2,3@worker-1"
    lines = [line for line in (tmp_path / "hostfile").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["head-1 slots=4", "worker-1 slots=4"]


@pytest.mark.parametrize("indices", [[2, 3], "2,3", [0, 0], "a,b"])
def test_case1_out_of_range_gpu_indices_are_refused(run_playbook, tmp_path, indices):
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1"],
                                      {"head-1": {"slots": 8}, "worker-1": {"slots": 2, "gpu_indices": indices}}))
    assert proc.returncode != 0
    errors = [line for line in proc.stdout.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 1 and "host worker-1: gpu_indices is" in errors[0], errors
    assert "slots=2, so the indices must be distinct integers from 0 to 1" in errors[0]
    assert not (tmp_path / "hostfile").exists()


@pytest.mark.parametrize("slots", ["eight", 0, "-2", None])
def test_bad_slots_are_refused_naming_the_host(run_playbook, tmp_path, slots):
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1"], [], {"head-1": {"slots": slots}}))
    assert proc.returncode != 0
    assert "host head-1: slots is" in proc.stdout and "positive integer" in proc.stdout


def test_two_heads_are_refused(run_playbook, tmp_path):
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1", "head-2"], [], {"head-1": {"slots": 1}, "head-2": {"slots": 1}}))
    assert proc.returncode != 0 and "must put exactly one host in group 'head'; it has 2" in proc.stdout


def test_slots_of_a_cuda_node_without_slots_are_its_gpu_count(run_playbook, tmp_path):
    """No slots in the inventory on an accelerator=cuda node: nvidia-smi's GPU count (a stand-in here) becomes its
    slots fact, counted once per run; a CPU node without slots is still refused."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    fake.chmod(0o755)
    inv = inventory(["head-1"], ["worker-1"], {"head-1": {"slots": 2, "accelerator": "cuda"},
                                               "worker-1": {"accelerator": "cuda"}})
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    proc = run_playbook("roles/cluster_check/tests/inventory.yml", "-i", str(tmp_path / "hosts.yml"),
                        "-e", "out_dir=%s" % tmp_path, "-e", "ansible_python_interpreter=%s" % sys.executable,
                        env={"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])})
    assert proc.returncode == 0, proc.stdout[-3000:]
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["ranks"] == {"head-1": 2, "worker-1": 3} and facts["world_size"] == 5
    lines = [line for line in (tmp_path / "hostfile").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["head-1 slots=2", "worker-1 slots=3"]
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1"], {"head-1": {"slots": 2}, "worker-1": {}}))
    assert proc.returncode != 0 and "host worker-1: slots is \"not set\"" in proc.stdout


def test_the_master_address_is_the_heads_cluster_address_not_its_ansible_host(run_playbook, tmp_path):
    """One rule for every node's address (cluster_address, else ansible_host, else the name): ssh_mesh writes these
    into /etc/hosts and the head's is the launcher's --master_addr, also where ansible_host is a management address."""
    proc, facts = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1", "worker-2"], {
        "head-1": {"slots": 1, "ansible_host": "192.168.50.10", "cluster_address": "10.1.0.10"},
        "worker-1": {"slots": 1, "ansible_host": "10.1.0.11"},
        "worker-2": {"slots": 1, "cluster_address": "10.1.0.12"}}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert facts["addresses"] == {"head-1": "10.1.0.10", "worker-1": "10.1.0.11", "worker-2": "10.1.0.12"}
    assert facts["master_addr"] == "10.1.0.10"


def test_a_cluster_address_that_is_a_name_is_refused(run_playbook, tmp_path):
    """A node with only a DNS name as ansible_host: /etc/hosts needs an IP, so cluster_address must be set."""
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1"], {
        "head-1": {"slots": 1}, "worker-1": {"slots": 1, "ansible_host": "worker-1.mgmt.example.org"}}))
    assert proc.returncode != 0
    assert 'host worker-1: its cluster address is "worker-1.mgmt.example.org"' in proc.stdout
    assert "set to the IP address the other nodes reach it on" in " ".join(proc.stdout.split())


def test_a_loopback_cluster_address_on_several_nodes_is_refused(run_playbook, tmp_path):
    proc, _ = run(run_playbook, tmp_path, inventory(["head-1"], ["worker-1"], {
        "head-1": {"slots": 1, "cluster_address": "127.0.1.1"}, "worker-1": {"slots": 1}}))
    assert proc.returncode != 0 and "host head-1: its cluster address is \"127.0.1.1\"" in proc.stdout


def test_a_limit_that_leaves_nodes_out_stops_at_once_naming_them(run_playbook, tmp_path):
    inv = inventory(["head-1"], ["worker-1", "worker-2"], {n: {"slots": 1} for n in ("head-1", "worker-1", "worker-2")})
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    proc = run_playbook("roles/cluster_check/tests/inventory.yml", "-i", str(tmp_path / "hosts.yml"), "--limit",
                        "worker-2", "-e", "out_dir=%s" % tmp_path, "-e", "ansible_python_interpreter=%s" % sys.executable)
    assert proc.returncode != 0
    errors = [line for line in proc.stdout.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 1 and "--limit leaves out head-1, worker-1 of the cluster" in errors[0], errors
    assert "playbooks/provision.yml --limit worker-2" in proc.stdout
    assert not (tmp_path / "facts.json").exists()
