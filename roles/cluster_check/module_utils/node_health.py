"""Read a node's health for the cluster check: the GPUs through NVML, the network and the host through the OS.

Only readings, no judgement: :func:`read_health` returns a plain dict (JSON types only) that
roles/cluster_check/files/preflight.py's health judge turns into refusals and warnings on the controller. Readings
recorded on a real GPU machine through this file are the judge's test data (roles/cluster_check/tests/data/).

Used by the node_report module (``from ansible.module_utils.node_health import read_health``: the module runs with
the node venv's Python, where ``nvidia-ml-py`` -- ``import pynvml`` -- is installed on CUDA nodes by python_env) and
runnable on its own to record a node's readings::

    <venv>/bin/python roles/cluster_check/module_utils/node_health.py [--address ADDR] [--dcgm-level N] > health.json

Standard library only, besides pynvml where it is installed. Every NVML call that a GPU does not support gives None
for that reading (NVML_ERROR_NOT_SUPPORTED); any other NVML error is kept in the GPU's ``errors``
({reading: message}). Sources: NVML's API reference (nvml.h) for the calls and constants, the Linux kernel's
Documentation/ABI/testing/sysfs-class-net and sysfs-class-infiniband for the network files, /dev/kmsg
(Documentation/ABI/testing/dev-kmsg) for the kernel log.
"""

import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

#: NVML's nvmlMemoryErrorType_t / nvmlEccCounterType_t / nvmlPageRetirementCause_t values (nvml.h)
_UNCORRECTED, _VOLATILE, _AGGREGATE = 1, 0, 1
_RETIRED_DBE, _RETIRED_SBE = 1, 0
#: NVML_NVLINK_MAX_LINKS (nvml.h, 18 from Hopper on)
NVLINK_MAX_LINKS = 18
#: an Xid line of the NVIDIA driver in the kernel log: "NVRM: Xid (PCI:0000:9a:00): 79, pid=..., GPU has fallen..."
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)[^)]*\): (\d+),?\s*(.*)")


def short_bus_id(bus_id):
    """NVML's PCI bus id ("00000000:9A:00.0") as lspci and the kernel write it ("0000:9a:00.0"); None stays None."""
    if not bus_id:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    domain, _, rest = bus_id.strip().partition(":")
    return ("%04x:%s" % (int(domain, 16), rest)).lower() if rest else bus_id.lower()


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def read_gpus(pynvml=None):
    """Every GPU's readings through NVML: a dict {"driver", "count", "gpus": [...], "error"}; "error" (a string) when
    NVML cannot be loaded or initialised (then no GPU is read). A GPU's keys: index (NVML's, as nvidia-smi -i),
    name, pci_bus_id, uuid, ecc_mode (current: true/false/None), ecc_uncorrected_volatile, ecc_uncorrected_aggregate,
    retired_pages_dbe, retired_pages_sbe, retired_pages_pending (pre-Ampere page retirement), remapped_rows
    {correctable, uncorrectable, pending, failure} (Ampere on), clock_event_reasons (the bitmask of
    nvmlDeviceGetCurrentClocksEventReasons), pcie {gen, gen_max, width, width_max}, nvlink (state per link, true =
    up; [] without NVLink), persistence_mode, memory {total, used} (bytes), processes [{pid, used_bytes, name}],
    temperature_c, power_w, errors."""
    out = {"driver": None, "count": 0, "gpus": [], "error": None}
    if pynvml is None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError as exc:
            out["error"] = "nvidia-ml-py (pynvml) is not installed in %s (%s)" % (sys.prefix, exc)
            return out
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        out["error"] = "NVML could not start: %s" % exc
        return out
    try:
        out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        out["count"] = pynvml.nvmlDeviceGetCount()
        for index in range(out["count"]):
            out["gpus"].append(_read_gpu(pynvml, index))
    except pynvml.NVMLError as exc:
        out["error"] = "NVML: %s" % exc
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return out


