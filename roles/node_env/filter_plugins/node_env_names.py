"""Filters of the node_env role (role-local: available to its tasks and to tasks_from entry points)."""

import difflib


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


class FilterModule:
    """node_env_closest_name."""

    def filters(self):
        return {"node_env_closest_name": node_env_closest_name}
