"""A run's directory on a node, made ready for its launch in one step (roles/train_stage, code.yml).

``python -m train.node.run_dir --run-dir RUN_DIR --output-dir OUTPUT_DIR [--remove PATH ...]`` with
``{"job.json": "<text>", ...}`` on stdin: creates RUN_DIR (mode 0755 whatever the umask, parents too), removes what
an earlier attempt of the run (``-e resume=``) or an earlier run of the same name left that this run's checks would
take for its own -- ``RUN_DIR/ranks/`` (the rank status files of train/node/rank_status.py: the liveness and
rendezvous checks would count a killed rank as dead, a stale start as a late rank), ``OUTPUT_DIR/progress.jsonl`` and
``OUTPUT_DIR/metrics.json`` (the follower's records) -- and ``RUN_DIR/passthrough.env`` (the variables an earlier
attempt's shell passed) and each ``--remove PATH``, and writes each file of stdin into RUN_DIR (mode 0644; written
to a temporary file beside it and renamed into place: a rank never reads half a file; left alone when its content is
already that). The output directory's other files (checkpoints) stay. Prints one JSON object: ``{"changed": bool,
"created": bool, "removed": [paths], "written": [names]}``.

One task instead of a directory, a removal and a copy per file: each module run costs 0.3-0.5 s on a GPU node
(docs/benchmarks/gpu-2026-12-05c.md), and these ran before every launch. Runs as a module from the staged code (it
imports train.common); nothing happens at import.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from train.common.jsonio import write_text_atomic
from train.node.rank_status import RANKS_DIR

#: beside the run's job.json on every node, mode 0600, when the admin's shell passed variables (node_env_passthrough:
#: HF_TOKEN, WANDB_API_KEY, ...): one NAME=value line each (roles/train_launch/tasks/passthrough.yml); every rank
#: reads it (train.rank.bootstrap.load_passthrough)
PASSTHROUGH_FILE = "passthrough.env"

#: beside the run's job.json on every node when the run was restarted after a fault (train/controller/restart.py):
#: the faults so far, oldest first (the rank records them in progress.jsonl and metrics.json)
ATTEMPTS_FILE = "attempts.json"

#: what an earlier attempt or run of the same name leaves that this run's checks would read as its own, and the
#: variables an earlier attempt's shell passed (roles/train_launch writes this attempt's, if any, after staging)
STALE_IN_RUN_DIR = (RANKS_DIR, PASSTHROUGH_FILE, ATTEMPTS_FILE)
STALE_IN_OUTPUT_DIR = ("progress.jsonl", "metrics.json")


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` (:func:`train.common.jsonio.write_text_atomic`: a temporary file beside it and a
    rename, mode 0644). Returns False, writing nothing, when the file already holds exactly ``text`` with mode 0644."""
    try:
        if path.read_bytes() == text.encode("utf-8"):
            if path.stat().st_mode & 0o777 == 0o644:
                return False
            os.chmod(path, 0o644)
            return True
    except FileNotFoundError:
        pass
    write_text_atomic(path, text)
    return True


def prepare(run_dir: str | Path, output_dir: str | Path, files: dict[str, str], remove=()) -> dict:
    """Make ``run_dir`` ready for a launch: create it, remove the stale records (:data:`STALE_IN_RUN_DIR` in it,
    :data:`STALE_IN_OUTPUT_DIR` in ``output_dir``) and the files ``remove`` names (absolute paths: what the caller knows
    is stale, e.g. one node's ``.deepspeed_env`` of an earlier version), write ``files`` ({file name: text}) into it.

    Returns ``{"changed", "created", "removed", "written"}``: whether anything changed, whether the directory was
    created (or its mode set to 0755), the paths removed, the names written (files whose text and mode 0644 were
    already right are not). The run directory and the parents it creates get mode 0755 whatever the umask.

    Raises:
        ValueError: a file name that is not a plain name in the run directory (a path separator, ``.`` or ``..``).
        OSError: the directory cannot be created or written (permissions, a full disk).
    """
    run = Path(run_dir)
    for name in files:
        if not name or name in (".", "..") or "/" in name:
            raise ValueError(f"{name!r} is not a file name in the run directory")
    created = not run.is_dir()
    missing = [d for d in [run, *run.parents] if not d.exists()]
    run.mkdir(parents=True, exist_ok=True)
    for d in [run, *missing]:  # 0755 whatever the umask, as Ansible's file module sets it
        if d.stat().st_mode & 0o777 != 0o755:
            os.chmod(d, 0o755)
            created = True
    removed = []
    stale = [run / n for n in STALE_IN_RUN_DIR] + [Path(output_dir) / n for n in STALE_IN_OUTPUT_DIR]
    for path in stale + [Path(p) for p in remove]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(str(path))
    written = [name for name, text in files.items() if _write(run / name, text)]
    return {"changed": bool(created or removed or written), "created": created, "removed": removed,
            "written": written}


def main(argv: list[str] | None = None) -> int:
    """CLI: the files as one JSON object on stdin; prints :func:`prepare`'s result as JSON. Exit 2 with one
    ``error: ...`` line on bad input or a directory that cannot be written."""
    parser = argparse.ArgumentParser(prog="python -m train.node.run_dir", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--remove", action="append", default=[], metavar="PATH",
                        help="an absolute path to remove too, file or directory (repeatable)")
    args = parser.parse_args(argv)
    try:
        files = json.load(sys.stdin)
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise ValueError("stdin must be one JSON object of file name -> text")
        if not all(os.path.isabs(p) for p in args.remove):
            raise ValueError(f"--remove takes absolute paths, not {[p for p in args.remove if not os.path.isabs(p)]}")
        print(json.dumps(prepare(args.run_dir, args.output_dir, files, args.remove)))
    except ValueError as e:
        print(f"error: {args.run_dir}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot make the run directory {args.run_dir} ready ({e.strerror or e}: "
              f"{e.filename or args.run_dir}); a file in its place, its permissions or a full disk -- fix it on this "
              "node or pick another -e run_name=", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
