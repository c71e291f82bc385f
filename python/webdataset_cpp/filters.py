"""Pipeline stages: the reference package's filters.

Each function returns a stage object; a DataPipeline (or a fluent method)
places it, and calling it on an iterator runs it directly. ``shuffle``,
``detshuffle``, ``decode``, ``to_tuple``, ``rename``, ``batched`` (with the
default collation) and ``slice`` are native (``shuffle(rng=...)`` runs in
Python); the others run Python callables and are Python stages.

>>> import webdataset_cpp as wds
>>> samples = [{"__key__": f"s{i}", "cls": i} for i in range(5)]
>>> [b for b in wds.to_tuple("__key__", "cls")(iter(samples))][:2]
[('s0', 0), ('s1', 1)]
>>> next(wds.batched(2)(iter(samples)))["cls"]
array([0, 1])
"""

import fnmatch
import functools
import io
import itertools
import os
import pickle
import random
import sys

from . import _core
from . import handlers as _handlers
from ._plan import (BATCHES, HOLDS, JSON, ONE_TO_ONE, SEED_MASK, SHUFFLE, TORCH, Context,
                    NativeSegment, Stage, alternatives_kind)
from .autodecode import JSON_EXTENSIONS, Continue, Decoder, ImageHandler
from .cache import LMDBCached  # noqa: F401 (the reference defines it in filters)
from .errors import DataError
from .handlers import reraise_exception
from .utils import PipelineStage  # noqa: F401 (the reference's filters module has it)
from .utils import identity

_builtin_map = map
_builtin_slice = slice


def _sample_name(sample):
    if isinstance(sample, dict) and ("__key__" in sample or "__url__" in sample):
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


FilterFunction = PythonFilter  # the reference's name for a curried filter


class RestCurried:
    """What pipelinefilter(f) returns: calling it with (*args, **kw) gives the
    stage f(src, *args, **kw). Picklable when f is a module-level function."""

    def __init__(self, f):
        self.f = f
        functools.update_wrapper(self, f)

    def __call__(self, *args, **kw):
        return PythonFilter(self.f, *args, _name=self.f.__name__.lstrip("_"), **kw)


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
    return RestCurried(f)


def compose2(f, g):
    """x -> g(f(x))."""
    return lambda x: g(f(x))


def compose(*args):
    """The functions applied left to right."""
    return functools.reduce(compose2, args)


def pipeline(source, *args):
    """The filters `args` applied in turn to `source` (the reference's helper)."""
    return compose(*args)(source) if args else source


def parse_field_spec(fields):
    """A field spec ("jpg;png cls", or a list) as lists of alternatives."""
    if isinstance(fields, str):
        fields = fields.split()
    return [_alternatives(field) for field in fields]


# ---------------------------------------------------------------- shuffling



def pick(buf, rng):
    """Removes and returns a random item of the list `buf`: the one at
    rng.randint(0, len(buf) - 1), whose slot the last item fills."""
    k = rng.randint(0, len(buf) - 1)
    item = buf[k]
    buf[k] = buf[-1]
    buf.pop()
    return item


def _python_rng(rng, seed):
    """The random.Random a Python shuffle draws from."""
    if rng is not None and seed is not None:
        raise ValueError("shuffle: pass rng= or seed=, not both")
    if seed is not None:
        return random.Random(seed)
    if rng is None:
        return random.Random()  # seeded from os.urandom: a new order every run
    if not callable(getattr(rng, "randint", None)):
        raise TypeError(f"shuffle: rng must be a random.Random (with randint), got {rng!r}")
    return rng


def _shuffle(data, bufsize=1000, initial=100, rng=None, seed=None, handler=None):
    """Yields the items of `data` shuffled with a buffer, in Python, drawing
    from `rng` (a random.Random; `seed` makes one; neither: a new order every
    run). The reference's algorithm and draws: each step reads an item, and a
    second one while the buffer holds fewer than `bufsize`; once it holds
    `initial`, each step yields pick(buf, rng). The same rng state gives the
    reference's order. `handler` is accepted and unused, as there."""
    rng = _python_rng(rng, seed)
    initial = min(initial, bufsize)
    data = iter(data)
    buf = []
    for item in data:
        buf.append(item)
        if len(buf) < bufsize:
            buf.extend(itertools.islice(data, 1))
        if len(buf) >= initial:
            yield pick(buf, rng)
    while buf:
        yield pick(buf, rng)


