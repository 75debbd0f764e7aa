"""The one hanging transaction a takeover completes by itself, and every one it refuses."""

from __future__ import annotations

import pytest

from ares.events.kafka.transactions import (
    CoordinatorView,
    Decision,
    OpenTransaction,
    TransactionState,
    hanging_decision,
)

OURS = 7
EPOCH = 3


def _view(state: TransactionState, producer_id: int = OURS,
          epoch: int = EPOCH) -> CoordinatorView:
    return CoordinatorView("events.writer-0", state, producer_id, epoch)


def _held(producer_id: int = OURS, epoch: int = EPOCH) -> OpenTransaction:
    return OpenTransaction(producer_id, epoch, first_offset=120)


@pytest.mark.parametrize(("state", "decision"), [
    (TransactionState.COMPLETE_COMMIT, Decision.COMMIT),
    (TransactionState.COMPLETE_ABORT, Decision.ABORT),
])
def test_the_coordinators_finished_decision_of_our_producer_and_epoch_is_repeated(
    state: TransactionState, decision: Decision,
) -> None:
    found, why = hanging_decision(_view(state), [_held()], OURS)
    assert found is decision
    assert f"decided {decision} for producer {OURS} epoch {EPOCH}" in why


@pytest.mark.parametrize("state", [
    TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
    TransactionState.PREPARE_ABORT, TransactionState.PREPARE_EPOCH_FENCE,
    TransactionState.DEAD, TransactionState.UNKNOWN,
])
def test_no_finished_decision_means_no_repair(state: TransactionState) -> None:
    found, why = hanging_decision(_view(state), [_held()], OURS)
    assert found is None
    assert f"state {state}" in why


def test_an_unreadable_coordinator_means_no_repair() -> None:
    found, why = hanging_decision(None, [_held()], OURS)
    assert found is None
    assert "not readable" in why


@pytest.mark.parametrize("holders", [[], [_held(), _held(producer_id=99)]])
def test_anything_but_one_holder_means_no_repair(holders: list[OpenTransaction]) -> None:
    found, why = hanging_decision(_view(TransactionState.COMPLETE_COMMIT), holders, OURS)
    assert found is None
    assert f"{len(holders)} producers hold" in why


def test_a_foreign_producers_records_are_not_ours_to_decide() -> None:
    found, why = hanging_decision(_view(TransactionState.COMPLETE_COMMIT),
                                  [_held(producer_id=99)], OURS)
    assert found is None
    assert "belong to producer 99" in why


def test_a_new_producer_id_cannot_decide_the_old_ones_records() -> None:
    """Our marker completes only records of the producer id it carries."""
    found, why = hanging_decision(_view(TransactionState.COMPLETE_COMMIT), [_held()], 8)
    assert found is None
    assert f"writes as producer 8: its markers cannot decide the records of producer {OURS}" \
        in why


def test_records_of_another_epoch_are_not_what_the_coordinator_decided() -> None:
    found, why = hanging_decision(_view(TransactionState.COMPLETE_ABORT),
                                  [_held(epoch=EPOCH - 1)], OURS)
    assert found is None
    assert f"epoch {EPOCH - 1}" in why
