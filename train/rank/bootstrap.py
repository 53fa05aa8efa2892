"""A rank's first steps, and who it is (standard library only: importing it changes nothing).

:func:`bootstrap` runs first thing, before torch is imported if it can: OMP_NUM_THREADS (the node's cores shared
among its ranks), HF_HUB_OFFLINE=1 and TOKENIZERS_PARALLELISM=false unless already set, the rank/world variables of
a single-process run under ``--deepspeed``; in a run of the playbooks, a copy of everything the rank writes to
stdout/stderr in ``<run_dir>/logs/<host>.rank<R>.log`` (:func:`tee_rank_output`) and the rank's status file
(train.node.rank_status), a dump of every thread's Python stack into that log on the hang watchdog's signal
(train.node.watchdog.register_stack_dump: faulthandler on SIGUSR2), and the variables the admin's shell passed to the
run (:func:`load_passthrough`); then it prints ``[rank R/W] host=<hostname> local_rank=<L>``.

The launch sets ``DSC_JOB_FILE`` (the run's job.json on this node) and ``DSC_RUN_NAME`` for every rank (through
``.deepspeed_env`` over pdsh on several nodes, else in the launcher's environment), so every rank sees them even when
a user's script writes to an ``--output_dir`` of its own.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path


JOB_FILE_ENV = "DSC_JOB_FILE"


RUN_NAME_ENV = "DSC_RUN_NAME"

@dataclasses.dataclass(frozen=True)
class RankInfo:
    """Who this process is: ``rank`` of ``world_size``, ``local_rank`` of ``local_size`` on ``host``; ``started``
    is time.monotonic() at bootstrap (seconds)."""

    rank: int
    world_size: int
    local_rank: int
    local_size: int
    host: str
    started: float


_INFO: RankInfo | None = None


def bootstrap(deepspeed_config: str | None = None, announce: bool = True) -> RankInfo:
    """Prepare this process to be a rank; call it before importing torch where possible. Idempotent.

    Args:
        deepspeed_config: the ``--deepspeed`` value when known. With it and no launcher variables (a plain
            ``python train/rank/pretrain.py --deepspeed ...``), this process becomes rank 0 of 1 on a free local port
            (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT), so DeepSpeed does not look for MPI.
        announce: print ``[rank R/W] host=<hostname> local_rank=<L>`` (one write(2), so the lines of ranks sharing
            the launcher's stdout don't interleave).

    With ``$DSC_JOB_FILE`` (a run of the playbooks) this rank's output is also copied into its own log file first
    (:func:`tee_rank_output`). Sets, unless already set: OMP_NUM_THREADS = usable cores // ranks on this node (LOCAL_SIZE or
    LOCAL_WORLD_SIZE), HF_HUB_OFFLINE=1 (nothing is downloaded at start-up), TOKENIZERS_PARALLELISM=false; and the
    variables the admin's shell passed to the run (:func:`load_passthrough`). When torch is already imported its
    thread count is set to OMP_NUM_THREADS too.

    Returns:
        RankInfo of this process (the same object on later calls; the single-process variables are still added
        when a later call brings the deepspeed_config).
    """
    global _INFO
    if deepspeed_config and "LOCAL_RANK" not in os.environ and "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if _INFO is not None:
        return _INFO
    local_size = int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1)
    if not os.environ.get("OMP_NUM_THREADS"):
        # ranks on one node share its cores; torch would otherwise start one thread per core in every rank
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, local_size)))
    load_passthrough()
    # nothing is downloaded at start-up (docs/developers/architecture.md, "What flows between the sites")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "torch" in sys.modules:  # imported before us: its OpenMP pool already read the environment
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    info = RankInfo(rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
                    local_rank=int(os.environ.get("LOCAL_RANK", "0")), local_size=local_size,
                    host=socket.gethostname(), started=time.monotonic())
    tee_rank_output(info.rank, info.host)
    if os.environ.get(JOB_FILE_ENV):
        # the hang watchdog's SIGUSR2 makes this rank write every thread's Python stack to its stderr, hence its log
        from train.node.watchdog import register_stack_dump

        register_stack_dump()
    if announce:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(),
                 f"[rank {info.rank}/{info.world_size}] host={info.host} local_rank={info.local_rank}\n".encode())
    from train.node import rank_status  # the rank's status file under the run directory (names a rank that dies)

    rank_status.record_start(info.rank, info.world_size, info.local_rank, info.host)
    _INFO = info
    return info


#: the prefix of the POSIX shared-memory objects DeepSpeed's CPU all-reduce creates, one per rank (deepspeed 0.19.8
#: ops/csrc/cpu/comm/shm.cpp: SHM_BUFFER_NAME, shm_initialize)
CPU_ALLREDUCE_SHM_PREFIX = "deepspeed_allreduce_buffer"

#: where Linux keeps POSIX shared-memory objects (shm_overview(7): a tmpfs, normally mounted on /dev/shm)
SHM_DIR = "/dev/shm"


def cpu_allreduce_buffer_name(rank: int, master_addr: str, master_port: str, uid: int | None = None) -> str:
    """The name of rank ``rank``'s shared-memory all-reduce buffer: DeepSpeed 0.19.8's shm.cpp ``shm_initialize``
    names it ``deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`` (uid: the process's, getuid())."""
    return f"{CPU_ALLREDUCE_SHM_PREFIX}_{os.getuid() if uid is None else uid}_{master_addr}_{master_port}_{rank}"


def unlink_cpu_allreduce_buffer(rank: int) -> str | None:
    """Unlink this rank's DeepSpeed CPU all-reduce buffer from /dev/shm. Only once every rank has mapped it (a peer
    still opening it would wait forever): train.rank.patches.release_cpu_allreduce_buffer calls it after a barrier.
    Peers that mapped the buffer keep it until they exit.

    Args:
        rank: the global rank (the name also takes $MASTER_ADDR and $MASTER_PORT, as DeepSpeed does).

    Returns:
        The path unlinked, or None when there was none. Never raises.
    """
    path = Path(SHM_DIR) / cpu_allreduce_buffer_name(rank, os.environ.get("MASTER_ADDR", ""),
                                                     os.environ.get("MASTER_PORT", ""))
    try:
        path.unlink()
    except OSError:
        return None
    return str(path)


_TEES: list = []  # the tee processes of tee_rank_output (kept so that they are never collected as garbage)


def process_start_unix_s(pid: int | str = "self") -> float | None:
    """When a process was created, as Unix time in seconds: now minus its age, the age from /proc/<pid>/stat field
    22 (start time in clock ticks after boot, resolution 1/CLK_TCK, usually 10 ms) against CLOCK_BOOTTIME (Linux
    only; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "(comm)": state is field 3, starttime 22
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def tee_rank_output(rank: int, host: str, job_file: str | None = None) -> Path | None:
    """Copy everything this process writes to its stdout and stderr into ``<run_dir>/logs/<host>.rank<R>.log``
    on this node, while it still goes where it went before (the launcher's stream: pdsh prefixes it with the node's
    name and the head keeps it in train.log, which the follower reads to find a node whose ranks died).

    Args:
        rank: this process's global rank; host: this node's name (the file's name says both).
        job_file: the run's job.json on this node (run_dir is its directory); default ``$DSC_JOB_FILE``.

    DeepSpeed's launcher has ``--enable_each_rank_log DIR``, but it redirects each rank's output into its file
    instead of the stream (launch.py: ``Popen(cmd, stdout=log_fd, stderr=log_fd)``), which would leave train.log
    without the ranks' lines. Here fds 1 and 2 themselves become pipes into ``tee -a -p FILE`` (one for each, so
    stdout and stderr stay apart on the stream), so the C libraries', the children's and a traceback's output are
    copied too. A tee ignores SIGINT/SIGTERM and ends when every writer of its pipe is gone: what a rank wrote before
    it was killed is in its file. Appends (a resumed run continues its ranks' files).

    Returns:
        The log file's path; None outside a run (no job file) or when it cannot be set up (no ``tee`` on PATH,
        the directory not writable): the rank then runs as before, output only on the stream. Never raises.
    """
    import shutil
    import subprocess

    job_file = job_file or os.environ.get(JOB_FILE_ENV)
    tee = shutil.which("tee")
    if not job_file or not tee:
        return None
    path = Path(job_file).parent / "logs" / f"{host}.rank{rank}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            read, write = os.pipe()
            try:
                # "$0" is the file: the run directory is in the tee's command line (stop.yml's pattern finds it)
                _TEES.append(subprocess.Popen(["/bin/sh", "-c", f"trap '' INT TERM; exec {tee} -a -p \"$0\"",
                                               str(path)], stdin=read, stdout=fd, close_fds=True))
                os.dup2(write, fd)
            finally:
                os.close(read)
                os.close(write)
    except OSError:
        return None
    return path


def rank_info() -> RankInfo:
    """The RankInfo of this process: bootstrap's, or (without bootstrap) read from the environment, unchanged."""
    if _INFO is not None:
        return _INFO
    return RankInfo(rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
                    local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                    local_size=int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1),
                    host=socket.gethostname(), started=time.monotonic())