_shuffle._wds_kind = HOLDS


def _seed_given(seed):
    """Whether a pipeline seed was chosen (False for the default of a pipeline
    made without a seed and without $WDS_SEED; see pipeline.default_seed)."""
    return not getattr(seed, "unset", False)


class Shuffle(Stage):
    """A buffer of `bufsize` samples, a random one yielded once it holds
    `initial`: see shuffle()."""

    def __init__(self, bufsize=1000, initial=100, seed=None, rng=None, epoch=-1):
        if bufsize < 0 or initial < 0:
            raise ValueError(f"shuffle: bufsize and initial must be >= 0, got {bufsize}, {initial}")
        if rng is not None:
            _python_rng(rng, seed)  # the argument errors, now
        self.bufsize = int(bufsize)
        self.initial = min(int(initial), self.bufsize)
        self.seed = seed
        self.rng = rng
        self.epoch = epoch

    @property
    def _wds_kind(self):
        # A Python shuffle (rng=) is a Python step that holds items.
        return SHUFFLE if self.rng is None else HOLDS

    @property
    def name(self):
        return "shuffle" if self.rng is None else "shuffle(rng=...)"

    def set_epoch(self, epoch):
        """Sets `epoch`: see shuffle()."""
        self.epoch = int(epoch)

    def is_native(self, ctx):
        return self.rng is None

    def native(self, ctx):
        return _core.shuffle(self.bufsize, self.initial, self._native_seed(ctx))

    def _native_seed(self, ctx):
        """None (the pipeline's seed), a 64-bit seed, or for an unseeded
        shuffle in an unseeded pipeline a fresh random one."""
        seed = self.seed
        if seed is None and not _seed_given(ctx.seed):
            return int.from_bytes(os.urandom(8), "little")
        if self.epoch is not None and self.epoch >= 0:
            return _core.derive_shuffle_seed(int(ctx.seed if seed is None else seed) & SEED_MASK,
                                             self.epoch)
        return None if seed is None else int(seed) & SEED_MASK

    def python(self, src, ctx):
        return _shuffle(src, self.bufsize, self.initial, rng=self.rng)

    def _wds_unrecordable(self, ctx):
        """Why a pipeline state cannot record a position through this stage,
        or None (a Python shuffle is refused as a step that holds items)."""
        if self.rng is None and self.seed is None and not _seed_given(ctx.seed):
            return ("shuffle() without a seed draws a new order every run, which a state cannot "
                    "replay (pass seed= to shuffle, or give the pipeline a seed: "
                    "WebDataset(seed=...), DataPipeline.seed or $WDS_SEED)")
        return None

    def __call__(self, src):
        if self.seed is None:
            # No pipeline seeds a shuffle called on an iterator: a new order
            # every run, as the reference's.
            return _shuffle(src, self.bufsize, self.initial, rng=self.rng)
        return super().__call__(src)

    def run(self, src):
        """Runs the stage on an iterator (the reference's PipelineStage.run)."""
        return self(src)


def shuffle(bufsize=1000, initial=100, rng=None, seed=None, handler=None):
    """Shuffles samples with a buffer of `bufsize`, yielding once it holds
    `initial` (the reference's algorithm).

    * seed=N: native, a repeatable order for (N, epoch, pass, rank, worker),
      a different one each epoch.
    * no seed: as in the reference, a new order every run. Unlike the
      reference, a pipeline given a seed (WebDataset(seed=...),
      DataPipeline.seed, $WDS_SEED) seeds it instead, so that its states can
      be resumed; a state of a pipeline with an unseeded shuffle and no seed
      records why it cannot be resumed.
    * rng=random.Random(...): runs in Python (the reference's `_shuffle`)
      drawing from rng, so the same rng gives the reference's order; such a
      state cannot be resumed. The native order differs from the
      reference's (another generator).

    `epoch` (set_epoch(e), or the attribute, as the reference's detshuffle
    has) -1 follows the pipeline's epoch; e >= 0 mixes e into the seed: a
    different, repeatable order for each e. `handler` is unused, as in the
    reference.

    >>> import random, webdataset_cpp as wds
    >>> list(wds.shuffle(5, rng=random.Random(0))(iter(range(5))))
    [3, 4, 0, 1, 2]
    """
    return Shuffle(bufsize or 0, initial, seed, rng)


