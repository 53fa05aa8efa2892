"""Judge the cluster from what every node reported (the node_report module) -- run on the controller, stdlib only.

    python preflight.py nodes  --input IN.json    # parity table, pdsh, disks, caches, the job's ops and GPUs
    python preflight.py health --input IN.json    # all-reduce table (allreduce.py's results) against thresholds

IN.json for ``nodes``::

    {"head": "head-1", "hosts": ["head-1", "worker-1"],           # hostfile order, head first
     "multi_node": true, "launcher": "pdsh", "min_free_bytes": 10000000000,
     "probes": {"head-1": <the deepspeed_probe module's result (roles/deepspeed/library)>, ...},
     "reports": {"head-1": <the node_report module's result (roles/cluster_check/library)>, ...},
     "runs": {"head-1": {"<run>": [pid, ...]}, ...},              # train/node/rank_status.py processes (train.yml)
     "job": {"precision": "bf16", "offload_optimizer": "cpu", ...} or null,
     "checkpoints": the plan's checkpoints ({bytes, kept, peak}) or null, "checkpoint_space_refuses": true,
     "package_lock_refuses": true,                                # false: packages off the lock only warn
     "shares": {"local_ssd_dir": {"worker-1": ["head-1", "worker-1"], ...}, "runs_dir": {...}},  # see shared_dirs
     "health": the node health judge's settings (files/health.py judge) or null: each report's "health" readings}

IN.json for ``health``: {"results": <allreduce.py output>, "min_busbw_gbps": 1.0, "relative": 0.5,
"gpu_relative": 0.8} (relative: pairs of nodes against the fastest pair; gpu_relative: pairs of GPUs of a node).

Prints the table (and notes, and warnings prefixed ``warning:``) on stdout (``--json``: as {"text": ..., "in_place":
[the nodes that read the head's local_ssd_dir in place]}). Each problem is one line on stderr,
``host <name>: <what is wrong>; <how to fix>``, and the exit status is 2 when there is any; 0 otherwise.
"""

import argparse
import collections
import importlib.util
import json
import os
import sys


