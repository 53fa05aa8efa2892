"""Filters of the node_env role (role-local: available to its tasks and to tasks_from entry points)."""

import difflib
import json
import re


def node_env_closest_name(name, known, cutoff=0.6):
    """The name in ``known`` closest to ``name`` (difflib.get_close_matches, compared in upper case with the blanks
    around the name removed, so ``"nccl_debug"`` and ``"NCCL_IB_DISABLE "`` find theirs); '' when none is close."""
    by_upper = {}
    for candidate in known:
        by_upper.setdefault(str(candidate).upper(), str(candidate))
    key = str(name).strip().upper()
    if key in by_upper:
        return by_upper[key]
    match = difflib.get_close_matches(key, list(by_upper), n=1, cutoff=cutoff)
    return by_upper[match[0]] if match else ""


def node_env_refused(env, known, name_re, collective_re, newline_re, quote_re, unknown_msg, unknown_hint):
    """The refusals of the job environment ``env`` (dict name -> value): one line per refused variable,
    ``Environment variable "NAME" (from ...) is refused: <problem>; <problem>.``, [] when every variable is fine.

    A name must match ``name_re``; an NCCL_*/GLOO_* name (``collective_re``, any case) must be in ``known`` (else
    ``unknown_msg``, the closest known name, ``unknown_hint``); a value must be a string or a number (not a
    boolean) and must not contain a line break (``newline_re``), a character the launcher's quoting breaks on
    (``quote_re``) or leading/trailing blanks. One filter call for the whole dict: the checks of tasks/vars.yml,
    which runs three times per train.yml, without a task per variable."""
    refused = []
    for name, value in env.items():
        name, text = str(name), str(value)
        collective = re.match(collective_re, name, re.IGNORECASE) is not None
        closest = node_env_closest_name(name, known) if collective else ""
        problems = []
        if not re.match(name_re, name):
            problems.append("the name must match " + name_re
                            + ((" (did you mean " + closest + "?)") if collective and closest else ""))
        elif collective and name not in known:
            problems.append(unknown_msg + "; " + (("the closest known name is " + closest) if closest
                                                   else "no known name is close") + unknown_hint)
        if not (isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))):
            problems.append('the value must be a string or a number (quote booleans: "1" or "0")')
        if re.search(newline_re, text):
            problems.append("the value contains a newline (.deepspeed_env holds exactly one KEY=VALUE per line)")
        if re.search(quote_re, text):
            problems.append("the value contains a double quote, backquote, backslash or $ (the launcher wraps values "
                            "in double quotes and the remote shell would expand them): write the value out literally")
        if text != text.strip():
            problems.append("the value has leading or trailing blanks (the launcher strips them)")
        if problems:
            refused.append('Environment variable %s (from node_env_extra, node_env_deepspeed_env_extra or the role) '
                           "is refused: %s." % (json.dumps(name), "; ".join(problems)))
    return refused


def node_env_differences(mine, ref, collective_re, ref_host):
    """The NCCL_*/GLOO_* settings (names matching ``collective_re``, any case) of ``mine`` (this node's node_env_extra,
    dict name -> value) that differ from ``ref`` (the head's): ``"NAME is <here> here and <there> on <ref_host>"``
    for each, a name missing on one side being ``(unset)``, sorted by name and joined with ", "; '' when none
    differs."""
    out = []
    for name in sorted({str(n) for n in mine} | {str(n) for n in ref}, key=lambda n: (n.lower(), n)):
        if not re.match(collective_re, name, re.IGNORECASE):
            continue
        here = str(mine[name]) if name in mine else "(unset)"
        there = str(ref[name]) if name in ref else "(unset)"
        if here != there:
            out.append("%s is %s here and %s on %s" % (name, here, there, ref_host))
    return ", ".join(out)


class FilterModule:
    """node_env_closest_name, node_env_refused, node_env_differences."""

    def filters(self):
        return {"node_env_closest_name": node_env_closest_name, "node_env_refused": node_env_refused,
                "node_env_differences": node_env_differences}
