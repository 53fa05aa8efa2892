"""The playbook knobs of train.yml's roles (``-e train_end_timeout_s=...``), checked with the job's keys in the plan,
before anything changes on a node (standard library and PyYAML; Ansible's own argument-spec validator where the
plan runs, inside ansible-playbook).

Each knob is declared once, in its role's ``meta/argument_specs.yml`` (KNOB_ROLES): type, default, choices and a
description that ends in its range where it is a number, written as an interval (``Range [low, high]``, ``(`` and ``)`` for open ends)::

    train_end_timeout_s:
      description: ... 0 switches it off. Range [0, inf).
      type: float

Ansible checks a role's arguments only when the role starts -- train_launch's after the data was staged --; the
plan's action (roles/train_plan/action_plugins/train_plan.py) calls :func:`check` first, so a bad value stops the run
at the plan with one line ``<what> (<where>); <how to fix>``. The types are checked by the validator Ansible runs
at the role's start (ansible.module_utils.common.arg_spec), the ranges here.

    python -m train.controller.knobs                                  # every knob, one line each
    python -m train.controller.knobs table --write docs/training.md   # docs/training.md's knob table
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from train.common.job import JobError
from train.common.keys import write_table

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
#: the roles of train.yml whose ``train_*`` options a user passes with -e
KNOB_ROLES = ("train_plan", "train_stage", "train_launch")
#: train_* options that are not knobs: the plan itself (a fact), the inventory's job defaults (checked as job keys)
#: and what train_launch takes from -e stop=, -e attach= and train_output_dir
NOT_KNOBS = ("train_plan", "train_defaults", "train_launch_stop", "train_launch_attach", "train_launch_results_dir")
#: a range at the end of a description: "Range [0, inf)", "Range (0, 1]", "Range [1, 65535]"
RANGE_RE = re.compile(r"Range ([\[(])\s*(-?inf|-?[0-9.e+-]+)\s*,\s*(-?inf|-?[0-9.e+-]+)\s*([\])])")
_WORDS = {"int": "an integer", "float": "a number", "bool": "a boolean (true or false)", "list": "a list",
          "dict": "a mapping", "str": "a string", "path": "a path"}


class KnobError(JobError):
    """A knob given with a value of the wrong type or out of its range (or a role's spec that is malformed)."""


@dataclass(frozen=True)
class Knob:
    """One knob, as its role's argument spec declares it.

    Attributes:
        name: the variable (``-e name=value``).
        spec: its option in the argument spec (type, default, choices, elements, description), for Ansible's validator.
        help: the description, one line.
        roles: ``role:entry point`` names that declare it.
        low, high, low_open, high_open: its range (from ``Range [a, b)`` in the description; None: unbounded).
    """

    name: str
    spec: dict
    help: str
    roles: tuple[str, ...]
    low: float | None = None
    high: float | None = None
    low_open: bool = True
    high_open: bool = True

    @property
    def type(self) -> str:
        return self.spec.get("type", "str")

    def range_text(self) -> str:
        """``[0, inf)``-style interval, or "" when the description gives none."""
        if self.low is None and self.high is None:
            return ""
        return (f"{'(' if self.low_open else '['}{'-inf' if self.low is None else _num(self.low)}, "
                f"{'inf' if self.high is None else _num(self.high)}{')' if self.high_open else ']'}")

    def out_of_range(self, value) -> bool:
        """Whether a number is outside the range (NaN always is)."""
        if isinstance(value, float) and math.isnan(value):
            return True
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return True
        return self.high is not None and (value >= self.high if self.high_open else value > self.high)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _one_line(description) -> str:
    text = " ".join(description) if isinstance(description, list) else str(description or "")
    return " ".join(text.split())


def parse_range(description: str):
    """(low, high, low_open, high_open) from ``Range [a, b)`` in ``description``; (None, None, True, True) without
    one. ``inf`` / ``-inf`` stand for no bound."""
    found = RANGE_RE.search(description)
    if not found:
        return None, None, True, True
    opening, low, high, closing = found.groups()
    low_v = None if low == "-inf" else float(low)
    high_v = None if high == "inf" else float(high)
    return low_v, high_v, opening == "(" or low_v is None, closing == ")" or high_v is None


def load(roles_dir=ROLES_DIR) -> dict[str, Knob]:
    """Every ``train_*`` option of KNOB_ROLES' argument specs (all entry points), by name.

    Raises:
        KnobError: an argument_specs.yml that does not read, or one knob declared with different types or
            defaults in two places (one knob, one declaration).
    """
    found: dict[str, Knob] = {}
    for role in KNOB_ROLES:
        path = Path(roles_dir) / role / "meta" / "argument_specs.yml"
        try:
            specs = yaml.safe_load(path.read_text(encoding="utf-8"))["argument_specs"]
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise KnobError(f"cannot read the role's argument spec: {exc}", str(path), "fix its YAML") from None
        for entry, spec in specs.items():
            for name, option in (spec.get("options") or {}).items():
                if not name.startswith("train_") or name in NOT_KNOBS:
                    continue
                option = {k: v for k, v in option.items() if k != "required"}
                text = _one_line(option.get("description"))
                where = f"{role}:{entry}"
                if name in found:
                    known = found[name]
                    same = {k: v for k, v in known.spec.items() if k != "description"}
                    if same != {k: v for k, v in option.items() if k != "description"}:
                        raise KnobError(f"knob {name} is declared differently in {', '.join(known.roles)} and {where}",
                                        str(path), "give it one type, default and choices")
                    found[name] = Knob(name, known.spec, known.help, (*known.roles, where), known.low, known.high,
                                       known.low_open, known.high_open)
                    continue
                low, high, low_open, high_open = parse_range(text)
                found[name] = Knob(name, option, text, (where,), low, high, low_open, high_open)
    return found


def check(given: dict, knobs: dict[str, Knob] | None = None, where: str = "-e") -> dict:
    """Check the knobs among ``given`` (variable name -> value as passed) by their declarations.

    Args:
        given: variables, e.g. the playbook's extra variables; names that are not knobs are ignored.
        knobs: :func:`load`'s result (default: this repository's roles).
        where: how the values were given, for the message (``-e``).

    Returns:
        {knob name: value converted to its type} for the knobs found in ``given``.

    Raises:
        KnobError: a value that is not of the knob's type or choices (Ansible's validator, as at the role's start)
            or outside its range; one line naming the knob, its type or range and its description.
    """
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    knobs = load() if knobs is None else knobs
    out = {}
    for name, value in given.items():
        knob = knobs.get(name)
        if knob is None:
            continue
        spec = {k: v for k, v in knob.spec.items() if k not in ("description", "default")}
        result = ArgumentSpecValidator({name: spec}).validate({name: value})
        if result.error_messages:
            choices = spec.get("choices")
            what = (f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}" if choices and
                    knob.type not in ("list", "dict") and "choices" in " ".join(result.error_messages)
                    else f"{name} must be {_WORDS.get(knob.type, knob.type)}, got {value!r}")
            raise KnobError(what, f"{where} {name}", f"give {name} {_expected(knob)} ({_help(knob)})")
        converted = result.validated_parameters[name]
        if knob.type in ("int", "float") and converted is not None and knob.out_of_range(converted):
            raise KnobError(f"{name} must be in {knob.range_text()}, got {value!r}", f"{where} {name}",
                            f"give {name} {_expected(knob)} ({_help(knob)})")
        out[name] = converted
    return out


