"""Lesson 07's preemption story on a real block allocator: preemptions are events, not requests."""

import numpy as np
import pytest

from kvsim.serving.preemption_story import DECODE, PREEMPTED, PREFILL, preemption_story


def test_preemption_events_can_outnumber_requests():
    s = preemption_story(((0, 6, 10),) * 4, num_blocks=11, block_size=4)
    assert s.events == sum(s.preempted) == 5 > 4 and max(s.preempted) >= 2
    assert (s.states == PREEMPTED).sum() == s.events
    assert s.blocks_used.max() <= 11


@pytest.mark.parametrize("blocks", [7, 9, 11, 16, 40])
def test_every_request_produces_exactly_its_tokens(blocks):
    # the first prefill and every readmission produce one token, every decode step one; a preemption none
    s = preemption_story(((0, 6, 10), (0, 6, 10), (1, 6, 10), (3, 6, 10)), num_blocks=blocks, block_size=4,
                         max_steps=400)
    assert s.states.shape[1] < 400
    assert (((s.states == DECODE) | (s.states == PREFILL)).sum(axis=1) == 10).all()
    assert ((s.states == PREFILL).sum(axis=1) == 1 + np.array(s.preempted)).all()


def test_plenty_of_blocks_means_no_preemption():
    s = preemption_story(((0, 6, 10),) * 4, num_blocks=40, block_size=4)
    assert s.events == 0 and s.states.shape[1] == 10
