"""Pipeline stages: the reference package's filters.

Each function returns a stage object; a DataPipeline (or a fluent method)
places it, and calling it on an iterator runs it directly. ``shuffle``,
``detshuffle``, ``decode``, ``to_tuple``, ``rename``, ``batched`` (with the
default collation) and ``slice`` are native; the others run Python callables
and are Python stages.

>>> import webdataset_cpp as wds
>>> samples = [{"__key__": f"s{i}", "cls": i} for i in range(5)]
>>> [b for b in wds.to_tuple("__key__", "cls")(iter(samples))][:2]
[('s0', 0), ('s1', 1)]
>>> next(wds.batched(2)(iter(samples)))["cls"]
array([0, 1])
"""

import fnmatch
import random
import sys

from . import _core
from . import handlers as _handlers
from ._plan import JSON, TORCH, Stage, alternatives_kind
from .autodecode import Continue, Decoder, ImageHandler
from .errors import DataError
from .handlers import reraise_exception

_builtin_map = map
_builtin_slice = slice


def _sample_name(sample):
    if isinstance(sample, dict):
        return f"{sample.get('__url__')}: key {sample.get('__key__')}"
    return "sample"


class PythonFilter(Stage):
    """A stage that runs a Python generator function f(src, *args, **kw)."""

    def __init__(self, f, *args, _name=None, **kw):
        self.f = f
        self.args = args
        self.kw = kw
        self.name = _name or f.__name__

    def python(self, src, ctx):
        return self.f(src, *self.args, **self.kw)

    def __repr__(self):
        return self.name


def pipelinefilter(f):
    """Makes a generator function f(src, *args, **kw) a curried filter:
    f(*args, **kw) is then a stage.

    >>> @pipelinefilter
    ... def double(src):
    ...     for x in src:
    ...         yield 2 * x
    >>> list(double()(iter([1, 2])))
    [2, 4]
    """

    name = f.__name__.lstrip("_")

    def curried(*args, **kw):
        return PythonFilter(f, *args, _name=name, **kw)

    curried.__name__ = name
    curried.__doc__ = f.__doc__
    curried.__wrapped__ = f
    return curried


# ---------------------------------------------------------------- shuffling


class Shuffle(Stage):
    """A buffer of `bufsize` samples, a random one yielded once it holds
    `initial` (native; seeded per seed, epoch, pass, rank and worker)."""
    _wds_kind = "shuffle"

    def __init__(self, bufsize=1000, initial=100, seed=None):
        if bufsize < 0 or initial < 0:
            raise ValueError(f"shuffle: bufsize and initial must be >= 0, got {bufsize}, {initial}")
        self.bufsize = int(bufsize)
        self.initial = min(int(initial), self.bufsize)
        self.seed = seed

    def is_native(self, ctx):
        return True

    def native(self, ctx):
        seed = None if self.seed is None else int(self.seed) & (2**64 - 1)
        return _core.shuffle(self.bufsize, self.initial, seed)


def shuffle(bufsize=1000, initial=100, rng=None, seed=None, handler=None):
    """Shuffles samples with a buffer (the reference's algorithm, native RNG).

    The order differs from the reference's Python random. `rng` (a
    random.Random) is not supported: pass `seed`.
    """
    if rng is not None:
        raise ValueError("shuffle(rng=...) is not supported: pass seed=")
    return Shuffle(bufsize or 0, initial, seed)


def detshuffle(bufsize=1000, initial=100, seed=0, epoch=-1):
    """A shuffle that differs per epoch and repeats for a given (seed, epoch):
    every native shuffle is one; here the epoch comes from the pipeline."""
    return Shuffle(bufsize, initial, seed)


# ---------------------------------------------------------------- mapping


def _map(data, f, handler=reraise_exception):
    for sample in data:
        try:
            result = f(sample)
        except Exception as exn:
            if handler(exn):
                continue
            break
        if result is None:
            continue
        if isinstance(sample, dict) and isinstance(result, dict) and "__key__" in sample:
            result["__key__"] = sample["__key__"]
        yield result


