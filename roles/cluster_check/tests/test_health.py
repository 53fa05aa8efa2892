"""The node health check: module_utils/node_health.py's reader and files/health.py's judge.

The readings are real: this machine's, read by the reader as the preflight's node_report runs it, and the GPU
machine's (tests/data/health-*.json: recorded on the device's GPU through the same reader, docs/gpu-validation.md
says how). A fault is one reading of such a record changed to what a sick node reports (an ECC count, an interface
state, /dev/shm's free bytes); everything else in the record stays as the hardware gave it.
"""

import copy
import glob
import importlib.util
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reader = load("node_health", os.path.join(HERE, "..", "module_utils", "node_health.py"))
health = load("health", os.path.join(HERE, "..", "files", "health.py"))
preflight = load("preflight", os.path.join(HERE, "..", "files", "preflight.py"))

GPU_RECORDS = sorted(glob.glob(os.path.join(DATA, "health-*.json")))
SETTINGS = {"accelerator": {}, "ranks": {}, "addresses": {}, "multi_node": True, "shm_per_rank_bytes": 256_000_000,
            "min_free_memory_bytes": 2_000_000_000, "min_free_bytes": 5_000_000_000, "min_link_mbps": 10000,
            "other_gpu_memory_bytes": 1_024_000_000}


@pytest.fixture(scope="module")
def here():
    """This machine's readings (no GPU: the CPU node's reading), as JSON gives them back."""
    return json.loads(json.dumps(reader.read_health(gpus=False, environ={"GLOO_SOCKET_IFNAME": "lo"})))


def settings(hosts, accelerator="cpu", ranks=2, **more):
    out = copy.deepcopy(SETTINGS)
    for host in hosts:
        out["accelerator"][host] = accelerator
        out["ranks"][host] = ranks
        out["addresses"][host] = "127.0.0.1"
    out.update(more)
    return out


def test_the_reader_gives_plain_json_of_this_machine(here):
    assert here["nvml"] is None and here["xid"] is None and here["dcgm"] is None  # a CPU node
    shm = os.statvfs("/dev/shm")
    assert here["host"]["shm"]["total_bytes"] == shm.f_blocks * shm.f_frsize > 0
    assert 0 < here["host"]["memory"]["available_bytes"] <= here["host"]["memory"]["total_bytes"]
    assert here["interfaces"]["lo"]["up"] is True and "127.0.0.1" in here["interfaces"]["lo"]["addresses"]
    assert set(here["interfaces"]) == set(os.listdir("/sys/class/net"))
    assert here["env"] == {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": None,
                           "NCCL_IB_HCA": None}


def test_nccl_and_gloo_interface_names_match_as_they_document():
    names = ["lo", "eth0", "eth1", "docker0", "ib0"]
    assert health.interface_matches("eth", names) == ["eth0", "eth1"]          # NCCL: prefixes
    assert health.interface_matches("=eth1", names) == ["eth1"]               # NCCL: "=" an exact name
    assert health.interface_matches("^lo,docker", names) == ["eth0", "eth1", "ib0"]  # "^" excludes
    assert health.interface_matches("eth", names, exact=True) == []           # gloo: exact names only
    assert health.interface_matches("eth0,ib0", names, exact=True) == ["eth0", "ib0"]


def test_kernel_log_xid_lines_are_found_with_their_gpu():
    lines = ["NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04",
             "NVRM: Xid (PCI:0000:9a:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:1B:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"]
    assert reader.parse_xids(lines) == [
        {"pci": "0000:9a:00", "xid": 79, "text": "pid=1234, name=python, GPU has fallen off the bus."},
        {"pci": "0000:1b:00", "xid": 13, "text": "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"}]
    assert reader.short_bus_id("00000000:9A:00.0") == "0000:9a:00.0"


