"""Judge every node's health readings (module_utils/node_health.py's read_health, in each node_report) -- run on the
controller by preflight.py's check_nodes, standard library only.

Every finding is one dict (:func:`finding`) and one sentence (:func:`finding_text`), the same words wherever it is
shown: the preflight's refusal or warning of train.yml, playbooks/check.yml's table per node. A finding is a
*refusal* (the run would fail or be wrong: an uncorrectable ECC error, a GPU missing, the NCCL/gloo interface down,
/dev/shm too small) or a *warning* (the run would be slow: clocks held down, a PCIe link below its width, NVLink links
down); each area's knob -- ``cluster_check_gpu_health``, ``cluster_check_network_health``,
``cluster_check_host_health``: refuse (default), warn, ignore -- turns its refusals into warnings, or drops the area.

The thresholds and their sources:

- clock event reasons that mean trouble (nvml.h nvmlClocksEventReason*): HW slowdown 0x8, SW thermal 0x20, HW thermal
  0x40, HW power brake 0x80; GPU idle is 0x1 (an idle GPU also lowers its PCIe link generation, so the generation is
  only judged on a GPU that is not idle);
- Xid numbers that mean a GPU fault (NVIDIA's "XID Errors" catalog, docs.nvidia.com/deploy/xid-errors): :data:`XID_FAULTS`;
  13, 31, 43 and 45 are a program's own errors (illegal address, page fault, stopped) and are not judged; any other Xid
  is a warning;
- /dev/shm: ``shm_per_rank_bytes`` a rank (cluster_check_shm_per_rank_mb, 256 MB by default: DeepSpeed's CPU
  all-reduce buffer ~67 MB a rank, NCCL's shared-memory transport buffers between a node's GPUs, the DataLoader's
  worker batches; Docker's and podman's default of 64 MB is the classic failure, NCCL "unhandled system error").
"""