def _load_health():
    """files/health.py beside this file (the node health judge), loaded by path: the action plugin loads this file by
    path too, so no package import works here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "health.py")
    spec = importlib.util.spec_from_file_location("dsc_cluster_check_health", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# Columns of the parity table: (title, report key, how to fix a node that differs).
PARITY = (
    ("venv", "venv", "give every node the same venv_dir in the inventory (group_vars) and run site.yml"),
    ("python", "python_version", "install the same Python on every node (the venv is made from the system python3)"),
    ("torch", "torch", "run site.yml so python_env installs the same torch everywhere"),
    ("cuda", "torch_cuda", "use the same cuda_version and torch build on every node (cuda, python_env roles)"),
    ("nccl", "nccl", "run site.yml so the nccl role installs the same NCCL everywhere"),
    ("deepspeed", "deepspeed", "run site.yml so the deepspeed role installs the same wheel everywhere"),
    ("ops", "ops", "run site.yml: the deepspeed role builds the same ops for every node"),
)
# Environment paths that must be on node-local disk: no rank writes a shared cache at start-up
# (docs/developers/architecture.md, "What flows between the sites").
LOCAL_PATHS = ("local_ssd_dir", "HF_HOME", "HF_DATASETS_CACHE", "TORCH_EXTENSIONS_DIR")
# DeepSpeed op each job setting needs pre-built (deepspeed/ops/op_builder): ZeRO-Offload's optimizer is DeepSpeedCPUAdam.
OPS_FOR_OFFLOAD = {"cpu": "cpu_adam"}
# bf16 needs compute capability >= 8.0 (Ampere): CUDA's __nv_bfloat16 arithmetic; torch.cuda.is_bf16_supported().
BF16_MIN_CC = (8, 0)


def merge(probe, report):
    """One node's facts: the deepspeed role's deepspeed_probe result (versions, pre-built ops) + node_report's
    (venv, NCCL, GPUs, pdsh, paths), flattened to the keys PARITY and the checks below read."""
    torch = probe.get("torch") or {}
    deepspeed = probe.get("deepspeed") or {}
    return dict(report, python_version=probe.get("python_version"), torch=torch.get("version"),
                torch_cuda=torch.get("cuda"), deepspeed=deepspeed.get("version"),
                ops=sorted(deepspeed.get("installed_ops") or []), accelerator_name=deepspeed.get("accelerator_name"))


def _shown(value):
    if value is None:
        return "-"
    if isinstance(value, list):
        return "%d ops" % len(value) if value else "none"
    return str(value)


def parity(reports, hosts, head):
    """Compare the nodes' reports column by column.

    Args: reports {host: merge() of the node's probe and report}; hosts: node names, head first; head: the head's name.
    Returns (rows, problems): rows is a list of [host, value per PARITY column] (strings); problems is a list of
    one-line messages, one per node whose value differs from the majority's (ties go to the group with the head).
    """
    rows = [[host] + [_shown(reports[host].get(key)) for _, key, _ in PARITY] for host in hosts]
    problems = []
    for title, key, fix in PARITY:
        groups = collections.OrderedDict()
        for host in hosts:
            groups.setdefault(json.dumps(reports[host].get(key), sort_keys=True), []).append(host)
        if len(groups) < 2:
            continue
        reference = max(groups.values(), key=lambda members: (len(members), head in members))
        ref_value = reports[reference[0]].get(key)
        for members in groups.values():
            if members is reference:
                continue
            for host in members:
                value = reports[host].get(key)
                if key == "ops":
                    missing = sorted(set(ref_value or []) - set(value or []))
                    extra = sorted(set(value or []) - set(ref_value or []))
                    what = "DeepSpeed ops differ (missing %s; extra %s)" % (", ".join(missing) or "none",
                                                                            ", ".join(extra) or "none")
                else:
                    what = "%s is %s, %s on %s" % (title, _shown(value), _shown(ref_value), ", ".join(reference))
                problems.append("host %s: %s; %s" % (host, what, fix))
    return rows, problems


def table(header, rows):
    """Plain-text table: header + rows (lists of strings), columns padded to the widest cell."""
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    line = lambda row: "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * width for width in widths])] + [line(row) for row in rows])


def disks(reports, hosts, min_free_bytes, in_place=()):
    """Node-local paths: on a network file system -> problem; local_ssd_dir with less than ``min_free_bytes``
    (bytes) free -> problem; no working POSIX locks in HOME or an HF cache -> warning.

    ``in_place``: the nodes whose local_ssd_dir is the head's (one storage, shared_dirs()): the data is read there in
    place, so local_ssd_dir and the caches under it may be on a network file system on those nodes, whose file locks
    must then work there (a problem, not a warning).
    Returns (problems, warnings), lists of one-line messages."""
    problems, warnings = [], []
    for host in hosts:
        paths = reports[host].get("paths") or {}
        ssd_root = ((paths.get("local_ssd_dir") or {}).get("path") or "").rstrip("/")
        for name in LOCAL_PATHS:
            info = paths.get(name)
            shared_ok = host in in_place and ssd_root and (
                (info or {}).get("path", "") + "/").startswith(ssd_root + "/")
            if info and info.get("network") and not shared_ok:
                problems.append(
                    "host %s: %s %s is on %s (%s), shared by every node and every rank; point local_ssd_dir at a "
                    "node-local disk (node_env puts HF_HOME, HF_DATASETS_CACHE and TORCH_EXTENSIONS_DIR under it) "
                    "and do not override them in node_env_extra" % (host, name, info["path"], info["fs"],
                                                                    info.get("mount")))
        ssd = paths.get("local_ssd_dir")
        if host in in_place and ssd and ssd.get("locks") is False:
            problems.append("host %s: file locks do not work in local_ssd_dir %s (%s on %s), which it shares with "
                            "other nodes: the caches there (HF datasets, torch.compile's) need them; mount it with "
                            "working locks (NFSv4, or NFSv3 with lockd) or give every node a local_ssd_dir of its own"
                            % (host, ssd["path"], ssd.get("fs"), ssd.get("mount")))
        if ssd and ssd.get("free_bytes") is not None and ssd["free_bytes"] < min_free_bytes:
            problems.append("host %s: local_ssd_dir %s has %.1f GB free, the check wants at least %.1f GB; free space "
                            "there or set cluster_check_min_free_gb" % (host, ssd["path"], ssd["free_bytes"] / 1e9,
                                                                        min_free_bytes / 1e9))
        for name in ("HOME",) + LOCAL_PATHS:
            info = paths.get(name)
            if info and info.get("locks") is False:
                warnings.append(
                    "host %s: file locks do not work in %s %s (%s on %s): HF datasets and filelock hang or fail "
                    "there; the job keeps its caches on local_ssd_dir, keep your own caches off it too"
                    % (host, name, info["path"], info["fs"], info.get("mount")))
    return problems, warnings


def shared_dirs(hosts, head, shares):
    """Which nodes share local_ssd_dir and the run directories' parent, from the preflight's markers.

    Args: hosts: the nodes, head first; head: the head's name; shares: {"local_ssd_dir" | "runs_dir": {node: [the
    nodes whose marker that node saw in its own directory of that name, itself included]}} (a name or node absent:
    not looked at).
    Returns (in_place, problems, notes): in_place is the list of nodes that see the head's local_ssd_dir (the head
    first; empty when no worker does): the staging copies nothing to those workers, they read the head's prepared data
    in place. Problems (one line each): a run-directory parent shared by two nodes (every node writes its own files
    and checkpoint part under the same names there, and the copy of -e resume='s checkpoint replaces a node's own);
    workers that share a local_ssd_dir among themselves but not with the head (the staging would write their one
    copy from two sources at once). Notes: a line naming the nodes that read the data in place."""
    problems, notes = [], []
    runs = shares.get("runs_dir") or {}
    for host in hosts:
        others = [n for n in runs.get(host) or [] if n != host]
        if others:
            problems.append("host %s: its run directories' disk (<dsc_root>/runs) is also %s's (one shared file "
                            "system): every node keeps its own run directory there, under the same names; set dsc_root "
                            "to a node-local path on every node" % (host, ", ".join(others)))
    ssd = shares.get("local_ssd_dir") or {}
    in_place = [n for n in hosts if n != head and head in (ssd.get(n) or [])]
    for host in hosts:
        seen = [n for n in ssd.get(host) or [] if n != host]
        if host != head and seen and head not in seen:
            problems.append("host %s: its local_ssd_dir is also %s's (one shared file system) but not the head %s's: "
                            "the data would be staged onto it from two nodes at once; give every node its own "
                            "local_ssd_dir, or put the head's on that storage too (then it is read in place)"
                            % (host, ", ".join(seen), head))
    if in_place:
        in_place = [head] + in_place
        notes.append("local_ssd_dir is one shared storage for %s: the data is prepared there once by %s and read in "
                     "place; nothing is copied to %s" % (", ".join(in_place), head, ", ".join(in_place[1:])))
    return in_place, problems, notes


def _size(nbytes):
    """"12.3 GB" from 1 GB on, "35 MB" below."""
    return "%.1f GB" % (nbytes / 1e9) if nbytes >= 1e9 else "%d MB" % round(nbytes / 1e6)


def checkpoint_space(reports, hosts, checkpoints, refuse=True):
    """The run's checkpoints against the free space of each node's run directory (the node_report path
    ``runs_dir``, its nearest existing directory): ``checkpoints`` is the plan's estimate {bytes: {node: bytes of one
    checkpoint there}, kept: how many at once, peak: {node: bytes}} (train.controller.memory.checkpoint_bytes), or
    None for none. A node whose peak exceeds its free bytes is a problem (``refuse``) or a warning.
    Returns (problems, warnings), lists of one-line messages."""
    found = []
    if not checkpoints:
        return [], []
    for host in hosts:
        info = (reports[host].get("paths") or {}).get("runs_dir")
        need = (checkpoints.get("peak") or {}).get(host)
        if not info or info.get("free_bytes") is None or not need or need <= info["free_bytes"]:
            continue
        one, kept = checkpoints["bytes"][host], checkpoints["kept"]
        found.append(
            "host %s: the run's checkpoints need about %s in %s (%d at once of %s each%s) and %s are free there "
            "(%s); free space there, keep fewer (-e save_total_limit=1: one kept, a second while it is written) or "
            "save less often (-e save_steps=N; the last step always saves)%s"
            % (host, _size(need), info["path"], kept, _size(one),
               ": the head gathers every rank's part" if host == hosts[0] and len(hosts) > 1 else "",
               _size(info["free_bytes"]), info.get("mount") or info.get("checked") or info["path"],
               "" if not refuse else "; -e cluster_check_checkpoint_space=false only warns"))
    return (found, []) if refuse else ([], found)


def _expected(specifier):
    """A lock's specifier as the messages show it: "2.21.0" for "==2.21.0", else as written ("any" for none)."""
    if specifier.startswith("==") and not any(c in specifier[2:] for c in "<>=!~,*"):
        return specifier[2:]
    return specifier or "any"


