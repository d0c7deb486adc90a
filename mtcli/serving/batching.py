"""Dynamic batching for the server: requests that arrive close together are decoded together by
one worker thread, so the model never runs two batches at once and each batch is as full as
the traffic allows.

Knows nothing of HTTP or models: a job is a list of lines and a key (which translator, which
settings); the worker calls `translate(key, lines)` and hands each job its share of the result.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


class QueueFull(Exception):
    """More jobs are waiting than the queue holds: the caller should come back later."""


@dataclass
class Job:
    key: Hashable  # jobs of one key can share a batch (same model, same decoding settings)
    lines: list[str]
    tokens: int  # source tokens, for the batch budget
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued_at: float = field(default_factory=time.monotonic)

    def deliver(self, result=None, error: BaseException | None = None) -> None:
        """Hand the result to the waiting request (from the worker thread)."""

        def settle() -> None:
            if self.future.done():  # the client went away and its handler was cancelled
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(settle)


class Batcher:
    """A bounded queue of jobs and the one thread that decodes them.

    The worker takes the oldest job, then waits up to `wait_s` for more jobs of the same key,
    until `max_tokens` source tokens are gathered, and decodes them as one batch. A job whose
    client has gone is skipped, so a disconnect never stalls the worker.
    """

    def __init__(
        self,
        translate: Callable[[Hashable, list[str]], list],
        *,
        wait_s: float,
        max_tokens: int,
        queue_size: int,
    ):
        self.translate, self.wait_s, self.max_tokens = translate, wait_s, max_tokens
        self.queue_size = queue_size
        self.jobs: deque[Job] = deque()
        self.cond = threading.Condition()
        self.batches = 0  # batches decoded so far (the tests compare it with requests)
        self.jobs_done = 0
        self.closing = False
        self.thread = threading.Thread(target=self._work, name="mtcli-decode", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        with self.cond:
            if self.closing:
                raise QueueFull("the server is shutting down")
            if len(self.jobs) >= self.queue_size:
                raise QueueFull(f"{len(self.jobs)} requests are waiting")
            self.jobs.append(job)
            self.cond.notify()

    def close(self) -> None:
        """Decode what is queued, then stop the worker."""
        with self.cond:
            self.closing = True
            self.cond.notify()
        self.thread.join()

    def _take_batch(self) -> list[Job] | None:
        """The oldest job and those of its key that arrive within the wait; None at the end."""
        with self.cond:
            while not self.jobs and not self.closing:
                self.cond.wait()
            if not self.jobs:
                return None
            first = self.jobs.popleft()
            batch, tokens = [first], first.tokens
            deadline, full = time.monotonic() + self.wait_s, False
            while not full:
                for job in [j for j in self.jobs if j.key == first.key]:
                    if tokens + job.tokens > self.max_tokens:
                        full = True
                        break
                    self.jobs.remove(job)
                    batch.append(job)
                    tokens += job.tokens
                left = deadline - time.monotonic()
                if left <= 0 or self.closing:
                    break
                self.cond.wait(left)
            return batch

    def _work(self) -> None:
        while (batch := self._take_batch()) is not None:
            live = [job for job in batch if not job.future.cancelled()]
            if not live:
                continue
            lines = [line for job in live for line in job.lines]
            try:
                results = self.translate(live[0].key, lines)
            except Exception as e:  # a bug must reach the requests, not kill the worker
                for job in live:
                    job.deliver(error=e)
                continue
            self.batches += 1
            self.jobs_done += len(live)
            start = 0
            for job in live:
                job.deliver(results[start : start + len(job.lines)])
                start += len(job.lines)
