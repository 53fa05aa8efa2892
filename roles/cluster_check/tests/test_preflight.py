"""roles/cluster_check/files/preflight.py and the node_report module: what the preflight finds in the nodes' reports
taken together, on reports shaped exactly like the role's (the deepspeed_probe and node_report modules' functions run
for real on this machine, merged by preflight.merge; the other "nodes" are edited copies); node_report run as the
role runs it, through Ansible, on this machine and on a stand-in GPU node."""

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files")
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "library")


def load(name, directory=FILES):
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


preflight = load("preflight")
node_report = load("node_report", LIBRARY)
deepspeed_probe = load("deepspeed_probe", LIBRARY)  # the preflight's module (a link to the deepspeed role's)


@pytest.fixture(scope="module")
def request_paths(tmp_path_factory):
    """The paths the role asks node_report about, on a fresh local directory."""
    local = tmp_path_factory.mktemp("ssd")
    return {"HOME": "~", "local_ssd_dir": str(local), "HF_HOME": str(local / "hf"),
            "HF_DATASETS_CACHE": str(local / "hf" / "datasets"), "TORCH_EXTENSIONS_DIR": str(local / "torch_extensions")}


@pytest.fixture(scope="module")
def real_report(request_paths):
    """node_report's and deepspeed_probe's functions run for real with this interpreter, merged as the role does."""
    return preflight.merge(deepspeed_probe.probe(), node_report.node_report("cpu", request_paths))


def cluster(report, *names):
    return {name: copy.deepcopy(report) for name in names}


