"""MultiLoader: a dataset iterated in worker processes, without torch.

The reference's ``webdataset.multi.MultiLoader`` (an alternative to
DataLoader where torch is not available), over multiprocessing pipes
instead of ZMQ: each of `workers` processes iterates `dataset` with WORKER
and NUM_WORKERS set, so that split_by_worker shares out the shards, and
sends its samples pickled; the loader yields them as they arrive (their
order depends on timing). A pipe holds a few samples, so a worker waits
while the consumer is behind.

Unlike the reference's, an exception in a worker is raised in the consumer
(the worker's traceback added as a note) and a worker that dies (killed, a
crash) is a RuntimeError naming it and its exit status, instead of a wait
that never ends; leaving the loop early (break, an exception) stops the
workers.

>>> import webdataset_cpp as wds
>>> with wds.ShardWriter("train-%06d.tar", maxcount=5, verbose=0) as sink:
...     for i in range(20):
...         sink.write({"__key__": f"{i:06d}", "cls": i})
>>> dataset = wds.WebDataset("train-{000000..000003}.tar", shardshuffle=False).decode()
>>> sorted(sample["cls"] for sample in MultiLoader(dataset, workers=2)) == list(range(20))
True
"""

import multiprocessing as mp
import os
import pickle
import traceback
import weakref
from multiprocessing.connection import wait

the_protocol = pickle.HIGHEST_PROTOCOL

all_pids = weakref.WeakSet()


class EOF:
    """The end of one worker's samples (`index`: the worker)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Failure:
    """An exception a worker raised (None when it could not be pickled) and
    its traceback's text."""

    def __init__(self, index, error, text):
        self.index, self.error, self.text = index, error, text


def reader(dataset, conn, index, num_workers):
    """Worker `index` of `num_workers`: sends the samples of `dataset`, then
    an EOF (or the failure that ended it), over `conn`."""
    os.environ["WORKER"] = str(index)
    os.environ["NUM_WORKERS"] = str(num_workers)
    try:
        for sample in dataset:
            conn.send_bytes(pickle.dumps(sample, protocol=the_protocol))
        conn.send_bytes(pickle.dumps(EOF(index=index), protocol=the_protocol))
    except BaseException as e:  # noqa: B902 (KeyboardInterrupt and SystemExit are reported too)
        text = traceback.format_exc()
        try:
            payload = pickle.dumps(_Failure(index, e, text), protocol=the_protocol)
        except Exception:
            payload = pickle.dumps(_Failure(index, None, text), protocol=the_protocol)
        try:
            conn.send_bytes(payload)
        except OSError:
            pass  # the consumer has gone
    finally:
        conn.close()


class MultiLoader:
    """Iterates `dataset` in `workers` processes (see the module). `verbose`
    prints when a worker finishes; `nokill` and `prefix` are accepted for
    the reference's sake (workers are always stopped when an iteration
    ends, and no socket file is made)."""

    def __init__(self, dataset, workers=4, verbose=False, nokill=False, prefix="/tmp/_multi-"):
        if workers < 1:
            raise ValueError(f"MultiLoader: workers must be at least 1, got {workers}")
        self.dataset = dataset
        self.workers = workers
        self.verbose = verbose
        self.nokill = nokill
        self.prefix = prefix
        self.pids = []

    def kill(self):
        """Stops the workers of the latest iteration."""
        for pid in self.pids:
            if pid is None:
                continue
            if pid.is_alive():
                pid.kill()
            pid.join(5.0)
        self.pids = []

    def __iter__(self):
        self.kill()
        self.pids = [None] * self.workers
        conns = {}
        try:
            for index in range(self.workers):
                receive, send = mp.Pipe(duplex=False)
                conns[receive] = index
                self.pids[index] = mp.Process(
                    target=reader, args=(self.dataset, send, index, self.workers), daemon=True)
                self.pids[index].start()
                send.close()
            all_pids.update(self.pids)
            while conns:
                for conn in wait(list(conns)):
                    index = conns[conn]
                    try:
                        item = pickle.loads(conn.recv_bytes())
                    except EOFError:
                        pid = self.pids[index]
                        pid.join(5.0)
                        raise RuntimeError(
                            f"MultiLoader: worker {index} ended before its last sample (exit "
                            f"code {pid.exitcode})") from None
                    if isinstance(item, EOF):
                        del conns[conn]
                        conn.close()
                        self.pids[index].join(5.0)
                        self.pids[index] = None
                        if self.verbose:
                            print("# subprocess finished", index)
                    elif isinstance(item, _Failure):
                        if item.error is None:
                            raise RuntimeError(f"MultiLoader: worker {index} failed:\n{item.text}")
                        item.error.add_note(f"in MultiLoader worker {index}:\n{item.text}")
                        raise item.error
                    else:
                        yield item
        finally:
            for conn in conns:
                conn.close()
            self.kill()
