"""Jinja filters of the staging tree (roles/train_stage tree.yml): which node copies the prepared data (or the checkpoint
a run resumes from) from which, round by round.

    "{{ _holding | staging_rounds(train_plan.head, train_stage_tree | bool) }}"
    "{{ __train_stage_rounds | staging_schedule_lines(__train_stage_item.what) }}"

A tree: the head holds the data, and so does every worker whose MANIFEST matches the head's and verified. In each
round every holder sends one copy to a worker that lacks the data, so the holders double each round: ceil(log2(N + 1))
rounds for N workers that lack it (the head alone holding it at first), and the head sends one copy a round instead
of N. A worker becomes a source in the round after its own copy verified (a copy that does not verify is retried
from the next source of its list, the head last, and staging stops where none verifies: the schedule holds only
while every copy ends verified). Workers are preferred as sources, so the head sends a copy only where the workers
holding the data are fewer than the workers still lacking it.
"""

from __future__ import annotations


def _names(holding) -> list[str]:
    if not isinstance(holding, dict):
        raise TypeError(f"staging_rounds: holding must be a mapping {{worker: bool}}, got {type(holding).__name__}")
    bad = [n for n in holding if not isinstance(n, str) or not n]
    if bad:
        raise ValueError(f"staging_rounds: worker names must be non-empty strings, got {bad!r}")
    return list(holding)


def staging_rounds(holding, head, tree=True):
    """The copies of the prepared data, round by round.

    Args:
      holding: {worker: bool}, every worker in node order (the inventory's); True where the worker holds the
        verified data already (MANIFEST matching the head's, verified), False where it needs a copy.
      head: the head's inventory name; it holds the data (prepared there) and must not be a key of ``holding``.
      tree: True: workers that hold the data are sources too (see the module's docstring). False: a star, one
        round in which every worker that lacks the data copies it from the head.

    Returns:
      list of rounds, each a list of copies ``{"dest": worker, "sources": [name, ...]}`` in node order of the
      destinations. ``sources`` is the order to try: the source of the schedule first, then (tree only) another
      worker that held the data when the round began, then the head unless it came first (the only source in a
      star). [] when no worker lacks the data. Every source of round r holds the data by the
      end of round r - 1, and each node is the first source of at most one copy a round.

    Raises:
      TypeError / ValueError: ``holding`` is not a mapping of worker names, or ``head`` is empty or one of its keys.
    """
    workers = _names(holding)
    if not isinstance(head, str) or not head:
        raise ValueError(f"staging_rounds: head must be the head's inventory name, got {head!r}")
    if head in holding:
        raise ValueError(f"staging_rounds: the head {head} is listed among the workers {workers}; the head holds "
                         "the data it prepared and is never a destination")
    lacking = [w for w in workers if not holding[w]]
    if not lacking:
        return []
    if not tree:
        return [[{"dest": w, "sources": [head]} for w in lacking]]
    holders = [w for w in workers if holding[w]]  # workers first: the head sends only where they are too few
    rounds = []
    while lacking:
        sources = holders + [head]
        now, lacking = lacking[:len(sources)], lacking[len(sources):]
        copies = []
        for i, dest in enumerate(now):
            first = sources[i]
            # the next source: another worker that held the data when the round began, the (i mod their count)-th of
            # the holders without ``first`` -- by index, not by building that list for every copy (O(N) a copy)
            n_others = len(holders) - 1 if i < len(holders) else len(holders)
            order = [first]
            if n_others:
                j = i % n_others
                order.append(holders[j + 1 if i < len(holders) and j >= i else j])
            copies.append({"dest": dest, "sources": order + ([head] if head not in order else [])})
        rounds.append(copies)
        holders = holders + now
    return rounds


def staging_round_count(lacking, holding=0):
    """Rounds of the tree for ``lacking`` workers that need the data and ``holding`` that hold it (the head
    besides): ceil(log2((lacking + holding + 1) / (holding + 1))); 0 when none lacks it. Equals
    ``len(staging_rounds(...))`` (tests check it); for models of large clusters without building the schedule.

    Raises ValueError for a negative count.
    """
    if lacking < 0 or holding < 0:
        raise ValueError(f"staging_round_count: counts must be >= 0, got lacking={lacking}, holding={holding}")
    if lacking == 0:
        return 0
    start, rounds = holding + 1, 0
    while start << rounds < lacking + start:
        rounds += 1
    return rounds


def staging_schedule_lines(rounds, what="the data"):
    """Printable lines of a schedule of ``staging_rounds``: one a round, ``round 2 of 2: worker-1 -> worker-2
    (else head-1)``, the copies of a round separated by ``, `` and each copy's further sources in brackets.
    ["every worker holds <what> already"] for an empty schedule (``what``: what is staged, in words)."""
    if not rounds:
        return [f"every worker holds {what} already"]
    lines = []
    for r, copies in enumerate(rounds, 1):
        said = []
        for copy in copies:
            first, *rest = copy["sources"]
            said.append(f"{first} -> {copy['dest']}" + (f" (else {', '.join(rest)})" if rest else ""))
        lines.append(f"round {r} of {len(rounds)}: {', '.join(said)}")
    return lines


class FilterModule:
    """The staging schedule's filters."""

    def filters(self):
        return {"staging_rounds": staging_rounds, "staging_schedule_lines": staging_schedule_lines}