def _majority(hosts, head, value_of):
    """The nodes whose ``value_of(host)`` is the most common (ties go to the group with the head), and that value."""
    groups = collections.OrderedDict()
    for host in hosts:
        groups.setdefault(json.dumps(value_of(host), sort_keys=True), []).append(host)
    reference = max(groups.values(), key=lambda members: (len(members), head in members))
    return reference, value_of(reference[0])


def packages(reports, hosts, head, refuse=True):
    """Every node's installed distributions (node_report's ``packages``) against the lock python_env recorded in its
    venv when site.yml installed it (node_report's ``lock``: {file, found, pins, differs}), and the nodes' locks and
    their packages outside the locks against each other's.

    Per node: a package of its lock that is missing or of another version -> one problem naming each (name,
    expected, found) and the fix, provisioning limited to that node (site.yml refuses a --limit) -- a warning when
    not ``refuse``; no lock recorded (a venv from before python_env recorded it) -> a warning. Across nodes: a lock
    that differs from the majority's (ties to the head's group) -> a problem (site.yml ran with other python_env
    variables there); a package outside the locks whose version differs from the majority's, or that only some
    nodes have -> a warning (provisioning does not change it: the dependencies pip chose, or a package installed by
    hand). torch and deepspeed are the parity table's.
    Returns (problems, warnings, column): column {host: "<matching>/<locked>" or "-" where no lock was recorded}.
    """
    problems, warnings, column = [], [], {}
    checked = [host for host in hosts if (reports[host].get("lock") or {}).get("found")]
    for host in hosts:
        lock = reports[host].get("lock")
        if lock is None:
            column[host] = "-"
            continue
        if not lock.get("found"):
            column[host] = "-"
            warnings.append("host %s: no lock recorded in its venv (%s): its packages were not checked against what "
                            "site.yml installs; run `ansible-playbook playbooks/provision.yml --limit %s` (python_env "
                            "records it)"
                            % (host, lock["file"], host))
            continue
        differs = lock.get("differs") or []
        column[host] = "%d/%d" % (len(lock["pins"]) - len(differs), len(lock["pins"]))
        if differs:
            what = "; ".join("%s (expected %s, found %s)" % (d["name"], _expected(d["expected"]),
                                                             d["found"] if d["found"] is not None else "missing")
                             for d in differs)
            message = ("host %s: %d package%s of its venv differ%s from the lock site.yml installed (%s): %s; run "
                       "`ansible-playbook playbooks/provision.yml --limit %s` (python_env installs the lock again)%s"
                       % (host, len(differs), "" if len(differs) == 1 else "s", "s" if len(differs) == 1 else "",
                          lock["file"], what, host,
                          "; -e cluster_check_package_lock=false only warns" if refuse else ""))
            (problems if refuse else warnings).append(message)
    if len(checked) > 1:
        reference, ref_pins = _majority(checked, head, lambda h: reports[h]["lock"]["pins"])
        for host in checked:
            pins = reports[host]["lock"]["pins"]
            if host in reference or pins == ref_pins:
                continue
            names = sorted(set(pins) | set(ref_pins), key=lambda n: (n not in ref_pins, n))
            what = ", ".join("%s %s (%s on %s)" % (n, _expected(pins[n]) if n in pins else "not locked",
                                                    _expected(ref_pins[n]) if n in ref_pins else "not locked",
                                                    reference[0])
                             for n in names if pins.get(n) != ref_pins.get(n))
            problems.append("host %s: site.yml installed another lock there than on %s: %s; give every node the same "
                            "python_env_* variables (group_vars) and run `ansible-playbook site.yml`"
                            % (host, ", ".join(reference), what))
    locked = {"torch", "deepspeed"}
    for host in checked:
        locked |= set(reports[host]["lock"]["pins"])
    listed = [host for host in hosts if reports[host].get("packages") is not None]
    if len(listed) > 1:
        outside = lambda h: {n: v for n, v in reports[h]["packages"].items() if n not in locked}  # noqa: E731
        reference, ref_packages = _majority(listed, head, outside)
        for host in listed:
            mine = outside(host)
            if host in reference or mine == ref_packages:
                continue
            names = sorted(set(mine) | set(ref_packages))
            what = ", ".join("%s %s (%s on %s)" % (n, mine.get(n, "missing"), ref_packages.get(n, "missing"),
                                                    reference[0])
                             for n in names if mine.get(n) != ref_packages.get(n))
            warnings.append("host %s: packages outside the lock differ from %s's: %s; install the same versions in "
                            "its venv (pip install NAME==VERSION), or remove its venv_dir and run `ansible-playbook "
                            "playbooks/provision.yml --limit %s`" % (host, ", ".join(reference), what, host))
    return problems, warnings, column