def test_a_small_dev_shm_is_refused_with_the_numbers_and_one_rank_needs_none(here):
    small = copy.deepcopy(here)
    small["host"]["shm"].update(total_bytes=67_108_864, free_bytes=60_000_000)  # Docker's and podman's default
    reports = {"worker-1": {"health": small, "paths": {}}}
    problems, warnings, _ = health.judge(reports, ["worker-1"], settings(["worker-1"]))
    assert problems == [
        "host worker-1: /dev/shm has 60 MB free of 67 MB and its 2 ranks need about 512 MB (256 MB a rank: "
        "cluster_check_shm_per_rank_mb) -- make it larger (mount -o remount,size=1G /dev/shm; a container: "
        "--shm-size or --ipc=host) or remove what fills it; -e cluster_check_host_health=warn only warns"]
    problems, _, _ = health.judge(reports, ["worker-1"], settings(["worker-1"], ranks=1))
    assert problems == []
    problems, warnings, _ = health.judge(reports, ["worker-1"], settings(["worker-1"], host="warn"))
    assert problems == [] and warnings[0].startswith("host worker-1: /dev/shm has 60 MB free")
    assert not warnings[0].endswith("only warns")


def test_a_gloo_interface_that_is_missing_or_down_is_refused(here):
    wrong = copy.deepcopy(here)
    wrong["env"]["GLOO_SOCKET_IFNAME"] = "eth9"
    down = copy.deepcopy(here)
    down["interfaces"]["dsc0"] = dict(here["interfaces"]["lo"], operstate="down", up=False, carrier=None,
                                      addresses=[])
    down["env"]["GLOO_SOCKET_IFNAME"] = "dsc0"
    reports = {"head-1": {"health": here}, "worker-1": {"health": wrong}, "worker-2": {"health": down}}
    hosts = list(reports)
    problems, _, per_host = health.judge(reports, hosts, settings(hosts))
    names = ", ".join(here["interfaces"])
    assert problems == [
        "host worker-1: GLOO_SOCKET_IFNAME=eth9 names no interface here (missing: eth9) -- set GLOO_SOCKET_IFNAME to "
        "this node's cluster network interface (lo, which holds 127.0.0.1) (node_env_extra; per node: "
        "node_env_nccl_conf); -e cluster_check_network_health=warn only warns",
        "host worker-2: GLOO_SOCKET_IFNAME=dsc0: dsc0 DOWN (down) -- bring it up (ip link set dsc0 up), or set "
        "GLOO_SOCKET_IFNAME to this node's cluster network interface (lo, which holds 127.0.0.1) (node_env_extra; per "
        "node: node_env_nccl_conf); -e cluster_check_network_health=warn only warns"], names
    assert per_host["head-1"]["interfaces"] == ["lo"]


def test_a_link_at_a_tenth_of_the_others_speed_is_a_warning(here):
    fast = copy.deepcopy(here)
    fast["interfaces"]["lo"]["speed_mbps"] = 100000
    slow = copy.deepcopy(fast)
    slow["interfaces"]["lo"]["speed_mbps"] = 10000
    reports = {"head-1": {"health": fast}, "worker-1": {"health": fast}, "worker-2": {"health": slow}}
    hosts = list(reports)
    problems, warnings, _ = health.judge(reports, hosts, settings(hosts))
    assert problems == [] and warnings == [
        "host worker-2: lo runs at 10000 Mb/s (the fastest node's: 100000 Mb/s; cluster_check_min_link_mbps 10000) -- "
        "check its cable and switch port (ethtool lo); every all-reduce between the nodes goes at most at this rate"]


def test_check_nodes_prints_a_table_per_node_in_check_yml_and_one_line_in_train_yml(here):
    hosts = ["head-1"]
    reports = {"head-1": {"health": here, "paths": {"dsc_root": {"path": "/opt/dsc", "free_bytes": 1_000_000_000,
                                                                  "mount": "/"}}}}
    problems, _, per_host = health.judge(reports, hosts, settings(hosts))
    assert problems == ["host head-1: dsc_root /opt/dsc has 1.0 GB free (/), under 5.0 GB (cluster_check_min_free_gb) "
                        "-- free space there (old runs: <dsc_root>/runs); -e cluster_check_host_health=warn only warns"]
    text = health.node_tables(reports, hosts, per_host, settings(hosts), preflight.table)
    assert text.splitlines()[:2] == ["node head-1", "network: lo up"]
    assert "REFUSED host head-1: dsc_root /opt/dsc has 1.0 GB free" in text
    assert health.summary_line(hosts, per_host, reports) == \
        "node health: 1 node, 0 GPUs read; 1 refusal, 0 warnings"


