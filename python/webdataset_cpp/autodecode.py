"""Decoding sample fields, as the reference package's autodecode.

A Decoder runs a chain of handlers over each field: ``pre`` (gzfilter:
``.gz`` fields are decompressed and decoded by the rest of their name), the
user's handlers (image specs and ``(key, data) -> value | None`` callables, in
order), then ``post`` (basichandlers). The first handler that returns a value
wins; a field no handler claims stays bytes; ``__``-fields are never decoded.

In a pipeline (``.decode(...)``), the chain runs natively: images are decoded
by libjpeg-turbo/libspng/libwebp straight into their batch slot, the basic
types (cls, txt, json, npy, .gz/.zst) natively, and Python callables are called
(under the GIL) only for the fields that reach them.

Image specs: ``l8 rgb8 rgba8`` (uint8 HWC ndarrays, l8 2-D), ``l rgb rgba``
(float32 in [0, 1]), ``torchl8 torchrgb8 torchrgba8`` (uint8 CHW tensors,
torchl8 2-D), ``torchl torchrgb torch torchrgba`` (float32 tensors), ``pill pil
pilrgb pilrgba`` (PIL images). Extension of the reference: ``size=(h, w)`` with
``crop=None`` (stretch), ``"center"`` or ``"random"`` (RandomResizedCrop,
``scale``, ``ratio``) and ``hflip`` (probability) resize while decoding.

>>> import webdataset_cpp as wds
>>> d = wds.Decoder([wds.imagehandler("rgb8")])
>>> d({"__key__": "a", "cls": b"3", "txt": b"hi"})
{'__key__': 'a', 'cls': 3, 'txt': 'hi'}
"""

import gzip
import io
import json
import os
import pickle
import re
import tempfile

from . import _core, utils
from .errors import DecodingError

pytorch_weights_only = os.environ.get("WDS_PYTORCH_WEIGHTS_ONLY", "0") == "1"

IMAGE_EXTENSIONS = (
    "blp bmp dib bufr cur pcx dcx dds ps eps fit fits fli flc ftc ftu gbr gif grib h5 hdf png "
    "apng jp2 j2k jpc jpf jpx j2c icns ico im iim tif tiff jfif jpe jpg jpeg mpg mpeg msp pcd "
    "pxr pbm pgm ppm pnm psd bw rgb rgba sgi ras tga icb vda vst webp wmf emf xbm xpm").split()

# imagespecs: the reference's table, spec -> (kind, dtype, channels).
imagespecs = {
    "l8": ("numpy", "uint8", "l"),
    "rgb8": ("numpy", "uint8", "rgb"),
    "rgba8": ("numpy", "uint8", "rgba"),
    "l": ("numpy", "float", "l"),
    "rgb": ("numpy", "float", "rgb"),
    "rgba": ("numpy", "float", "rgba"),
    "torchl8": ("torch", "uint8", "l"),
    "torchrgb8": ("torch", "uint8", "rgb"),
    "torchrgba8": ("torch", "uint8", "rgba"),
    "torchl": ("torch", "float", "l"),
    "torchrgb": ("torch", "float", "rgb"),
    "torch": ("torch", "float", "rgb"),
    "torchrgba": ("torch", "float", "rgba"),
    "pill": ("pil", None, "l"),
    "pil": ("pil", None, "rgb"),
    "pilrgb": ("pil", None, "rgb"),
    "pilrgba": ("pil", None, "rgba"),
}

IMAGE_SPECS = tuple(imagespecs)

# The image formats the native decoder reads (by content).
NATIVE_IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")

# The core checks JSON fields and leaves their text; Python parses it (the
# core's table of basic decoders is not published: see basichandlers).
JSON_EXTENSIONS = ("json", "jsn")


class Continue:
    """A handler's result meaning: go on with the next handler, with this new
    key and data (gzfilter returns one)."""

    def __init__(self, key, data):
        self.key = key
        self.data = data


def gzfilter(key, data):
    """Decompresses ``.gz`` fields; the rest of the name decodes them."""
    if not key.endswith(".gz"):
        return None
    return Continue(key[:-3], gzip.decompress(data))


def _extension(key):
    return re.sub(r".*[.]", "", key)


def call_extension_handler(key, data, f, extensions):
    """f(data) if `key` ends in one of `extensions` (a list; several dots
    allowed: "seg.png"), ignoring case, else None."""
    parts = key.lower().split(".")
    for e in extensions:
        e = e.lower().split(".")
        if len(e) <= len(parts) and parts[-len(e):] == e:
            return f(data)
    return None