map = pipelinefilter(_map)
map.__doc__ = """Yields f(sample); None results are dropped and a dict result gets the
input's __key__ back (only when the input had one)."""


def _map_dict(data, handler=reraise_exception, **kw):
    if not kw:
        raise ValueError("map_dict needs at least one field=function")
    for k, f in kw.items():
        if not callable(f):
            raise TypeError(f"map_dict: {k}={f!r} is not callable")
    for sample in data:
        try:
            for k, f in kw.items():
                sample[k] = f(sample[k])
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield sample


map_dict = pipelinefilter(_map_dict)
map_dict.__doc__ = "Applies field=function to those fields, in place."


def _map_tuple(data, *args, handler=reraise_exception):
    fs = [f if f is not None else (lambda x: x) for f in args]
    for sample in data:
        try:
            sample = list(sample)
            for i, f in enumerate(fs[:len(sample)]):
                sample[i] = f(sample[i])
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield tuple(sample)


map_tuple = pipelinefilter(_map_tuple)
map_tuple.__doc__ = "Applies the i-th function to the i-th element (None: unchanged)."


def _select(data, predicate):
    for sample in data:
        if predicate(sample):
            yield sample


select = pipelinefilter(_select)
select.__doc__ = "Keeps the samples for which predicate(sample) is true."


def _rsample(data, p=0.5):
    for sample in data:
        if random.uniform(0, 1) < p:
            yield sample


rsample = pipelinefilter(_rsample)
rsample.__doc__ = "Keeps each sample with probability p (Python's global random)."


def _info(data, fmt=None, n=3, every=-1, width=50, stream=sys.stderr, name=""):
    for i, sample in enumerate(data):
        if i < n or (every > 0 and (i + 1) % every == 0):
            if fmt is None:
                print("---", name, file=stream)
                for k, v in sample.items():
                    print(k, repr(v)[:width], file=stream)
            else:
                print(fmt.format(**sample), file=stream)
        yield sample


info = pipelinefilter(_info)
info.__doc__ = "Prints the first n samples (and every `every`-th) and passes all through."


def _associate(data, associator, **kw):
    for sample in data:
        extra = associator(sample["__key__"], **kw) if callable(associator) else \
            associator.get(sample["__key__"], {})
        sample.update(extra)
        yield sample


associate = pipelinefilter(_associate)
associate.__doc__ = "Adds associator(key) (or associator.get(key)) to each sample."


# ---------------------------------------------------------------- fields


def getfirst(a, keys, default=None, missing_is_error=True):
    """The value of the first of `keys` (a list or "a;b") present in `a`."""
    if isinstance(keys, str):
        if " " in keys:
            raise ValueError(f"getfirst: {keys!r} holds a space")
        keys = keys.split(";")
    for k in keys:
        if k in a:
            return a[k]
    if missing_is_error:
        raise DataError(f"{_sample_name(a)}: no field {';'.join(keys)!r} (fields present: "
                        f"{', '.join(a.keys())})")
    return default


def transform_with(sample, transformers):
    """Applies transformers[i] to sample[i] (None: unchanged); returns a list."""
    result = list(sample)
    for i, f in enumerate(transformers):
        if f is not None:
            result[i] = f(sample[i])
    return result


def _tuple_fields(args):
    if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
        return tuple(args[0].split())
    return args


def _to_tuple(data, *args, handler=reraise_exception, missing_is_error=True, none_is_error=None):
    args = _tuple_fields(args)
    if none_is_error is None:
        none_is_error = missing_is_error
    for sample in data:
        try:
            result = tuple(getfirst(sample, f, missing_is_error=missing_is_error) for f in args)
            if none_is_error and any(x is None for x in result):
                raise DataError(f"{_sample_name(sample)}: to_tuple {args} got None")
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield result