def load_passthrough(job_file: str | None = None) -> list[str]:
    """Put the variables the admin's shell passed to the run (``passthrough.env`` beside the run's job.json, written
    by roles/train_launch/tasks/passthrough.yml on every node) into this rank's environment, over what it inherited.

    The one way they reach a rank, whatever the launcher (pdsh, Ansible, srun) and on one node too: not through
    .deepspeed_env, whose lines DeepSpeed's pdsh runner puts on the pdsh command line and logs, nor through the launch
    tasks' environment, which Ansible puts on the remote command line.

    Args:
        job_file: the run's job.json on this node; default ``$DSC_JOB_FILE``. None/unset: nothing is read.

    Returns:
        The names set, in the file's order ([] without a file). Lines without ``=`` or with a name that is not an
        identifier are skipped; a value is the rest of its line, as given. Never raises.
    """
    from train.node.run_dir import PASSTHROUGH_FILE  # (importing it changes nothing)

    job_file = job_file or os.environ.get(JOB_FILE_ENV)
    if not job_file:
        return []
    try:
        text = (Path(job_file).parent / PASSTHROUGH_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    names = []
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.isidentifier():
            os.environ[name] = value
            names.append(name)
    return names


def barrier() -> None:
    """Wait until every rank has got here; nothing without torch.distributed or with one rank. A collective: every
    rank must call it."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def gather_objects(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` without torch.distributed. A collective: every
    rank must call it."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        out = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(out, obj)
        return out
    return [obj]
