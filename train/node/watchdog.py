"""The hang watchdog: a run whose ranks still live (their nodes answer, their processes are there) but log no new
step is stuck -- a rank stopped, or stuck outside a collective the others wait in -- and torch would wait for its
process-group timeout (30 min on gloo, 10 on NCCL) or for ever.

* :func:`hang_bound`: how long the run may go without a new logged step, from its own measured logging intervals
  (pure; the follower's part ``HangWatch`` in roles/train_launch/action_plugins/deepspeed_watch.py applies it,
  and a restart loop on the head can too).
* When the bound is passed, every rank's Python stack is captured before the run is stopped: each rank registers
  :data:`STACK_SIGNAL` with the standard library's faulthandler (:func:`register_stack_dump`, called by
  train.rank.bootstrap), which writes every thread's stack to the rank's stderr -- the per-rank log
  ``<run_dir>/logs/<host>.rank<R>.log`` and the launcher's log. :func:`dump_node` (on each node) sends the signal to
  the node's ranks and reads what each wrote; :func:`dump_nodes` asks every node at once from the head, over the
  cluster's ssh mesh (``python -m train.node.watchdog dump ...``); ``py-spy dump`` is used for a rank that cannot
  answer the signal (a stopped process) where py-spy is installed in the node's venv.
* :func:`odd_ranks` (pure) compares the stacks and names the ranks that are not where the others are.

Standard library only (the follower runs the node side with the node venv's python on the head).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from train.node.rank_status import RANKS_DIR, fan_out

#: the signal a rank's faulthandler answers with every thread's Python stack (SIGUSR1 is Slurm's "save and stop
#: before the time limit", which the ranks ignore: docs/slurm.md)
STACK_SIGNAL = signal.SIGUSR2

#: seconds a node's dump waits for its ranks' stacks to appear in their logs
DUMP_WAIT_S = 5.0

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')

#: /proc/<pid>/stat states, in words (proc(5))
_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep (disk or driver)", "T": "stopped",
           "t": "stopped by a debugger", "Z": "a zombie", "X": "dead"}


def hang_bound(intervals_s, floor_s: float, factor: float, first_step_s: float, steps_seen: int) -> float | None:
    """Seconds the run may go without a new logged step before it is taken for hung, or None (the watchdog is off).

    Args:
      intervals_s: the logging intervals measured so far, in seconds (progress.jsonl's ``interval_s`` of every
        record of this attempt but its first, which covers the warm-up); a checkpoint save falls inside one.
      floor_s: the least bound (s) once a step was logged; 0 or less switches the watchdog off.
      factor: K: the bound is at least K x the slowest interval seen.
      first_step_s: the allowance before the first logged step (s): loading, compilation, the first save's
        warm-up; 0 or less: no bound before the first step.
      steps_seen: progress records (logged steps) seen in this attempt.

    Returns:
      None when ``floor_s`` <= 0, or before the first step when ``first_step_s`` <= 0; ``first_step_s`` before
      the first step; else ``max(floor_s, factor x max(intervals_s))`` (``floor_s`` with no interval yet).

    The form is NVIDIA's resiliency extension's idea (a timeout derived from the observed step times) in its simplest
    shape: the slowest interval already includes the saves and evaluations the run makes, K covers their growth.
    """
    if floor_s <= 0:
        return None
    if steps_seen <= 0:
        return first_step_s if first_step_s > 0 else None
    slowest = max((float(x) for x in intervals_s if isinstance(x, (int, float)) and x >= 0), default=0.0)
    return max(float(floor_s), float(factor) * slowest)


def register_stack_dump(file=None) -> bool:
    """Make this process write every thread's Python stack to ``file`` (default: its stderr, which
    train.rank.bootstrap copies into the per-rank log) when it gets :data:`STACK_SIGNAL` (faulthandler: the C
    handler writes even while the main thread is inside a C call, a collective, say). Returns False where it cannot
    (a platform without the signal, no usable file descriptor); never raises."""
    import faulthandler

    try:
        faulthandler.register(STACK_SIGNAL, file=file or sys.stderr, all_threads=True, chain=False)
        return True
    except (AttributeError, ValueError, OSError, RuntimeError):
        return False


def parse_dump(text: str) -> list[list[dict]]:
    """The threads of the faulthandler dumps in ``text`` (other lines between them are skipped):
    ``[[{"file", "line", "func"}, ...], ...]``, each thread's frames innermost first (as faulthandler writes them),
    threads in the dump's order; [] when ``text`` holds none."""
    threads: list[list[dict]] = []
    current: list[dict] | None = None
    for line in text.splitlines():
        if _THREAD.match(line):
            if current is not None:
                threads.append(current)
            current = []
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current.append({"file": m.group("file"), "line": int(m.group("line")), "func": m.group("func")})
        elif current is not None and line.strip():
            threads.append(current)
            current = None
    if current is not None:
        threads.append(current)
    return [t for t in threads if t]


