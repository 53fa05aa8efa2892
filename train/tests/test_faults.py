"""train/node/faults.py: which faults are retried, which are not, and why (the restart policy's classification)."""

import pytest

from train.node import faults
from train.node.faults import Fault, classify, decide

RANKS = {0: "head-1", 1: "worker-1", 2: "worker-2"}


@pytest.mark.parametrize("evidence, kind, node, rank", [
    ({"unreachable": ["worker-2", "worker-1"], "dead": [{"node": "head-1", "rank": 0, "what": "error: x"}]},
     faults.NODE_LOST, "worker-2", None),
    ({"slurm": {"JobState": "NODE_FAIL", "Reason": "NodeDown", "FailedNode": "worker-2"}},
     faults.NODE_LOST, "worker-2", None),
    ({"slurm": {"JobState": "PREEMPTED"}}, faults.PREEMPTED, "", None),
    ({"slurm": {"JobState": "TIMEOUT"}}, faults.TIME_LIMIT, "", None),
    ({"slurm": {"JobState": "OUT_OF_MEMORY"}}, faults.RANK_KILLED, "", None),
    ({"hung": [{"rank": 2, "host": "worker-2"}], "dead": [{"node": "head-1", "rank": 0, "what": "error: x"}]},
     faults.HANG, "worker-2", 2),
    ({"late": [{"rank": 1, "host": "worker-1", "waiting_s": 130.0}]}, faults.RENDEZVOUS, "worker-1", 1),
    ({"dead": [{"node": "worker-1", "rank": 1, "what": "killed: no exit recorded, pid 42"}]},
     faults.RANK_KILLED, "worker-1", 1),
    # rank_status's own records: no end recorded and the process gone
    ({"dead": [{"rank": 2, "end": None, "alive": False}], "node_of_rank": RANKS}, faults.RANK_KILLED, "worker-2", 2),
    ({"dead": [{"node": "worker-1", "rank": 1,
                "what": "error: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
                        "by peer [10.89.0.4]:5021"}]}, faults.COLLECTIVE, "worker-1", 1),
    ({"dead": [{"node": "worker-1", "rank": 1, "what": "error: DistBackendError: NCCL error in: ...ncclRemoteError"}]},
     faults.COLLECTIVE, "worker-1", 1),
    ({"dead": [{"node": "worker-1", "rank": 1,
                "what": "error: RuntimeError: CUDA error: uncorrectable ECC error encountered"}]},
     faults.GPU_ERROR, "worker-1", 1),
    ({"dead": [{"node": "worker-1", "rank": 1, "what": "error: KeyError: 'input_ids'"}]},
     faults.EXCEPTION, "worker-1", 1),
    ({"dead": [{"node": "worker-2", "rank": 2, "what": "never started"}]}, faults.RENDEZVOUS, "worker-2", 2),
    ({"exit_code": -9}, faults.RANK_KILLED, "", None),
    ({"exit_code": 137}, faults.RANK_KILLED, "", None),
    ({"exit_code": 1}, faults.UNKNOWN, "", None),
    ({}, faults.UNKNOWN, "", None),
])
def test_classify_takes_the_first_cause_that_applies(evidence, kind, node, rank):
    fault = classify(step=40, **evidence)
    assert (fault.kind, fault.node, fault.rank, fault.step, fault.at_start) == (kind, node, rank, 40, False)
    assert fault.detail  # something is always said


@pytest.mark.parametrize("kind", sorted(faults.RETRIED - {faults.EXCEPTION}))
def test_a_fault_of_the_cluster_is_retried_up_to_max_restarts(kind):
    fault = Fault(kind=kind, node="worker-2", rank=2, step=40, detail="x")
    first = decide(fault, [], restarts_done=0, max_restarts=2)
    assert first.retry and "restart 1 of 2" in first.reason
    assert first.exclude == (["worker-2"] if kind in faults.NODE_KINDS else [])
    # the next one comes at another step: retried again, then the restarts are used up
    later = Fault(kind=kind, node="worker-2", rank=2, step=80, detail="x")
    assert decide(later, [fault], restarts_done=1, max_restarts=2).retry
    used = decide(Fault(kind=kind, step=120), [fault, later], restarts_done=2, max_restarts=2)
    assert not used.retry and "used its 2 restarts (max_restarts=2)" in used.reason and used.exclude == []


def test_restarts_off_keep_todays_behaviour():
    verdict = decide(classify(unreachable=["worker-2"], step=40), [], restarts_done=0, max_restarts=0)
    assert not verdict.retry
    assert verdict.reason == ("not retried: worker-2 was lost (did not answer the liveness check); restarts are off "
                              "(max_restarts=0)")


def test_an_exception_before_the_first_step_is_not_retried_and_the_reason_is_said():
    fault = classify(dead=[{"node": "worker-2", "rank": 2, "what": "error: ValueError: bad --foo"}], step=None)
    assert fault.kind == faults.EXCEPTION and fault.at_start
    verdict = decide(fault, [], restarts_done=0, max_restarts=3)
    assert not verdict.retry
    assert "rank 2 on worker-2 raised an exception (error: ValueError: bad --foo) before the first step" in \
        verdict.reason and "fix it and run again" in verdict.reason


def test_an_exception_mid_run_is_retried_once_and_not_when_it_repeats_at_the_same_step():
    first = classify(dead=[{"node": "worker-1", "rank": 1, "what": "error: RuntimeError: bad batch at 0x7f3a2c"}],
                     step=120)
    assert decide(first, [], restarts_done=0, max_restarts=3).retry
    # the same error at the same step (the address differs between the two attempts): not retried a third time
    again = classify(dead=[{"node": "worker-2", "rank": 2, "what": "error: RuntimeError: bad batch at 0x55e1a0"}],
                     step=120)
    assert again.signature() == first.signature()
    verdict = decide(again, [first.as_dict()], restarts_done=1, max_restarts=3)
    assert not verdict.retry
    assert "the same error at step 120 as in attempt 1" in verdict.reason and "deterministic" in verdict.reason
    # the same error at another step is retried
    other = Fault(**{**again.as_dict(), "step": 160})
    assert decide(other, [first], restarts_done=1, max_restarts=3).retry
    # another error at the same step is retried
    different = classify(dead=[{"node": "worker-1", "rank": 1, "what": "error: OSError: disk full"}], step=120)
    assert decide(different, [first], restarts_done=1, max_restarts=3).retry


def test_a_node_lost_twice_at_the_same_step_is_not_retried_a_third_time():
    first = classify(unreachable=["worker-2"], step=40)
    assert not decide(classify(unreachable=["worker-2"], step=40), [first], 1, 3).retry
    assert decide(classify(unreachable=["worker-1"], step=40), [first], 1, 3).retry  # another node


@pytest.mark.parametrize("fault, says", [
    (classify(slurm={"JobState": "TIMEOUT"}, step=300), "time limit is not a fault"),
    (classify(exit_code=1, step=300), "its cause is not known"),
])
def test_what_needs_a_person_is_not_retried(fault, says):
    verdict = decide(fault, [], restarts_done=0, max_restarts=5)
    assert not verdict.retry and says in verdict.reason


def test_the_progress_phrase_names_the_node_and_rank():
    assert classify(hung=[{"rank": 4, "host": "worker-2", "why": "in all_reduce"}], step=7).describe() == \
        "rank 4 on worker-2 hung (in all_reduce)"
    assert classify(unreachable=["worker-2"]).describe() == "worker-2 was lost (did not answer the liveness check)"