def test_node_report_describes_this_machine(real_report):
    assert real_report["venv"] == sys.prefix
    assert real_report["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    ssd = real_report["paths"]["local_ssd_dir"]
    assert ssd["exists"] is True and ssd["free_bytes"] > 0 and ssd["locks"] is True and ssd["fs"]
    # not created yet: described by its nearest existing parent
    hf = real_report["paths"]["HF_HOME"]
    assert hf["exists"] is False and hf["checked"] == os.path.realpath(ssd["path"])
    assert real_report["paths"]["HOME"]["path"] == "~"


@pytest.mark.slow  # runs ansible
def test_the_module_returns_the_report_in_check_mode(run_module, request_paths):
    result = run_module("cluster_check", "node_report", {"accelerator": "cpu", "paths": request_paths}, check=True)
    assert result["changed"] is False and not result.get("failed"), result
    expected = node_report.node_report("cpu", request_paths)
    for described in list(expected["paths"].values()) + list(result["paths"].values()):
        described.pop("free_bytes")  # moves between the two calls
    assert {key: result[key] for key in expected} == expected and "master_port_in_use" not in result


def test_a_path_that_cannot_be_described_fails_with_the_fix(monkeypatch):
    def broken_mount(path):  # a stale NFS mount
        raise OSError(116, "Stale file handle", path)

    monkeypatch.setattr(node_report.os, "statvfs", broken_mount)
    with pytest.raises(node_report.PathError) as failure:
        node_report.node_report("cpu", {"local_ssd_dir": "/"})
    assert str(failure.value) == ("local_ssd_dir / cannot be described on this node (/: Stale file handle); repair "
                                  "that mount, or point the inventory's local_ssd_dir (node_env's caches under it) "
                                  "at a node-local disk")


def test_mount_of_picks_the_longest_mount_point(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text("22 1 254:0 / / rw - ext4 /dev/vda rw\n"
                    "40 22 0:50 / /home rw - nfs4 server:/home rw\n"
                    "41 40 0:51 / /home/scratch rw - xfs /dev/nvme0n1 rw\n")
    assert node_report.mount_of("/home/alice/.cache", str(info)) == ("/home", "nfs4")
    assert node_report.mount_of("/home/scratch/x", str(info)) == ("/home/scratch", "xfs")
    assert node_report.mount_of("/opt", str(info)) == ("/", "ext4")
    assert "nfs4" in node_report.NETWORK_FS and "xfs" not in node_report.NETWORK_FS


# Case 5: one worker's venv at another path, or its torch differs -> parity table, named node.
def test_parity_names_the_node_with_another_venv(real_report):
    reports = cluster(real_report, "head-1", "worker-1", "worker-2")
    reports["worker-2"]["venv"] = "/home/alice/venv"
    rows, problems = preflight.parity(reports, ["head-1", "worker-1", "worker-2"], "head-1")
    assert len(problems) == 1
    assert problems[0].startswith("host worker-2: venv is /home/alice/venv, %s on head-1, worker-1" % sys.prefix)
    assert "venv_dir" in problems[0]
    assert [row[0] for row in rows] == ["head-1", "worker-1", "worker-2"] and rows[2][1] == "/home/alice/venv"


def test_parity_names_the_node_with_another_torch_and_ties_go_to_the_head(real_report):
    reports = cluster(dict(real_report, torch="2.13.0+cpu"), "head-1", "worker-1")
    reports["worker-1"]["torch"] = "2.4.0+cpu"
    _, problems = preflight.parity(reports, ["head-1", "worker-1"], "head-1")
    assert problems == ["host worker-1: torch is 2.4.0+cpu, 2.13.0+cpu on head-1; run site.yml so python_env installs "
                        "the same torch everywhere"]


def test_parity_passes_identical_nodes_and_prints_a_table(real_report):
    reports = cluster(real_report, "head-1", "worker-1")
    rows, problems = preflight.parity(reports, ["head-1", "worker-1"], "head-1")
    assert problems == []
    text = preflight.table(["node"] + [c[0] for c in preflight.PARITY], rows)
    assert text.splitlines()[0].split() == ["node", "venv", "python", "torch", "cuda", "nccl", "deepspeed", "ops"]
    assert len(text.splitlines()) == 4


# Case 2: pdsh missing on the head.
def test_pdsh_missing_on_the_head_is_named_only_when_pdsh_launches(real_report):
    reports = cluster(real_report, "head-1", "worker-1")
    reports["head-1"]["pdsh"] = None
    assert "host head-1: pdsh is not installed" in preflight.launcher(reports, "head-1", True, "pdsh")[0]
    assert preflight.launcher(reports, "head-1", True, "ansible") == []
    assert preflight.launcher(reports, "head-1", False, "pdsh") == []


# Case 11: optimizer offload without cpu_adam on one node; extensions dir on a shared home.
def test_offload_without_cpu_adam_names_the_node(real_report):
    reports = cluster(real_report, "head-1", "worker-1")
    for report in reports.values():
        report["ops"] = ["cpu_adam", "fused_adam"]
    reports["worker-1"]["ops"] = ["fused_adam"]
    problems = preflight.job_needs(reports, ["head-1", "worker-1"], {"offload_optimizer": "cpu", "precision": "fp32"})
    assert len(problems) == 1 and problems[0].startswith("host worker-1: offload_optimizer=cpu needs the DeepSpeed op "
                                                         "cpu_adam")
    assert preflight.job_needs(reports, ["head-1", "worker-1"], {"offload_optimizer": "none"}) == []


def test_extensions_dir_on_a_shared_home_is_refused(real_report):
    reports = cluster(real_report, "head-1")
    reports["head-1"]["paths"]["TORCH_EXTENSIONS_DIR"].update(path="/home/alice/.cache/torch_extensions",
                                                              fs="nfs4", network=True, mount="/home")
    problems, _ = preflight.disks(reports, ["head-1"], 0)
    assert len(problems) == 1 and problems[0].startswith(
        "host head-1: TORCH_EXTENSIONS_DIR /home/alice/.cache/torch_extensions is on nfs4 (/home)")


# Case 12: HF datasets cache on a shared network home; a home without working file locks.
def test_datasets_cache_on_nfs_is_refused_and_broken_locks_warned(real_report):
    reports = cluster(real_report, "head-1", "worker-1")
    reports["worker-1"]["paths"]["HF_DATASETS_CACHE"].update(fs="nfs", network=True, mount="/home")
    reports["worker-1"]["paths"]["HOME"].update(fs="nfs", network=True, mount="/home", locks=False)
    problems, warnings = preflight.disks(reports, ["head-1", "worker-1"], 0)
    assert [p.split(":")[0] for p in problems] == ["host worker-1"] and "HF_DATASETS_CACHE" in problems[0]
    assert len(warnings) == 1 and warnings[0].startswith("host worker-1: file locks do not work in HOME ~ (nfs")


def test_a_local_ssd_dir_the_workers_share_with_the_head_is_read_in_place_even_on_nfs(real_report):
    """The markers every node saw (preflight.yml): workers that see the head's local_ssd_dir read it in place; their
    local_ssd_dir and the caches under it may be on NFS then, a worker's own NFS cache outside it still may not."""
    hosts = ["head-1", "worker-1", "worker-2"]
    shares = {"local_ssd_dir": {"head-1": hosts, "worker-1": hosts, "worker-2": ["worker-2"]},
              "runs_dir": {h: [h] for h in hosts}}
    in_place, problems, notes = preflight.shared_dirs(hosts, "head-1", shares)
    assert in_place == ["head-1", "worker-1"] and problems == []
    assert notes == ["local_ssd_dir is one shared storage for head-1, worker-1: the data is prepared there once by "
                     "head-1 and read in place; nothing is copied to worker-1"]
    reports = cluster(real_report, *hosts)
    for host in hosts:
        ssd = reports[host]["paths"]["local_ssd_dir"]["path"]
        for name in ("local_ssd_dir", "HF_HOME", "HF_DATASETS_CACHE"):
            reports[host]["paths"][name].update(fs="nfs4", network=True, mount="/shared")
        reports[host]["paths"]["TORCH_EXTENSIONS_DIR"].update(path="/home/x/.cache/torch_extensions", fs="nfs4",
                                                              network=True, mount="/home")
        assert reports[host]["paths"]["HF_HOME"]["path"].startswith(ssd + "/")
    problems, _ = preflight.disks(reports, hosts, 0, in_place)
    assert sorted((p.split(":")[0], p.split()[2]) for p in problems) == [
        ("host head-1", "TORCH_EXTENSIONS_DIR"), ("host worker-1", "TORCH_EXTENSIONS_DIR"),
        ("host worker-2", "HF_DATASETS_CACHE"), ("host worker-2", "HF_HOME"), ("host worker-2", "TORCH_EXTENSIONS_DIR"),
        ("host worker-2", "local_ssd_dir")]
    # on the shared storage the caches need working file locks: a problem there, not a warning
    reports["worker-1"]["paths"]["local_ssd_dir"]["locks"] = False
    problems, _ = preflight.disks(reports, hosts, 0, in_place)
    assert [p for p in problems if "file locks" in p] == [
        "host worker-1: file locks do not work in local_ssd_dir %s (nfs4 on /shared), which it shares with other "
        "nodes: the caches there (HF datasets, torch.compile's) need them; mount it with working locks (NFSv4, or "
        "NFSv3 with lockd) or give every node a local_ssd_dir of its own" % reports["worker-1"]["paths"]["local_ssd_dir"]["path"]]


def test_shared_run_directories_and_workers_sharing_without_the_head_are_refused():
    hosts = ["head-1", "worker-1", "worker-2", "worker-3"]
    shares = {"local_ssd_dir": {"head-1": ["head-1"], "worker-1": ["worker-1"], "worker-2": ["worker-2", "worker-3"],
                                "worker-3": ["worker-2", "worker-3"]},
              "runs_dir": {"head-1": ["head-1", "worker-1"], "worker-1": ["head-1", "worker-1"],
                           "worker-2": ["worker-2"], "worker-3": ["worker-3"]}}
    in_place, problems, notes = preflight.shared_dirs(hosts, "head-1", shares)
    assert in_place == [] and notes == []
    assert [p.split(":")[0] for p in problems] == ["host head-1", "host worker-1", "host worker-2", "host worker-3"]
    assert "run directories' disk (<dsc_root>/runs) is also worker-1's" in problems[0]
    assert "set dsc_root to a node-local path" in problems[1]
    assert problems[2].startswith("host worker-2: its local_ssd_dir is also worker-3's (one shared file system) but "
                                  "not the head head-1's")
    # nothing looked at (one node, or check.yml before this check existed): nothing to say
    assert preflight.shared_dirs(hosts, "head-1", {}) == ([], [], [])


def test_the_judge_gives_the_nodes_that_read_in_place_as_json(real_report, tmp_path):
    hosts = ["head-1", "worker-1"]
    data = {"head": "head-1", "hosts": hosts, "multi_node": True, "launcher": "ansible", "min_free_bytes": 0,
            "probes": {h: {} for h in hosts}, "reports": {h: real_report for h in hosts},
            "shares": {"local_ssd_dir": {h: hosts for h in hosts}}}
    path = tmp_path / "in.json"
    path.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, os.path.join(FILES, "preflight.py"), "nodes", "--json", "--input",
                           str(path)], capture_output=True, text=True, check=False)
    out = json.loads(proc.stdout)
    assert out["in_place"] == ["head-1", "worker-1"], proc.stderr
    assert "read in place; nothing is copied to worker-1" in out["text"]


