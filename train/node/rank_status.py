"""One status file per rank, so that a run that loses a rank can say which one.

``<run_dir>/ranks/rank-<R>.json`` (run_dir = the directory of ``$DSC_JOB_FILE``, which the launch sets for every
rank) holds ``{"rank", "world_size", "host", "local_rank", "pid", "started", "joined", "end"}``. ``started`` is the Unix
time the file was written (the rank's bootstrap), ``joined`` the time torch.distributed's process group came up in
it (null until then: the follower stops a run whose ranks do not all join within a bound). ``end`` is null while
the rank runs and becomes, as the process ends:

* ``"finished"``: it exited normally (``atexit``);
* ``"error: <Type>: <message>"``: an uncaught exception ended it (``sys.excepthook``, then atexit keeps that);
* ``"terminated"``: it got SIGTERM -- what DeepSpeed's launcher sends a node's other ranks when one of them dies.

A rank killed with SIGKILL, or by the kernel, writes nothing: its file keeps ``"end": null``. After a failure the
rank whose file says null or ``error: ...`` on the node that failed first is the one that died
(:func:`dead_ranks`); the playbook reads the files from there (roles/train_launch/tasks/stop.yml).

Also the one finder of a run's processes (:func:`run_processes`: its run directory ``<runs>/<run>/`` in their command
line), used by the stop (:func:`stop_run`), the preflight's "one run at a time" and the cluster tests; the head's
claim on the cluster (:func:`claim`, :func:`release`: one train.yml at a time from the preflight to the launch); and the
follower's liveness check (:func:`check_nodes`: from the head, over the cluster's ssh mesh with short timeouts, does
every node answer and do its ranks live). The playbooks run the controller's copy of this file on the nodes, its
source on ``python -``'s stdin (roles/cluster_check's preflight, roles/train_launch's stop.yml), not the code staged
there, which may be older. Standard library only (it runs as a plain script too); nothing happens at import.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: the directory of a run directory that holds the rank status files (removed before a new attempt: train/node/run_dir.py)
RANKS_DIR = "ranks"

_PATH: Path | None = None
_STATE: dict = {}


def _write() -> None:
    if _PATH is None:
        return
    tmp = _PATH.with_name(_PATH.name + ".tmp")
    try:
        tmp.write_text(json.dumps(_STATE))
        os.replace(tmp, _PATH)
    except OSError:
        pass


def _end(what: str) -> None:
    """Record how the rank ended, once: the first cause wins (an error before the atexit that follows it)."""
    if _PATH is not None and _STATE.get("end") is None:
        _STATE["end"] = what
        _write()


def _record_join(every_s: float = 0.5) -> None:
    """Record ``joined`` (Unix time, s) once torch.distributed's default process group exists in this process: the
    rank got through the rendezvous at the master address (init_process_group returned). Polls, without importing
    torch (a rank imports it after its status file is written); a daemon thread, so it never holds the rank's exit.
    """
    while _PATH is not None and _STATE.get("end") is None:
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                _STATE["joined"] = time.time()
                _write()
                return
        except Exception:  # noqa: BLE001 - a module half-imported by the main thread: look again
            pass
        time.sleep(every_s)


def record_start(rank: int, world_size: int, local_rank: int, host: str, job_file: str | None = None) -> Path | None:
    """Write this rank's status file and arrange for its end to be recorded.

    Args:
        rank, world_size, local_rank: this process's place in the job (train.rank.bootstrap.RankInfo).
        host: the node's hostname.
        job_file: path of the run's job.json on this node; default ``$DSC_JOB_FILE``. None/unset: nothing is written
            (a plain ``python pretrain.py`` outside the playbooks).

    Returns:
        The status file's path, or None when there is no run directory. Never raises (a status file is a report,
        not a reason to stop training).
    """
    global _PATH
    job_file = job_file or os.environ.get("DSC_JOB_FILE")
    if not job_file:
        return None
    try:
        ranks = Path(job_file).parent / RANKS_DIR
        ranks.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    _PATH = ranks / f"rank-{rank}.json"
    _STATE.clear()
    _STATE.update(rank=rank, world_size=world_size, host=host, local_rank=local_rank, pid=os.getpid(), end=None,
                  started=time.time(), joined=None)
    _write()
    threading.Thread(target=_record_join, name="dsc-rank-status-join", daemon=True).start()

    hook = sys.excepthook

    def excepthook(kind, value, tb):
        _end(f"error: {kind.__name__}: {value}"[:500])
        hook(kind, value, tb)

    sys.excepthook = excepthook
    atexit.register(_end, "finished")

    def on_term(signum, frame):
        _end("terminated")
        os._exit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        pass
    return _PATH


#: what a rank's error says when it only lost a peer (the dead rank is elsewhere): gloo, NCCL, torch's store
PEER_ERRORS = ("closed by peer", "Connection reset by peer", "Broken pipe", "communicator was aborted",
               "Socket Timeout", "recvValue failed", "Connection refused")


def read_node(ranks_dir: str | Path, first: int, count: int) -> list[dict]:
    """This node's ranks ``first`` .. ``first + count - 1`` as their status files say, with ``alive`` read from
    /proc and, for a rank not through the rendezvous yet (``joined`` null), ``waiting_s``: seconds since it started,
    by this node's clock (the head's may differ); a rank without a file is ``{"rank": r, "end": "never started",
    "alive": False}``."""
    out = []
    now = time.time()
    for rank in range(int(first), int(first) + int(count)):
        path = Path(ranks_dir) / f"rank-{rank}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            out.append({"rank": rank, "end": "never started", "alive": False})
            continue
        pid = int(record.get("pid") or 0)
        record["alive"] = bool(pid) and Path(f"/proc/{pid}").exists()
        if record.get("joined") is None and isinstance(record.get("started"), (int, float)):
            record["waiting_s"] = round(now - record["started"], 1)
        out.append(record)
    return out


def dead_ranks(statuses: list[dict]) -> list[dict]:
    """The ranks that died on their own, most likely cause first, among status records (read_node's, any nodes).

    Order: killed (no end recorded and the process is gone: SIGKILL, the kernel's OOM killer); an error of its own;
    never started; an error that only says a peer went away (PEER_ERRORS). A rank still running, terminated by
    SIGTERM or finished is not dead.
    """
    def kind(s):
        end = s.get("end")
        if end is None:
            return None if s.get("alive", False) else 0
        end = str(end)
        if end.startswith("error"):
            return 3 if any(p in end for p in PEER_ERRORS) else 1
        return 2 if end == "never started" else None

    ranked = [(kind(s), int(s.get("rank", 0)), s) for s in statuses]
    return [s for k, _, s in sorted((r for r in ranked if r[0] is not None), key=lambda r: (r[0], r[1]))]


def node_ranks(hosts: list[str], ranks: dict) -> dict[str, list[int]]:
    """The global ranks each node holds: ``{host: [first, ..., first + count - 1]}``.

    Args:
        hosts: the nodes in host order (the plan's ``hosts``, head first); ranks: ``{host: ranks on it}``.
    Ranks are numbered in host order, as DeepSpeed's world info numbers them.
    """
    out, first = {}, 0
    for host in hosts:
        count = int(ranks[host])
        out[host] = list(range(first, first + count))
        first += count
    return out


#: programs that only read a run's files (a follower's ``tail`` of its log, a copy's ``rsync``): not the run's own
READERS = ("tail", "rsync")


def run_of(cmdline: bytes, runs_dir: str) -> str | None:
    """The run whose directory ``<runs_dir>/<run>/`` is in a command line (``/proc/<pid>/cmdline``: NUL-separated
    words), or None: none is, or the program is one of READERS. This is what makes a process one of a run's:
    train.yml puts the run directory in the command line of every process it starts (DeepSpeed's runner and pdsh
    on the head, the launcher and the ranks on every node)."""
    marker = runs_dir.rstrip("/").encode() + b"/"
    at = cmdline.find(marker)
    if at < 0:
        return None
    program = cmdline.split(b"\0", 1)[0].rsplit(b"/", 1)[-1].decode(errors="replace")
    if program in READERS:
        return None
    name = cmdline[at + len(marker):].split(b"/")[0].split(b"\0")[0].decode(errors="replace")
    return name or None


def _pid_namespace(proc: str, pid: str) -> str | None:
    """The PID namespace of ``pid`` (``/proc/<pid>/ns/pid``'s link, e.g. ``pid:[4026531836]``), None when it cannot
    be read (another user's process, without the right to look)."""
    try:
        return os.readlink(os.path.join(proc, pid, "ns", "pid"))
    except OSError:
        return None


def run_processes(runs_dir: str, run: str | None = None, proc: str = "/proc") -> dict[str, list[int]]:
    """``{run name: [pid, ...]}`` of this node's processes that belong to a run (:func:`run_of`), this process
    excepted; only ``run``'s when it is given. Read from ``proc`` (no procps needed).

    A process in another PID namespace than this one's is not this node's: a container on the node (a test cluster
    whose nodes are containers on the head, say) runs its own runs, with the same paths, which the host can see in
    its /proc but must neither count nor stop. A process whose namespace cannot be read counts. Without ``run``, a
    name counts only where ``<runs_dir>/<name>/`` exists: every run's directory does while it runs, and a shell's
    ``rm -r <runs>/*/output`` names none."""
    runs: dict[str, list[int]] = {}
    ours = _pid_namespace("/proc", "self")
    for pid in sorted((p for p in os.listdir(proc) if p.isdigit()), key=int):
        if int(pid) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                name = run_of(f.read(), runs_dir)
        except OSError:
            continue
        if not name or (run is not None and name != run):
            continue
        if run is None and not os.path.isdir(os.path.join(runs_dir, name)):
            continue
        theirs = _pid_namespace(proc, pid)
        if ours is not None and theirs is not None and theirs != ours:
            continue
        runs.setdefault(name, []).append(int(pid))
    return runs


#: the head's claim on the cluster, ``<runs_dir>/CLAIM_FILE``: ``{"run", "pid", "pid_start", "since", "by"}``
CLAIM_FILE = ".claim.json"
#: flock(2)ed while a claim is read and taken or released: two train.yml in the same second take turns
CLAIM_LOCK = ".claim.lock"


def _process_start(pid) -> str | None:
    """The start time of process ``pid`` (``/proc/<pid>/stat``'s 22nd field, clock ticks since boot: with the pid,
    it names one process, whatever pid is reused later), or None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError, TypeError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _read_claim(runs_dir: str) -> dict | None:
    try:
        record = json.loads((Path(runs_dir) / CLAIM_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("run") else None


def claim_state(runs_dir: str, record: dict | None) -> str | None:
    """Whether a claim (:func:`claim`'s record) still holds: ``"claimed"`` while its holder process lives (its
    train.yml plans, checks or stages the run: nothing launched yet), ``"running"`` while the run it names has a
    process on this node (:func:`run_processes`), None when neither (stale: its train.yml failed, was interrupted
    or the run ended; the next claim takes its place)."""
    if not record:
        return None
    start = _process_start(record.get("pid"))
    if start is not None and start == record.get("pid_start"):
        return "claimed"
    if run_processes(runs_dir, str(record["run"])).get(str(record["run"])):
        return "running"
    return None


def _hold(path: Path, run: str, until: float) -> None:
    """The holder's life: until ``until`` (time.monotonic) or until the claim file no longer names it (released)."""
    me = os.getpid()
    while time.monotonic() < until:
        time.sleep(1)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if record.get("run") != run or record.get("pid") != me:
            return


def claim(runs_dir: str, run: str, by: str, hold_s: float) -> dict:
    """Claim the cluster for ``run`` on its head, atomically: under an exclusive flock of ``<runs_dir>/CLAIM_LOCK``,
    a claim that still holds (:func:`claim_state`) refuses it; else a holder process (detached: its own session,
    no terminal, stdio on /dev/null) writes ``<runs_dir>/CLAIM_FILE`` naming ``run`` and itself (temporary file and
    os.replace) and lives on while the claim must hold: until :func:`release` (the launch hands the claim to the
    run's processes; a failed preflight or -e stop= ends it) or ``hold_s`` seconds (a train.yml that died before
    its launch blocks the cluster no longer than that).

    Args:
        runs_dir: the head's run directories' parent (created if missing); run: the run's name.
        by: who claims (shown to a refused run: user and controller).
        hold_s: seconds the holder lives at most.

    Returns:
        ``{"claimed": True, "pid": holder pid}``, or ``{"claimed": False, "claim": the record that holds, "state":
        claim_state's}``. Raises OSError when the runs directory cannot be written.
    """
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    path = Path(runs_dir) / CLAIM_FILE
    with open(Path(runs_dir) / CLAIM_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _read_claim(runs_dir)
        state = claim_state(runs_dir, current)
        if state is not None:
            return {"claimed": False, "claim": current, "state": state}
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        until = time.monotonic() + float(hold_s)
        r, w = os.pipe()
        child = os.fork()
        if child == 0:  # the holder: detached (a second fork, out of the caller's session), then it writes the claim
            try:
                os.close(r)
                os.setsid()
                if os.fork() == 0:
                    null = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(null, fd)
                    lock.close()  # the flock stays the caller's until it returns
                    record = {"run": run, "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
                              "since": since, "by": by}
                    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(record))
                    os.replace(tmp, path)
                    os.write(w, str(os.getpid()).encode())
                    os.close(w)
                    _hold(path, run, until)
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(child, 0)
        with os.fdopen(r) as f:
            said = f.read().strip()
        if not said:
            raise OSError(f"the claim's holder could not write {path}")
        return {"claimed": True, "pid": int(said)}


def release(runs_dir: str, run: str) -> dict:
    """End ``run``'s claim on this node, if it holds one: its holder is sent SIGTERM, and the claim file is removed
    unless the run has processes here (after the launch they hold the claim until they end).

    Returns ``{"released": bool (the claim named the run), "held": bool (its holder was alive: the run's
    train.yml had not launched it yet), "running": bool (its processes keep the claim)}``.
    """
    path = Path(runs_dir) / CLAIM_FILE
    if not path.exists():
        return {"released": False, "held": False, "running": False}
    with open(Path(runs_dir) / CLAIM_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_claim(runs_dir)
        if not record or record.get("run") != run:
            return {"released": False, "held": False, "running": False}
        start = _process_start(record.get("pid"))
        held = start is not None and start == record.get("pid_start")
        if held:
            try:
                os.kill(int(record["pid"]), signal.SIGTERM)
            except OSError:
                pass
        running = bool(run_processes(runs_dir, run).get(run))
        if not running:
            path.unlink(missing_ok=True)
        return {"released": True, "held": held, "running": running}



def _args_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return ""


def stop_run(runs_dir: str, run: str, term_wait_s: float = 5.0, kill_wait_s: float = 15.0) -> dict:
    """End every process of ``run`` on this node: SIGTERM, up to ``term_wait_s`` seconds for them to go, SIGKILL
    for what is left, up to ``kill_wait_s`` seconds for that to take, then look again.

    Returns ``{"stopped": bool (there was something to stop), "left": [[pid, command line], ...]}`` -- ``left`` is
    empty unless a process survived SIGKILL (e.g. stuck in the kernel). The run's claim on the cluster
    (:func:`claim`), where this node holds it, is released too: a run stopped before its launch had only that.
    """
    def pids():
        return run_processes(runs_dir, run).get(run, [])

    def signal_all(found, sig):
        for pid in found:
            try:
                os.kill(pid, sig)
            except OSError:  # gone meanwhile, or not ours
                pass

    found = pids()
    if found:
        signal_all(found, signal.SIGTERM)
        deadline = time.monotonic() + term_wait_s
        while pids() and time.monotonic() < deadline:
            time.sleep(0.25)
        if pids():
            signal_all(pids(), signal.SIGKILL)
            # a killed process keeps its command line until the kernel has freed its memory: a rank's GBs take a
            # while on a busy node
            deadline = time.monotonic() + kill_wait_s
            while pids() and time.monotonic() < deadline:
                time.sleep(0.1)
    held = release(runs_dir, run)["held"]
    return {"stopped": bool(found) or held, "left": [[pid, _args_of(pid)] for pid in pids()]}


def fan_out(nodes: list[dict], remote, local, timeout_s: float = 5.0, answer_within_s: float | None = None,
            ssh_options: list[str] | tuple = ()) -> dict[str, dict]:
    """Run one command on every node at once from the head, over the cluster's ssh mesh, and read the JSON line it
    prints: the liveness check's (:func:`check_nodes`) and the hang watchdog's (train.node.watchdog) way to ask
    the nodes.

    Args:
        nodes: ``[{"host", "code_dir", "local", ...}]``: the node's name as the head's ssh knows it, the staged code
            there (the command runs in it), ``local`` true for the node this runs on (``local(node)`` is called
            instead of ssh).
        remote: remote(node) -> argv of the command on the node (its words are quoted here).
        local: local(node) -> the result for the local node.
        timeout_s: ssh's ConnectTimeout (the TCP connect and the ssh handshake) and keep-alives, in seconds.
        answer_within_s: seconds every node has to answer in all (default twice ``timeout_s``); a node that has not
            is cut off.
        ssh_options: extra ssh words (tests).

    Returns:
        ``{host: {"answered": bool, "error": str, "result": the JSON value or None}}`` in ``nodes``' order --
        ``answered`` false when ssh could not reach the node or it did not answer in time (``error`` says what ssh
        said); a node that answered but printed no JSON line has ``answered`` true and ``error`` set.
    """
    out: dict[str, dict] = {}
    procs = {}
    t = max(1, int(round(timeout_s)))
    within = float(answer_within_s) if answer_within_s else 2 * t
    for node in nodes:
        host = node["host"]
        if node.get("local"):
            out[host] = {"answered": True, "error": "", "result": local(node)}
            continue
        command = " ".join(["cd", shlex.quote(node["code_dir"]), "&&", shlex.join(remote(node))])
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={t}", "-o", f"ServerAliveInterval={t}",
                "-o", "ServerAliveCountMax=1", *ssh_options, host, command]
        try:
            procs[host] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
        except OSError as e:
            out[host] = {"answered": False, "error": f"cannot run ssh: {e}", "result": None}
    deadline = time.monotonic() + within
    for host, p in procs.items():
        try:
            stdout, stderr = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            out[host] = {"answered": False, "error": f"no answer within {within:g} s", "result": None}
            continue
        last = (stderr.strip().splitlines() or [""])[-1][:300]
        if p.returncode == 255:
            out[host] = {"answered": False, "error": last or "ssh failed (exit code 255)", "result": None}
            continue
        try:
            out[host] = {"answered": True, "error": "", "result": json.loads(stdout.strip().splitlines()[-1])}
        except (IndexError, ValueError):
            out[host] = {"answered": True, "result": None, "error": f"exit code {p.returncode}: {last}"}
    return {node["host"]: out[node["host"]] for node in nodes}


def check_nodes(nodes: list[dict], runs_dir: str, run: str, timeout_s: float = 5.0,
                ssh_options: list[str] | tuple = ()) -> dict[str, dict]:
    """The follower's liveness check, run on the head: does every node answer, and are its ranks alive?

    Args:
        nodes: ``[{"host", "first", "count", "python", "code_dir", "local"}]``: the node's name as the head's ssh
            knows it (the hostfile's), its ranks (``first`` .. ``first + count - 1``), the node venv's python and
            the staged code there; ``local`` true for the node this runs on (read directly, no ssh).
        runs_dir, run: the run's directory ``<runs_dir>/<run>`` (given in two words: no command line of the check
            holds ``<runs_dir>/<run>/``, so the check is never taken for one of the run's processes).
        timeout_s: seconds a node has to answer: ssh's ConnectTimeout (the TCP connect and the ssh handshake) and
            keep-alives; a node that has not answered after twice that is cut off. Every node is asked at once
            (:func:`fan_out`).
        ssh_options: extra ssh words (tests).

    Returns:
        ``{host: {"answered": bool, "error": str, "ranks": [read_node records]}}`` -- ``answered`` false when ssh
        could not reach the node or it did not answer in time (``error`` says what ssh said); a node that answered
        but could not read its ranks has ``answered`` true and ``error`` set.
    """
    def remote(node):
        return [node["python"], "-m", "train.node.rank_status", "read", runs_dir, run, str(int(node["first"])),
                str(int(node["count"]))]

    def local(node):
        return read_node(Path(runs_dir) / run / RANKS_DIR, node["first"], node["count"])

    out = {}
    for host, answer in fan_out(nodes, remote, local, timeout_s, ssh_options=ssh_options).items():
        if not answer["answered"]:
            out[host] = {"answered": False, "error": answer["error"], "ranks": []}
        elif answer["error"] or not isinstance(answer["result"], list):
            out[host] = {"answered": True, "ranks": [],
                         "error": f"its rank status could not be read ({answer['error'] or 'not a list'})"}
        else:
            out[host] = {"answered": True, "error": "", "ranks": answer["result"]}
    return out


def trouble(status: dict) -> str | None:
    """Why a node fails the liveness check (one of check_nodes' values), or None when it is fine: it did not
    answer, or one of its ranks is gone without finishing (no end recorded and no process: SIGKILL, the OOM
    killer; or an error of its own). A rank not started yet, still running, finished or terminated is fine, and so
    is one whose error only says that a peer went away (PEER_ERRORS): the node that failed is the peer."""
    if not status.get("answered"):
        return f"did not answer ({status.get('error') or 'no reason given'})"
    for r in status.get("ranks") or []:
        if r.get("alive"):
            continue
        end = r.get("end")
        if end is None:
            return f"rank {r.get('rank')} is gone (killed: no exit recorded, pid {r.get('pid')})"
        if str(end).startswith("error") and not any(peer in str(end) for peer in PEER_ERRORS):
            return f"rank {r.get('rank')} ended with {str(end)[:200]}"
    return None


def late_to_join(statuses: dict, bound_s: float, since_launch_s: float) -> list[dict]:
    """The ranks not through torch.distributed's rendezvous in time, from the liveness check's last result.

    Args:
      statuses: {host: check_nodes' status}: each rank's record (train.node.rank_status.read_node: ``joined``,
        ``waiting_s`` by the node's own clock, ``alive``, ``end``).
      bound_s: seconds a rank may wait in the rendezvous after its start (its status file: before it imports torch).
      since_launch_s: seconds since the launch (a rank with no status file yet is late after ``bound_s`` of it).

    Returns:
      ``[{"host", "rank", "waiting_s"}]`` (``waiting_s`` None: the rank has not started), or [] while every rank
      joined, may still join in time, or has ended (ended ranks are the liveness check's and the log's to name).
    """
    late = []
    for host, status in statuses.items():
        for r in status.get("ranks") or []:
            if r.get("end") == "never started":
                if since_launch_s > bound_s:
                    late.append({"host": host, "rank": r.get("rank"), "waiting_s": None})
            elif r.get("alive") and r.get("joined") is None and float(r.get("waiting_s") or 0) > bound_s:
                late.append({"host": host, "rank": r.get("rank"), "waiting_s": float(r["waiting_s"])})
    return late


def main(argv: list[str] | None = None) -> int:
    """The command line; every form names a run directory in two words (``RUNS_DIR RUN``), so that its own command
    line does not hold ``<runs>/<run>/``, the mark of the run's processes (:func:`run_of`). Prints one JSON line.

    * ``read RUNS_DIR RUN FIRST COUNT``: read_node's records for ``RUNS_DIR/RUN/ranks``;
    * ``processes RUNS_DIR [RUN]``: run_processes' ``{run: [pid, ...]}``;
    * ``stop RUNS_DIR RUN``: stop_run's result; exit code 3 when a process is left;
    * ``check RUNS_DIR RUN NODES_JSON TIMEOUT_S``: check_nodes' result (NODES_JSON: its ``nodes``);
    * ``claim RUNS_DIR RUN HOLD_S BY``: claim's result (the holder goes on after this command returns);
    * ``release RUNS_DIR RUN``: release's result.

    Wrong arguments: a usage line on stderr and exit code 2.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: rank_status.py read RUNS_DIR RUN FIRST_RANK COUNT | processes RUNS_DIR [RUN] | stop RUNS_DIR RUN"
             " | check RUNS_DIR RUN NODES_JSON TIMEOUT_S | claim RUNS_DIR RUN HOLD_S BY | release RUNS_DIR RUN")
    what, rest = (args[0], args[1:]) if args else ("", [])
    try:
        if what == "read" and len(rest) == 4:
            result = read_node(Path(rest[0]) / rest[1] / RANKS_DIR, int(rest[2]), int(rest[3]))
        elif what == "processes" and len(rest) in (1, 2):
            result = run_processes(rest[0], rest[1] if len(rest) == 2 else None)
        elif what == "stop" and len(rest) == 2:
            result = stop_run(rest[0], rest[1])
        elif what == "check" and len(rest) == 4:
            result = check_nodes(json.loads(rest[2]), rest[0], rest[1], float(rest[3]))
        elif what == "claim" and len(rest) == 4:
            result = claim(rest[0], rest[1], rest[3], float(rest[2]))
        elif what == "release" and len(rest) == 2:
            result = release(rest[0], rest[1])
        else:
            print(usage, file=sys.stderr)
            return 2
    except ValueError as e:
        print(f"{usage} ({e})", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 3 if what == "stop" and result["left"] else 0


if __name__ == "__main__":
    sys.exit(main())