def _read_gpu(pynvml, index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    errors = {}

    def ask(key, call, *args):
        try:
            return call(handle, *args)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as exc:
            errors[key] = str(exc)
            return None

    gpu = {"index": index, "name": _text(ask("name", pynvml.nvmlDeviceGetName))}
    pci = ask("pci_bus_id", pynvml.nvmlDeviceGetPciInfo)
    gpu["pci_bus_id"] = short_bus_id(getattr(pci, "busId", None))
    gpu["uuid"] = _text(ask("uuid", pynvml.nvmlDeviceGetUUID))
    mode = ask("ecc_mode", pynvml.nvmlDeviceGetEccMode)
    gpu["ecc_mode"] = bool(mode[0]) if mode else None
    gpu["ecc_uncorrected_volatile"] = ask("ecc_uncorrected_volatile", pynvml.nvmlDeviceGetTotalEccErrors,
                                          _UNCORRECTED, _VOLATILE)
    gpu["ecc_uncorrected_aggregate"] = ask("ecc_uncorrected_aggregate", pynvml.nvmlDeviceGetTotalEccErrors,
                                           _UNCORRECTED, _AGGREGATE)
    dbe = ask("retired_pages_dbe", pynvml.nvmlDeviceGetRetiredPages, _RETIRED_DBE)
    sbe = ask("retired_pages_sbe", pynvml.nvmlDeviceGetRetiredPages, _RETIRED_SBE)
    gpu["retired_pages_dbe"] = None if dbe is None else len(dbe)
    gpu["retired_pages_sbe"] = None if sbe is None else len(sbe)
    pending = ask("retired_pages_pending", pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
    gpu["retired_pages_pending"] = None if pending is None else bool(pending)
    rows = ask("remapped_rows", pynvml.nvmlDeviceGetRemappedRows)
    gpu["remapped_rows"] = None if rows is None else {
        "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    gpu["clock_event_reasons"] = ask("clock_event_reasons", reasons)
    gpu["pcie"] = {"gen": ask("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                   "gen_max": ask("pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                   "width": ask("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
                   "width_max": ask("pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth)}
    links = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            links.append(bool(pynvml.nvmlDeviceGetNvLinkState(handle, link)))
        except pynvml.NVMLError:  # NOT_SUPPORTED / INVALID_ARGUMENT: no such link (or no NVLink at all)
            break
    gpu["nvlink"] = links
    persistence = ask("persistence_mode", pynvml.nvmlDeviceGetPersistenceMode)
    gpu["persistence_mode"] = None if persistence is None else bool(persistence)
    memory = ask("memory", pynvml.nvmlDeviceGetMemoryInfo)
    gpu["memory"] = None if memory is None else {"total": memory.total, "used": memory.used}
    processes = []
    for proc in ask("processes", pynvml.nvmlDeviceGetComputeRunningProcesses) or []:
        used = getattr(proc, "usedGpuMemory", None)
        processes.append({"pid": proc.pid, "used_bytes": used if isinstance(used, int) else None,
                          "name": _process_name(proc.pid)})
    gpu["processes"] = processes
    gpu["temperature_c"] = ask("temperature_c", pynvml.nvmlDeviceGetTemperature, 0)  # NVML_TEMPERATURE_GPU
    power = ask("power_w", pynvml.nvmlDeviceGetPowerUsage)  # milliwatts
    gpu["power_w"] = None if power is None else round(power / 1000.0, 1)
    gpu["errors"] = errors
    return gpu


def _process_name(pid):
    """The command name of ``pid`` (/proc/PID/comm), or None (another PID namespace, gone)."""
    try:
        with open("/proc/%d/comm" % pid, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def parse_xids(lines):
    """The NVIDIA driver's Xid lines among kernel-log ``lines`` (strings): [{"pci": "0000:9a:00", "xid": 79, "text":
    the rest of the line (200 characters at most)}], in the log's order."""
    found = []
    for line in lines:
        match = XID_LINE.search(line)
        if match:
            domain, _, rest = match.group(1).partition(":")
            found.append({"pci": ("%04x:%s" % (int(domain, 16), rest)).lower(), "xid": int(match.group(2)),
                          "text": match.group(3).strip()[:200]})
    return found


def kernel_log(kmsg="/dev/kmsg"):
    """The kernel log since boot (what is left of it in the ring buffer): (lines, source) or (None, why not).
    /dev/kmsg read without blocking, else ``dmesg``, else ``journalctl -k -b`` (a user may not read the log:
    kernel.dmesg_restrict)."""
    why = []
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why.append("%s: %s" % (kmsg, exc.strerror))
    else:
        lines = []
        try:
            while True:
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except BrokenPipeError:  # a record overwritten while reading: read on
                    continue
                if not record:
                    break
                lines.append(record.decode("utf-8", "replace").partition(";")[2].rstrip("\n"))
        except OSError as exc:
            why.append("%s: %s" % (kmsg, exc.strerror))
            lines = None
        finally:
            os.close(fd)
        if lines is not None:
            return lines, kmsg
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-o", "cat"]):
        if not shutil.which(argv[0]):
            continue
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            why.append("%s: %s" % (argv[0], exc))
            continue
        if run.returncode == 0:
            return run.stdout.splitlines(), " ".join(argv)
        why.append("%s: %s" % (argv[0], (run.stderr.strip().splitlines() or ["rc %d" % run.returncode])[-1]))
    return None, "; ".join(why) or "no kernel log found"


def read_xids():
    """{"xids": parse_xids(the kernel log) or None when it cannot be read, "source": where it was read, or why not}."""
    lines, source = kernel_log()
    return {"xids": None if lines is None else parse_xids(lines), "source": source}


def _sys(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def ipv4_addresses():
    """{interface: [IPv4 addresses]}: ``ip -j -4 addr`` (every address), else each interface's primary address
    (SIOCGIFADDR)."""
    if shutil.which("ip"):
        try:
            run = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, timeout=10)
            if run.returncode == 0:
                return {entry["ifname"]: [a["local"] for a in entry.get("addr_info", []) if "local" in a]
                        for entry in json.loads(run.stdout or "[]")}
        except (OSError, ValueError, KeyError, subprocess.SubprocessError):
            pass
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                out[name] = [socket.inet_ntoa(raw[20:24])]
            except OSError:
                out[name] = []
    return out


def read_interfaces(net="/sys/class/net"):
    """Every network interface: {name: {"operstate", "up" (IFF_UP), "carrier" (true/false/None), "speed_mbps" (None
    where the driver gives none: virtual links, a link that is down), "mtu", "addresses"}}."""
    addresses = ipv4_addresses()
    out = {}
    for name in sorted(os.listdir(net)) if os.path.isdir(net) else []:
        base = os.path.join(net, name)
        flags, speed, carrier = _sys(base + "/flags"), _sys(base + "/speed"), _sys(base + "/carrier")
        try:
            speed = int(speed) if speed is not None and int(speed) > 0 else None
        except ValueError:
            speed = None
        out[name] = {"operstate": _sys(base + "/operstate"),
                     "up": bool(int(flags, 16) & 1) if flags else None,
                     "carrier": None if carrier is None else carrier == "1",
                     "speed_mbps": speed, "mtu": int(_sys(base + "/mtu") or 0) or None,
                     "addresses": addresses.get(name, [])}
    return out


def read_infiniband(root="/sys/class/infiniband"):
    """Every InfiniBand (or RoCE) port: [{"device", "port", "state" ("ACTIVE", "DOWN", ...), "phys_state"
    ("LinkUp", ...), "rate" ("200 Gb/sec (4X HDR)"), "link_layer" ("InfiniBand" / "Ethernet")}]; [] without any."""
    ports = []
    for device in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        base = os.path.join(root, device, "ports")
        for port in sorted(os.listdir(base), key=lambda p: int(p) if p.isdigit() else 0) if os.path.isdir(base) else []:
            where = os.path.join(base, port)
            state, phys = _sys(where + "/state") or "", _sys(where + "/phys_state") or ""
            ports.append({"device": device, "port": int(port) if port.isdigit() else port,
                          "state": state.partition(":")[2].strip() or state, "phys_state":
                          phys.partition(":")[2].strip() or phys, "rate": _sys(where + "/rate"),
                          "link_layer": _sys(where + "/link_layer")})
    return ports


def read_host(shm="/dev/shm", meminfo="/proc/meminfo"):
    """{"shm": {"path", "total_bytes", "free_bytes"} (None when missing), "memory": {"total_bytes",
    "available_bytes"} (/proc/meminfo's MemTotal and MemAvailable), "cpus": os.cpu_count()}."""
    out = {"shm": None, "memory": None, "cpus": os.cpu_count()}
    try:
        stat = os.statvfs(shm)
        out["shm"] = {"path": shm, "total_bytes": stat.f_blocks * stat.f_frsize,
                      "free_bytes": stat.f_bavail * stat.f_frsize}
    except OSError:
        pass
    values = {}
    try:
        with open(meminfo, encoding="utf-8") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    values[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    if "MemTotal" in values:
        out["memory"] = {"total_bytes": values["MemTotal"], "available_bytes": values.get("MemAvailable")}
    return out


def read_dcgm(level, timeout=900):
    """``dcgmi diag -r LEVEL -j`` (DCGM's diagnostic; level 1 takes seconds, 2 about two minutes, 3 longer):
    {"level", "rc", "failures": [{"test", "gpu", "status", "info"}], "error"}; "error" when dcgmi is missing, fails
    or prints no JSON."""
    out = {"level": level, "rc": None, "failures": [], "error": None}
    dcgmi = shutil.which("dcgmi")
    if not dcgmi:
        out["error"] = "dcgmi is not installed (NVIDIA DCGM: datacenter-gpu-manager)"
        return out
    try:
        run = subprocess.run([dcgmi, "diag", "-r", str(level), "-j"], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        out["error"] = "dcgmi diag -r %s: %s" % (level, exc)
        return out
    out["rc"] = run.returncode
    try:
        result = json.loads(run.stdout)
    except ValueError:
        out["error"] = "dcgmi diag -r %s gave no JSON (rc %d): %s" % (
            level, run.returncode, (run.stderr.strip() or run.stdout.strip())[-300:])
        return out
    out["failures"] = dcgm_failures(result)
    return out


def dcgm_failures(result, test=None):
    """The failed tests in ``dcgmi diag -j``'s JSON (any DCGM version: every dict holding a "status" of "Fail"),
    [{"test", "gpu", "status", "info"}]."""
    found = []
    if isinstance(result, dict):
        test = result.get("name") or result.get("test_name") or test
        status = str(result.get("status") or result.get("result") or "")
        if status.lower().startswith("fail"):
            info = result.get("warnings") or result.get("info") or result.get("warning") or ""
            found.append({"test": test, "gpu": result.get("gpu_id", result.get("gpu_ids")),
                          "status": status, "info": json.dumps(info)[:300] if not isinstance(info, str) else info[:300]})
        for value in result.values():
            if isinstance(value, (dict, list)):
                found += dcgm_failures(value, test)
    elif isinstance(result, list):
        for value in result:
            found += dcgm_failures(value, test)
    return found


def read_health(gpus=True, dcgm_level=0, environ=None):
    """All of this node's readings, one JSON-serialisable dict: {"nvml": read_gpus() (None when ``gpus`` is false:
    a CPU node), "xid": read_xids() (None on a CPU node), "interfaces": read_interfaces(), "infiniband":
    read_infiniband(), "host": read_host(), "env": the NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_DISABLE and
    NCCL_IB_HCA this process sees (``environ``, default os.environ), "dcgm": read_dcgm() or None when ``dcgm_level``
    is 0}."""
    environ = os.environ if environ is None else environ
    return {"nvml": read_gpus() if gpus else None,
            "xid": read_xids() if gpus else None,
            "interfaces": read_interfaces(),
            "infiniband": read_infiniband(),
            "host": read_host(),
            "env": {name: environ.get(name) for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE",
                                                         "NCCL_IB_HCA")},
            "dcgm": read_dcgm(dcgm_level) if dcgm_level else None}


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Print this node's health readings as JSON (cluster_check).")
    parser.add_argument("--cpu", action="store_true", help="no GPU readings (a CPU node)")
    parser.add_argument("--dcgm-level", type=int, default=0, help="run dcgmi diag -r N (0: no)")
    args = parser.parse_args(argv)
    json.dump(read_health(gpus=not args.cpu, dcgm_level=args.dcgm_level), sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