class detshuffle(Shuffle):
    """A shuffle with a seed (default 0): a repeatable order for (seed,
    epoch), a different one each epoch. As in the reference, `epoch` (or
    set_epoch) picks the order; unlike it, epoch -1 follows the pipeline's
    epoch, and the stage does not count its own iterations."""

    def __init__(self, bufsize=1000, initial=100, seed=0, epoch=-1):
        super().__init__(bufsize, initial, seed, epoch=epoch)


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
        keys = _alternatives(keys)
    for k in keys:
        if k in a:
            return a[k]
    if missing_is_error:
        raise DataError(f"{_sample_name(a)}: no field {';'.join(keys)!r} (fields present: "
                        f"{', '.join(a.keys())})")
    return default


def transform_with(sample, transformers):
    """Applies transformers[i] to sample[i] (None: unchanged); returns a list
    (the sample itself when there are no transformers, as the reference)."""
    if not transformers:
        return sample
    if len(transformers) > len(sample):
        raise ValueError(f"transform_with: {len(transformers)} transformers for a sample of "
                         f"{len(sample)}")
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
    _wds_kind = ONE_TO_ONE

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


def _alternatives(spec):
    return spec.split(";") if isinstance(spec, str) else list(spec)


def _rename(data, handler=reraise_exception, keep=True, **kw):
    for sample in data:
        try:
            new = {k: getfirst(sample, v, missing_is_error=True) for k, v in kw.items()}
            if keep:
                gone = {alt for v in kw.values() for alt in _alternatives(v)}
                out = {k: v for k, v in sample.items() if k not in gone}
            else:
                out = {}
            out.update(new)
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield out


class Rename(Stage):
    """rename(new="old;alt", ...): see rename()."""
    _wds_kind = ONE_TO_ONE

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
    """Renames fields: new="old" or new="a;b" (the first present). Every
    listed alternative is removed (__key__ too when listed); keep=False keeps
    only the named fields (no __key__ or __url__), as in the reference."""
    return Rename(handler=handler, keep=keep, **kw)


def _key_matches(key, patterns):
    """Whether a field name matches one of the fnmatch patterns, as the
    reference matches them: the name, or the name after a dot ("*.png"
    matches "png" and "x.png")."""
    return any(fnmatch.fnmatch("." + key, p) or fnmatch.fnmatch(key, p) for p in patterns)


def _extract_keys(source, *patterns, duplicate_is_error=True, ignore_missing=False):
    for sample in source:
        result = []
        for pattern in patterns:
            alternatives = _alternatives(pattern)
            found = [k for k in sample if _key_matches(k, alternatives)]
            if not found:
                if ignore_missing:
                    continue
                raise DataError(f"{_sample_name(sample)}: extract_keys: no field matches "
                                f"{pattern!r} (fields present: {', '.join(sample)})")
            if len(found) > 1 and duplicate_is_error:
                raise DataError(f"{_sample_name(sample)}: extract_keys: fields {found} all match "
                                f"{pattern!r}")
            result.append(sample[found[0]])
        yield tuple(result)


extract_keys = pipelinefilter(_extract_keys)
extract_keys.__doc__ = """A tuple of the first field matching each fnmatch pattern (a list, or
"a;b" alternatives), as the reference: "*.png" matches "png" and "x.png". A pattern without
a match is a DataError (a ValueError), or left out of the tuple with ignore_missing; several
matches are a DataError unless duplicate_is_error=False."""


def _rename_keys(source, *args, keep_unselected=False, must_match=True, duplicate_is_error=True,
                 **kw):
    renamings = [(pattern, output) for output, pattern in args] + \
                [(pattern, output) for output, pattern in kw.items()]
    for sample in source:
        new = {}
        matched = {pattern: False for pattern, _ in renamings}
        for path, value in sample.items():
            fname = path.rsplit("/", 1)[-1].lower()
            target = next(((pattern, name) for pattern, name in reversed(renamings)
                           if fnmatch.fnmatch(fname, pattern)), None)
            if target is None:
                if keep_unselected:
                    new[path] = value
                continue
            matched[target[0]] = True
            if target[1] in new:
                if duplicate_is_error:
                    raise DataError(f"{_sample_name(sample)}: rename_keys: two fields become "
                                    f"{target[1]!r} (fields present: {', '.join(sample)})")
                continue
            new[target[1]] = value
        if must_match and not all(matched.values()):
            missing = [k for k, v in matched.items() if not v]
            raise DataError(f"{_sample_name(sample)}: rename_keys: no field matches {missing} "
                            f"(fields present: {', '.join(sample)})")
        yield new


