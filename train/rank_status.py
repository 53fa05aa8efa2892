"""One status file per rank, so that a run that loses a rank can say which one.

``<run_dir>/ranks/rank-<R>.json`` (run_dir = the directory of ``$DSC_JOB_FILE``, which the launch sets for every
rank) holds ``{"rank", "world_size", "host", "local_rank", "pid", "end"}``. ``end`` is null while the rank runs and
becomes, as the process ends:

* ``"finished"``: it exited normally (``atexit``);
* ``"error: <Type>: <message>"``: an uncaught exception ended it (``sys.excepthook``, then atexit keeps that);
* ``"terminated"``: it got SIGTERM -- what DeepSpeed's launcher sends a node's other ranks when one of them dies.

A rank killed with SIGKILL, or by the kernel, writes nothing: its file keeps ``"end": null``. After a failure the
rank whose file says null or ``error: ...`` on the node that failed first is the one that died
(:func:`dead_ranks`); the playbook reads the files from there (roles/train_launch/tasks/stop.yml).
Standard library only; nothing happens at import.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
from pathlib import Path

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


def record_start(rank: int, world_size: int, local_rank: int, host: str, job_file: str | None = None) -> Path | None:
    """Write this rank's status file and arrange for its end to be recorded.

    Args:
        rank, world_size, local_rank: this process's place in the job (train.runtime.RankInfo).
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
        ranks = Path(job_file).parent / "ranks"
        ranks.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    _PATH = ranks / f"rank-{rank}.json"
    _STATE.clear()
    _STATE.update(rank=rank, world_size=world_size, host=host, local_rank=local_rank, pid=os.getpid(), end=None)
    _write()

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
    /proc; a rank without a file is ``{"rank": r, "end": "never started", "alive": False}``."""
    out = []
    for rank in range(int(first), int(first) + int(count)):
        path = Path(ranks_dir) / f"rank-{rank}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            out.append({"rank": rank, "end": "never started", "alive": False})
            continue
        pid = int(record.get("pid") or 0)
        record["alive"] = bool(pid) and Path(f"/proc/{pid}").exists()
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


def main(argv: list[str] | None = None) -> int:
    """``python -m train.rank_status RUNS_DIR RUN FIRST COUNT``: print read_node's records for
    ``RUNS_DIR/RUN/ranks`` as JSON (one line). The run's directory is given in two words so that this command's own
    command line does not hold ``<runs>/<run>/``, the pattern that stops a run's processes (stop.yml)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print("usage: python -m train.rank_status RUNS_DIR RUN FIRST_RANK COUNT", file=sys.stderr)
        return 2
    print(json.dumps(read_node(Path(args[0]) / args[1] / "ranks", int(args[2]), int(args[3]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
