"""Rows as CSV bytes for the databases' bulk loads (PostgreSQL's COPY, MariaDB's LOAD DATA): rendered batch by
batch from pyarrow, ahead of the database in a worker thread (:func:`prefetch`), readable as a stream
(:class:`CsvStream`)."""
from __future__ import annotations

import io
import queue
import re
import threading
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.csv as pacsv


class CsvStream(io.RawIOBase):
    """A read-only stream of CSV bytes rendered batch by batch (what COPY FROM STDIN reads)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buf = chunks, memoryview(b"")
        self.error: BaseException | None = None  # what stopped the stream (the driver only reports "read failed")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                nxt = next(self._chunks, None)
            except BaseException as exc:
                self.error = exc
                raise
            if nxt is None:
                return 0
            self._buf = memoryview(nxt)
        n = min(len(b), len(self._buf))
        b[:n], self._buf = self._buf[:n], self._buf[n:]
        return n


# pyarrow 22 added WriteOptions.null_string; before it a null is always an empty, unquoted field. Strings are
# always quoted and no other scalar type renders empty, so there an empty unquoted field is exactly a null:
# _EMPTY_FIELD matches a quoted field whole (a comma or newline inside it is no boundary) or an empty field.
NATIVE_NULL_STRING = hasattr(pacsv.WriteOptions(), "null_string")
_EMPTY_FIELD = re.compile(rb'"(?:[^"]|"")*"|(?<![^,\n])(?=[,\n])')


def csv_chunks(batches: Iterator[pa.RecordBatch], null: str = "") -> Iterator[bytes]:
    """The batches as CSV (a null written as ``null``, unquoted), rendered ahead in a thread while the
    database ingests the previous chunk. On a pyarrow without ``null_string`` a non-empty ``null`` is put
    into the empty fields after rendering (same bytes, slower)."""
    opts = pacsv.WriteOptions(include_header=False, batch_size=8192)
    refill = null.encode() if null and not NATIVE_NULL_STRING else b""
    if null and not refill:
        opts.null_string = null

    def render() -> Iterator[bytes]:
        for batch in batches:
            sink = io.BytesIO()
            pacsv.write_csv(batch, sink, opts)
            yield _EMPTY_FIELD.sub(lambda m: m.group(0) or refill, sink.getvalue()) if refill else sink.getvalue()

    return prefetch(render())


_DONE = object()


def prefetch(items: Iterator[Any], depth: int = 4) -> Iterator[Any]:
    """Iterate ``items`` in a worker thread, up to ``depth`` ahead (Parquet decoding and CSV rendering
    release the GIL, so they overlap the database's ingest). An exception in the worker is raised here;
    when the consumer stops early the worker stops too."""
    q: queue.Queue[Any] = queue.Queue(depth)
    stop = threading.Event()

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in items:
                if not put((x, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised in its thread
            put((_DONE, exc))

    worker = threading.Thread(target=work, name="eo-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            x, exc = q.get()
            if exc is not None:
                raise exc
            if x is _DONE:
                return
            yield x
    finally:
        stop.set()
        worker.join()
