"""Requests that arrive together are searched together: an asyncio queue in front of the models.

A beam search over many sentences costs far less per sentence than one search per sentence (one
dispatch and one loop for all, wider matrix products), and it is batch-independent: a
sentence's output does not depend on its neighbours. So the server keeps one queue: the first
request to arrive opens a batch, every request arriving in the next few milliseconds joins it
(up to a number of sentences), and one worker thread runs the whole batch (one search per model)
while the event loop goes on accepting requests. Each request then gets back its own part of
the results, in the order of its own sentences.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any


@dataclasses.dataclass
class Job:
    """One request's work: its sentences and options, and where its result goes."""

    sentences: list[str]
    options: Any  # whatever ``run_batch`` reads besides the sentences
    future: asyncio.Future = dataclasses.field(repr=False)


class Batcher:
    """Collects jobs for ``wait_seconds`` after the first (or until ``max_sentences``), runs
    ``run_batch(jobs) -> results`` (one result per job, in order) on one worker thread, and
    hands each job its result.

    One thread runs every batch, so the models see one call at a time: JAX programs on a CPU
    already use every core, and two searches at once would only compete for them.
    """

    def __init__(
        self,
        run_batch: Callable[[Sequence[Job]], list[Any]],
        *,
        max_sentences: int,
        wait_seconds: float,
    ):
        self.run_batch = run_batch
        self.max_sentences = max_sentences
        self.wait_seconds = wait_seconds
        self.batches = 0  # batches run so far (the tests read how requests were grouped)
        self._queue: asyncio.Queue[Job] | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts collecting on the running event loop (the server's lifespan calls this)."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._collect_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._worker.shutdown(wait=True)

    async def submit(self, sentences: list[str], options: Any = None) -> Any:
        """The result of ``sentences`` with ``options`` once its batch has run."""
        if self._queue is None:
            raise RuntimeError("the batcher is not started; call start() on the event loop")
        job = Job(sentences, options, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    async def _next_batch(self, first: Job) -> tuple[list[Job], Job | None]:
        """``first`` and the jobs that arrive within the wait, without passing the sentence
        limit; a job that would pass it is returned apart, to open the next batch."""
        jobs, sentences = [first], len(first.sentences)
        deadline = asyncio.get_running_loop().time() + self.wait_seconds
        while sentences < self.max_sentences:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                job = await asyncio.wait_for(self._queue.get(), left)
            except TimeoutError:
                break
            if sentences + len(job.sentences) > self.max_sentences:
                return jobs, job
            jobs.append(job)
            sentences += len(job.sentences)
        return jobs, None

    async def _collect_forever(self) -> None:
        loop = asyncio.get_running_loop()
        waiting: Job | None = None
        while True:
            first = waiting if waiting is not None else await self._queue.get()
            jobs, waiting = await self._next_batch(first)
            jobs = [job for job in jobs if not job.future.cancelled()]  # clients that left
            if not jobs:
                continue
            self.batches += 1
            try:
                results = await loop.run_in_executor(self._worker, self.run_batch, jobs)
            except Exception as error:  # noqa: BLE001 (each request is told; the server goes on)
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error)
                continue
            for job, result in zip(jobs, results, strict=True):
                if not job.future.done():
                    job.future.set_result(result)
