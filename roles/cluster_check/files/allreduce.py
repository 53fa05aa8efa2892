"""All-reduce bus-bandwidth test across all ranks, for each pair of nodes and for each pair of GPUs (ranks) of a
node with three or more ranks; started by the DeepSpeed launcher.

    deepspeed --hostfile H allreduce.py --out RESULTS.json [--mib 64] [--iters 10] [--warmup 3]

Every rank: torch.distributed with NCCL when CUDA is available (one GPU per local rank), gloo otherwise. Rank 0
writes RESULTS.json::

    {"backend": "gloo", "world_size": 4, "nodes": ["head-1", "worker-1"],
     "all":   [{"ranks": 4, "bytes": ..., "time_s": ..., "algbw_gbps": ..., "busbw_gbps": ...}],
     "pairs": [{"nodes": ["head-1", "worker-1"], "ranks": 4, ...}],
     "gpus":  [{"node": "head-1", "gpus": ["0", "1"], "ranks": 2, ...}]}

"gpus" (with CUDA, or --gpu-pairs always) names a rank's device as CUDA_VISIBLE_DEVICES lists it (the launcher's
--include / gpu_indices), else its local rank; with two ranks on a node its one pair is that node's whole and a slow
GPU could not be told from the other, so none is measured.

Every pair of nodes, and every pair of a node's GPUs, is measured once, in rounds of disjoint pairs (:func:`rounds`,
the circle method of round-robin tournaments): n nodes take n - 1 rounds (n for odd n, one node sitting out each
round) of n/2 pairs measured at the same time, instead of n(n - 1)/2 one after another; the GPU pairs of all nodes
share rounds too. A round's process groups are created at its start (torch's new_subgroups_by_enumeration, a call
of every rank) and destroyed at its end: a rank never holds more than one pair's group. Disjoint pairs share no
node, so on a non-blocking fabric (a fat tree, one switch) they do not slow each other down; where they do
(oversubscribed uplinks), every pair is measured under the same load and the slowest still stand out. Rank 0
prints how many rounds and groups it took.

Formula (nccl-tests doc/PERFORMANCE.md, AllReduce): algbw = S / t with S the buffer size in bytes and t the mean
time of one all-reduce in seconds; busbw = algbw * 2 (n - 1) / n with n the ranks taking part. Units: GB/s = 1e9
bytes/s. The node of a rank is --nodes[CROSS_RANK] (the launcher's node rank, hostfile order), else its host name.
"""

import argparse
import itertools
import json
import os
import socket
import time

import torch
import torch.distributed as dist