def _help(knob: Knob) -> str:
    """The description without its range (the message gives the range once)."""
    return re.sub(RANGE_RE.pattern + r"\.?", "", knob.help).strip().rstrip(".")


def _expected(knob: Knob) -> str:
    """What a knob takes, for the message: its type, range and default."""
    text = _WORDS.get(knob.type, knob.type)
    if knob.range_text():
        text += f" in {knob.range_text()}"
    if knob.spec.get("choices"):
        text = f"one of {', '.join(map(str, knob.spec['choices']))}"
    if "default" in knob.spec:
        text += f", default {knob.spec['default']!r}"
    return text


TABLE_BEGIN = "<!-- playbook knobs: generated by `python -m train.controller.knobs table --write docs/training.md` -->"
TABLE_END = "<!-- end of playbook knobs -->"


def table(knobs: dict[str, Knob] | None = None) -> str:
    """docs/training.md's knob table (Markdown, one row a knob, in the roles' order), between TABLE_BEGIN and
    TABLE_END: name, type and range or choices, default, role, description."""
    knobs = load() if knobs is None else knobs
    rows = [TABLE_BEGIN, "", "| knob | type | default | role | what |", "|---|---|---|---|---|"]
    for knob in knobs.values():
        kind = knob.type + (f" in {knob.range_text()}" if knob.range_text() else "")
        if knob.spec.get("choices"):
            kind = " \\| ".join(f"`{c}`" for c in knob.spec["choices"])
        default = f"`{json.dumps(knob.spec['default'])}`" if "default" in knob.spec else ""
        roles = ", ".join(dict.fromkeys(r.split(":")[0] for r in knob.roles))
        rows.append(f"| `{knob.name}` | {kind} | {default} | {roles} | {_help(knob).replace('|', '/')} |")
    return "\n".join([*rows, "", TABLE_END])


def main(args=None) -> int:
    """No command: print every knob, one line each (name, type, range, default, roles, description); ``table``: the
    Markdown table; ``table --write PAGE``: replace it in PAGE (train.common.keys.write_table)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m train.controller.knobs", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["table"])
    parser.add_argument("--write", metavar="PAGE", help="replace the table between its markers in PAGE")
    opts = parser.parse_args(args)
    if opts.command is None:
        for knob in load().values():
            print(f"{knob.name}\t{knob.type}\t{knob.range_text() or '-'}\t{knob.spec.get('default', '')!r}\t"
                  f"{','.join(knob.roles)}\t{knob.help}")
        return 0
    if not opts.write:
        print(table())
        return 0
    status = write_table(opts.write, TABLE_BEGIN, TABLE_END, table())
    if status == 0:
        print(f"wrote the table of the playbook knobs to {opts.write}")
    return status


if __name__ == "__main__":
    sys.exit(main())