#: nvml.h nvmlClocksEventReason* bits that mean the clocks are held down by a fault or the environment
CLOCK_TROUBLE = {0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake slowdown"}
CLOCK_IDLE = 0x1
#: Xid errors that mean the GPU or its memory or link failed (NVIDIA's Xid catalog)
XID_FAULTS = {48: "double-bit ECC error", 63: "ECC page retirement or row remapping event",
              64: "ECC page retirement or row remapper recording failure", 74: "NVLink error",
              79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate", 94: "contained ECC error",
              95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error", 140: "unrecovered ECC error"}
#: Xid errors a program causes itself (illegal address, MMU fault, program stopped, preemptive cleanup)
XID_PROGRAM = {13, 31, 43, 45}
AREAS = ("gpu", "network", "host")


def finding(host, area, level, what, fix, gpu=None, pci=None):
    """One finding: ``host`` the node, ``area`` gpu | network | host (its knob), ``level`` refuse | warn, ``what``
    the measured value in words, ``fix`` what to do, ``gpu`` the NVML index (nvidia-smi -i) and ``pci`` its PCI bus
    id where it is about one GPU."""
    return {"host": host, "area": area, "level": level, "what": what, "fix": fix, "gpu": gpu, "pci": pci}


def finding_text(item):
    """The one sentence of a finding: ``host worker-3 GPU 5 (0000:9a:00.0): 2 uncorrectable ECC errors since boot --
    drain the node or reset the GPU (nvidia-smi -r -i 5)``, and for a refusal ``; -e cluster_check_gpu_health=warn
    only warns``."""
    where = "host %s" % item["host"]
    if item.get("gpu") is not None:
        where += " GPU %s" % item["gpu"]
    if item.get("pci"):
        where += " (%s)" % item["pci"]
    text = "%s: %s -- %s" % (where, item["what"], item["fix"])
    if item["level"] == "refuse":
        text += "; -e cluster_check_%s_health=warn only warns" % item["area"]
    return text


def _gb(nbytes):
    return "%.1f GB" % (nbytes / 1e9) if nbytes >= 1e9 else "%d MB" % round(nbytes / 1e6)


def _gib(nbytes):
    return "%.1f GiB" % (nbytes / 2 ** 30)


def gpu_findings(host, nvml, xid, used, dcgm=None, other_memory_bytes=2 ** 30):
    """Findings about one node's GPUs. ``nvml``/``xid``/``dcgm``: read_health()'s readings; ``used``: the NVML
    indices the run uses (gpu_indices, else 0 .. slots - 1); ``other_memory_bytes``: GPU memory held by other
    processes from which on a GPU is refused. Returns a list of finding dicts."""
    out = []
    if nvml is None:
        return out
    if nvml.get("error"):
        out.append(finding(host, "gpu", "refuse", "the GPUs cannot be read: %s" % nvml["error"],
                           "check the driver (nvidia-smi) and run site.yml (python_env installs nvidia-ml-py)"))
        return out
    gpus = nvml.get("gpus") or []
    need = max(used) + 1 if used else 0
    if len(gpus) < need:
        out.append(finding(
            host, "gpu", "refuse", "NVML sees %d GPU%s and the run needs %d (slots / gpu_indices)"
            % (len(gpus), "" if len(gpus) == 1 else "s", need),
            "a GPU has fallen off the bus or is hidden: look for Xid 79 in the kernel log (dmesg), reset the GPU or "
            "reboot the node; or leave it out with slots / gpu_indices in the inventory"))
    best_links = max((sum(g.get("nvlink") or []) for g in gpus), default=0)
    for gpu in gpus:
        index, pci = gpu["index"], gpu.get("pci_bus_id")
        mine = index in used

        def add(level, what, fix):
            out.append(finding(host, "gpu", level if mine else "warn",
                               what + ("" if mine else " (a GPU this run does not use)"), fix, index, pci))

        lost = [msg for msg in (gpu.get("errors") or {}).values() if "lost" in msg.lower() or "unknown" in msg.lower()]
        if lost:
            add("refuse", "NVML cannot read it (%s)" % lost[0], "reset the GPU (nvidia-smi -r -i %d) or reboot the node"
                % index)
        volatile, aggregate = gpu.get("ecc_uncorrected_volatile"), gpu.get("ecc_uncorrected_aggregate")
        if volatile:
            add("refuse", "%d uncorrectable ECC error%s since boot" % (volatile, "" if volatile == 1 else "s"),
                "drain the node or reset the GPU (nvidia-smi -r -i %d)" % index)
        elif aggregate:
            add("warn", "%d uncorrectable ECC error%s in its lifetime (none since boot)"
                % (aggregate, "" if aggregate == 1 else "s"),
                "watch it (nvidia-smi -q -d ECC,ROW_REMAPPER); replace it when rows fail to remap")
        rows = gpu.get("remapped_rows") or {}
        if rows.get("failure"):
            add("refuse", "row remapping failed (a memory bank has no spare row left)",
                "drain the node and have the GPU replaced")
        elif rows.get("pending"):
            add("refuse", "a row remap is pending (%s uncorrectable rows remapped)" % rows.get("uncorrectable"),
                "reset the GPU (nvidia-smi -r -i %d) or reboot the node so the remap takes effect" % index)
        if gpu.get("retired_pages_pending"):
            add("refuse", "a page retirement is pending",
                "reset the GPU (nvidia-smi -r -i %d) or reboot the node so it takes effect" % index)
        reasons = gpu.get("clock_event_reasons") or 0
        trouble = [name for bit, name in sorted(CLOCK_TROUBLE.items()) if reasons & bit]
        if trouble:
            add("warn", "clocks held down now: %s (%s %s C, %s W)" % (", ".join(trouble), "temperature",
                                                                     gpu.get("temperature_c"), gpu.get("power_w")),
                "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); every rank waits for "
                "this GPU")
        pcie = gpu.get("pcie") or {}
        if pcie.get("width") and pcie.get("width_max") and pcie["width"] < pcie["width_max"]:
            add("warn", "PCIe link x%d of x%d" % (pcie["width"], pcie["width_max"]),
                "reseat the GPU or check its slot and riser (lspci -vv -s %s: LnkSta against LnkCap)" % pci)
        elif (pcie.get("gen") and pcie.get("gen_max") and pcie["gen"] < pcie["gen_max"]
              and reasons is not None and not reasons & CLOCK_IDLE):
            add("warn", "PCIe link generation %d of %d while busy" % (pcie["gen"], pcie["gen_max"]),
                "check its slot and the BIOS's PCIe settings (lspci -vv -s %s: LnkSta against LnkCap)" % pci)
        links = gpu.get("nvlink") or []
        up = sum(links)
        if links and (0 < up < len(links) or up < best_links):
            add("warn", "%d of %d NVLink links down (%d up; %d on this node's best GPU)"
                % (len(links) - up, len(links), up, best_links),
                "check with nvidia-smi nvlink -s -i %d; a reset (nvidia-smi -r -i %d) or a reboot may bring them up; "
                "NCCL falls back to PCIe between GPUs" % (index, index))
        others = [p for p in gpu.get("processes") or [] if p.get("used_bytes")]
        held = sum(p["used_bytes"] for p in others)
        if others and held >= other_memory_bytes:
            add("refuse", "%d other process%s hold%s %s of its memory (%s)"
                % (len(others), "" if len(others) == 1 else "es", "s" if len(others) == 1 else "",
                   _gib(held), ", ".join("pid %s %s %s" % (p["pid"], p.get("name") or "?", _gib(p["used_bytes"]))
                                         for p in others[:3])),
                "stop them or wait for them to end; the run needs the GPU to itself")
        if gpu.get("persistence_mode") is False:
            add("warn", "persistence mode is off (each process start re-initialises the GPU: seconds)",
                "nvidia-smi -pm 1, or run nvidia-persistenced")
    out += xid_findings(host, xid, gpus, used)
    for failure in (dcgm or {}).get("failures") or []:
        out.append(finding(host, "gpu", "refuse", "dcgmi diag -r %s: test %s failed on GPU %s (%s)"
                           % (dcgm["level"], failure.get("test"), failure.get("gpu"), failure.get("info") or "-"),
                           "drain the node; dcgmi diag -r 3 says more"))
    if dcgm and dcgm.get("error"):
        out.append(finding(host, "gpu", "refuse", dcgm["error"],
                           "install NVIDIA DCGM (datacenter-gpu-manager) or set -e cluster_check_dcgm_diag=0"))
    return out


def xid_findings(host, xid, gpus, used):
    """Findings of the kernel log's Xid errors (``xid``: read_xids()'s reading), matched to the GPUs by PCI bus id; an
    Xid of a PCI device NVML no longer sees (fallen off the bus) is named by its bus id alone."""
    out = []
    by_pci = {}
    for entry in (xid or {}).get("xids") or []:
        if entry["xid"] not in XID_PROGRAM:
            by_pci.setdefault(entry["pci"], []).append(entry)
    for pci, entries in sorted(by_pci.items()):
        gpu = next((g for g in gpus if (g.get("pci_bus_id") or "").startswith(pci)), None)
        counts = {}
        for entry in entries:
            counts[entry["xid"]] = counts.get(entry["xid"], 0) + 1
        faults = {x: n for x, n in counts.items() if x in XID_FAULTS}
        words = ", ".join("Xid %d (%s) x%d" % (x, XID_FAULTS.get(x, "see NVIDIA's Xid catalog"), n)
                          for x, n in sorted(counts.items()))
        index = gpu["index"] if gpu else None
        level = "refuse" if faults and (gpu is None or index in used) else "warn"
        what = "%s in the kernel log since boot%s" % (words, "" if gpu else ", and NVML does not see this GPU")
        fix = ("drain the node, reset the GPU (nvidia-smi -r -i %d) or reboot it" % index if gpu
               else "drain the node and reboot it; reseat the GPU if it stays missing")
        out.append(finding(host, "gpu", level, what, fix, index, pci if gpu is None else gpu.get("pci_bus_id")))
    return out


def interface_matches(spec, names, exact=False):
    """The interfaces among ``names`` that NCCL_SOCKET_IFNAME-style ``spec`` selects (NCCL's environment
    documentation: a comma-separated list of prefixes, "=name" an exact name, a leading "^" excludes what the list
    names); ``exact``: GLOO_SOCKET_IFNAME, a list of exact names. Returns the matched names, in ``names``' order."""
    exclude = spec.startswith("^")
    items = [item.strip() for item in spec.lstrip("^").split(",") if item.strip()]

    def hit(name):
        for item in items:
            if exact or item.startswith("="):
                if name == item.lstrip("="):
                    return True
            elif name.startswith(item):
                return True
        return False

    return [name for name in names if hit(name) != exclude]


def _is_up(info):
    return bool(info) and info.get("up") is not False and info.get("operstate") in ("up", "unknown") \
        and info.get("carrier") is not False


def _link(name, info):
    speed = info.get("speed_mbps")
    return "%s %s%s" % (name, "up" if _is_up(info) else "DOWN (%s)" % info.get("operstate"),
                        ", %d Mb/s" % speed if speed else "")


def network_findings(host, health, env, accelerator, address, multi_node, min_link_mbps, fastest_mbps=None,
                     relative=0.5):
    """Findings about the interfaces NCCL and gloo will use on one node. ``env``: the node environment's
    NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_DISABLE (what the ranks get); ``address``: the node's cluster
    address (its interface is used where the variables name none); ``min_link_mbps``: a used link slower than this
    (Mb/s) is a warning, and so is one slower than ``relative`` x ``fastest_mbps`` (the fastest node's). Returns
    (findings, the names of the interfaces judged used)."""
    out = []
    interfaces = health.get("interfaces") or {}
    names = list(interfaces)
    used = []
    by_address = [n for n, info in interfaces.items() if address and address in (info.get("addresses") or [])]
    for var, exact in (("NCCL_SOCKET_IFNAME", False), ("GLOO_SOCKET_IFNAME", True)):
        spec = (env or {}).get(var)
        if not spec or (var.startswith("NCCL") and accelerator != "cuda"):
            continue
        matched = interface_matches(spec, names, exact)
        missing = [item.strip() for item in spec.split(",") if exact and item.strip() not in interfaces]
        fix = ("set %s to this node's cluster network interface%s (node_env_extra; per node: node_env_nccl_conf)"
               % (var, " (%s, which holds %s)" % (by_address[0], address) if by_address else ""))
        if missing or not matched:
            out.append(finding(host, "network", "refuse", "%s=%s names no interface here (%s: %s)"
                               % (var, spec, "missing" if missing else "interfaces", ", ".join(missing or names)),
                               fix))
            continue
        down = [n for n in matched if not _is_up(interfaces[n])]
        if down and (exact or len(down) == len(matched)):
            out.append(finding(host, "network", "refuse", "%s=%s: %s" % (
                var, spec, ", ".join(_link(n, interfaces[n]) for n in down)),
                "bring it up (ip link set %s up), or %s" % (down[0], fix[0].lower() + fix[1:])))
            continue
        used += [n for n in matched if n not in used and _is_up(interfaces[n])]
    if not used and multi_node:
        used = by_address
        for name in by_address:
            if not _is_up(interfaces[name]):
                out.append(finding(host, "network", "refuse", "the interface of its cluster address %s: %s"
                                   % (address, _link(name, interfaces[name])),
                                   "bring it up (ip link set %s up)" % name))
    if multi_node:
        for name in used:
            speed = interfaces[name].get("speed_mbps")
            slow = speed and ((min_link_mbps and speed < min_link_mbps)
                              or (fastest_mbps and relative and speed < relative * fastest_mbps))
            if slow:
                out.append(finding(host, "network", "warn", "%s runs at %d Mb/s (the fastest node's: %s Mb/s; "
                                   "cluster_check_min_link_mbps %s)" % (name, speed, fastest_mbps, min_link_mbps),
                                   "check its cable and switch port (ethtool %s); every all-reduce between the nodes "
                                   "goes at most at this rate" % name))
    if str((env or {}).get("NCCL_IB_DISABLE") or "0") != "1" and accelerator == "cuda":
        for port in health.get("infiniband") or []:
            if port.get("state") != "ACTIVE":
                out.append(finding(host, "network", "warn", "InfiniBand port %s/%s is %s (%s)"
                                   % (port["device"], port["port"], port.get("state"), port.get("phys_state")),
                                   "check its cable and the subnet manager (ibstat %s); NCCL uses only active ports"
                                   % port["device"]))
    return out, used


def _shm_need(ranks, per_rank):
    """/dev/shm the node's ``ranks`` need: ``per_rank`` bytes each, none for one rank (it shares no memory with
    another: NCCL's and DeepSpeed's shared-memory transports are between ranks)."""
    return ranks * per_rank if ranks > 1 else 0


def host_findings(host, health, ranks, shm_per_rank_bytes, min_free_memory_bytes, dsc_root=None,
                  min_free_bytes=0):
    """Findings about one node's host: /dev/shm free against ``ranks`` x ``shm_per_rank_bytes``, memory available
    against ``min_free_memory_bytes`` (a warning), free disk under dsc_root (``dsc_root``: node_report's path
    reading) against ``min_free_bytes``."""
    out = []
    reading = health.get("host") or {}
    shm = reading.get("shm")
    need = _shm_need(ranks, shm_per_rank_bytes)
    if shm is None and need:
        out.append(finding(host, "host", "refuse", "/dev/shm is missing",
                           "mount a tmpfs there (mount -t tmpfs -o size=8G tmpfs /dev/shm)"))
    elif shm and shm["free_bytes"] < need:
        out.append(finding(
            host, "host", "refuse", "/dev/shm has %s free of %s and its %d rank%s need about %s (%s a rank: "
            "cluster_check_shm_per_rank_mb)" % (_gb(shm["free_bytes"]), _gb(shm["total_bytes"]), ranks,
                                                "" if ranks == 1 else "s", _gb(need), _gb(shm_per_rank_bytes)),
            "make it larger (mount -o remount,size=%dG /dev/shm; a container: --shm-size or --ipc=host) or remove "
            "what fills it" % max(1, -(-need * 2 // 2 ** 30))))
    memory = reading.get("memory") or {}
    if memory.get("available_bytes") is not None and memory["available_bytes"] < min_free_memory_bytes:
        out.append(finding(host, "host", "warn", "%s of %s memory available (cluster_check_min_free_memory_gb %s)"
                           % (_gb(memory["available_bytes"]), _gb(memory["total_bytes"]),
                              "%g" % (min_free_memory_bytes / 1e9)),
                           "stop what uses it; the ranks' data loaders and checkpoint saves need host memory"))
    if dsc_root and dsc_root.get("free_bytes") is not None and dsc_root["free_bytes"] < min_free_bytes:
        out.append(finding(host, "host", "refuse", "dsc_root %s has %s free (%s), under %s (cluster_check_min_free_gb)"
                           % (dsc_root["path"], _gb(dsc_root["free_bytes"]), dsc_root.get("mount") or
                              dsc_root.get("checked"), _gb(min_free_bytes)),
                           "free space there (old runs: <dsc_root>/runs)"))
    return out


def judge(reports, hosts, settings):
    """Every node's findings, the knobs applied. ``reports``: {host: node_report's result, with "health" (read_health)
    and "paths"}; ``settings``: {"gpu" | "network" | "host": refuse | warn | ignore, "accelerator": {host: cpu|cuda},
    "ranks": {host: n}, "gpu_indices": {host: [NVML indices the run uses]}, "addresses": {host: cluster address},
    "multi_node", "shm_per_rank_bytes", "min_free_memory_bytes",
    "min_free_bytes", "min_link_mbps", "other_gpu_memory_bytes", "dcgm"}.
    The node environment's NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and NCCL_IB_DISABLE are each reading's "env".
    Returns (problems, warnings, per_host): problems and warnings are finding_text() lines; per_host {host: {"findings":
    [...], "interfaces": [used]}} for the tables."""
    levels = {area: settings.get(area) or "refuse" for area in AREAS}
    per_host, speeds = {}, {}
    for host in hosts:
        health = reports[host].get("health")
        if health is None:
            continue
        _, used = network_findings(host, health, health.get("env") or {}, settings["accelerator"].get(host),
                                   settings["addresses"].get(host), settings.get("multi_node"), 0)
        speeds[host] = max((health["interfaces"][n].get("speed_mbps") or 0 for n in used), default=0)
    fastest = max(speeds.values(), default=0) or None
    problems, warnings = [], []
    for host in hosts:
        health = reports[host].get("health")
        if health is None:
            continue
        accelerator = settings["accelerator"].get(host)
        ranks = int(settings["ranks"].get(host) or 0)
        indices = (settings.get("gpu_indices") or {}).get(host)
        used_gpus = ([int(i) for i in indices] if indices else list(range(ranks))) if accelerator == "cuda" else []
        found = []
        if accelerator == "cuda":
            found += gpu_findings(host, health.get("nvml"), health.get("xid"), used_gpus, health.get("dcgm"),
                                  settings.get("other_gpu_memory_bytes", 2 ** 30))
        net, used = network_findings(host, health, health.get("env") or {}, accelerator,
                                     settings["addresses"].get(host), settings.get("multi_node"),
                                     settings.get("min_link_mbps") or 0, fastest)
        found += net
        found += host_findings(host, health, ranks, int(settings.get("shm_per_rank_bytes") or 0),
                               int(settings.get("min_free_memory_bytes") or 0),
                               (reports[host].get("paths") or {}).get("dsc_root"),
                               int(settings.get("min_free_bytes") or 0))
        kept = []
        for item in found:
            if levels[item["area"]] == "ignore":
                continue
            if levels[item["area"]] == "warn":
                item = dict(item, level="warn")
            kept.append(item)
            (problems if item["level"] == "refuse" else warnings).append(finding_text(item))
        per_host[host] = {"findings": kept, "interfaces": used}
    return problems, warnings, per_host


def _verdict(findings):
    if any(f["level"] == "refuse" for f in findings):
        return "REFUSED"
    return "warning" if findings else "ok"


def node_tables(reports, hosts, per_host, settings, table):
    """playbooks/check.yml's table per node: a row per GPU, then the network and host lines; ``table`` is
    preflight.py's table(). Returns the text."""
    blocks = []
    for host in hosts:
        health = reports[host].get("health")
        if health is None or host not in per_host:
            continue
        mine = per_host[host]["findings"]
        lines = ["node %s" % host]
        nvml = health.get("nvml")
        if nvml and not nvml.get("error"):
            xids = {}
            for entry in (health.get("xid") or {}).get("xids") or []:
                xids.setdefault(entry["pci"], []).append(entry["xid"])
            rows = []
            for gpu in nvml.get("gpus") or []:
                pcie, rows_ = gpu.get("pcie") or {}, gpu.get("remapped_rows") or {}
                links = gpu.get("nvlink") or []
                reasons = gpu.get("clock_event_reasons") or 0
                others = [p for p in gpu.get("processes") or [] if p.get("used_bytes")]
                xid = [x for pci, found in xids.items() if (gpu.get("pci_bus_id") or "").startswith(pci)
                       for x in found]
                rows.append([
                    str(gpu["index"]), gpu.get("pci_bus_id") or "-", gpu.get("name") or "-",
                    "%s/%s" % (_dash(gpu.get("ecc_uncorrected_volatile")), _dash(gpu.get("ecc_uncorrected_aggregate"))),
                    "-" if not rows_ else ("FAILED" if rows_.get("failure") else "pending" if rows_.get("pending")
                                           else "ok (%s)" % rows_.get("uncorrectable")),
                    ",".join(str(x) for x in xid) or ("none" if (health.get("xid") or {}).get("xids") is not None
                                                      else "?"),
                    ", ".join(n for b, n in sorted(CLOCK_TROUBLE.items()) if reasons & b) or
                    ("idle" if reasons & CLOCK_IDLE else "ok"),
                    "gen%s/%s x%s/%s" % (_dash(pcie.get("gen")), _dash(pcie.get("gen_max")), _dash(pcie.get("width")),
                                          _dash(pcie.get("width_max"))),
                    "%d/%d" % (sum(links), len(links)) if links else "-",
                    _gib(sum(p["used_bytes"] for p in others)) if others else "0",
                    {True: "on", False: "off", None: "-"}[gpu.get("persistence_mode")],
                    _verdict([f for f in mine if f.get("gpu") == gpu["index"]])])
            lines.append(table(["GPU", "PCI", "name", "ECC unc. boot/life", "row remap", "Xid", "clocks",
                                "PCIe now/max", "NVLink up", "others' mem", "persist.", "verdict"], rows))
        interfaces = health.get("interfaces") or {}
        used = per_host[host]["interfaces"]
        ib = health.get("infiniband") or []
        lines.append("network: %s%s" % (", ".join(_link(n, interfaces[n]) for n in used) or
                                        "the interface is chosen by NCCL/gloo (one node)",
                                        "; InfiniBand %s" % ", ".join("%s/%s %s %s" % (p["device"], p["port"],
                                                                                        p.get("state"), p.get("rate"))
                                                                       for p in ib) if ib else ""))
        reading = health.get("host") or {}
        shm, memory = reading.get("shm") or {}, reading.get("memory") or {}
        root = (reports[host].get("paths") or {}).get("dsc_root") or {}
        lines.append("host: /dev/shm %s free of %s (need %s), memory %s available of %s%s" % (
            _gb(shm.get("free_bytes") or 0), _gb(shm.get("total_bytes") or 0),
            _gb(_shm_need(int(settings["ranks"].get(host) or 0), int(settings.get("shm_per_rank_bytes") or 0))),
            _gb(memory.get("available_bytes") or 0), _gb(memory.get("total_bytes") or 0),
            ", dsc_root %s free" % _gb(root["free_bytes"]) if root.get("free_bytes") is not None else ""))
        for item in mine:
            lines.append(("REFUSED " if item["level"] == "refuse" else "warning: ") + finding_text(item))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def summary_line(hosts, per_host, reports):
    """train.yml's one line: 'node health: 3 nodes, 8 GPUs read, 0 refusals, 1 warning'."""
    gpus = sum(len(((reports[h].get("health") or {}).get("nvml") or {}).get("gpus") or []) for h in per_host)
    findings = [f for h in per_host for f in per_host[h]["findings"]]
    refusals = sum(f["level"] == "refuse" for f in findings)
    return "node health: %d node%s, %d GPU%s read; %d refusal%s, %d warning%s" % (
        len(per_host), "" if len(per_host) == 1 else "s", gpus, "" if gpus == 1 else "s", refusals,
        "" if refusals == 1 else "s", len(findings) - refusals, "" if len(findings) - refusals == 1 else "s")


def _dash(value):
    return "-" if value is None else str(value)