class ToTuple(Stage):
    """to_tuple(*fields): a tuple of the fields (each may be "a;b")."""
    _wds_kind = "one_to_one"

    def __init__(self, *args, handler=reraise_exception, missing_is_error=True,
                 none_is_error=None):
        self.fields = _tuple_fields(args)
        if not self.fields:
            raise ValueError("to_tuple needs at least one field")
        for f in self.fields:
            if not isinstance(f, str):
                raise TypeError(f"to_tuple: fields are str, got {f!r}")
        self.handler = handler
        self.missing_is_error = missing_is_error
        self.none_is_error = none_is_error

    def is_native(self, ctx):
        return (self.missing_is_error and self.none_is_error in (None, True)
                and _handlers.native_name(self.handler) is not None
                and len(set(self.fields)) == len(self.fields))

    def native(self, ctx):
        return _core.to_tuple(list(self.fields), "error", _handlers.native_name(self.handler))

    def python(self, src, ctx):
        return _to_tuple(src, *self.fields, handler=self.handler,
                         missing_is_error=self.missing_is_error, none_is_error=self.none_is_error)

    def kinds(self, fn, ctx):
        return lambda name: alternatives_kind(fn, name)


def to_tuple(*args, handler=reraise_exception, missing_is_error=True, none_is_error=None):
    """Turns dict samples into tuples of the given fields ("jpg;png": the
    first present). A single argument with spaces lists the fields.

    Unlike the reference, a field missing is a DataError (a ValueError) whose
    message names the shard, the key and the fields present.
    """
    return ToTuple(*args, handler=handler, missing_is_error=missing_is_error,
                   none_is_error=none_is_error)


def _rename(data, handler=reraise_exception, keep=True, **kw):
    for sample in data:
        try:
            new = {k: getfirst(sample, v, missing_is_error=True) for k, v in kw.items()}
            if keep:
                gone = {alt for v in kw.values() for alt in v.split(";")}
                out = {k: v for k, v in sample.items() if k not in gone or k.startswith("__")}
            else:
                out = {k: v for k, v in sample.items() if k.startswith("__")}
            out.update(new)
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield out


class Rename(Stage):
    """rename(new="old;alt", ...): see rename()."""
    _wds_kind = "one_to_one"

    def __init__(self, handler=reraise_exception, keep=True, **kw):
        if not kw:
            raise ValueError("rename needs at least one new=old")
        self.handler = handler
        self.keep = keep
        self.renames = kw

    def is_native(self, ctx):
        return _handlers.native_name(self.handler) is not None

    def native(self, ctx):
        return _core.rename(list(self.renames.items()), self.keep,
                            _handlers.native_name(self.handler))

    def python(self, src, ctx):
        return _rename(src, handler=self.handler, keep=self.keep, **self.renames)

    def kinds(self, fn, ctx):
        renames, keep = self.renames, self.keep

        def kind(name):
            if name in renames:
                return alternatives_kind(fn, renames[name])
            return fn(name) if keep else 0

        return kind


def rename(handler=reraise_exception, keep=True, **kw):
    """Renames fields: new="old" or new="a;b" (the first present). The old
    fields are removed; keep=False drops every field not named. Unlike the
    reference, __key__ and __url__ are always kept."""
    return Rename(handler=handler, keep=keep, **kw)


def _rename_keys(source, *args, keep_unselected=False, must_match=True, duplicate_is_error=True,
                 **kw):
    renamings = [(pattern, output) for output, pattern in args] + \
                [(pattern, output) for output, pattern in kw.items()]
    for sample in source:
        new = {}
        matched = {k: False for k, _ in renamings}
        for path, value in sample.items():
            fname = path.lower()
            target = None
            for pattern, name in renamings:
                if fnmatch.fnmatch(fname, pattern):
                    matched[pattern] = True
                    target = name
            if target is None:
                if keep_unselected:
                    new[path] = value
                continue
            if target in new and duplicate_is_error:
                raise DataError(f"rename_keys: {target} is given twice in {list(sample)}")
            new[target] = value
        if must_match and not all(matched.values()):
            missing = [k for k, v in matched.items() if not v]
            raise DataError(f"rename_keys: no field matches {missing} in {list(sample)}")
        yield new


