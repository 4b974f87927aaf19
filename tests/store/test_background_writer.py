"""The background writer's queue: nothing submitted is lost or reordered, and ``wait_idle`` means written."""

from __future__ import annotations

import threading

from trainspect.store.background import BackgroundWriter


def test_items_submitted_while_the_writer_drains_are_all_handled_in_order() -> None:
    handled: list[int] = []
    writer = BackgroundWriter("test", handle=handled.extend, flush_interval=0.001)
    writer.start()

    def produce(start: int) -> None:
        for i in range(start, start + 20000):
            assert writer.submit(i)

    producer = threading.Thread(target=produce, args=(0,))
    producer.start()
    producer.join()
    produce(20000)  # the lock-free path (the writer busy) and the locked one (it went idle) both taken
    assert writer.wait_idle(10)
    assert handled == list(range(40000))
    assert writer.close()


def test_wait_idle_writes_an_item_queued_as_the_writer_went_idle() -> None:
    handled: list[str] = []
    writer = BackgroundWriter("test", handle=handled.extend, flush_interval=60)
    writer.start()
    assert writer.submit("first")
    assert writer.wait_idle(10) and handled == ["first"]
    # what submit's lock-free path leaves when the writer finds its queue empty just before the append: the item
    # queued, the writer idle
    writer._items.append("late")
    assert writer.wait_idle(10)
    assert handled == ["first", "late"]
    assert writer.close()


def test_items_with_bytes_are_accounted_and_dropped_past_the_bound() -> None:
    handled: list[str] = []
    writer = BackgroundWriter("test", handle=handled.extend, flush_interval=60, max_pending_bytes=100)
    assert writer.submit("a", 60)
    assert not writer.submit("b", 60)  # over the bound: dropped, training not stalled
    assert writer.submit("c")  # no bytes: always queued
    writer.start()
    assert writer.wait_idle(10)
    assert handled == ["a", "c"]
    assert writer._pending == 0
    assert writer.close()


def test_a_writer_given_nothing_is_idle_at_once() -> None:
    writer = BackgroundWriter("test", handle=list, flush_interval=60)
    assert writer.wait_idle(0)  # nothing submitted: nothing to wait for, started or not
    writer.start()
    assert writer.wait_idle(0)
    assert writer.close()
