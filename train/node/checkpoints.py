"""Checkpoints of a run whose output_dir is on each node's own disk: gathered on the head, checked, resumed from.

With DeepSpeed under the HF Trainer a checkpoint ``<output_dir>/checkpoint-<step>/`` is written by every rank on
its own node: rank 0 writes the model states, ``trainer_state.json``, the scheduler and ``latest``; every rank
writes its own optimizer shard (``global_step<N>/*zero_pp_rank_<R>_mp_rank_00_optim_states.pt``, ZeRO >= 1; at
ZeRO-3 also ``zero_pp_rank_<R>_mp_rank_00_model_states.pt``) and its RNG state (``rng_state_<R>.pth``). On
node-local disks no node holds a whole checkpoint (DeepSpeed #2319, #5452), so:

* ``supervise`` runs the head's launcher as a child and, every few seconds while it runs, ``gather``s: it pulls the
  rank files of every new checkpoint from the other nodes into the head's copy (rsync over the cluster's ssh, the
  mesh the launcher and the data staging use; every node at once, :func:`pull_from_all`), checks it (``problems``) and marks it complete (``MARKER``, written
  last, atomically). Training never waits for it.
* train.yml gathers once more when the run ends (also after a failure), brings the complete checkpoints back to
  the controller, and ``-e resume=<run>`` stages the newest complete one (``latest_complete``) onto every node.
* ``universal`` converts a checkpoint, on the head, into DeepSpeed's universal checkpoint (``ds_to_universal``:
  every parameter's fp32 weights and optimizer moments whole, in ``<tag>_universal/zero/<param>/``, beside the
  ZeRO shards) once, for a resume on another world size; the conversion is kept and reused.

A checkpoint is complete when ``trainer_state.json`` names its step, DeepSpeed's ``latest`` names a tag directory
that holds the model states, every rank 0..world_size-1 has its optimizer shard (when any rank has one, or the
ZeRO stage is >= 1) and its RNG state, and every torch file (a zip archive since torch 1.6) and safetensors file is
whole: a save cut off half-way lacks the zip's central directory or the tensors its header promises.

Standard library only (the controller imports it for the resume lookup; the head runs it with the node venv).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

#: Written into a checkpoint directory once it was found complete (last, by rename): what was checked.
MARKER = "dsc-checkpoint.json"
#: DeepSpeed's pointer to a checkpoint's universal tag (ds_to_universal writes it; the engine reads it in place of
#: ``latest`` when the config says ``"checkpoint": {"load_universal": true}``).
LATEST_UNIVERSAL = "latest_universal"
#: Written into ``<tag>_universal/`` once the conversion ended (last, by rename): the conversion is whole.
UNIVERSAL_MARKER = "dsc-universal.json"
_STEP = re.compile(r"^checkpoint-(\d+)$")
_RANK_FILE = re.compile(r"(?:^|_)zero_pp_rank_(\d+)_mp_rank_\d+_(optim|model)_states\.pt$")
#: a rank's optimizer shard (ZeRO >= 1, or DeepSpeed's bf16 optimizer): the state a world size change must convert
RANK_SHARD = re.compile(r"zero_pp_rank_\d+_mp_rank_\d+_optim_states\.pt$")
_RNG = re.compile(r"^rng_state(?:_(\d+))?\.pth$")
#: rsync filter of the files one rank writes (the only files the head pulls from the other nodes).
RANK_FILTER = ["--include=/global_step*/", "--include=/global_step*/*zero_pp_rank_*_states.pt",
               "--include=/rng_state_*.pth", "--exclude=*"]
#: the per-rank logs of a run directory's logs/ (train/rank/bootstrap.py's ``<host>.rank<R>.log``)
LOG_FILTER = ["--include=*.rank*.log", "--exclude=*"]
#: rsyncs a gather runs at once (one per node; each is mostly waiting on the network and the node's disk)
PULL_FANOUT = 32
GATHER_EVERY_S = 2.0  # supervise's period (s): well under the time between two saves of a real run
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
       "-o", "ServerAliveCountMax=3"]


def step_of(path) -> int | None:
    """The step of a ``checkpoint-<step>`` directory name (str or Path), or None for any other name."""
    m = _STEP.match(Path(path).name)
    return int(m.group(1)) if m else None


def checkpoints(output_dir) -> list[Path]:
    """The ``checkpoint-<step>`` directories of ``output_dir``, oldest step first ([] when it does not exist)."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=step_of)


