"""The health check's node-pair all-reduce (roles/cluster_check/files/allreduce.py): measured with N one-rank
"nodes" on this machine (N torch.distributed.run agents on localhost, gloo, as roles/cluster_check/tests do), then
modelled for larger N. Prints Markdown tables; health-check-scaling.md holds what it printed.

    python docs/benchmarks/health_check_scaling.py [--nodes 8 16] [--script allreduce.py] [--label rounds]

Run it with the node venv's Python (torch). --script names the allreduce.py to measure (default: the repository's);
an older one (git show <commit>:roles/cluster_check/files/allreduce.py > old.py) gives the "before" row.

Model: a test of one pair takes t_pair (warm-up + iterations of one all-reduce of the buffer between two nodes) and
creating one process group takes t_group (a call of every rank). One pair at a time: N(N-1)/2 x (t_pair + t_group).
In rounds of disjoint pairs (the circle method): (N-1) x t_pair + N(N-1)/2 x t_group, the groups of a round made
together at its start. t_pair and t_group are inputs (--t-pair, --t-group, seconds): on one machine every "node"
shares the same cores, so the measured wall time says little about a real fabric's.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "cluster_check" / "files" / "allreduce.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(script: Path, nodes: int, mib: float) -> tuple[float, dict]:
    """Wall seconds of allreduce.py over ``nodes`` one-rank agents, and its results (the JSON rank 0 wrote).
    Raises RuntimeError with the agents' output when one fails."""
    out = Path(tempfile.mkdtemp()) / "allreduce.json"
    names = ",".join("n%02d" % i for i in range(nodes))
    port = free_port()
    start = time.perf_counter()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc_per_node", "1",
         "--node_rank", str(i), "--master_addr", "127.0.0.1", "--master_port", str(port), str(script),
         "--out", str(out), "--nodes", names, "--mib", str(mib), "--iters", "3", "--warmup", "1"],
        env=dict(os.environ, CROSS_RANK=str(i), OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for i in range(nodes)]
    logs = [p.communicate(timeout=1800)[0] for p in procs]
    seconds = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(logs)[-4000:])
    return seconds, json.loads(out.read_text())


def model(n: int, t_pair: float, t_group: float) -> tuple[float, float]:
    """Predicted seconds of the node-pair tests for ``n`` nodes: (one pair at a time, rounds); see the docstring."""
    pairs = n * (n - 1) // 2
    return pairs * (t_pair + t_group), (n - 1 if n % 2 == 0 else n) * t_pair + pairs * t_group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--script", type=Path, default=SCRIPT)
    parser.add_argument("--label", default="rounds")
    parser.add_argument("--mib", type=float, default=1.0)
    parser.add_argument("--t-pair", type=float, default=0.05, help="seconds per pair test on the fabric modelled")
    parser.add_argument("--t-group", type=float, default=0.02, help="seconds to create one process group")
    args = parser.parse_args()
    print(f"| allreduce.py | nodes | pairs | rounds | process groups created | wall s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in args.nodes:
        seconds, results = run(args.script, n, args.mib)
        pairs = len(results["pairs"])
        rounds = results.get("rounds", pairs)  # one pair at a time: a round each
        groups = results.get("groups_created", pairs)  # the old script made one group per pair, all at once
        print(f"| {args.label} | {n} | {pairs} | {rounds} | {groups} | {seconds:.1f} |")
    print()
    print(f"Model (t_pair {args.t_pair} s, t_group {args.t_group} s):")
    print()
    print("| nodes | pairs | one pair at a time, s | rounds, s |")
    print("| --- | --- | --- | --- |")
    for n in (8, 64, 256, 1024):
        one, rounds = model(n, args.t_pair, args.t_group)
        print(f"| {n} | {n * (n - 1) // 2:,} | {one:,.0f} | {rounds:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
