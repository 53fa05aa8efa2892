"""roles/train_stage/filter_plugins/staging_tree.py: the data staging's schedule (which node copies from which,
round by round), called with what workers.yml passes ({worker: holds the verified data}, the head, the tree
switch)."""

import importlib.util
import math
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "staging_tree_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "staging_tree.py")
_mod = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_mod)
staging_rounds = _mod.staging_rounds
staging_round_count = _mod.staging_round_count
staging_schedule_lines = _mod.staging_schedule_lines


def workers(n, holding=()):
    return {f"w{i:04d}": f"w{i:04d}" in holding for i in range(1, n + 1)}


def check_schedule(holding, head, rounds):
    """The properties every schedule keeps: each worker that lacks the data gets one copy, in exactly one round;
    every source of a copy holds the data when the round begins; a node is the first source of at most one copy
    a round; the head is each copy's first or last source; a holder is never a destination."""
    have = {head} | {w for w, h in holding.items() if h}
    got = []
    for copies in rounds:
        firsts = [c["sources"][0] for c in copies]
        assert len(firsts) == len(set(firsts)), copies
        for c in copies:
            assert c["dest"] not in have, (c, have)
            assert all(s in have for s in c["sources"]), (c, have)
            assert head in (c["sources"][0], c["sources"][-1]), c
            assert len(c["sources"]) == len(set(c["sources"])), c
        have |= {c["dest"] for c in copies}
        got += [c["dest"] for c in copies]
    assert got == [w for w, h in holding.items() if not h]


def test_one_worker_copies_from_the_head_alone():
    assert staging_rounds({"worker-1": False}, "head-1") == [[{"dest": "worker-1", "sources": ["head-1"]}]]


def test_two_workers_the_second_copies_from_the_first_then_the_head():
    """The cluster scenario's shape: head-1 sends one copy; worker-2 copies from worker-1, the head its fallback."""
    rounds = staging_rounds({"worker-1": False, "worker-2": False}, "head-1")
    assert rounds == [[{"dest": "worker-1", "sources": ["head-1"]}],
                      [{"dest": "worker-2", "sources": ["worker-1", "head-1"]}]]
    assert staging_schedule_lines(rounds) == ["round 1 of 2: head-1 -> worker-1",
                                              "round 2 of 2: worker-1 -> worker-2 (else head-1)"]


def test_three_workers_two_rounds_head_and_first_worker_both_send():
    rounds = staging_rounds({"w1": False, "w2": False, "w3": False}, "h")
    assert rounds == [[{"dest": "w1", "sources": ["h"]}],
                      [{"dest": "w2", "sources": ["w1", "h"]}, {"dest": "w3", "sources": ["h", "w1"]}]]


def test_a_worker_that_holds_the_data_serves_from_the_first_round_and_the_head_only_when_needed():
    rounds = staging_rounds({"w1": True, "w2": False}, "h")
    assert rounds == [[{"dest": "w2", "sources": ["w1", "h"]}]]
    # two holders, one lacking: a worker sends, the head does not
    rounds = staging_rounds({"w1": True, "w2": True, "w3": False}, "h")
    assert rounds == [[{"dest": "w3", "sources": ["w1", "w2", "h"]}]]


def test_every_worker_holding_the_data_means_no_copy():
    assert staging_rounds({"w1": True, "w2": True}, "h") == []
    assert staging_rounds({}, "h") == []
    assert staging_schedule_lines([]) == ["every worker holds the data already"]
    assert staging_schedule_lines([], "checkpoint-40") == ["every worker holds checkpoint-40 already"]


def test_star_copies_every_lacking_worker_from_the_head_in_one_round():
    rounds = staging_rounds({"w1": False, "w2": True, "w3": False}, "h", tree=False)
    assert rounds == [[{"dest": "w1", "sources": ["h"]}, {"dest": "w3", "sources": ["h"]}]]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 255, 1023, 1024])
def test_the_holders_double_each_round(n):
    holding = workers(n)
    rounds = staging_rounds(holding, "head")
    check_schedule(holding, "head", rounds)
    assert len(rounds) == math.ceil(math.log2(n + 1)) == staging_round_count(n)
    # round r copies to 2^(r-1) workers (every holder sends one) until the last, which takes what is left
    assert [len(c) for c in rounds[:-1]] == [2 ** r for r in range(len(rounds) - 1)]
    # the head is the first source of one copy a round at most: its uplink carries rounds x S, not n x S
    assert sum(c["sources"][0] == "head" for copies in rounds for c in copies) <= len(rounds)


@pytest.mark.parametrize("n,held", [(5, ["w0002"]), (10, ["w0001", "w0007", "w0010"]), (64, ["w0064"])])
def test_workers_holding_the_data_shorten_the_tree(n, held):
    holding = workers(n, held)
    rounds = staging_rounds(holding, "head")
    check_schedule(holding, "head", rounds)
    assert len(rounds) == staging_round_count(n - len(held), len(held))


def test_a_copy_has_another_worker_to_retry_from_when_one_held_the_data():
    """Fallbacks: the first source, another worker that held the data when the round began, then the head."""
    rounds = staging_rounds(workers(6), "head")
    last = rounds[-1]  # round 3: holders w1..w3 and the head, three copies
    assert [c["sources"] for c in last] == [["w0001", "w0002", "head"], ["w0002", "w0003", "head"],
                                            ["w0003", "w0001", "head"]]


def test_round_count_for_large_clusters():
    assert [staging_round_count(n) for n in (0, 1, 2, 3, 7, 8, 255, 1023, 1024)] == [0, 1, 2, 2, 3, 4, 8, 10, 11]
    assert staging_round_count(6, 1) == 2  # w1 + head: 2 -> 4 -> 8 holders
    with pytest.raises(ValueError, match="counts must be >= 0"):
        staging_round_count(-1)


def test_bad_inputs_are_refused_with_what_and_where():
    with pytest.raises(ValueError, match="the head h is listed among the workers"):
        staging_rounds({"h": False, "w1": False}, "h")
    with pytest.raises(TypeError, match=r"holding must be a mapping \{worker: bool\}, got list"):
        staging_rounds(["w1"], "h")
    with pytest.raises(ValueError, match="head must be the head's inventory name"):
        staging_rounds({"w1": False}, "")
    with pytest.raises(ValueError, match="worker names must be non-empty strings"):
        staging_rounds({"": False}, "h")
