"""Data staging (roles/train_stage tree.yml, from workers.yml): the prepared data copied to every worker from the head
at once (a star) or as a tree (filter_plugins/staging_tree.py: every node holding the verified data sends one copy a
round).
Measures what it can here, then prints the predicted staging time for larger clusters as a Markdown table;
health-check-scaling.md holds what it printed.

    python3 docs/benchmarks/staging_scaling.py [--log train-pdsh.log ...] [--size-gb 100] [--link-gbit 10]

--log: train.yml logs written with the profile_tasks callback (molecule/cluster/run.sh's
$DSC_CLUSTER_STATE/train-pdsh.log): each one's staging time (from the task "Stage the data onto every worker" to the
first task of the next play), its rounds and the time a round took (the rounds' tasks, from "Copy round by round -
the prepared data" on, divided by the rounds: on a tiny data set, the fixed cost of a round). Without --log, give --t-round.

Model, for N workers lacking the data, S bytes, a link bandwidth B per node (each node sends and receives at B at
once: a switched fabric without oversubscription), a verification hash rate H per node (one core's sha256), Ansible's
forks F (the copies of a round run F at a time: stage_copy holds a fork while its rsync runs) and t_round, the fixed
cost of a round (its Ansible tasks, measured):

    star: t_round + N x S / B + ceil(N / F) x S / H    (the head's uplink carries every copy)
    tree: sum over rounds r of  t_round + ceil(k_r / F) x (S / B + S / H)
          k_r = the copies of round r (1, 2, 4, ... while the holders double), ceil(log2(N + 1)) rounds

A copy is hashed on its node before that node serves (S / H each round). Both are linear in S: the last column is
the size above which the tree is faster (below it the tree's extra rounds cost more than the head's uplink saves).
The head's uplink carries N x S in a star, at most rounds x S in a tree (one copy a round, none where the workers
holding the data are enough).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location(
    "staging_tree", REPO / "roles" / "train_stage" / "filter_plugins" / "staging_tree.py")
staging_tree = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(staging_tree)

_TASK = re.compile(r"^TASK \[(?P<name>[^\]]+)\]")
_CLOCK = re.compile(r"\(\d+:\d+:[\d.]+\)\s+(?P<h>\d+):(?P<m>\d+):(?P<s>[\d.]+)")
_ROUNDS = re.compile(r"round \d+ of (\d+):")


def staging_seconds(text: str) -> tuple[float, int, float | None]:
    """(seconds, rounds, seconds of the rounds) of the data staging in a train.yml log written with profile_tasks:
    from the start of the task "train_stage : Stage the data onto every worker" to the start of the first task of the
    next play (profile_tasks prints the elapsed time under every task's header; the staging ends its play). rounds:
    the schedule's ("round i of R"), 0 where every worker held the data already, 1 for a log from before the tree
    (one copy a worker, all at once); seconds of the rounds: from the task "Copy
    round by round - the prepared data" on (None in a log without it). Raises ValueError when the log lacks those tasks or
    profile_tasks' times."""
    starts = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("PLAY ["):
            starts.append(("PLAY", None))
            continue
        m = _TASK.match(line)
        if not m:
            continue
        clock = next((_CLOCK.search(x) for x in lines[i + 1:i + 3] if _CLOCK.search(x)), None)
        if clock:
            starts.append((m["name"], int(clock["h"]) * 3600 + int(clock["m"]) * 60 + float(clock["s"])))
    begin = next((i for i, (name, _) in enumerate(starts) if name == "train_stage : Stage the data onto every worker"),
                 None)
    if begin is None:
        raise ValueError("no task 'train_stage : Stage the data onto every worker' with profile_tasks' times in "
                         "the log; give a train.yml log written with "
                         "ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks")
    play = next((i for i in range(begin + 1, len(starts)) if starts[i][0] == "PLAY"), None)
    end = next((t for _, t in starts[play + 1:] if t is not None), None) if play is not None else None
    if end is None:
        raise ValueError("the log ends inside the staging (no play after it)")
    # the prepared data's schedule only (a resumed run's checkpoint and a script's data have their own), in the lines
    # the staging printed (a log from before the tree has neither)
    staged = text.split("TASK [train_stage : Stage the data onto every worker]", 1)[1]
    shown = staged.split("Show the copies round by round (source -> destination) - the prepared data", 1)
    shown = shown[1].split("TASK [", 1)[0] if len(shown) > 1 else staged
    if re.search(r"every worker holds (the|the prepared) data already", shown):
        return end - starts[begin][1], 0, None
    rounds = _ROUNDS.findall(shown)
    copying = next((t for name, t in starts[begin:play] if name in (
        "train_stage : Copy round by round - the prepared data", "train_stage : Copy the prepared data in rounds")), None)
    return end - starts[begin][1], int(rounds[0]) if rounds else 1, None if copying is None else end - copying


def hash_rate(mib: int = 256) -> float:
    """sha256 bytes per second of one core here (hashlib over ``mib`` MiB in memory, as the verification hashes)."""
    block = b"\x5a" * (1 << 20)
    h = hashlib.sha256()
    start = time.perf_counter()
    for _ in range(mib):
        h.update(block)
    return mib * (1 << 20) / (time.perf_counter() - start)


def schedule(n: int) -> list[list[dict]]:
    """The tree's rounds for ``n`` workers that lack the data (the real schedule: staging_tree.staging_rounds)."""
    return staging_tree.staging_rounds({f"w{i}": False for i in range(n)}, "head")


def rounds_of(n: int) -> list[int]:
    """Copies of each round of the tree for ``n`` workers that lack the data."""
    return [len(r) for r in schedule(n)]


def star_seconds(n: int, size: float, link: float, hashed: float, t_round: float, forks: float) -> float:
    """Predicted seconds of a star; ``size`` bytes, ``link`` and ``hashed`` bytes per second (the copies share the
    head's uplink whatever the forks; the checks run ``forks`` nodes at a time)."""
    return t_round + n * size / link + max(1, math.ceil(n / forks)) * size / hashed


def tree_seconds(n: int, size: float, link: float, hashed: float, t_round: float, forks: float) -> float:
    """Predicted seconds of the tree with ``forks`` copies at a time (math.inf: no limit)."""
    return sum(t_round + max(1, math.ceil(k / forks)) * (size / link + size / hashed) for k in rounds_of(n))


def crossover_bytes(n: int, link: float, hashed: float, t_round: float, forks: float) -> float:
    """The data size above which the tree is faster than the star for ``n`` workers (math.inf: never). Both times
    are linear in the size: the tree pays rounds - 1 more fixed costs and waves x (1/B + 1/H) per byte, the star
    n/B + 1/H per byte."""
    ks = rounds_of(n)
    waves = sum(max(1, math.ceil(k / forks)) for k in ks)
    per_byte = n / link + max(1, math.ceil(n / forks)) / hashed - waves * (1 / link + 1 / hashed)
    return (len(ks) - 1) * t_round / per_byte if per_byte > 0 else math.inf


def size_of(nbytes: float) -> str:
    if nbytes == math.inf:
        return "never"
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.0f} MB"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, nargs="*", default=[], help="train.yml logs with profile_tasks' times")
    parser.add_argument("--size-gb", type=float, default=100.0, help="the prepared data, GB (1e9 bytes)")
    parser.add_argument("--link-gbit", type=float, default=10.0, help="each node's link, Gbit/s")
    parser.add_argument("--forks", type=int, default=50, help="Ansible's forks (ansible.cfg)")
    parser.add_argument("--t-round", type=float, default=None,
                        help="fixed seconds of a round; default: measured from --log (a log of the tree)")
    parser.add_argument("--hash-gbs", type=float, default=None, help="sha256 GB/s of one core; default: measured here")
    args = parser.parse_args()
    t_round = args.t_round
    if args.log:
        print("| log | staging s | rounds | s a round |")
        print("| --- | --- | --- | --- |")
        for path in args.log:
            seconds, rounds, copying = staging_seconds(path.read_text(encoding="utf-8", errors="replace"))
            per_round = f"{copying / rounds:.1f}" if copying is not None else "-"
            print(f"| {path} | {seconds:.1f} | {rounds} | {per_round} |")
            if copying is not None and args.t_round is None:
                t_round = copying / rounds
        print()
    if t_round is None:
        parser.error("give --t-round, or --log with a log of the tree to measure it")
    hashed = args.hash_gbs * 1e9 if args.hash_gbs else hash_rate()
    size, link = args.size_gb * 1e9, args.link_gbit * 1e9 / 8
    print(f"Model: S = {args.size_gb:g} GB, link {args.link_gbit:g} Gbit/s per node ({link / 1e9:.2f} GB/s each way), "
          f"sha256 {hashed / 1e9:.2f} GB/s (one core{'' if args.hash_gbs else ', measured here'}), "
          f"t_round {t_round:.1f} s, forks {args.forks}.")
    print()
    print("| nodes | star | head sends (star) | tree rounds | tree, forks " + f"{args.forks} | tree, unlimited forks "
          "| head sends (tree) | tree faster above |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for nodes in (8, 64, 256, 1024):
        n = nodes - 1  # the head holds the data
        rounds = rounds_of(n)
        head_sends = sum(c["sources"][0] == "head" for copies in schedule(n) for c in copies)
        print(f"| {nodes:,} | {duration(star_seconds(n, size, link, hashed, t_round, args.forks))} | {n} x S "
              f"| {len(rounds)} | {duration(tree_seconds(n, size, link, hashed, t_round, args.forks))} "
              f"| {duration(tree_seconds(n, size, link, hashed, t_round, math.inf))} | {head_sends} x S "
              f"| {size_of(crossover_bytes(n, link, hashed, t_round, args.forks))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