def test_too_little_free_space_is_refused(real_report):
    reports = cluster(real_report, "head-1")
    reports["head-1"]["paths"]["local_ssd_dir"]["free_bytes"] = 2 * 10 ** 9
    problems, _ = preflight.disks(reports, ["head-1"], 5 * 10 ** 9)
    assert problems and "has 2.0 GB free, the check wants at least 5.0 GB" in problems[0]


def test_checkpoints_that_do_not_fit_a_nodes_run_directory_are_refused_with_the_numbers(real_report, tmp_path):
    """The plan's checkpoint estimate (train.controller.memory, a real Llama 8B ZeRO-3 plan on 2 nodes) against the
    free space node_report finds for the run directory: the head, which gathers every rank's part, is named with
    the numbers and the fixes; -e cluster_check_checkpoint_space=false turns the refusal into a warning."""
    import sys as _sys
    _sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    from train.controller import memory

    job = {"model_type": "llama", "vocab_size": 128256, "zero_stage": 3, "precision": "bf16", "autocast": True,
           "max_steps": 1000, "save_steps": 100, "save_total_limit": 2,
           "model_config": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                            "num_key_value_heads": 8, "intermediate_size": 14336, "tie_word_embeddings": False}}
    one = memory.checkpoint_bytes(job, {"head-1": 1, "worker-1": 1}, "head-1")
    kept = memory.checkpoints_kept(job)
    assert kept == 3  # two kept, a third while it is written
    # 8.0 B parameters: fp32 weights (autocast) 4 N in model.safetensors, 12 N of optimizer states gathered on the
    # head, half of them on the worker
    assert 128e9 < one["head-1"] < 130e9 and 80e9 < one["worker-1"] < 82e9, one
    checkpoints = {"bytes": one, "kept": kept, "peak": {n: b * kept for n, b in one.items()}}
    reports = cluster(node_report.node_report("cpu", {"runs_dir": str(tmp_path / "runs")}), "head-1", "worker-1")
    reports["head-1"]["paths"]["runs_dir"]["free_bytes"] = 200 * 10 ** 9
    reports["worker-1"]["paths"]["runs_dir"]["free_bytes"] = 250 * 10 ** 9
    assert reports["head-1"]["paths"]["runs_dir"]["checked"] == os.path.realpath(tmp_path)  # not made yet
    problems, warnings = preflight.checkpoint_space(reports, ["head-1", "worker-1"], checkpoints)
    assert warnings == [] and len(problems) == 1, problems
    assert problems[0].startswith(
        "host head-1: the run's checkpoints need about %.1f GB in %s (3 at once of %.1f GB each: the head gathers "
        "every rank's part) and 200.0 GB are free there" % (3 * one["head-1"] / 1e9, tmp_path / "runs",
                                                             one["head-1"] / 1e9)), problems
    assert preflight._size(20 * 2 ** 20) == "21 MB" and preflight._size(1.25e9) == "1.2 GB"
    assert "-e save_total_limit=1" in problems[0] and "-e save_steps=N" in problems[0]
    assert "-e cluster_check_checkpoint_space=false only warns" in problems[0]
    problems, warnings = preflight.checkpoint_space(reports, ["head-1", "worker-1"], checkpoints, refuse=False)
    assert problems == [] and len(warnings) == 1 and warnings[0].startswith("host head-1: ")
    reports["head-1"]["paths"]["runs_dir"]["free_bytes"] = 400 * 10 ** 9
    assert preflight.checkpoint_space(reports, ["head-1", "worker-1"], checkpoints) == ([], [])
    assert preflight.checkpoint_space(reports, ["head-1", "worker-1"], None) == ([], [])


