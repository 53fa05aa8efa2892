"""A user's own training script (``-e script=run_mlm.py -e script_args=...``): its arguments, on the controller.

``train.yml`` launches a user's HF Trainer script (for example transformers' examples/pytorch/language-modeling/
run_mlm.py) the way it launches train/pretrain.py. This module, which uses only the standard library so the Ansible
controller's Python runs it, does three things with the script's arguments:

* :func:`split` -- accept them as a list or as one shell-quoted string (``-e script_args="--max_steps 100 ..."``);
* :func:`job_overrides` -- read the TrainingArguments that the rendered ds_config must agree with (micro batch,
  gradient accumulation, warm-up, precision, ...) as job keys, so train.job / train.dsconfig validate them with the
  same rules and messages as the built-in path (e.g. ``--bf16`` on a CPU cluster, batch arithmetic);
* :func:`complete` -- add the project's ``--deepspeed <rendered config>`` and ``--output_dir`` unless the user gave
  them, and replace ``{data}`` with the node-local copy of the staged data (``-e script_data=...``).

CLI: ``python -m train.script_args overrides|argv ...`` (see ``--help``); exit 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys

#: TrainingArguments flags that map one-to-one onto job keys (and so reach ds_config's "auto" checks)
NUMERIC_FLAGS = {
    "per_device_train_batch_size": int,
    "gradient_accumulation_steps": int,
    "learning_rate": float,
    "weight_decay": float,
    "adam_beta1": float,
    "adam_beta2": float,
    "adam_epsilon": float,
    "max_grad_norm": float,
    "warmup_steps": int,
    "max_steps": int,
    "seed": int,
}
#: TrainingArguments defaults (transformers 5.x) for what the script leaves out
TRAINER_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "warmup_steps": 0}
PLACEHOLDER = "{data}"


class ScriptArgsError(ValueError):
    """Bad script arguments; the message says what is wrong and how to fix it."""


def split(value) -> list[str]:
    """Return the script's arguments as a list of strings.

    Args:
        value: a list (each item one argument), a JSON list in a string, or one shell-quoted string; None or ""
            for no arguments.

    Raises:
        ScriptArgsError: unbalanced quotes, or a list item that is not a string or number.
    """
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise ScriptArgsError(f"script_args looks like a JSON list but is not valid JSON ({e.msg}); "
                                      "give a list or one shell-quoted string") from None
        else:
            try:
                return shlex.split(text)
            except ValueError as e:
                raise ScriptArgsError(f"script_args cannot be split into arguments ({e}); balance the quotes") from None
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise ScriptArgsError("script_args must be a list of strings or one shell-quoted string")
    return [str(v) for v in value]


def _flags(args: list[str]) -> dict[str, str | None]:
    """Map ``--name`` -> value (``None`` for a bare flag) for every ``--name value`` / ``--name=value``."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, val = arg[2:].partition("=")
            name = name.replace("-", "_")
            if eq:
                out[name] = val
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[name] = args[i + 1]
                i += 1
            else:
                out[name] = None
        i += 1
    return out


def _truthy(name: str, value: str | None) -> bool:
    if value is None:
        return True
    low = value.strip().lower()
    if low in ("1", "true", "yes", "y", "on"):
        return True
    if low in ("0", "false", "no", "n", "off"):
        return False
    raise ScriptArgsError(f"--{name} {value!r} is not a boolean; use --{name} true or --{name} false")