def _zip_whole(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as z:
            end = max((i.header_offset + len(i.filename) + 30 + i.compress_size for i in z.infolist()), default=0)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"{path.name} is cut off or not a torch file ({exc})"
    if end > path.stat().st_size:
        return f"{path.name} is cut off ({path.stat().st_size} bytes, its entries need {end})"
    return None


def _safetensors_whole(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except (OSError, struct.error, ValueError) as exc:
        return f"{path.name} is cut off or not safetensors ({exc})"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if path.stat().st_size < 8 + n + end:
        return f"{path.name} is cut off ({path.stat().st_size} bytes, its tensors need {8 + n + end})"
    return None


def problems(ckpt_dir, world_size: int, zero_stage: int | None = None) -> list[str]:
    """What makes ``ckpt_dir`` (a ``checkpoint-<step>`` directory) not a complete checkpoint of ``world_size`` ranks.

    Args:
        ckpt_dir: the checkpoint directory.
        world_size: ranks of the run (>= 1).
        zero_stage: the run's ZeRO stage, or None to judge from the files (shards of some rank -> all ranks').

    Returns:
        [] when complete, else one line per problem (e.g. ``no optimizer shard of rank 2``).
    """
    d = Path(ckpt_dir)
    if not d.is_dir():
        return [f"{d} does not exist"]
    out = []
    step = step_of(d)
    try:
        state = json.loads((d / "trainer_state.json").read_text(encoding="utf-8"))
        if step is not None and state.get("global_step") != step:
            out.append(f"trainer_state.json is of step {state.get('global_step')}, not {step}")
    except (OSError, ValueError):
        out.append("no readable trainer_state.json (rank 0 had not finished saving)")
    try:
        tag = (d / "latest").read_text(encoding="utf-8").strip()
    except OSError:
        tag = ""
        out.append("no DeepSpeed 'latest' file")
    tag_dir = d / tag if tag else None
    files = [p for p in d.rglob("*") if p.is_file()]
    shards: dict[str, set[int]] = {"optim": set(), "model": set()}
    rngs = set()
    for p in files:
        m = _RANK_FILE.search(p.name)
        if m and tag_dir is not None and p.parent == tag_dir:
            shards[m.group(2)].add(int(m.group(1)))
        r = _RNG.match(p.name) if p.parent == d else None
        if r:
            rngs.add(int(r.group(1) or 0))
    ranks = set(range(int(world_size)))
    if tag_dir is not None:
        if not tag_dir.is_dir():
            out.append(f"'latest' names {tag}, which is not there")
        elif not (tag_dir / "mp_rank_00_model_states.pt").is_file() and shards["model"] != ranks:
            out.append(f"no model states in {tag}/ (mp_rank_00_model_states.pt, or every rank's at ZeRO-3)")
        if (zero_stage or 0) >= 1 or shards["optim"]:
            missing = sorted(ranks - shards["optim"])
            if missing:
                out.append(f"no optimizer shard of rank{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(map(str, missing))} in {tag}/")
            extra = sorted(shards["optim"] - ranks)
            if extra:
                out.append(f"optimizer shards of ranks {extra} beyond world size {world_size} (another run's?)")
        if shards["model"] and shards["model"] != ranks:
            out.append(f"ZeRO-3 model states of ranks {sorted(shards['model'])}, not 0..{int(world_size) - 1}")
    missing = sorted(ranks - rngs)
    if missing and int(world_size) > 1:
        out.append(f"no RNG state of rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}")
    for p in files:
        bad = (_zip_whole(p) if p.suffix in (".pt", ".pth", ".bin") else
               _safetensors_whole(p) if p.suffix == ".safetensors" else None)
        if bad:
            out.append(bad)
    return out


def marker(ckpt_dir) -> dict | None:
    """The checkpoint's ``MARKER`` contents, or None when it has none (never checked complete) or it is unreadable."""
    try:
        return json.loads((Path(ckpt_dir) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def mark(ckpt_dir, world_size: int, zero_stage: int | None = None) -> list[str]:
    """Check ``ckpt_dir`` (``problems``); when complete, write ``MARKER`` (temp file + rename) and return [].

    The marker records the step, world size, ZeRO stage and every file with its size (bytes). Returns the problems
    otherwise (nothing is written then).
    """
    found = problems(ckpt_dir, world_size, zero_stage)
    if found:
        return found
    d = Path(ckpt_dir)
    record = {"step": step_of(d), "world_size": int(world_size), "zero_stage": zero_stage,
              "files": {str(p.relative_to(d)): p.stat().st_size for p in sorted(d.rglob("*"))
                        if p.is_file() and p.name != MARKER},
              "checked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = d / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, d / MARKER)
    return []


def verify(ckpt_dir) -> list[str]:
    """Re-check a marked checkpoint (e.g. after it was copied): its files against ``problems`` for the marker's world
    size and against the sizes the marker recorded. Returns [] when it is complete, else the problems."""
    rec = marker(ckpt_dir)
    if rec is None:
        return [f"{Path(ckpt_dir).name} was never found complete (no {MARKER})"]
    out = problems(ckpt_dir, rec["world_size"], rec.get("zero_stage"))
    for name, size in rec.get("files", {}).items():
        p = Path(ckpt_dir) / name
        if not p.is_file():
            out.append(f"{name} is missing")
        elif p.stat().st_size != size:
            out.append(f"{name} has {p.stat().st_size} bytes, not {size}")
    return out


def universal_tag(ckpt_dir) -> str | None:
    """The universal tag of ``ckpt_dir`` whose conversion ended (``latest_universal`` names it and it holds
    ``UNIVERSAL_MARKER``), or None when it was never converted or a conversion was cut off."""
    d = Path(ckpt_dir)
    try:
        tag = (d / LATEST_UNIVERSAL).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return tag if tag and (d / tag / UNIVERSAL_MARKER).is_file() else None


def universal(ckpt_dir, python: str = sys.executable, workers: int | None = None) -> dict:
    """Convert the complete checkpoint ``ckpt_dir`` into DeepSpeed's universal checkpoint, once, beside its tag.

    Runs DeepSpeed's own converter (``python -m deepspeed.checkpoint.ds_to_universal --input_folder <tag>
    --output_folder <tag>_universal --inject_missing_state``; the HF Trainer's models carry no universal-checkpoint
    info of their own, hence the injection) into a temporary folder, moves it into place and then writes
    ``latest_universal`` (temp file + rename): a conversion cut off leaves no half folder where the engine looks.
    A checkpoint converted before is reused as it is.

    Args:
        ckpt_dir: a ``checkpoint-<step>`` directory holding every rank's files (the head's copy).
        python: the interpreter with DeepSpeed (the node venv's; the CLI passes its own).
        workers: the converter's extract processes (default: the CPUs, at most 8).

    Returns:
        {"tag": "<tag>_universal", "converted": True when converted now, False when reused, "seconds": float}.

    Raises:
        RuntimeError: the checkpoint is not complete (``verify``), or the converter failed (its last lines).
    """
    d = Path(ckpt_dir)
    found = universal_tag(d)
    if found is not None:
        return {"tag": found, "converted": False, "seconds": 0.0}
    bad = verify(d)
    if bad:
        raise RuntimeError(f"{d} is not a complete checkpoint: {'; '.join(bad[:3])}")
    tag = (d / "latest").read_text(encoding="utf-8").strip()
    final, tmp = d / f"{tag}_universal", d / f".{tag}_universal.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)  # a conversion cut off after its move but before its marker
    n = workers or max(1, min(8, os.cpu_count() or 1))
    t0 = time.monotonic()
    res = subprocess.run([python, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(d / tag),
                          "--output_folder", str(tmp), "--inject_missing_state", "--num_extract_workers", str(n),
                          "--num_merge_workers", str(max(1, n // 2))],
                         capture_output=True, text=True, check=False)
    if res.returncode or not tmp.is_dir():
        tail = " | ".join(line for line in (res.stdout + res.stderr).strip().splitlines()[-4:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"DeepSpeed's ds_to_universal failed on {d / tag} (rc {res.returncode}): {tail}")
    seconds = time.monotonic() - t0
    (tmp / UNIVERSAL_MARKER).write_text(json.dumps({"from": tag, "seconds": round(seconds, 2)}) + "\n",
                                        encoding="utf-8")
    os.replace(tmp, final)
    pointer = d / f".{LATEST_UNIVERSAL}.tmp"  # the converter pointed it at the temporary folder
    pointer.write_text(final.name, encoding="utf-8")
    os.replace(pointer, d / LATEST_UNIVERSAL)
    return {"tag": final.name, "converted": True, "seconds": round(seconds, 2)}


def latest_complete(output_dir) -> Path | None:
    """The newest checkpoint of ``output_dir`` that is marked and verifies (``verify``), or None."""
    for d in reversed(checkpoints(output_dir)):
        if not verify(d):
            return d
    return None


#: what rsync's or ssh's error lines mean, in words: (pattern in stderr, what failed -- {host} is the node)
COPY_FAILURES = (
    ("Host key verification failed",
     "{host}'s ssh host key is not the one the head trusts (a reinstalled node, or another machine at its address; "
     "ansible-playbook playbooks/ssh_mesh.yml says which key and how to accept it)"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED",
     "{host}'s ssh host key changed (ansible-playbook playbooks/ssh_mesh.yml says which key and how to accept it)"),
    ("Permission denied", "the head's cluster key is not accepted by {host} (run site.yml to authorise it)"),
    ("Could not resolve hostname", "the head cannot resolve {host}'s name"),
    ("Connection timed out", "{host} does not answer over ssh (powered off, or its network cut)"),
    ("No route to host", "{host} cannot be reached over ssh (no route to it)"),
    ("Connection refused", "{host} refuses ssh (is sshd running there?)"),
    ("No space left on device", "the head's disk is full (No space left on device)"),
    ("No such file or directory", "{host} has no such checkpoint directory"),
)


def copy_failure(host: str, returncode: int, stderr: str) -> str:
    """One line saying why an rsync of ``host``'s files failed: ``"<host>: <what failed, in words> (<the tool's own
    line>)"`` for the causes of :data:`COPY_FAILURES`, else ``"<host>: <rsync's last line>"`` (``rc N`` when it said
    nothing). rsync's last line ("rsync error: unexplained error (code 255) at io.c(232)") names no cause; the cause
    is on an earlier line, from ssh or the remote rsync."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for pattern, what in COPY_FAILURES:
        said = next((line for line in lines if pattern in line), None)
        if said is not None:
            return f"{host}: {what.format(host=host)} ({said})"
    return f"{host}: {lines[-1] if lines else f'rc {returncode}'}"


def pull_rank_files(host: str, ckpt_dir, timeout_s: float = 600, filters=tuple(RANK_FILTER)) -> str | None:
    """Copy the rank files (``filters``, rsync's: ``RANK_FILTER``, or ``LOG_FILTER`` for a logs/ directory) of
    ``host``'s ``ckpt_dir`` (same path there) into the local one.

    Uses rsync over ``ssh host`` (the cluster's ssh config: names, ports, keys, known_hosts); the copies belong to
    this process's user (a non-root user's files on the node arrive as the head's). Returns None on
    success, else one line saying what failed (:func:`copy_failure`: a changed host key, unreachable, no such
    directory, a full disk) or a timeout."""
    d = str(ckpt_dir).rstrip("/") + "/"
    # --no-owner/--no-group: the head's copy belongs to the head's user, not to the uid that wrote it on the node
    cmd = ["rsync", "-a", "--no-owner", "--no-group", "--timeout=30", "-e", " ".join(SSH), *filters,
           f"{host}:{d}", d]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"{host}: rsync timed out after {timeout_s:.0f} s"
    if res.returncode:
        return copy_failure(host, res.returncode, res.stderr)
    return None


def pull_from_all(hosts: list[str], ckpt_dir, fanout: int = PULL_FANOUT,
                  filters=tuple(RANK_FILTER)) -> list[str | None]:
    """:func:`pull_rank_files` of ``ckpt_dir`` (with ``filters``) from every host at once (at most ``fanout`` rsyncs
    at a time), not one after another: on N nodes a gather then takes about as long as the slowest node's copy, not
    the sum of N copies. Returns each host's result (None or the failure line), in the order of ``hosts``."""
    if len(hosts) <= 1:
        return [pull_rank_files(h, ckpt_dir, filters=filters) for h in hosts]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(int(fanout), len(hosts)))) as pool:
        return list(pool.map(lambda h: pull_rank_files(h, ckpt_dir, filters=filters), hosts))


def pull_logs(logs_dir, hosts: list[str]) -> list[str]:
    """Copy every other node's per-rank logs (``LOG_FILTER``) of ``logs_dir`` (the same path on every node) into the
    local one, from all nodes at once (:func:`pull_from_all`), so that the head holds every rank's log and one copy
    brings them to the controller: not one fetch per log, node after node (O(nodes x ranks) on the head).
    Returns the failure lines (one per node whose logs stayed there), [] when every copy worked."""
    Path(logs_dir).mkdir(parents=True, exist_ok=True)
    return [line for line in pull_from_all(hosts, logs_dir, filters=tuple(LOG_FILTER)) if line]


def gather(output_dir, hosts: list[str], world_size: int, zero_stage: int | None = None,
           final: bool = False) -> dict:
    """Complete the head's unmarked checkpoints in ``output_dir`` from the other nodes and mark those found whole.

    Args:
        output_dir: the run's output directory (the same path on every node).
        hosts: the other nodes (as ssh names them); [] on one node.
        world_size, zero_stage: as for ``problems``.
        final: the run has ended: also report the checkpoints still incomplete (else they may still be saving).

    Returns:
        {"complete": [names newly marked], "incomplete": {name: [problems]} (final only), "errors": [lines]}.
        A directory the Trainer rotated away while it was pulled is removed again, not reported.
    """
    report = {"complete": [], "incomplete": {}, "errors": []}
    for d in checkpoints(output_dir):
        if marker(d) is not None:
            continue
        if not (d / "trainer_state.json").is_file() and not final:
            continue  # rank 0 is still saving it
        errors = [e for e in pull_from_all(hosts, d) if e]
        if not (d / "trainer_state.json").exists() and not final:
            shutil.rmtree(d, ignore_errors=True)  # rotated away by the Trainer meanwhile: the pull re-created it
            continue
        found = mark(d, world_size, zero_stage)
        if not found:
            report["complete"].append(d.name)
        elif final:
            report["incomplete"][d.name] = found + errors
        report["errors"] += errors
    return report


def supervise(cmd: list[str], output_dir, hosts: list[str], world_size: int, zero_stage: int | None = None,
              every_s: float = GATHER_EVERY_S) -> int:
    """Run ``cmd`` (the head's launcher) and gather its checkpoints every ``every_s`` seconds until it exits.

    A round with no new checkpoint costs a directory listing (``gather`` pulls only unmarked checkpoints whose
    ``trainer_state.json`` rank 0 has written), so the period is short: a checkpoint lives only until the Trainer
    rotates it away (``save_total_limit`` saves later) on every node, and must be pulled within that time.

    SIGTERM/SIGINT/SIGHUP are passed on to the child. Each checkpoint found complete is printed once
    (``[checkpoints] checkpoint-20 complete: ...``), so it shows in the run's log. Returns the child's exit status
    (128 + signal number when a signal ended it)."""
    child = subprocess.Popen(cmd)

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    told = set()
    while True:
        try:
            rc = child.wait(timeout=every_s)
            break
        except subprocess.TimeoutExpired:
            pass
        try:
            report = gather(output_dir, hosts, world_size, zero_stage)
        except Exception as exc:  # noqa: BLE001 - gathering must never stop the run it watches
            print(f"[checkpoints] gathering failed, will retry: {exc!r}", flush=True)
            continue
        for name in report["complete"]:
            print(f"[checkpoints] {name} complete: {world_size} ranks' files on the head "
                  f"({Path(output_dir) / name})", flush=True)
        for err in report["errors"]:
            if err not in told:
                told.add(err)
                print(f"[checkpoints] could not pull rank files from {err} (retrying)", flush=True)
    return 128 - rc if rc < 0 else rc


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m train.node.checkpoints", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("supervise", "gather"):
        s = sub.add_parser(name)
        s.add_argument("--output", required=True, help="the run's output directory (same path on every node)")
        s.add_argument("--world-size", type=int, required=True)
        s.add_argument("--zero-stage", type=int, default=None)
        s.add_argument("--hosts", default="", help="the other nodes, comma-separated (ssh names)")
        if name == "supervise":
            s.add_argument("--every", type=float, default=GATHER_EVERY_S, help="seconds between gathers")
            s.add_argument("command", nargs=argparse.REMAINDER, help="-- the launcher's argv")
    g = sub.add_parser("pull-logs", help="pull the other nodes' per-rank logs of DIR into this node's DIR")
    g.add_argument("--dir", required=True, help="the run's logs/ directory (same path on every node)")
    g.add_argument("--hosts", default="", help="the other nodes, comma-separated (ssh names)")
    c = sub.add_parser("latest", help="print the newest complete checkpoint of OUTPUT as JSON (null if none)")
    c.add_argument("output")
    u = sub.add_parser("universal", help="convert the complete checkpoint CKPT into DeepSpeed's universal checkpoint "
                                         "(once; reused after)")
    u.add_argument("checkpoint")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """CLI: ``supervise --output D --world-size W [--hosts a,b] -- CMD...`` (exit status of CMD), ``gather ...``
    (JSON report on stdout, the final gather), ``pull-logs --dir D --hosts a,b`` (JSON {"failed": [lines]}),
    ``latest D`` (JSON: {"path", "step", "world_size"} or null), ``universal CKPT`` (JSON: :func:`universal`'s
    result; exit status 1 with one line on stderr when it cannot convert)."""
    args = _parse(argv)
    if args.cmd == "universal":
        try:
            print(json.dumps(universal(args.checkpoint)))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "latest":
        d = latest_complete(args.output)
        rec = marker(d) if d else None
        print(json.dumps(None if d is None else {"path": str(d), "step": rec["step"],
                                                 "world_size": rec["world_size"]}))
        return 0
    hosts = [h for h in args.hosts.split(",") if h]
    if args.cmd == "pull-logs":
        print(json.dumps({"failed": pull_logs(args.dir, hosts)}))
        return 0
    if args.cmd == "gather":
        report = gather(args.output, hosts, args.world_size, args.zero_stage, final=True)
        report["kept"] = [d.name for d in checkpoints(args.output) if not verify(d)]
        print(json.dumps(report))
        return 0
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        print("error: supervise needs the command to run after --", file=sys.stderr)
        return 2
    return supervise(cmd, args.output, hosts, args.world_size, args.zero_stage, args.every)


if __name__ == "__main__":
    sys.exit(main())