# Case 9 (the GPU part): bf16 on a compute-capability 7.0 GPU.
def test_bf16_on_a_volta_gpu_is_refused(real_report):
    reports = cluster(real_report, "head-1", "worker-1")
    reports["head-1"]["gpus"] = [{"index": 0, "name": "NVIDIA H200", "cc": "9.0"}]
    reports["worker-1"]["gpus"] = [{"index": 0, "name": "Tesla V100-SXM2-32GB", "cc": "7.0"}]
    problems = preflight.job_needs(reports, ["head-1", "worker-1"], {"precision": "bf16"})
    assert problems == ["host worker-1: GPU 0 (Tesla V100-SXM2-32GB) has compute capability 7.0 and bf16 needs >= 8.0; "
                        "use -e precision=fp16 (or fp32)"]
    assert preflight.job_needs(reports, ["head-1", "worker-1"], {"precision": "fp16"}) == []


def test_cli_exit_status_and_lines(real_report, tmp_path):
    probe = {"python_version": "3.11.2", "torch": {"version": "2.13.0+cpu", "cuda": None},
             "deepspeed": {"version": "0.19.8", "installed_ops": ["cpu_adam"], "accelerator_name": "cpu"}}
    probes = {"head-1": probe, "worker-1": copy.deepcopy(probe)}
    probes["worker-1"]["deepspeed"]["version"] = "0.15.0"
    reports = cluster(real_report, "head-1", "worker-1")
    data = {"head": "head-1", "hosts": ["head-1", "worker-1"], "multi_node": True, "launcher": "pdsh",
            "min_free_bytes": 0, "probes": probes, "reports": reports, "job": None}
    (tmp_path / "in.json").write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, os.path.join(FILES, "preflight.py"), "nodes", "--input",
                           str(tmp_path / "in.json")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["host worker-1: deepspeed is 0.15.0, 0.19.8 on head-1; run site.yml so the "
                                        "deepspeed role installs the same wheel everywhere"]
    assert proc.stdout.splitlines()[0].startswith("node")