def launcher(reports, head, multi_node, launcher_name):
    """pdsh must be on the head when the launcher starts ranks on other nodes over ssh (pdsh -R ssh)."""
    if multi_node and launcher_name == "pdsh" and not reports[head].get("pdsh"):
        return ["host %s: pdsh is not installed on the head, and the deepspeed launcher starts the other nodes' ranks "
                "with it; run site.yml (the base role installs it) or launch with -e launcher=ansible" % head]
    return []


def job_needs(reports, hosts, job):
    """What the job needs from every node: pre-built ops (cpu_adam for optimizer offload) and bf16-capable GPUs.
    Returns a list of one-line problems."""
    problems = []
    if not job:
        return problems
    op = OPS_FOR_OFFLOAD.get(job.get("offload_optimizer") or "none")
    for host in hosts:
        report = reports[host]
        if op and op not in (report.get("ops") or []):
            problems.append(
                "host %s: offload_optimizer=%s needs the DeepSpeed op %s, which is not pre-built there (ds_report: "
                "not installed); run site.yml (the deepspeed role builds it with DS_BUILD_OPS=1) or set "
                "-e offload_optimizer=none" % (host, job["offload_optimizer"], op))
        if job.get("precision") == "bf16":
            for gpu in report.get("gpus") or []:
                major, minor = (int(part) for part in str(gpu["cc"]).split(".")[:2])
                if (major, minor) < BF16_MIN_CC:
                    problems.append(
                        "host %s: GPU %s (%s) has compute capability %s and bf16 needs >= %d.%d; use "
                        "-e precision=fp16 (or fp32)" % (host, gpu["index"], gpu["name"], gpu["cc"], *BF16_MIN_CC))
    return problems