rename_keys = pipelinefilter(_rename_keys)
rename_keys.__doc__ = """Renames fields by fnmatch patterns: rename_keys(new="*.jpg"); the last
matching pattern wins; fields no pattern matches are dropped unless keep_unselected."""


def _extract_keys(source, *patterns, duplicate_is_error=True, ignore_missing=False):
    for sample in source:
        result = []
        for pattern in patterns:
            found = [v for k, v in sample.items()
                     if any(fnmatch.fnmatch("." + k, "." + p) or fnmatch.fnmatch(k, p)
                            for p in pattern.split(";"))]
            if len(found) == 0:
                if ignore_missing:
                    result.append(None)
                    continue
                raise DataError(f"extract_keys: no field matches {pattern} in {list(sample)}")
            if len(found) > 1 and duplicate_is_error:
                raise DataError(f"extract_keys: several fields match {pattern} in {list(sample)}")
            result.append(found[0])
        yield tuple(result)


extract_keys = pipelinefilter(_extract_keys)
extract_keys.__doc__ = "A tuple of the fields matching each fnmatch pattern (';' alternatives)."


# ---------------------------------------------------------------- decoding


class Decode(Stage):
    """decode(*specs_or_handlers): see decode()."""
    _wds_kind = "one_to_one"

    def __init__(self, *args, handler=reraise_exception, pre=None, post=None, only=None,
                 partial=False, size=None, crop=None, hflip=0.0, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3)):
        resize = dict(size=size, crop=crop, hflip=hflip, scale=scale, ratio=ratio)
        handlers = []
        for a in args:
            if isinstance(a, str):
                handlers.append(ImageHandler(a, **resize))
            elif callable(a):
                handlers.append(a)
            else:
                raise TypeError(f"decode: arguments are image specs or callables, got {a!r}")
        self.decoder = Decoder(handlers, pre=pre, post=post, only=only, partial=partial)
        self.handler = handler
        self._names = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_names"] = None
        return state

    def is_native(self, ctx):
        return self.decoder.native_items() is not None

    def native(self, ctx):
        items, _, calls_python = self.decoder.native_items()
        self._names = self._names or _core.NameSet()
        only = sorted(self.decoder.only) if self.decoder.only is not None else []
        return _core.decode(items, only, self.decoder.partial,
                            _handlers.for_native(self.handler), Continue, self._names,
                            not calls_python)

    def name_sets(self):
        return [self._names] if self._names is not None else []

    def python(self, src, ctx):
        return _map(src, self.decoder, handler=self.handler)

    def kinds(self, fn, ctx):
        torch_extensions = self.decoder.torch_extensions()
        json = self.decoder.native_items()[1]
        only, names = self.decoder.only, self._names

        def kind(name):
            base = fn(name)
            if only is not None and name not in only:
                return base
            extension = _inner_extension(name)
            if extension in torch_extensions or (names is not None and name in names):
                base |= TORCH
            if json and extension in ("json", "jsn"):
                base |= JSON
            return base

        return kind


def _inner_extension(name):
    parts = name.lower().split(".")
    if len(parts) > 1 and parts[-1] in ("gz", "zst"):
        parts = parts[:-1]
    return parts[-1]


def decode(*args, handler=reraise_exception, **kw):
    """Decodes fields: image specs ("rgb8", "torchrgb", "pil", ...) and
    (key, data) callables, then the basic types.

    kw: pre, post, only, partial (the reference's Decoder arguments) and the
    native resize options size=(h, w), crop=None|"center"|"random", hflip,
    scale, ratio.

    >>> import webdataset_cpp as wds
    >>> stage = wds.decode("rgb8", size=(224, 224), crop="center")
    """
    return Decode(*args, handler=handler, **kw)