def health_result(n, seconds, nbytes=2 ** 24):
    algbw = nbytes / seconds / 1e9
    return {"ranks": n, "bytes": nbytes, "time_s": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (n - 1) / n}


def test_health_names_the_slow_pair_and_the_slow_node():
    pairs = []
    for a, b, seconds in (("n1", "n2", 0.01), ("n1", "n3", 0.2), ("n2", "n3", 0.2)):
        pairs.append(dict(health_result(4, seconds), nodes=[a, b]))
    results = {"backend": "gloo", "all": [health_result(6, 0.05)], "pairs": pairs}
    text, problems = preflight.check_health({"results": results, "min_busbw_gbps": 0.0, "relative": 0.5})
    assert [p.split(":")[0] for p in problems] == ["n1 + n3", "n2 + n3", "host n3"]
    assert "busbw = algbw x 2(n-1)/n" in text and text.count("SLOW") == 2
    ok_text, ok = preflight.check_health({"results": results, "min_busbw_gbps": 0.0, "relative": 0.01})
    assert ok == [] and ok_text.count(" ok") == 4


def test_health_floor_applies_to_all_ranks():
    results = {"backend": "gloo", "all": [health_result(2, 1.0)], "pairs": []}  # 16.8 MB/s
    _, problems = preflight.check_health({"results": results, "min_busbw_gbps": 0.1, "relative": 0.5})
    assert len(problems) == 1 and problems[0].startswith("all ranks: all-reduce bus bandwidth 0.0168 GB/s")


def test_health_names_a_gpu_below_80_percent_of_the_others_on_its_node():
    """Four GPUs of head-1: every pair with GPU 2 runs at 70 % of the others (its NVLink degraded, say): those
    three pairs are slow and GPU 2 is named; worker-1's four are all within 80 % and pass. 80 % is the default."""
    gpus = []
    for node, slow in (("head-1", "2"), ("worker-1", None)):
        for a, b in ((a, b) for i, a in enumerate("0123") for b in "0123"[i + 1:]):
            seconds = 0.010 / (0.7 if slow in (a, b) else 1.0) * (1.0 if node == "head-1" else 1.1)
            gpus.append(dict(health_result(2, seconds), node=node, gpus=[a, b]))
    results = {"backend": "nccl", "all": [health_result(8, 0.02)], "pairs": [], "gpus": gpus}
    text, problems = preflight.check_health({"results": results, "min_busbw_gbps": 0.0, "relative": 0.5,
                                             "gpu_relative": 0.8})
    assert [p.split(":")[0] for p in problems] == ["head-1 GPU 0 + 2", "head-1 GPU 1 + 2", "head-1 GPU 2 + 3",
                                                   "host head-1 GPU 2"], problems
    best = max(g["busbw_gbps"] for g in gpus if g["node"] == "head-1")
    assert f"is below 0.8 x the fastest pair of head-1 ({best:.3g} GB/s)" in problems[0], problems[0]
    assert "every slow GPU pair of head-1 includes it" in problems[-1] and "gpu_indices" in problems[-1]
    assert text.count("SLOW") == 3 and "worker-1 GPU 0 + 1" in text
    _, ok = preflight.check_health({"results": results, "min_busbw_gbps": 0.0, "relative": 0.5, "gpu_relative": 0.6})
    assert ok == []