rename_keys = pipelinefilter(_rename_keys)
rename_keys.__doc__ = """Renames fields by fnmatch patterns on the lower-cased name after its
last "/": rename_keys(("new", "*.jpg")) or rename_keys(new="*.jpg"); the last pattern given
that matches wins; fields no pattern matches are dropped unless keep_unselected; a second
field for a new name is a DataError, or dropped with duplicate_is_error=False (as the
reference)."""


# ---------------------------------------------------------------- decoding


class Decode(Stage):
    """decode(*specs_or_handlers): see decode()."""
    _wds_kind = ONE_TO_ONE

    def __init__(self, *args, handler=reraise_exception, pre=None, post=None, only=None,
                 partial=False, size=None, crop=None, hflip=0.0, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), device=None, normalize=None, float16=False):
        resize = dict(size=size, crop=crop, hflip=hflip, scale=scale, ratio=ratio,
                      device=device, normalize=normalize, float16=float16)
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
            if json and extension in JSON_EXTENSIONS:
                base |= JSON
            return base

        return kind


def _inner_extension(name):
    parts = name.lower().split(".")
    if len(parts) > 1 and parts[-1] in ("gz", "zst"):
        parts = parts[:-1]
    return parts[-1]


def _decode(data, *args, handler=reraise_exception, **kw):
    """The generator of decode(*args, **kw) over `data`."""
    return Decode(*args, handler=handler, **kw)(data)


def decode(*args, handler=reraise_exception, **kw):
    """Decodes fields: image specs ("rgb8", "torchrgb", "pil", ...) and
    (key, data) callables, then the basic types.

    kw: pre, post, only, partial (the reference's Decoder arguments) and the
    native resize options size=(h, w), crop=None|"center"|"random", hflip,
    scale, ratio. device="cuda" decodes the image specs' images on the GPU of
    webdataset_cpp.Loader(device="cuda"), with normalize=(mean, std) and
    float16 for float specs (see ImageHandler).

    >>> import webdataset_cpp as wds
    >>> stage = wds.decode("rgb8", size=(224, 224), crop="center")
    """
    return Decode(*args, handler=handler, **kw)


def decode_bin(stream):
    """The bytes of a stream (xdecode's "*.bin")."""
    return stream.read()


def decode_text(stream):
    """The UTF-8 text of a stream (xdecode's "*.txt")."""
    return stream.read().decode("utf-8")


def decode_pickle(stream):
    """The object pickled in a stream (xdecode's "*.pyd"): only for data you trust."""
    return pickle.load(stream)


default_decoders = [("*.bin", decode_bin), ("*.txt", decode_text), ("*.pyd", decode_pickle)]


def find_decoder(decoders, path):
    """The decoder of the last (pattern, decoder) whose fnmatch pattern matches
    the lower-cased name after the last "/" of `path` (or "." + it); the
    identity for metadata ("__key__"); None if none matches."""
    fname = path.rsplit("/", 1)[-1]
    if fname.startswith("__"):
        return identity
    fname = fname.lower()
    for pattern, f in reversed(decoders):
        if fnmatch.fnmatch(fname, pattern) or fnmatch.fnmatch("." + fname, pattern):
            return f
    return None


def _xdecode(source, *args, must_decode=True, defaults=default_decoders, **kw):
    decoders = list(defaults) + list(args) + [(f"*.{ext}", f) for ext, f in kw.items()]
    for sample in source:
        out = {}
        for k, v in sample.items():
            f = find_decoder(decoders, k) if isinstance(v, bytes) and k[:2] != "__" else False
            if f is None and must_decode:
                raise ValueError(f"{_sample_name(sample)}: xdecode: no decoder for {k!r}")
            out[k] = f(io.BytesIO(v)) if f else v
        yield out