def _xdecode(source, *args, must_decode=True, defaults=None, **kw):
    import io as _io

    decoders = list(args) + [(f"*.{ext}", f) for ext, f in kw.items()]
    if defaults is None:
        defaults = [("*.bin", lambda stream: stream.read()),
                    ("*.txt", lambda stream: stream.read().decode("utf-8")),
                    ("*.pyd", lambda stream: __import__("pickle").load(stream))]
    decoders = defaults + decoders
    for sample in source:
        out = {}
        for k, v in sample.items():
            if k.startswith("__") or not isinstance(v, bytes):
                out[k] = v
                continue
            found = None
            for pattern, f in decoders:
                if fnmatch.fnmatch("." + k, pattern) or fnmatch.fnmatch(k, pattern):
                    found = f
            if found is None:
                if must_decode:
                    raise ValueError(f"No decoder found for {k}.")
                out[k] = v
            else:
                out[k] = found(_io.BytesIO(v))
        yield out


xdecode = pipelinefilter(_xdecode)
xdecode.__doc__ = "Decodes by fnmatch patterns of (pattern, f(stream)); the last match wins."


# ---------------------------------------------------------------- batching


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _combine(values, combine_tensors, combine_scalars):
    import numpy as np

    first = values[0]
    if isinstance(first, (int, float)):
        return np.array(values) if combine_scalars else list(values)
    if _is_tensor(first) or isinstance(first, np.ndarray):
        if not combine_tensors:
            return list(values)
        shapes = {tuple(x.shape) for x in values}
        if len(shapes) != 1:
            raise DataError(f"all shapes must be equal in collation, got {sorted(shapes)}")
        if _is_tensor(first):
            import torch

            return torch.stack(list(values))
        return np.array(list(values))
    return list(values)


def default_collation_fn(samples, combine_tensors=True, combine_scalars=True):
    """Collates a list of samples (dicts or tuples) column by column: numbers
    to a NumPy array, ndarrays stacked (same shape), tensors torch.stack'ed,
    everything else (str, bytes, PIL images, ...) a list.

    >>> default_collation_fn([(1, "a"), (2, "b")])
    (array([1, 2]), ['a', 'b'])
    """
    first = samples[0]
    if isinstance(first, dict):
        keys = list(first)
        for s in samples:
            if set(s) != set(keys):
                raise DataError(f"keys don't match in different samples: {sorted(keys)} and "
                                f"{sorted(s)}")
        return {k: _combine([s[k] for s in samples], combine_tensors, combine_scalars)
                for k in keys}
    if not isinstance(first, (list, tuple)):
        raise TypeError(f"collation takes dicts or tuples, got {type(first).__name__}")
    columns = list(zip(*samples))
    return tuple(_combine(list(c), combine_tensors, combine_scalars) for c in columns)


def _batched(data, batchsize=20, collation_fn=default_collation_fn, partial=True):
    batch = []
    for sample in data:
        batch.append(sample)
        if len(batch) == batchsize:
            yield batch if collation_fn is None else collation_fn(batch)
            batch = []
    if batch and partial:
        yield batch if collation_fn is None else collation_fn(batch)


class Batched(Stage):
    """batched(batchsize): see batched()."""
    _wds_kind = "batches"

    def __init__(self, batchsize=20, collation_fn=default_collation_fn, partial=True):
        if not isinstance(batchsize, int) or isinstance(batchsize, bool) or batchsize < 1:
            raise ValueError(f"batched: batchsize must be an int >= 1, got {batchsize!r}")
        self.batchsize = batchsize
        self.collation_fn = collation_fn
        self.partial = partial

    def is_native(self, ctx):
        return self.collation_fn is default_collation_fn

    def native(self, ctx):
        return _core.batched(self.batchsize, bool(self.partial))

    def python(self, src, ctx):
        return _batched(src, self.batchsize, self.collation_fn, self.partial)

    def __repr__(self):
        collation = getattr(self.collation_fn, "__name__", repr(self.collation_fn))
        return (f"Batched(batchsize={self.batchsize}, collation_fn={collation}, "
                f"partial={self.partial!r})")