def rounds(items):
    """Every pair of ``items`` exactly once, as rounds of disjoint pairs (the circle method): a list of rounds, each
    a list of (a, b) with a before b in ``items``' order. n items give n - 1 rounds of n/2 pairs (n even) or n
    rounds of (n - 1)/2 (n odd: each item sits out one round); fewer than two items give []. Every rank computes
    the same schedule from the same list."""
    items = list(items)
    if len(items) < 2:
        return []
    order = {item: i for i, item in enumerate(items)}
    ring = items + [None] * (len(items) % 2)
    schedule = []
    for _ in range(len(ring) - 1):
        pairs = [(ring[i], ring[-1 - i]) for i in range(len(ring) // 2)]
        schedule.append([tuple(sorted(pair, key=order.get)) for pair in pairs if None not in pair])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return schedule


def measure_rounds(tensor, schedule, ranks_of, rank, iters, warmup, device):
    """Measure each round's pairs at the same time (``schedule``: rounds of (a, b), ``ranks_of[x]``: the ranks of
    pair member x); every rank must call this. Returns ([(a, b, measure() result) of the pairs this rank leads --
    the lowest rank of the pair], the number of process groups created)."""
    mine, created = [], 0
    for pairs in schedule:
        members = [ranks_of[a] + ranks_of[b] for a, b in pairs]
        group, groups = dist.new_subgroups_by_enumeration(members)
        created += len(groups)
        for (a, b), ranks in zip(pairs, members):
            if rank in ranks:
                result = measure(tensor, group, len(ranks), iters, warmup, device)
                if rank == min(ranks):
                    mine.append((a, b, result))
        dist.barrier()
        for g in groups:
            dist.destroy_process_group(g)
    return mine, created


def measure(tensor, group, size, iters, warmup, device):
    """Mean seconds of one all-reduce of ``tensor`` over ``group`` (``size`` ranks), with the bandwidths."""
    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / iters
    nbytes = tensor.numel() * tensor.element_size()
    algbw = nbytes / seconds / 1e9
    return {"ranks": size, "bytes": nbytes, "time_s": seconds, "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (size - 1) / size if size > 1 else algbw}


def gpu_pairs(tensor, names, rank, local_rank, iters, warmup, device):
    """All-reduce over every pair of ranks of each node with >= 3 ranks (see the module docstring), the nodes' pairs
    in shared rounds: (the results of the pairs this rank leads, as measure() with "node" and "gpus" added, the
    process groups created). ``names[r]`` is rank r's node; every rank must call this."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    gpu = visible[local_rank] if local_rank < len(visible) else str(local_rank)
    labels = [None] * len(names)
    dist.all_gather_object(labels, gpu)
    per_node = {node: rounds(r for r, name in enumerate(names) if name == node) for node in dict.fromkeys(names)}
    per_node = {node: schedule for node, schedule in per_node.items() if len(schedule) > 1}  # 3+ ranks
    schedule = [[pair for s in per_node.values() if k < len(s) for pair in s[k]]
                for k in range(max((len(s) for s in per_node.values()), default=0))]
    measured, created = measure_rounds(tensor, schedule, {r: [r] for r in range(len(names))}, rank, iters, warmup,
                                       device)
    return [dict(result, node=names[a], gpus=[labels[a], labels[b]]) for a, b, result in measured], created


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--mib", type=float, default=64.0)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--nodes", default="", help="node names in hostfile order (comma-separated)")
    parser.add_argument("--gpu-pairs", choices=["auto", "always", "never"], default="auto",
                        help="measure every pair of a node's ranks (3+ ranks): auto = on CUDA only (gloo's CPU "
                             "ranks share the same cores and memory: their pairs say nothing of a device)")
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", args.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if cuda:
        dist.init_process_group(backend="nccl", device_id=device)
    else:
        dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    names = [None] * world
    hostfile_order = [name for name in args.nodes.split(",") if name]
    node_rank = int(os.environ.get("CROSS_RANK", 0))  # set by deepspeed.launcher.launch (--node_rank)
    me = hostfile_order[node_rank] if node_rank < len(hostfile_order) else socket.gethostname()
    dist.all_gather_object(names, me)
    nodes = list(dict.fromkeys(names))
    ranks_of = {node: [r for r, name in enumerate(names) if name == node] for node in nodes}

    tensor = torch.ones(int(args.mib * 2 ** 20 // 4), dtype=torch.float32, device=device)
    results = {"backend": dist.get_backend(), "world_size": world, "nodes": nodes, "all": [], "pairs": []}
    results["all"].append(measure(tensor, None, world, args.iters, args.warmup, device))

    schedule = rounds(nodes)
    created = 0
    if len(nodes) > 2:
        measured, created = measure_rounds(tensor, schedule, ranks_of, rank, args.iters, args.warmup, device)
        results["pairs"] = [dict(result, nodes=[a, b]) for a, b, result in measured]
    elif len(nodes) == 2 and rank == 0:  # two nodes: the pair is the whole world
        results["pairs"].append(dict(results["all"][0], nodes=list(nodes)))

    pairs_wanted = args.gpu_pairs == "always" or (args.gpu_pairs == "auto" and cuda)
    results["gpus"], gpu_groups = (gpu_pairs(tensor, names, rank, args.local_rank, args.iters, args.warmup, device)
                                   if pairs_wanted else ([], 0))
    results["rounds"] = len(schedule) if len(nodes) > 2 else 0
    results["groups_created"] = created + gpu_groups

    gathered = [None] * world
    dist.all_gather_object(gathered, (results["pairs"], results["gpus"]))
    if rank == 0:
        order = {pair: i for i, pair in enumerate(itertools.combinations(nodes, 2))}  # hostfile order, as before
        results["pairs"] = sorted((pair for part, _ in gathered for pair in part),
                                  key=lambda p: order[tuple(p["nodes"])])
        results["gpus"] = sorted((pair for _, part in gathered for pair in part),
                                 key=lambda p: (nodes.index(p["node"]), p["gpus"]))
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
        os.replace(tmp, args.out)
        print("all-reduce: %d ranks on %d node(s), busbw %.3f GB/s (all ranks); %d pairs of nodes in %d rounds, "
              "%d process groups created one round at a time"
              % (world, len(nodes), results["all"][0]["busbw_gbps"], len(results["pairs"]), results["rounds"],
                 results["groups_created"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