def busy(reports, hosts, head, run, master_port):
    """A run of this project still running on a node, or the master port taken on the head: problems (list of str)."""
    problems = []
    for host in hosts:
        for other, pids in sorted((reports[host].get("runs") or {}).items()):
            if other == run:
                what = "a run named %s is already running there" % other
            else:
                what = "run %s is still running there" % other
            problems.append(
                "host %s: %s (pid %s). One run at a time: wait for it to end (ansible-playbook train.yml "
                "-e attach=%s follows it and brings its results back), or stop it on every node with "
                "ansible-playbook train.yml -e stop=%s" % (host, what, ", ".join(str(p) for p in pids[:5]), other,
                                                           other))
    if reports[head].get("master_port_in_use") and not problems:
        problems.append(
            "host %s (head): the master port %s is taken by another program (torch's rendezvous would fail with "
            "EADDRINUSE). Free it, or give another one: -e train_master_port=<port>" % (head, master_port))
    return problems


def check_nodes(data):
    """The whole node preflight. Returns (text for stdout, problems)."""
    hosts, head = data["hosts"], data["head"]
    reports = {host: merge(data["probes"][host], data["reports"][host]) for host in hosts}
    for host in hosts:  # the runs still running there (train/node/rank_status.py processes), which busy() judges
        reports[host]["runs"] = (data.get("runs") or {}).get(host) or {}
    rows, problems = parity(reports, hosts, head)
    package_problems, warnings, lock_column = packages(reports, hosts, head, data.get("package_lock_refuses", True))
    problems += package_problems
    for row, host in zip(rows, hosts):
        row.append(lock_column[host])
    in_place, share_problems, notes = shared_dirs(hosts, head, data.get("shares") or {})
    problems += share_problems
    disk_problems, disk_warnings = disks(reports, hosts, int(data.get("min_free_bytes") or 0), in_place)
    problems += disk_problems
    warnings += disk_warnings
    problems += launcher(reports, head, bool(data.get("multi_node")), data.get("launcher") or "pdsh")
    problems += job_needs(reports, hosts, data.get("job"))
    space_problems, space_warnings = checkpoint_space(reports, hosts, data.get("checkpoints"),
                                                      data.get("checkpoint_space_refuses", True))
    problems += space_problems
    warnings += space_warnings
    if data.get("run_name"):
        problems += busy(reports, hosts, head, data["run_name"], data.get("master_port"))
    text = table(["node"] + [title for title, _, _ in PARITY] + ["lock"], rows)
    blocks = [text]
    if data.get("health"):  # every node's GPU, network and host readings (node_health), judged by files/health.py
        health = _load_health()
        settings = data["health"]
        health_problems, health_warnings, per_host = health.judge(reports, hosts, settings)
        problems += health_problems
        warnings += health_warnings
        blocks.append("\n" + health.node_tables(reports, hosts, per_host, settings, table) if settings.get("tables")
                      else health.summary_line(hosts, per_host, reports))
    data["in_place"] = in_place  # main(--json) gives it to the staging
    return "\n".join(blocks + notes + ["warning: " + w for w in warnings]), problems


