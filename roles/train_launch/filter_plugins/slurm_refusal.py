"""Jinja filter ``slurm_refusal``: why a ``-e launcher=slurm`` job cannot be submitted, read from ``sinfo`` on the
head, or "" when nothing stops it (roles/train_launch launch_slurm.yml, "Stop when the head has no Slurm, ...").

    "{{ __train_launch_sinfo | slurm_refusal(train_plan.hosts, train_plan.head, train_slurm_partition) }}"
"""

from __future__ import annotations


def slurm_refusal(sinfo, hosts, head, partition=""):
    """The reason, one paragraph, or "".

    Args:
      sinfo: the registered result of ``sinfo --noheader --Node --format "%N %P %t"`` on the head (a dict with rc,
        stdout, stderr, msg; a missing command gives rc 2 and msg "No such file or directory").
      hosts: the plan's nodes (list of str), which must be Slurm NodeNames.
      head: the head node's name (where the commands ran).
      partition: the partition asked for (-e train_slurm_partition), "" for Slurm's default.

    Returns:
      "" when sinfo ran and lists every host and the partition; else, in that order of precedence: the head cannot
      run Slurm's commands (with what to install), the hosts Slurm does not know (with the ones it does), or the
      partition that does not exist (with the ones that do). A partition name of sinfo ends in "*" when it is the
      default; that mark is not part of its name.
    """
    sinfo = dict(sinfo or {})
    out = str(sinfo.get("stdout") or "")
    if int(sinfo.get("rc", 2) or 0) != 0 and not out.strip():
        said = str(sinfo.get("msg") or "").strip() or str(sinfo.get("stderr") or "").strip()
        return (f"{head} cannot run Slurm's commands (sinfo: {said}). Install Slurm's client commands on the head "
                "(Debian/Ubuntu: slurm-client, with the cluster's slurm.conf and munge key), or set slurm_enabled: "
                "true in the inventory and run site.yml to provision a Slurm cluster on these nodes.")
    rows = [line.split() for line in out.splitlines() if line.split()]
    known = list(dict.fromkeys(row[0] for row in rows))
    partitions = list(dict.fromkeys(row[1].rstrip("*") for row in rows if len(row) > 1))
    missing = [h for h in hosts if h not in known]
    if missing:
        what = "is not a Slurm node" if len(missing) == 1 else "are not Slurm nodes"
        return (f"{', '.join(missing)} {what} (sinfo on {head} lists "
                f"{', '.join(known) or 'none'}). The inventory's node names must be Slurm's NodeNames: name the hosts "
                "as slurm.conf does, or run site.yml with slurm_enabled: true.")
    if partition and partition not in partitions:
        return (f"there is no partition {partition} (-e train_slurm_partition); Slurm has "
                f"{', '.join(partitions) or 'none'}.")
    return ""


class FilterModule:
    def filters(self):
        return {"slurm_refusal": slurm_refusal}