def handle_extension(extensions, f):
    """A handler calling f(data) for keys ending in one of the space-separated
    extensions (see call_extension_handler).

    >>> h = handle_extension("foo bar", lambda data: data.upper())
    >>> h(".x.foo", b"abc"), h(".x.baz", b"abc")
    (b'ABC', None)
    """
    wanted = extensions.split()
    return lambda key, data: call_extension_handler(key, data, f, wanted)


_SECURITY = "while webdataset_cpp.utils.enforce_security is set (WDS_SECURE=1)"


def torch_loads(data):
    """torch.load of bytes, onto the CPU; refused while utils.enforce_security is set."""
    if utils.enforce_security:
        raise ValueError(f"torch.load is refused {_SECURITY}")
    import torch

    return torch.load(io.BytesIO(data), weights_only=pytorch_weights_only, map_location="cpu")


def unpickle_loads(data):
    """pickle.loads; refused while utils.enforce_security is set."""
    if utils.enforce_security:
        raise ValueError(f"unpickling is refused {_SECURITY}")
    return pickle.loads(data)


def tenbin_loads(data):
    """The list of arrays of tenbin bytes (see webdataset_cpp.tenbin)."""
    from . import tenbin

    return tenbin.decode_buffer(data)


def npz_loads(data):
    """A dict of the arrays of .npz bytes."""
    import numpy as np

    with np.load(io.BytesIO(data)) as archive:
        return dict(archive)


def msgpack_loads(data):
    """msgpack.unpackb (needs msgpack)."""
    import msgpack

    return msgpack.unpackb(data)


def cbor_loads(data):
    """cbor.loads (needs cbor)."""
    import cbor

    return cbor.loads(data)


def npy_loads(data):
    """An array from .npy bytes, by the core's reader (no pickle; bool,
    integer and float dtypes)."""
    return _core.decode_basic(".npy", data)


# decoders: the reference's table (extension -> decoder of the bytes) for the
# types the core does not decode; the core's own types come first.
decoders = {
    **{e: unpickle_loads for e in ("pkl", "pickle", "pyd")},
    "pth": torch_loads,
    **{e: tenbin_loads for e in ("ten", "tb")},
    **{e: msgpack_loads for e in ("mp", "msg")},
    "npz": npz_loads,
    "cbor": cbor_loads,
}


def basichandlers(key, data):
    """Decodes the basic field types by their last extension, ignoring case:
    first the core's decoders (what ``.decode()`` runs natively:
    txt/text/transcript -> str, cls/cls2/class/count/index/inx/id -> int,
    json/jsn -> json.loads, npy -> numpy), then the table ``decoders``:
    pkl/pickle/pyd -> pickle, pth -> torch.load, ten/tb -> tenbin (a list of
    arrays), mp/msg -> msgpack, npz -> numpy, cbor -> cbor. As in the
    reference, .tenbin and .msgpack fields stay bytes.

    Unlike the reference, class and count fields (which its writer encodes)
    are decoded too, and the core's rules apply: integers are ASCII decimal
    within int64 (no "1_000"), JSON is checked as strict json.loads of UTF-8
    text, and .npy holds bool, integer or float arrays; anything else is a
    DataError naming the fault, as in a pipeline's ``.decode()``.

    >>> basichandlers(".cls", b" 7\\n"), basichandlers(".jpg", b"")
    (7, None)
    """
    value = _core.decode_basic(key, data)
    if value is not None:
        return json.loads(value) if _extension(key).lower() in JSON_EXTENSIONS else value
    return _python_basic(key, data)


def _python_basic(key, data):
    f = decoders.get(_extension(key).lower())
    return None if f is None else f(data)


def _json_handler(key, data):
    return basichandlers(key, data) if _extension(key).lower() in JSON_EXTENSIONS else None