def _gpu_health(gpus, relative):
    """Rows and problems of allreduce.py's GPU pairs (``gpus``): per node, a pair below ``relative`` x that node's
    fastest pair is slow, and a GPU in every slow pair of its node (of two or more) is named: one slow GPU of n is
    in n - 1 of the n(n - 1)/2 pairs, so it is below the others while the fastest pair is two good ones."""
    rows, problems = [], []
    for node in dict.fromkeys(g["node"] for g in gpus):
        mine = [g for g in gpus if g["node"] == node]
        best = max(g["busbw_gbps"] for g in mine)
        slow = []
        for g in mine:
            label = "%s GPU %s + %s" % (node, g["gpus"][0], g["gpus"][1])
            verdict = "ok"
            if relative and g["busbw_gbps"] < relative * best:
                verdict = "SLOW (< %g x fastest pair of %s %.3g GB/s)" % (relative, node, best)
                slow.append(g["gpus"])
                problems.append("%s: all-reduce bus bandwidth %.3g GB/s is below %g x the fastest pair of %s "
                                "(%.3g GB/s)" % (label, g["busbw_gbps"], relative, node, best))
            rows.append([label, str(g["ranks"]), "%.1f" % (g["bytes"] / 2 ** 20), "%.3f" % (g["time_s"] * 1e3),
                         "%.3g" % g["algbw_gbps"], "%.3g" % g["busbw_gbps"], verdict])
        if len(slow) > 1:
            for gpu in sorted(set.intersection(*(set(p) for p in slow))):
                others = [g["busbw_gbps"] for g in mine if gpu not in g["gpus"]]
                problems.append(
                    "host %s GPU %s: every slow GPU pair of %s includes it (%.3g GB/s at best against %.3g GB/s "
                    "between the others); check its links (nvidia-smi topo -m, nvidia-smi nvlink -s), clocks and "
                    "errors (nvidia-smi -q), or leave it out with gpu_indices"
                    % (node, gpu, node, max(g["busbw_gbps"] for g in mine if gpu in g["gpus"]),
                       min(others) if others else best))
    return rows, problems