def batched(batchsize=20, collation_fn=default_collation_fn, partial=True):
    """Collates groups of `batchsize` samples (the last, shorter one too when
    partial). With the default collation the batches are made natively:
    images decoded earlier in the same chain are written straight into the
    batch (no copy), and arrays come out as NumPy views of the batch block.
    collation_fn=None yields plain lists."""
    return Batched(batchsize, collation_fn, partial)


def _unbatched(data):
    for batch in data:
        if isinstance(batch, dict):
            lengths = {len(v) for v in batch.values()}
            if len(lengths) != 1:
                raise DataError(f"unbatched: the fields' lengths differ: {sorted(lengths)}")
            keys = list(batch)
            for i in range(lengths.pop()):
                yield {k: batch[k][i] for k in keys}
        elif isinstance(batch, (list, tuple)):
            for i in range(len(batch[0])):
                yield tuple(x[i] for x in batch)
        else:
            raise ValueError(f"unbatched: batches are dicts, tuples or lists, got "
                             f"{type(batch).__name__}")


unbatched = pipelinefilter(_unbatched)
_unbatched._wds_kind = "holds"
unbatched.__doc__ = "Turns batches back into samples (views of the batch's arrays)."


def _unlisted(data):
    for batch in data:
        if not isinstance(batch, list):
            raise TypeError(f"unlisted: batches are lists, got {type(batch).__name__}")
        yield from batch


unlisted = pipelinefilter(_unlisted)
_unlisted._wds_kind = "holds"


# ---------------------------------------------------------------- slicing


class Slice(Stage):
    """slice(stop) or slice(start, stop[, step]), as itertools.islice (native)."""

    def __init__(self, *args):
        s = _builtin_slice(*args)
        start = 0 if s.start is None else s.start
        step = 1 if s.step is None else s.step
        for v, what in ((start, "start"), (s.stop, "stop"), (step, "step")):
            if v is not None and (not isinstance(v, int) or v < 0):
                raise ValueError(f"slice: {what} must be None or an int >= 0, got {v!r}")
        if step < 1:
            raise ValueError("slice: step must be >= 1")
        self.start, self.stop, self.step = start, s.stop, step

    def is_native(self, ctx):
        return True

    def native(self, ctx):
        stop = self.stop if self.stop is None else max(self.stop, self.start)
        return _core.slice(self.start, stop, self.step)


def slice(*args):
    """Items [start:stop:step] of the stream, as itertools.islice.

    >>> list(slice(1, 5, 2)(iter([{"a": i} for i in range(9)])))
    [{'a': 1}, {'a': 3}]
    """
    return Slice(*args)


# ---------------------------------------------------------------- caching


class Cached(Stage):
    """Records the samples of the first iteration and replays them after."""
    _wds_kind = "holds"

    def __init__(self):
        self.cached = None

    def python(self, src, ctx):
        if self.cached is not None:
            yield from self.cached
            return
        recorded = []
        for sample in src:
            recorded.append(sample)
            yield sample
        self.cached = recorded


def _log_keys(data, logfile=None):
    if not logfile:
        yield from data
        return
    import fcntl

    from .utils import pytorch_worker_info

    rank, _, worker, _ = pytorch_worker_info()
    with open(logfile, "a") as stream:
        for i, sample in enumerate(data):
            line = f"{i}\t{worker}\t{rank}\t{sample.get('__key__')}\n"
            fcntl.flock(stream, fcntl.LOCK_EX)
            stream.write(line)
            stream.flush()
            fcntl.flock(stream, fcntl.LOCK_UN)
            yield sample


log_keys = pipelinefilter(_log_keys)