def resize_spec(size=None, crop=None, hflip=0.0, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """The native decoder's resize options: None, or (mode, height, width,
    min_scale, max_scale, min_ratio, max_ratio, hflip)."""
    if size is None:
        if crop is not None:
            raise ValueError(f"decode: crop={crop!r} needs a size=(height, width)")
        if not hflip:
            return None
        return ("none", 0, 0, scale[0], scale[1], ratio[0], ratio[1], float(hflip))
    if isinstance(size, int):
        size = (size, size)
    height, width = size
    modes = {None: "stretch", "center": "center_crop", "random": "random_resized_crop"}
    if crop not in modes:
        raise ValueError(f"decode: crop must be None, 'center' or 'random', got {crop!r}")
    return (modes[crop], int(height), int(width), float(scale[0]), float(scale[1]),
            float(ratio[0]), float(ratio[1]), float(hflip))


class ImageHandler:
    """Decodes image fields (by extension) according to `imagespec`.

    JPEG, PNG and WebP content is decoded natively; other formats (GIF, BMP,
    TIFF, ...) and the pil* specs with PIL, as the reference does.

    device="cuda" leaves the decode to the batches' consumer: the native
    workers read and plan each image (its crop and flip, drawn as on the CPU)
    and webdataset_cpp.Loader(device="cuda") decodes whole batches with nvJPEG
    into torch CUDA tensors. normalize=(mean, std) and float16 apply there, to
    float specs (rgb, torchrgb, torch).
    """

    def __init__(self, imagespec, extensions=IMAGE_EXTENSIONS, size=None, crop=None, hflip=0.0,
                 scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), device=None, normalize=None,
                 float16=False):
        if imagespec not in IMAGE_SPECS:
            raise ValueError(f"Unknown imagespec: {imagespec}")
        if isinstance(extensions, str):
            extensions = extensions.split()
        self.imagespec = imagespec
        self.extensions = [e.lower() for e in extensions]
        self.resize = resize_spec(size, crop, hflip, scale, ratio)
        if self.resize is not None and self.is_pil():
            raise ValueError(f"decode: size, crop and hflip need an array spec, not {imagespec}")
        if device is not None and not str(device).startswith("cuda"):
            raise ValueError(f"decode: device must be None or 'cuda', got {device!r}")
        if device is None and (normalize is not None or float16):
            raise ValueError("decode: normalize and float16 need device='cuda'")
        self.device = None if device is None else "cuda"
        self.normalize = None
        if normalize is not None:
            mean, std = normalize
            self.normalize = (tuple(float(m) for m in mean), tuple(float(s) for s in std))
        self.float16 = bool(float16)
        if self.device is not None:
            # The spec and options the GPU path cannot serve are refused here.
            _core.check_gpu_decode(imagespec, self.resize, self.float16, self.normalize)

    def is_pil(self):
        return self.imagespec.startswith("pil")

    def is_torch(self):
        return self.imagespec.startswith("torch")

    def native_item(self):
        if self.device is not None:
            return ("gpu_image", self.imagespec, self.extensions, self.resize, self.float16,
                    self.normalize)
        if self.is_pil():
            return ("python", self, self.extensions)
        return ("image", self.imagespec, self.extensions, self.resize, self._pil_decode)

    def __call__(self, key, data):
        if _extension(key).lower() not in self.extensions:
            return None
        if self.device is not None:
            raise ValueError("decode(device='cuda') runs in native decode stages only (a "
                             "webdataset_cpp.Loader over a native pipeline)")
        if not self.is_pil() and _core.sniff_image(data) is not None:
            return _core.decode_image(data, self.imagespec, self.resize)
        return self._pil_decode(key, data)

    def _pil_decode(self, key, data):
        import numpy as np
        import PIL.Image

        with io.BytesIO(data) as stream:
            img = PIL.Image.open(stream)
            img.load()
        spec = self.imagespec
        mode = "L" if spec in ("l8", "l", "torchl8", "torchl", "pill") else (
            "RGBA" if spec.endswith("rgba8") or spec.endswith("rgba") else "RGB")
        img = img.convert(mode)
        if self.is_pil():
            return img
        img = self._pil_resize(img)
        array = np.array(img)
        if not spec.endswith("8"):
            array = array.astype(np.float32) / 255.0
        if not self.is_torch():
            return array
        import torch

        if array.ndim == 3:
            array = array.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(array))

    def _pil_resize(self, img):
        if self.resize is None or self.resize[0] == "none":
            if self.resize is not None and self.resize[7]:
                raise DecodingError(message="hflip of images PIL decodes is not supported")
            return img
        mode, height, width = self.resize[:3]
        if mode == "center_crop":
            w, h = img.size
            scale = min(w / width, h / height)
            cw, ch = round(width * scale), round(height * scale)
            left, top = (w - cw) // 2, (h - ch) // 2
            img = img.crop((left, top, left + cw, top + ch))
        elif mode != "stretch":
            raise DecodingError(message="random crops of images PIL decodes are not supported")
        return img.resize((width, height))


def imagehandler(imagespec, extensions=IMAGE_EXTENSIONS, **resize):
    """An ImageHandler (resize: size, crop, hflip, scale, ratio)."""
    return ImageHandler(imagespec, extensions, **resize)


def _only_set(only):
    if only is None:
        return None
    if isinstance(only, str):
        return set(only.split())
    return set(only)