def check_health(data):
    """Judge allreduce.py's results. A measurement below ``min_busbw_gbps`` (GB/s) is a problem; so is a pair of
    nodes below ``relative`` x the fastest pair (the slow pair is named, and a node in every slow pair is named as
    the slow node; the fastest pair, not the median, is the reference because one slow node of n is in n - 1 of the
    n(n - 1)/2 pairs, most of them for n = 3). Returns (text, problems)."""
    results = data["results"]
    floor = float(data.get("min_busbw_gbps") or 0)
    relative = float(data.get("relative") or 0)
    rows, problems = [], []
    tests = [dict(test, label="all ranks") for test in results.get("all", [])]
    tests += [dict(test, label=" + ".join(test["nodes"])) for test in results.get("pairs", [])]
    pairs = results.get("pairs", [])
    best = max((p["busbw_gbps"] for p in pairs), default=None)
    slow_pairs = []
    for test in tests:
        verdict = "ok"
        if test["busbw_gbps"] < floor:
            verdict = "SLOW (< %g GB/s)" % floor
        elif "nodes" in test and best and test["busbw_gbps"] < relative * best:
            verdict = "SLOW (< %g x fastest pair %.3g GB/s)" % (relative, best)
        if verdict != "ok":
            if "nodes" in test:
                slow_pairs.append(test["nodes"])
            problems.append("%s: all-reduce bus bandwidth %.3g GB/s is %s; check the network between them "
                            "(NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, link speed) or lower cluster_check_min_busbw_gbps"
                            % (test["label"], test["busbw_gbps"], verdict.lower()))
        rows.append([test["label"], str(test["ranks"]), "%.1f" % (test["bytes"] / 2 ** 20),
                     "%.3f" % (test["time_s"] * 1e3), "%.3g" % test["algbw_gbps"], "%.3g" % test["busbw_gbps"],
                     verdict])
    if len(slow_pairs) > 1:
        common = set.intersection(*(set(p) for p in slow_pairs))
        for node in sorted(common):
            problems.append("host %s: every slow pair includes it; check its network interface and link" % node)
    gpu_rows, gpu_problems = _gpu_health(results.get("gpus", []), float(data.get("gpu_relative") or 0))
    rows += gpu_rows
    problems += gpu_problems
    text = table(["test (%s)" % results.get("backend", "?"), "ranks", "MiB", "ms", "algbw GB/s", "busbw GB/s",
                  "verdict"], rows)
    return text + "\nbusbw = algbw x 2(n-1)/n, algbw = bytes / time (nccl-tests doc/PERFORMANCE.md, all-reduce)", problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["nodes", "health"])
    parser.add_argument("--input", required=True)
    parser.add_argument("--json", action="store_true",
                        help='stdout is {"text": the table, "in_place": shared_dirs()\'s nodes (nodes only)}')
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as handle:
        data = json.load(handle)
    text, problems = (check_nodes if args.what == "nodes" else check_health)(data)
    print(json.dumps({"text": text, "in_place": data.get("in_place") or []}) if args.json else text)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