xdecode = pipelinefilter(_xdecode)
xdecode.__doc__ = """Decodes fields with (pattern, f(stream)) pairs and ext=f keywords after
`defaults` (see find_decoder; a decoder False leaves the field as it is). Unlike the
reference, a value that is not bytes (decoded earlier) passes through."""


# ---------------------------------------------------------------- batching


def _stacker(x):
    """torch.stack for a tensor, np.array for an ndarray, else None."""
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.stack
    return np.array if np is not None and isinstance(x, np.ndarray) else None


_collation_pool = None  # batch memory every _collate of this process reuses


def _collate(samples):
    """The core's collation of `samples` (the rules in include/wds/batch/batch.h),
    run by a native batched stage over them."""
    global _collation_pool
    if not samples:
        raise IndexError("collation of no samples")
    if _collation_pool is None:
        _collation_pool = _core.BatchPool()
    segment = NativeSegment("samples", None, [Batched(len(samples))])
    chain, kinds, names = segment.build(iter(samples), Context())
    return next(chain.open(kinds=kinds, kind_names=names, pool=_collation_pool))


def _combined(value, combine_tensors, combine_scalars):
    """Whether a column starting with `value` is collated (else listed)."""
    if isinstance(value, (int, float)):
        return combine_scalars
    return combine_tensors or _stacker(value) is None


def combine_values(values, combine_tensors=True, combine_scalars=True):
    """One column of a batch: see default_collation_fn."""
    return default_collation_fn([(v,) for v in values], combine_tensors, combine_scalars)[0]


def tuple2dict(sample):
    """A tuple sample as {0: ..., 1: ...}; a dict as it is."""
    return sample if isinstance(sample, dict) else dict(enumerate(sample))


def dict2tuple(d):
    """The inverse of tuple2dict."""
    return tuple(d[i] for i in range(1 + max(d.keys())))


def default_collation_fn(samples, combine_tensors=True, combine_scalars=True):
    """Collates a list of samples (dicts or tuples) column by column, by the
    core's rules (what a native batched does): numbers to a NumPy array,
    ndarrays and tensors stacked (same dtype and shape), everything else
    (str, bytes, PIL images, ...) a list. combine_tensors=False or
    combine_scalars=False lists those columns instead. Arrays of dtypes the
    core does not hold (str, complex, bfloat16, ...) are stacked by NumPy or
    torch, as in the reference.

    Unlike the reference, columns of different dtypes, shapes or kinds (an int
    and a str) are a DataError naming the field, where the reference may
    build an object or str array or raise AssertionError.

    >>> default_collation_fn([(1, "a"), (2, "b")])
    (array([1, 2]), ['a', 'b'])
    """
    if not samples:
        raise IndexError("collation of no samples")
    rows = [tuple2dict(s) for s in samples]
    first = rows[0]
    listed = {k for k, v in first.items() if not _combined(v, combine_tensors, combine_scalars)}
    # Only the columns to collate go to the core: a listed column may hold
    # what the core refuses to stack (arrays of other shapes, mixed kinds).
    collated = {}
    if not listed:
        collated = tuple2dict(_collate(samples))
    elif len(listed) < len(first):
        keep = [k for k in first if k not in listed]
        if isinstance(samples[0], dict):
            collated = _collate([{k: r[k] for k in keep} for r in rows])
        else:
            collated = dict(zip(keep, _collate([tuple(r[k] for k in keep) for r in rows])))
    columns = {}
    for k, v in first.items():
        if k in listed:
            columns[k] = [r[k] for r in rows]
        elif _stacker(v) is not None and isinstance(collated[k], list):
            columns[k] = _stacker(v)(collated[k])  # a dtype the core does not hold
        else:
            columns[k] = collated[k]
    return columns if isinstance(samples[0], dict) else dict2tuple(columns)


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
    _wds_kind = BATCHES

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
_unbatched._wds_kind = HOLDS
unbatched.__doc__ = "Turns batches back into samples (views of the batch's arrays)."


def _unlisted(data):
    for batch in data:
        if not isinstance(batch, list):
            raise TypeError(f"unlisted: batches are lists, got {type(batch).__name__}")
        yield from batch


unlisted = pipelinefilter(_unlisted)
_unlisted._wds_kind = HOLDS


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
    _wds_kind = HOLDS

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

    def run(self, source):
        """Runs the stage on an iterator (the reference's PipelineStage.run)."""
        return self(source)


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