def main_thread(threads: list[list[dict]]) -> list[dict]:
    """The main thread's frames among a dump's threads: the one that runs a module's top level (a ``<module>``
    frame: the script, or ``python -m``'s module under runpy), else the first not started by ``threading``, else the
    last (faulthandler lists the newest thread first)."""
    for frames in threads:
        if any(f["func"] == "<module>" for f in frames):
            return frames
    for frames in threads:
        if frames and frames[-1]["func"] != "_bootstrap":
            return frames
    return threads[-1] if threads else []


def where(frames: list[dict]) -> str:
    """Where a stack is, in one phrase: its innermost frame's function and file (the file from its package on:
    ``all_reduce (torch/distributed/distributed_c10d.py:2806)``); "" for no frames."""
    if not frames:
        return ""
    top = frames[0]
    parts = Path(top["file"]).parts
    short = "/".join(parts[parts.index("site-packages") + 1:] if "site-packages" in parts else parts[-2:])
    return f"{top['func']} ({short}:{top['line']})"


def _signature(frames: list[dict]) -> tuple:
    return tuple((Path(f["file"]).name, f["func"]) for f in frames)


def _ranks_text(ranks: list[int]) -> str:
    """"0-3, 5" for [0, 1, 2, 3, 5]."""
    out, ranks = [], sorted(ranks)
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}-{ranks[j]}" if j > i + 1 else ", ".join(str(r) for r in ranks[i:j + 1]))
        i = j + 1
    return ", ".join(out)


def odd_ranks(dumps: list[dict]) -> tuple[list[dict], str]:
    """The ranks whose stack is not where the others' are, and one sentence that says it.

    Args:
      dumps: one per rank: ``{"rank", "host", "state" (/proc state letter, "" unknown), "stack" (the text the rank
        wrote after the signal, "" none)}`` (:func:`dump_node`'s records).

    Returns:
      (``[{"rank", "host", "why"}]`` stuck ranks first by rank, the sentence). A rank that wrote no stack is stuck
      (its process state says why: stopped, in the kernel); among the others, those outside the largest group of
      ranks with the same main-thread stack (file and function of every frame) are stuck. When every rank that
      answered is in the same place and none is missing, none is named: the sentence says where they all are.
      Examples: ``"rank 2 on worker-2 wrote no stack: its process is stopped (state T); ranks 0, 1 wait in the same
      all_reduce (torch/distributed/distributed_c10d.py:2806)"``.
    """
    silent, groups = [], {}
    for d in sorted(dumps, key=lambda d: int(d.get("rank", 0))):
        frames = main_thread(parse_dump(d.get("stack") or ""))
        if not frames:
            silent.append(d)
        else:
            groups.setdefault(_signature(frames), []).append((d, frames))
    stuck: list[dict] = []
    parts: list[str] = []
    for d in silent:
        state = str(d.get("state") or "")
        why = f"wrote no stack: its process is {_STATES.get(state, 'gone')}" + (f" (state {state})" if state else "")
        stuck.append({"rank": int(d["rank"]), "host": d.get("host", ""), "why": why})
        parts.append(f"rank {d['rank']} on {d.get('host', '?')} {why}")
    ordered = sorted(groups.values(), key=lambda g: (-len(g), int(g[0][0]["rank"])))
    if ordered:
        main = ordered[0]
        for group in ordered[1:]:
            for d, frames in group:
                why = f"is in {where(frames)}"
                stuck.append({"rank": int(d["rank"]), "host": d.get("host", ""), "why": why})
                parts.append(f"rank {d['rank']} on {d.get('host', '?')} {why}")
        ranks = [int(d["rank"]) for d, _ in main]
        place = where(main[0][1])
        if stuck:
            parts.append(f"rank{'s' if len(ranks) > 1 else ''} {_ranks_text(ranks)} wait"
                         f"{'' if len(ranks) > 1 else 's'} in {'the same ' if len(ranks) > 1 else ''}{place}")
        else:
            parts.append(f"every rank is in the same place, {place}: none is elsewhere (a collective that does not "
                         f"complete: the network, or a peer stuck outside Python)")
    elif not stuck:
        parts.append("no rank wrote a stack")
    return sorted(stuck, key=lambda s: s["rank"]), "; ".join(parts)


