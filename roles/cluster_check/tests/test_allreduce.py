"""roles/cluster_check/files/allreduce.py for real: three "nodes" of one rank each (three torch.distributed.run
agents with node ranks 0..2, as deepspeed.launcher.launch sets CROSS_RANK), gloo on this CPU machine."""

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files", "allreduce.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("n", range(0, 34))
def test_rounds_pair_every_two_items_once_in_rounds_of_disjoint_pairs(n):
    """allreduce.rounds, the circle method: n - 1 rounds for even n, n for odd n (one item out each round), each
    pair in hostfile order."""
    import itertools

    sys.path.insert(0, os.path.dirname(SCRIPT))
    from allreduce import rounds

    items = ["n%02d" % i for i in range(n)]
    schedule = rounds(items)
    assert len(schedule) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    assert sorted(pair for r in schedule for pair in r) == list(itertools.combinations(items, 2))
    for r in schedule:
        members = [x for pair in r for x in pair]
        assert len(members) == len(set(members)) and len(r) == n // 2


@pytest.mark.parametrize("nnodes", [2, 3])
def test_all_ranks_and_every_pair_of_nodes(tmp_path, nnodes):
    port, out = free_port(), tmp_path / "allreduce.json"
    names = ["n%d" % i for i in range(nnodes)]
    procs = []
    for node_rank in range(nnodes):
        env = dict(os.environ, CROSS_RANK=str(node_rank), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc_per_node", "1",
             "--node_rank", str(node_rank), "--master_addr", "127.0.0.1", "--master_port", str(port),
             SCRIPT, "--out", str(out), "--nodes", ",".join(names), "--mib", "1", "--iters", "3", "--warmup", "1"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), logs
    results = json.loads(out.read_text())
    assert results["backend"] == "gloo" and results["world_size"] == nnodes and results["nodes"] == names
    (whole,) = results["all"]
    assert whole["ranks"] == nnodes and whole["bytes"] == 2 ** 20
    # nccl-tests' all-reduce formulas
    assert whole["algbw_gbps"] == pytest.approx(whole["bytes"] / whole["time_s"] / 1e9)
    assert whole["busbw_gbps"] == pytest.approx(whole["algbw_gbps"] * 2 * (nnodes - 1) / nnodes)
    pairs = [tuple(p["nodes"]) for p in results["pairs"]]
    assert pairs == [("n0", "n1"), ("n0", "n2"), ("n1", "n2")][:1 if nnodes == 2 else 3]
    pairs = {tuple(p["nodes"]): p for p in results["pairs"]}
    for pair in pairs.values():
        assert pair["ranks"] == 2 and pair["busbw_gbps"] == pytest.approx(pair["algbw_gbps"]) and pair["time_s"] > 0
    assert results["gpus"] == []  # one rank per node: no pair of GPUs to measure
    # three nodes: three rounds of one pair, one group each, made and destroyed round by round
    assert (results["rounds"], results["groups_created"]) == ((0, 0) if nnodes == 2 else (3, 3))


def test_every_pair_of_ranks_of_a_node_with_three(tmp_path):
    """One node of three ranks (as three GPUs: --gpu-pairs always, since without CUDA the default leaves them out)
    with CUDA_VISIBLE_DEVICES=4,5,6 (gpu_indices): the three pairs of its ranks are measured and named by those
    device numbers."""
    port, out = free_port(), tmp_path / "allreduce.json"
    env = dict(os.environ, CROSS_RANK="0", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="4,5,6")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "3", "--master_addr",
         "127.0.0.1", "--master_port", str(port), SCRIPT, "--out", str(out), "--nodes", "head-1", "--mib", "1",
         "--iters", "3", "--warmup", "1", "--gpu-pairs", "always"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    assert results["world_size"] == 3 and results["pairs"] == []
    assert sorted((g["node"], tuple(g["gpus"])) for g in results["gpus"]) == [
        ("head-1", ("4", "5")), ("head-1", ("4", "6")), ("head-1", ("5", "6"))], results["gpus"]
    for g in results["gpus"]:
        assert g["ranks"] == 2 and g["bytes"] == 2 ** 20 and g["busbw_gbps"] == pytest.approx(g["algbw_gbps"])
    assert results["groups_created"] == 3 and results["rounds"] == 0  # the GPU pairs' rounds; one node: no node pair
    # the default (auto) measures pairs on CUDA only: three CPU ranks share one machine's cores and memory
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "3", "--master_addr",
         "127.0.0.1", "--master_port", str(free_port()), SCRIPT, "--out", str(out), "--nodes", "head-1", "--mib", "1",
         "--iters", "2", "--warmup", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and json.loads(out.read_text())["gpus"] == [], proc.stdout + proc.stderr
