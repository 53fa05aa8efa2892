"""Turn the rank-0 progress stream (``progress.jsonl``) into one-line progress reports.

``train/pretrain.py`` appends one JSON object per logging step to ``<output_dir>/progress.jsonl``::

    {"step": 40, "max_steps": 200, "loss": 6.12, "learning_rate": 0.0009,
     "samples_per_second": 35.1, "elapsed_s": 61.8, "eta_s": 247.0, "epoch": 0.4}

The playbook's ``deepspeed_watch`` action (roles/train_launch/action_plugins/) reads the new bytes of that file while the
job runs and prints each record with :func:`format_record`. Only the standard library is used: this module runs
in the Ansible controller's Python.
"""

from __future__ import annotations

import json
import re
import sys


def format_duration(seconds: float | None) -> str:
    """Format a duration for people.

    Args:
        seconds: duration in seconds (``None`` or negative means unknown).

    Returns:
        ``"45s"``, ``"3m05s"`` or ``"2h03m"``; ``"?"`` when unknown.
    """
    if seconds is None or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_record(record: dict) -> str:
    """Format one progress record as a single line.

    Args:
        record: one object of ``progress.jsonl`` (keys as in the module docstring; missing keys print ``?``).

    Returns:
        e.g. ``"step 40/200 (20%) | loss 6.1200 | 35.1 samples/s | elapsed 1m02s | ETA 4m07s"``.
    """
    step = record.get("step")
    max_steps = record.get("max_steps")
    if isinstance(step, int) and isinstance(max_steps, int) and max_steps > 0:
        where = f"step {step}/{max_steps} ({100 * step // max_steps}%)"
    else:
        where = f"step {step if step is not None else '?'}"
    loss = record.get("loss")
    loss_txt = f"loss {loss:.4f}" if isinstance(loss, (int, float)) else "loss ?"
    sps = record.get("samples_per_second")
    sps_txt = f"{sps:.1f} samples/s" if isinstance(sps, (int, float)) else "? samples/s"
    return " | ".join(
        [where, loss_txt, sps_txt, f"elapsed {format_duration(record.get('elapsed_s'))}",
         f"ETA {format_duration(record.get('eta_s'))}"]
    )


def parse_records(text: str) -> tuple[list[dict], int]:
    """Parse the complete lines of a chunk of ``progress.jsonl``.

    Args:
        text: bytes of the file decoded as UTF-8, starting at a line boundary.

    Returns:
        ``(records, consumed)``: the records of every complete line (a trailing line without ``\\n`` may still be
        being written and is left for the next read) and the number of characters consumed. Lines that are not
        JSON objects are skipped.
    """
    records: list[dict] = []
    consumed = 0
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        consumed += len(line)
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records, consumed


def main(argv: list[str] | None = None) -> int:
    """``python -m train.progress FILE``: print every record of a progress file, one line each."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m train.progress <output_dir>/progress.jsonl", file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            records, _ = parse_records(fh.read())
    except OSError as err:
        print(f"error: cannot read {args[0]}: {err.strerror}; is the path the run's output_dir/progress.jsonl?",
              file=sys.stderr)
        return 2
    for record in records:
        print(format_record(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------------- the DeepSpeed op build's log
_OPS_LINE = re.compile(r"Install Ops=(\{.*\})")
_BUILDING_LINE = re.compile(r"building '([\w.]+)' extension")


def ops_planned(line: str) -> int | None:
    """Number of ops set to build (value 1 or True) in setuptools' ``Install Ops={...}`` line of DeepSpeed's
    setup.py (pip's build log), or None for any other line. Used by roles/deepspeed's deepspeed_build_watch."""
    match = _OPS_LINE.search(line)
    return None if not match else len(re.findall(r":\s*(?:1|True)\b", match.group(1)))


def op_started(line: str) -> str | None:
    """The op's short name when setuptools starts compiling it (``building 'deepspeed.ops.adam.cpu_adam_op'
    extension`` -> ``cpu_adam``), or None for any other line."""
    match = _BUILDING_LINE.search(line)
    return None if not match else re.sub(r"_op$", "", match.group(1).rsplit(".", 1)[-1])