def _state_of(pid: int) -> str:
    """The /proc state letter of ``pid`` ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _py_spy(pid: int) -> str:
    """``py-spy dump --pid`` of a rank that cannot answer the signal, in faulthandler's format, where py-spy is
    installed beside this python (the node's venv); "" otherwise."""
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if not exe:
        return ""
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    # py-spy: 'Thread 123 (idle): "MainThread"' then '    func (file:line)'; written here as faulthandler would
    lines = []
    for line in out.splitlines():
        if line.startswith("Thread "):
            lines.append("Thread 0x0 (most recent call first):")
        m = re.match(r"^\s+(\S+) \((.+):(\d+)\)\s*$", line)
        if m:
            lines.append(f'  File "{m.group(2)}", line {m.group(3)} in {m.group(1)}')
    return "\n".join(lines)


def dump_node(runs_dir: str, run: str, first: int, count: int, wait_s: float = DUMP_WAIT_S) -> list[dict]:
    """On a node: make its ranks ``first`` .. ``first + count - 1`` of run ``<runs_dir>/<run>`` write their stacks,
    and read them.

    Each rank's status file (train.node.rank_status) gives its pid and host, hence its log
    ``<run_dir>/logs/<host>.rank<R>.log``; the log's size is noted, :data:`STACK_SIGNAL` sent, and what the log
    gains until it holds a dump and has not grown for 0.5 s (at most ``wait_s`` s) is the rank's stack. A rank that
    wrote none (a stopped process) gets py-spy's, where py-spy is installed. Returns ``[{"rank", "host", "pid",
    "state", "stack", "log"}]`` (``stack`` at most 20,000 characters, ``state`` the /proc letter, "" gone)."""
    run_dir = Path(runs_dir) / run
    ranks = []
    for rank in range(int(first), int(first) + int(count)):
        try:
            status = json.loads((run_dir / RANKS_DIR / f"rank-{rank}.json").read_text())
        except (OSError, ValueError):
            ranks.append({"rank": rank, "host": "", "pid": None, "state": "", "stack": "", "log": ""})
            continue
        log = run_dir / "logs" / f"{status.get('host')}.rank{rank}.log"
        try:
            size = log.stat().st_size
        except OSError:
            size = 0
        pid = int(status.get("pid") or 0)
        entry = {"rank": rank, "host": status.get("host", ""), "pid": pid, "state": _state_of(pid) if pid else "",
                 "stack": "", "log": str(log), "_from": size}
        if entry["state"] in ("T", "t"):
            entry["_done"] = True  # a stopped process answers no signal until it is continued: not waited for
        elif pid and entry["state"] and status.get("end") is None:
            try:
                os.kill(pid, STACK_SIGNAL)
            except OSError:
                pass
        else:
            entry["_done"] = True
        ranks.append(entry)
    deadline = time.monotonic() + wait_s
    last_sizes: dict[int, tuple[int, float]] = {}
    while time.monotonic() < deadline:
        pending = False
        for entry in ranks:
            if not entry.get("log") or entry.get("_done"):
                continue
            try:
                size = Path(entry["log"]).stat().st_size
            except OSError:
                continue
            seen_size, since = last_sizes.get(entry["rank"], (-1, 0.0))
            if size != seen_size:
                last_sizes[entry["rank"]] = (size, time.monotonic())
                pending = True
                continue
            if size > entry["_from"] and time.monotonic() - since >= 0.5:
                with open(entry["log"], "rb") as f:
                    f.seek(entry["_from"])
                    text = f.read(200_000).decode("utf-8", "replace")
                if parse_dump(text):
                    entry["stack"], entry["_done"] = text[-20_000:], True
                    continue
            pending = True
        if not pending:
            break
        time.sleep(0.2)
    for entry in ranks:
        if not entry["stack"] and entry.get("pid") and entry["state"]:
            entry["stack"] = _py_spy(entry["pid"])
        entry.pop("_from", None)
        entry.pop("_done", None)
    return ranks


def dump_nodes(nodes: list[dict], runs_dir: str, run: str, timeout_s: float = 5.0) -> list[dict]:
    """From the head: every node's :func:`dump_node` at once, over the cluster's ssh mesh (the nodes as
    train.node.rank_status.check_nodes takes them: ``[{"host", "first", "count", "python", "code_dir", "local"}]``).
    Returns every rank's record, by rank; a node that did not answer gives its ranks with ``stack`` "" and
    ``state`` "" and ``error`` set."""
    def remote(node):
        return [node["python"], "-m", "train.node.watchdog", "dump", runs_dir, run, str(int(node["first"])),
                str(int(node["count"]))]

    def local(node):
        return dump_node(runs_dir, run, node["first"], node["count"])

    out: list[dict] = []
    answers = fan_out(nodes, remote, local, timeout_s + DUMP_WAIT_S + 25)
    for node in nodes:
        answer = answers[node["host"]]
        if answer.get("answered") and isinstance(answer.get("result"), list):
            out.extend(dict(r, host=r.get("host") or node["host"]) for r in answer["result"])
        else:
            out.extend({"rank": r, "host": node["host"], "pid": None, "state": "", "stack": "",
                        "error": answer.get("error", "")}
                       for r in range(int(node["first"]), int(node["first"]) + int(node["count"])))
    return sorted(out, key=lambda r: int(r["rank"]))


def main(argv: list[str] | None = None) -> int:
    """``dump RUNS_DIR RUN FIRST COUNT`` (this node's ranks: :func:`dump_node`) or ``dump-all RUNS_DIR RUN
    NODES_JSON TIMEOUT_S`` (every node from the head: :func:`dump_nodes`, then :func:`odd_ranks`: ``{"ranks",
    "stuck", "said"}``); prints one JSON line. Wrong arguments: a usage line on stderr, exit status 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: watchdog.py dump RUNS_DIR RUN FIRST_RANK COUNT | dump-all RUNS_DIR RUN NODES_JSON TIMEOUT_S"
    try:
        if args[:1] == ["dump"] and len(args) == 5:
            result = dump_node(args[1], args[2], int(args[3]), int(args[4]))
        elif args[:1] == ["dump-all"] and len(args) == 5:
            ranks = dump_nodes(json.loads(args[3]), args[1], args[2], float(args[4]))
            stuck, said = odd_ranks(ranks)
            result = {"ranks": ranks, "stuck": stuck, "said": said}
        else:
            print(usage, file=sys.stderr)
            return 2
    except ValueError as e:
        print(f"{usage} ({e})", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