@pytest.mark.skipif(not GPU_RECORDS, reason="no GPU record in tests/data")
@pytest.mark.parametrize("record", GPU_RECORDS, ids=os.path.basename)
def test_a_gpu_record_judged_as_recorded_and_with_one_fault_each(record):
    with open(record, encoding="utf-8") as handle:
        recorded = json.load(handle)
    nvml = recorded["nvml"]
    assert nvml["error"] is None and nvml["count"] == len(nvml["gpus"]) >= 1
    gpu = nvml["gpus"][0]
    assert gpu["pci_bus_id"].count(":") == 2 and gpu["memory"]["total"] > 0 and gpu["pcie"]["width_max"] >= 8
    hosts = ["gpu-1"]
    conf = settings(hosts, "cuda", ranks=len(nvml["gpus"]))
    reports = {"gpu-1": {"health": recorded, "paths": {}}}
    problems, _, _ = health.judge(reports, hosts, conf)
    assert problems == []  # the machine was healthy when it was recorded
    index, pci = gpu["index"], gpu["pci_bus_id"]

    def judged(change):
        sick = copy.deepcopy(recorded)
        change(sick["nvml"]["gpus"][0], sick)
        return health.judge({"gpu-1": {"health": sick, "paths": {}}}, hosts, conf)[:2]

    problems, _ = judged(lambda g, _: g.update(ecc_uncorrected_volatile=2, ecc_uncorrected_aggregate=2))
    assert problems == ["host gpu-1 GPU %d (%s): 2 uncorrectable ECC errors since boot -- drain the node or reset the "
                        "GPU (nvidia-smi -r -i %d); -e cluster_check_gpu_health=warn only warns" % (index, pci, index)]
    problems, _ = judged(lambda g, s: s["nvml"]["gpus"].pop())
    assert problems[0].startswith("host gpu-1: NVML sees %d GPU" % (len(nvml["gpus"]) - 1))
    problems, warnings = judged(lambda g, _: g.update(clock_event_reasons=(g["clock_event_reasons"] or 0) | 0x40))
    assert problems == [] and any("clocks held down now: HW thermal slowdown" in w for w in warnings)
    problems, warnings = judged(lambda g, _: g["pcie"].update(width=g["pcie"]["width_max"] // 4))
    assert any("GPU %d (%s): PCIe link x%d of x%d" % (index, pci, gpu["pcie"]["width_max"] // 4,
                                                       gpu["pcie"]["width_max"]) in w for w in warnings)
    problems, _ = judged(lambda g, s: s.__setitem__("xid", {"source": "/dev/kmsg", "xids": [
        {"pci": pci[:-2], "xid": 79, "text": "GPU has fallen off the bus."}]}))
    assert problems == ["host gpu-1 GPU %d (%s): Xid 79 (GPU has fallen off the bus) x1 in the kernel log since "
                        "boot -- drain the node, reset the GPU (nvidia-smi -r -i %d) or reboot it; "
                        "-e cluster_check_gpu_health=warn only warns" % (index, pci, index)]
    problems, _ = judged(lambda g, _: g["processes"].append({"pid": 4242, "used_bytes": 30 * 2 ** 30,
                                                             "name": "python"}))
    assert problems == ["host gpu-1 GPU %d (%s): 1 other process holds 30.0 GiB of its memory (pid 4242 python "
                        "30.0 GiB) -- stop them or wait for them to end; the run needs the GPU to itself; "
                        "-e cluster_check_gpu_health=warn only warns" % (index, pci)]
    if gpu["remapped_rows"] is not None:
        problems, _ = judged(lambda g, _: g["remapped_rows"].update(pending=True))
        assert problems[0].startswith("host gpu-1 GPU %d (%s): a row remap is pending" % (index, pci))