FAKE_TORCH = """
import ctypes, os
if os.environ.get("FAKE_TORCH_RAISES"):
    raise RuntimeError("node_report imported torch")
# a CUDA torch links libnccl: loading it puts it in /proc/self/maps
_nccl = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "..", "nvidia", "nccl", "lib", "libnccl.so.2"))


class cuda:
    class nccl:
        @staticmethod
        def version():
            return (2, 27, 3)  # the headers torch was built with, not the library it loads

    is_available = staticmethod(lambda: True)
    device_count = staticmethod(lambda: 1)
    get_device_capability = staticmethod(lambda index: (9, 0))
    get_device_name = staticmethod(lambda index: "NVIDIA H200 (torch)")
"""


@pytest.fixture
def gpu_node(tmp_path):
    """A GPU node's pieces where this machine has none: an `nvidia-smi` on PATH that answers the query as the
    H200's driver does, a real shared library `nvidia/nccl/lib/libnccl.so.2` (built here with cc) whose
    ncclGetVersion returns 22809, and a stand-in `torch` next to it that loads that library (as a CUDA torch does),
    names its GPU "NVIDIA H200 (torch)", says it was built with NCCL 2.27.3 headers, and raises when imported under
    FAKE_TORCH_RAISES=1."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build the stand-in libnccl.so.2")
    site = tmp_path / "site"
    lib = site / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    source = tmp_path / "nccl.c"
    source.write_text("int ncclGetVersion(int *v) { *v = 22809; return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libnccl.so.2"), str(source)], check=True)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = --query-gpu=index,name,compute_cap,mig.mode.current ] || exit 2\n"
                   "echo \"0, NVIDIA H200, 9.0, ${FAKE_MIG:-Disabled}\"\necho '1, NVIDIA H200, 9.0, [N/A]'\n")
    smi.chmod(0o755)
    env = {key: value for key, value in os.environ.items()
           if key not in ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update(PYTHONPATH=str(site), PATH="%s:%s" % (bin_dir, env.get("PATH", "")))
    return site, env


@pytest.fixture
def run_report(run_module):
    """node_report run as the role runs it (through Ansible) in the environment ``env``, with ``request``."""
    def run(env, request):
        result = run_module("cluster_check", "node_report", request, env=env)
        assert not result.get("failed"), result
        return result

    return run


@pytest.mark.slow  # runs ansible
def test_node_report_reads_gpus_and_nccl_without_torch(gpu_node, run_report):
    _, env = gpu_node
    report = run_report(dict(env, FAKE_TORCH_RAISES="1"), {"accelerator": "cuda"})
    assert report["gpus"] == [{"index": 0, "name": "NVIDIA H200", "cc": "9.0"},
                              {"index": 1, "name": "NVIDIA H200", "cc": "9.0"}]
    assert report["nccl"] == "2.28.9"


@pytest.mark.slow  # runs ansible
@pytest.mark.parametrize("case", ["CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "MIG", "no nvidia-smi",
                                  "torch's own libnccl"])
def test_node_report_asks_torch_where_it_could_see_otherwise(gpu_node, run_report, case):
    """Where nvidia-smi or the wheel's library could differ from what torch sees, torch answers (its GPU name shows
    it), and the NCCL version is still the loaded library's (2.28.9), not the headers torch was built with."""
    site, env = gpu_node
    lib = site / "nvidia" / "nccl" / "lib"
    if case == "CUDA_VISIBLE_DEVICES":
        env[case] = "1"
    elif case == "LD_PRELOAD":
        env[case] = str(lib / "libnccl.so.2")
    elif case == "LD_LIBRARY_PATH":
        env[case] = str(lib)
    elif case == "MIG":
        env["FAKE_MIG"] = "Enabled"
    elif case == "no nvidia-smi":
        env["PATH"] = env["PATH"].split(":", 1)[1]
    else:
        (site / "torch" / "lib").mkdir()
        shutil.copy(lib / "libnccl.so.2", site / "torch" / "lib" / "libnccl.so.2")
    report = run_report(env, {"accelerator": "cuda"})
    assert report["gpus"] == [{"index": 0, "name": "NVIDIA H200 (torch)", "cc": "9.0"}]
    assert report["nccl"] == "2.28.9"


def test_nccl_version_codes(tmp_path):
    assert node_report.nccl_version_string(22809) == "2.28.9"
    assert node_report.nccl_version_string(21805) == "2.18.5"
    assert node_report.nccl_version_string(2708) == "2.7.8"
    assert node_report.library_nccl_version(str(tmp_path / "missing.so")) is None
