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
--include / gpu_indices), else its local rank. The pairs of all nodes are measured at the same time, one pair per
node at a time (disjoint groups), so the measuring takes as long on 64 nodes as on one (creating the groups, a
world-wide call each, does not); with two ranks on a node its one pair is that node's whole and a slow GPU could
not be told from the other, so none is measured.

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
    """All-reduce over every pair of ranks of each node with >= 3 ranks (see the module docstring): the results of
    the pairs this rank leads (their lower rank), as measure() with "node" and "gpus" added. ``names[r]`` is rank
    r's node; every rank must call this (it creates every group, in the same order, as new_group requires)."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    gpu = visible[local_rank] if local_rank < len(visible) else str(local_rank)
    labels = [None] * len(names)
    dist.all_gather_object(labels, gpu)
    per_node = {}
    for node in dict.fromkeys(names):
        ranks = [r for r, name in enumerate(names) if name == node]
        if len(ranks) >= 3:
            per_node[node] = [(a, b, dist.new_group([a, b])) for a, b in itertools.combinations(ranks, 2)]
    mine = []
    for k in range(max((len(p) for p in per_node.values()), default=0)):
        for node, pairs in per_node.items():
            if k < len(pairs) and rank in pairs[k][:2]:
                a, b, group = pairs[k]
                result = measure(tensor, group, 2, iters, warmup, device)
                if rank == a:
                    mine.append(dict(result, node=node, gpus=[labels[a], labels[b]]))
        dist.barrier()
    return mine


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

    # Every rank must create every group, in the same order (torch.distributed.new_group).
    pairs = [(a, b, dist.new_group(ranks_of[a] + ranks_of[b])) for a, b in itertools.combinations(nodes, 2)]
    if len(nodes) > 2:
        for a, b, group in pairs:
            members = ranks_of[a] + ranks_of[b]
            if rank in members:
                result = measure(tensor, group, len(members), args.iters, args.warmup, device)
                result["nodes"] = [a, b]
                if rank == members[0]:
                    results["pairs"].append(result)
            dist.barrier()
    elif pairs and rank == 0:  # two nodes: the pair is the whole world
        results["pairs"].append(dict(results["all"][0], nodes=list(nodes)))

    pairs_wanted = args.gpu_pairs == "always" or (args.gpu_pairs == "auto" and cuda)
    results["gpus"] = (gpu_pairs(tensor, names, rank, args.local_rank, args.iters, args.warmup, device)
                       if pairs_wanted else [])

    gathered = [None] * world
    dist.all_gather_object(gathered, (results["pairs"], results["gpus"]))
    if rank == 0:
        results["pairs"] = [pair for part, _ in gathered for pair in part]
        results["gpus"] = [pair for _, part in gathered for pair in part]
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
        os.replace(tmp, args.out)
        print("all-reduce: %d ranks on %d node(s), busbw %.3f GB/s (all ranks)"
              % (world, len(nodes), results["all"][0]["busbw_gbps"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