class Decoder:
    """Decodes every field of a sample with the handler chain.

    pre defaults to [gzfilter], post to [basichandlers]. Errors are raised as
    DecodingError(url, key, k) from the handler's exception.
    """

    def __init__(self, handlers, pre=None, post=None, only=None, partial=False):
        if not isinstance(handlers, list):
            raise TypeError(f"Decoder: handlers must be a list, got {type(handlers).__name__}")
        self.handlers = handlers
        self.pre = [gzfilter] if pre is None else pre
        self.post = [basichandlers] if post is None else post
        self.only = _only_set(only)
        self.partial = partial

    def decode1(self, key, data):
        key = "." + key
        for f in self.pre + self.handlers + self.post:
            result = f(key, data)
            if isinstance(result, Continue):
                key, data = result.key, result.data
            elif result is not None:
                return result
        return data

    def _field(self, sample, k, v):
        if k.startswith("__"):
            if isinstance(v, bytes):
                try:
                    return v.decode("utf-8")
                except UnicodeDecodeError:
                    return v
            return v
        if self.only is not None and k not in self.only:
            return v
        if not isinstance(v, bytes):
            if self.partial:
                return v
            raise ValueError(f"field {k} is already decoded (holds {type(v).__name__}); "
                             f"decode with partial=True")
        return self.decode1(k, v)

    def decode(self, sample):
        result = {}
        for k, v in sample.items():
            try:
                result[k] = self._field(sample, k, v)
            except Exception as exn:
                url, key = sample.get("__url__"), sample.get("__key__")
                raise DecodingError(url=url, key=key, k=k, sample=sample,
                                    message=f"{url}: key {key}: field {k}: {exn!r}") from exn
        return result

    def __call__(self, sample):
        if not isinstance(sample, dict):
            raise TypeError(f"Decoder: samples must be dicts, got {type(sample).__name__}")
        return self.decode(sample)

    # The native form of the chain.

    def native_items(self):
        """(items, json_native, calls_python) for the native decode stage, or
        None when the chain cannot run natively (a pre other than gzfilter)."""
        if self.pre != [gzfilter]:
            return None
        items, user_python = [], False
        for h in self.handlers + self.post:
            if isinstance(h, ImageHandler):
                items.append(h.native_item())
                user_python = user_python or h.is_pil()
            elif h is basichandlers:
                items.append("basic")
            else:
                items.append(("python", h, None))
                user_python = True
        # JSON is parsed in Python at the chain's end (FieldKinds) unless a
        # user callable might see .json fields first.
        # With partial=True a json field may already be a str (set by a map),
        # which the reference leaves as it is: only Python can tell it apart.
        json_native = not user_python and not self.partial
        out = []
        for item in items:
            if item == "basic":
                out.append(("basic", None if json_native else list(JSON_EXTENSIONS)))
                if not json_native:
                    out.append(("python", _json_handler, list(JSON_EXTENSIONS)))
                out.append(("python", _python_basic, list(decoders)))
            else:
                out.append(item)
        return out, json_native and basichandlers in self.post, user_python

    def torch_extensions(self):
        """Extensions that the first image handler claiming them decodes with a
        torch* spec."""
        claimed, torch = set(), set()
        for h in self.handlers:
            if isinstance(h, ImageHandler):
                for e in h.extensions:
                    if e not in claimed and h.is_torch() and h.device is None:
                        torch.add(e)
                    claimed.add(e)
        return torch


def _load_from_file(data, extension, load):
    """Returns load(path) for a temporary file "file.<extension>" holding
    `data`: for decoders that read files only (the file is removed after)."""
    with tempfile.TemporaryDirectory() as dirname:
        fname = os.path.join(dirname, f"file.{extension}")
        with open(fname, "wb") as stream:
            stream.write(data)
        return load(fname)


def torch_video(key, data):
    """Decodes video fields with torchvision.io.read_video (needs torchvision)."""
    extension = re.sub(r".*[.]", "", key)
    if extension not in "mp4 ogv mjpeg avi mov h264 mpg webm wmv".split():
        return None
    import torchvision.io

    return _load_from_file(data, extension,
                           lambda fname: torchvision.io.read_video(fname, pts_unit="sec"))


def torch_audio(key, data):
    """Decodes audio fields with torchaudio.load (needs torchaudio)."""
    extension = re.sub(r".*[.]", "", key)
    if extension not in "flac mp3 sox wav m4a ogg wma".split():
        return None
    import torchaudio

    return _load_from_file(data, extension, torchaudio.load)


default_pre_handlers = [gzfilter]
default_post_handlers = [basichandlers]
# default_decoder: gzfilter, then basichandlers (the reference lists both as
# handlers too, which decodes alike).
default_decoder = Decoder([])
