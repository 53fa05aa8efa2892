"""A user's own training script (``-e script=run_mlm.py -e script_args=...``): its arguments, on the controller.

``train.yml`` launches a user's HF Trainer script (for example transformers' examples/pytorch/language-modeling/
run_mlm.py) the way it launches train/rank/pretrain.py. This module does three things with the script's arguments:

* :func:`split` -- accept them as a list or as one shell-quoted string (``-e script_args="--max_steps 100 ..."``);
* :func:`job_overrides` -- read the TrainingArguments that the rendered ds_config must agree with (micro batch,
  gradient accumulation, warm-up, precision, ...) as job keys, so train.common.job / train.controller.dsconfig validate them with the
  same rules and messages as the built-in path (e.g. ``--bf16`` on a CPU cluster, batch arithmetic);
* :func:`complete` -- add the project's ``--deepspeed <rendered config>`` and ``--output_dir`` unless the user gave
  them, and replace ``{data}`` with the node-local copy of the staged data (``-e script_data=...``).

The TrainingArguments flags are read by transformers' own parser, ``HfArgumentParser(TrainingArguments)
.parse_known_args`` (the script's other flags are left alone), so names, boolean spellings and defaults are exactly
the Trainer's: nothing is copied from transformers by hand. Only the argparse namespace is used; TrainingArguments
is never instantiated (its __post_init__ would set up devices). transformers imports without torch, so the
Ansible controller's Python runs this too (requirements.txt pins the same transformers as the nodes); it is
imported inside the functions, so ``import train.controller.script_args`` stays cheap.

CLI: ``python -m train.controller.script_args overrides|argv ...`` (see ``--help``); exit 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shlex
import sys

from train.common import cli
from train.common.job import JobError, precision_of_flags

#: TrainingArguments fields that map one-to-one onto job keys (and so reach ds_config's "auto" checks)
JOB_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "weight_decay",
              "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "max_steps", "seed")
PLACEHOLDER = "{data}"


class ScriptArgsError(ValueError):
    """Bad script arguments; the message (one line) says what is wrong and how to fix it."""


def split(value) -> list[str]:
    """Return the script's arguments as a list of strings.

    Args:
        value: a list (each item one argument: str, int or float), a JSON list in a string, or one shell-quoted
            string; None or "" for no arguments.

    Returns:
        list of str, e.g. ``["--max_steps", "100"]``.

    Raises:
        ScriptArgsError: a dict (or a JSON object in a string), a string that starts with ``{`` or ``[`` but is not
            valid JSON, a JSON value that is not a list, unbalanced quotes, or a list item that is not a string or
            number.
    """
    if value is None or value == "":
        return []
    if isinstance(value, dict):
        raise ScriptArgsError("script_args is a mapping; give a list of arguments, e.g. "
                              '["--max_steps", "100"], or one shell-quoted string "--max_steps 100"')
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "{")):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise ScriptArgsError(f"script_args starts with {text[0]!r} but is not valid JSON ({e.msg} at "
                                      f"character {e.pos}); give a JSON list such as "
                                      '["--max_steps", "100"] or one shell-quoted string "--max_steps 100"') from None
            if isinstance(value, dict):
                raise ScriptArgsError("script_args is a JSON object; give a JSON list of arguments, e.g. "
                                      '["--max_steps", "100"], or one shell-quoted string "--max_steps 100"')
        else:
            try:
                return shlex.split(text)
            except ValueError as e:
                raise ScriptArgsError(f"script_args cannot be split into arguments ({e}); balance the quotes") from None
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise ScriptArgsError("script_args must be a list of strings or one shell-quoted string; give e.g. "
                              '["--max_steps", "100"] or "--max_steps 100"')
    return [str(v) for v in value]


@functools.lru_cache(maxsize=1)
def _parser():
    """transformers' HfArgumentParser over TrainingArguments, raising ScriptArgsError instead of exiting."""
    # transformers warns once at import that PyTorch is missing (true on the controller, and irrelevant here)
    quiet = "TRANSFORMERS_NO_ADVISORY_WARNINGS" not in os.environ
    if quiet:
        os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    try:
        from transformers import HfArgumentParser, TrainingArguments
    finally:
        if quiet:
            os.environ.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)

    class _Parser(HfArgumentParser):
        def error(self, message):
            raise ScriptArgsError(f"{message} (script_args, as TrainingArguments reads them); fix that argument")

    # exact names only: an abbreviation the user's own parser would read differently must not match here
    return _Parser(TrainingArguments, allow_abbrev=False, add_help=False)


def training_arguments(args: list[str]) -> argparse.Namespace:
    """The script's TrainingArguments as transformers parses them, without building TrainingArguments.

    Args:
        args: the script's arguments (see :func:`split`); flags of the script's own dataclasses are ignored.

    Returns:
        argparse.Namespace with one attribute per TrainingArguments field: the script's value, else the
        dataclass default (e.g. ``per_device_train_batch_size`` 8, ``max_steps`` -1, ``warmup_steps`` 0).

    Raises:
        ScriptArgsError: a TrainingArguments flag whose value does not parse (``--max_steps lots``,
            ``--bf16 maybe``), with argparse's message.
    """
    namespace, _unknown = _parser().parse_known_args(list(args))
    return namespace


def job_overrides(args: list[str]) -> dict:
    """Job keys implied by the script's TrainingArguments.

    Args:
        args: the script's arguments (see :func:`split`).

    Returns:
        ``{job key: value}``: the JOB_FIELDS values the Trainer will run with (given or TrainingArguments'
        defaults), ``warmup_steps`` (int) and ``precision`` (bf16 / fp16 / fp32 from ``--bf16`` / ``--fp16``).
        transformers 5's ``--warmup_steps`` is a float: >= 1 is a number of steps, a fraction in (0, 1) is a share
        of the total steps (TrainingArguments.get_warmup_steps: ceil(share x max_steps)); without a positive
        max_steps the total is unknown before the data is loaded, so warm-up counts as present (1) and ds_config
        keeps its "auto" scheduler for the Trainer to fill. ``max_steps`` is left out when the script trains by
        epochs (``max_steps`` -1): the job keeps its own positive value.

    Raises:
        ScriptArgsError: a flag value TrainingArguments can't parse, a negative warm-up, or --fp16 together with
            --bf16.
    """
    ns = training_arguments(args)
    out = {name: getattr(ns, name) for name in JOB_FIELDS}
    warmup = float(ns.warmup_steps)
    if warmup < 0 or not math.isfinite(warmup):
        raise ScriptArgsError(f"--warmup_steps {ns.warmup_steps} is negative (script_args); give a number of steps "
                              "(>= 1), a share of the total steps in (0, 1), or 0")
    if warmup >= 1:
        out["warmup_steps"] = int(warmup)
    elif warmup > 0:
        out["warmup_steps"] = math.ceil(warmup * ns.max_steps) if ns.max_steps > 0 else 1
    else:
        out["warmup_steps"] = 0
    try:
        out["precision"] = precision_of_flags(ns.bf16, ns.fp16, "script_args")
    except JobError as e:
        raise ScriptArgsError(str(e)) from None
    if out["max_steps"] <= 0:
        out.pop("max_steps")  # -1: the Trainer trains num_train_epochs; the job keeps its own positive default
    return out


def complete(args: list[str], output_dir: str, deepspeed: str, data_dir: str | None = None) -> list[str]:
    """The arguments to launch the script with.

    Args:
        args: the user's arguments.
        output_dir: the run's output directory on the nodes (added as ``--output_dir`` unless given).
        deepspeed: the rendered DeepSpeed config on the nodes (added as ``--deepspeed`` unless given).
        data_dir: node-local copy of ``script_data``; replaces every ``{data}`` inside an argument.

    Returns:
        list of str: the user's arguments ({data} replaced), then ``--deepspeed`` / ``--output_dir`` when missing.

    Raises:
        ScriptArgsError: ``{data}`` is used but no script_data was staged, or a TrainingArguments value does not
            parse.
    """
    if any(PLACEHOLDER in a for a in args):
        if not data_dir:
            raise ScriptArgsError("script_args use {data} but no -e script_data=<path on the head> was given to stage")
        args = [a.replace(PLACEHOLDER, data_dir) for a in args]
    ns = training_arguments(args)
    out = list(args)
    if ns.deepspeed is None:
        out += ["--deepspeed", deepspeed]
    if ns.output_dir is None:
        out += ["--output_dir", output_dir]
    return out


def deepspeed_config(args: list[str]) -> tuple[str, str, dict] | None:
    """The DeepSpeed config the user gave the script (``--deepspeed FILE`` or ``--deepspeed '{...}'``), read on
    the controller: it becomes the run's ds_config.json (staged to every node, kept in outputs/<run>/).

    Args:
        args: the user's arguments; a relative FILE is read from the current directory (as ``-e script`` is).

    Returns:
        ``(where, text, config)``: the file's path (or ``"script_args"`` for inline JSON), its exact text and the
        parsed JSON object; None when the arguments give no ``--deepspeed``.

    Raises:
        ScriptArgsError: FILE is not a file on the controller, is not JSON, or is not a JSON object.
    """
    value = training_arguments(args).deepspeed
    if value is None:
        return None
    value = str(value)
    if value.lstrip().startswith("{"):
        where, text = "script_args", value
    else:
        path = os.path.abspath(value)
        if not os.path.isfile(path):
            raise ScriptArgsError(f"--deepspeed {value} is not a file on the controller (script_args; relative paths "
                                  f"are from {os.getcwd()}); give your DeepSpeed config's path there (it is copied "
                                  "to every node as the run's ds_config.json), or drop --deepspeed to use the "
                                  "project's config")
        where = path
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptArgsError(f"--deepspeed {value} can't be read ({exc}); fix the file") from None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ScriptArgsError(f"--deepspeed {value} is not JSON ({exc}); fix the DeepSpeed config") from None
    if not isinstance(config, dict):
        raise ScriptArgsError(f"--deepspeed {value} is a JSON {type(config).__name__}, not an object; a DeepSpeed "
                              "config is a JSON object ({\"train_batch_size\": ...})")
    return where, text, config


def with_deepspeed(args: list[str], path: str) -> list[str]:
    """``args`` with the value of every ``--deepspeed`` (``--deepspeed X`` or ``--deepspeed=X``) replaced by
    ``path``: the ranks read the staged copy of the user's config."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--deepspeed" and i + 1 < len(args):
            out += [arg, path]
            skip = True
        elif arg.startswith("--deepspeed="):
            out.append(f"--deepspeed={path}")
        else:
            out.append(arg)
    return out


def output_dir_of(args: list[str], default: str) -> str:
    """The ``--output_dir`` the script will write to: the user's (as TrainingArguments reads it), or ``default``.

    Raises:
        ScriptArgsError: a TrainingArguments value does not parse.
    """
    return training_arguments(args).output_dir or default


def _cli_parser() -> cli.Parser:
    p = cli.Parser(prog="python -m train.controller.script_args", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=cli.Parser)
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
    ns = _cli_parser().parse_args(argv)

    def command():
        args = split(ns.script_args)
        if ns.cmd == "overrides":
            print(json.dumps(job_overrides(args)))
        else:
            full = complete(args, ns.output_dir, ns.deepspeed, ns.data_dir)
            print(json.dumps({"argv": full, "output_dir": output_dir_of(full, ns.output_dir)}))

    return cli.run(command, ScriptArgsError)


if __name__ == "__main__":
    sys.exit(main())