def job_overrides(args: list[str]) -> dict:
    """Job keys implied by the script's TrainingArguments.

    Args:
        args: the script's arguments (see :func:`split`).

    Returns:
        ``{job key: value}``: every NUMERIC_FLAGS key the script sets (TRAINER_DEFAULTS for micro batch,
        accumulation and warm-up when it doesn't, since the Trainer then uses those), and ``precision``
        (bf16 / fp16 / fp32 from ``--bf16`` / ``--fp16``). ``--warmup_ratio`` r with ``--max_steps`` n gives
        warmup_steps = ceil(r * n) (transformers' TrainingArguments.get_warmup_steps); without max_steps the
        number of steps is unknown before the data is loaded, so warm-up counts as present (1) and ds_config keeps
        its "auto" scheduler for the Trainer to fill.

    Raises:
        ScriptArgsError: a numeric flag without a number, --fp16 together with --bf16, a non-boolean precision flag.
    """
    flags = _flags(args)
    out: dict = dict(TRAINER_DEFAULTS)
    for name, kind in NUMERIC_FLAGS.items():
        if name in flags:
            raw = flags[name]
            try:
                out[name] = kind(raw) if kind is float else int(str(raw))
            except (TypeError, ValueError):
                raise ScriptArgsError(f"--{name} needs a {'number' if kind is float else 'whole number'}, got "
                                      f"{raw!r} (script_args)") from None
    if "warmup_steps" not in flags and "warmup_ratio" in flags:
        try:
            ratio = float(flags["warmup_ratio"] or "")
        except ValueError:
            raise ScriptArgsError(f"--warmup_ratio needs a number, got {flags['warmup_ratio']!r}") from None
        if ratio > 0:
            out["warmup_steps"] = math.ceil(ratio * out["max_steps"]) if out.get("max_steps", -1) > 0 else 1
    fp16 = "fp16" in flags and _truthy("fp16", flags["fp16"])
    bf16 = "bf16" in flags and _truthy("bf16", flags["bf16"])
    if fp16 and bf16:
        raise ScriptArgsError("script_args enable both --fp16 and --bf16; keep one (bf16 on GPUs of compute "
                              "capability >= 8.0, fp16 otherwise)")
    out["precision"] = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    if out.get("max_steps", 1) <= 0:
        out.pop("max_steps")  # -1: the Trainer trains num_train_epochs; the job keeps its own positive default
    return out


def complete(args: list[str], output_dir: str, deepspeed: str, data_dir: str | None = None) -> list[str]:
    """The arguments to launch the script with.

    Args:
        args: the user's arguments.
        output_dir: the run's output directory on the nodes (added as ``--output_dir`` unless given).
        deepspeed: the rendered DeepSpeed config on the nodes (added as ``--deepspeed`` unless given).
        data_dir: node-local copy of ``script_data``; replaces every ``{data}`` inside an argument.

    Raises:
        ScriptArgsError: ``{data}`` is used but no script_data was staged.
    """
    if any(PLACEHOLDER in a for a in args):
        if not data_dir:
            raise ScriptArgsError("script_args use {data} but no -e script_data=<path on the head> was given to stage")
        args = [a.replace(PLACEHOLDER, data_dir) for a in args]
    flags = _flags(args)
    out = list(args)
    if "deepspeed" not in flags:
        out += ["--deepspeed", deepspeed]
    if "output_dir" not in flags:
        out += ["--output_dir", output_dir]
    return out


def output_dir_of(args: list[str], default: str) -> str:
    """The ``--output_dir`` the script will write to (the user's, or ``default``)."""
    return _flags(args).get("output_dir") or default


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m train.script_args", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overrides", help="print the job keys the script's arguments imply (JSON)")
    o.add_argument("--script-args", default="", help="JSON list or one shell-quoted string")
    a = sub.add_parser("argv", help="print {argv, output_dir} to launch the script with (JSON)")
    a.add_argument("--script-args", default="")
    a.add_argument("--output-dir", required=True)
    a.add_argument("--deepspeed", required=True)
    a.add_argument("--data-dir", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 with one ``error:`` line on stderr for bad input)."""
    ns = _parser().parse_args(argv)
    try:
        args = split(ns.script_args)
        if ns.cmd == "overrides":
            print(json.dumps(job_overrides(args)))
        else:
            full = complete(args, ns.output_dir, ns.deepspeed, ns.data_dir)
            print(json.dumps({"argv": full, "output_dir": output_dir_of(full, ns.output_dir)}))
    except ScriptArgsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
