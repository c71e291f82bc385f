"""Decoding: every image spec against PIL, the basic handlers, .gz fields,
custom decoders mixed with native ones, and decode errors."""

import gzip
import io
import json
import os
import pickle
import sys
import types

import numpy as np
import PIL.Image
import pytest
import torch

import webdataset_cpp as wds
from conftest import encode_image, image_array, write_tar

ARRAY_SPECS = [s for s in wds.autodecode.IMAGE_SPECS if not s.startswith("pil")]
MODES = {"l8": "L", "l": "L", "torchl8": "L", "torchl": "L", "rgba8": "RGBA", "rgba": "RGBA",
         "torchrgba8": "RGBA", "torchrgba": "RGBA"}
RGB = image_array(1, 20, 28)
RGBA = np.concatenate([RGB, np.full(RGB.shape[:2] + (1,), 200, np.uint8)], axis=2)
IMAGES = {
    "jpeg_rgb": encode_image(RGB, "JPEG", quality=90),
    "jpeg_gray": encode_image(RGB[:, :, 1], "JPEG", quality=90),
    "png_rgb": encode_image(RGB, "PNG"),
    "png_rgba": encode_image(RGBA, "PNG"),
    "png_gray": encode_image(RGB[:, :, 0], "PNG"),
    "webp_lossless": encode_image(RGB, "WEBP", lossless=True),
    "webp_lossy": encode_image(RGB, "WEBP", quality=80),
}


def pil_reference(data, spec):
    """What the reference package gives: PIL decoding and conversion."""
    img = PIL.Image.open(io.BytesIO(data))
    img.load()
    array = np.array(img.convert(MODES.get(spec, "RGB")))
    if not spec.endswith("8"):
        array = array.astype(np.float32) / 255.0
    if spec.startswith("torch"):
        if array.ndim == 3:
            array = array.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(array))
    return array


def decoded_in_pipeline(data, spec, ext="png"):
    sample = {"__key__": "k", "__url__": "u", ext: data}
    return next(iter(wds.decode(spec)(iter([sample]))))[ext]


@pytest.mark.parametrize("spec", ARRAY_SPECS)
@pytest.mark.parametrize("image", sorted(IMAGES))
def test_every_array_spec_matches_pil(spec, image):
    data = IMAGES[image]
    expected = pil_reference(data, spec)
    for got in (decoded_in_pipeline(data, spec), wds.imagehandler(spec)(".png", data)):
        assert type(got) is type(expected)
        assert tuple(got.shape) == tuple(expected.shape)
        assert got.dtype == expected.dtype
        if image == "jpeg_rgb" and spec in ("l8", "l", "torchl8", "torchl"):
            # Documented: a colour JPEG decoded to gray is its Y plane (as djpeg
            # -grayscale); PIL computes luma from the RGB pixels. Off by one at most.
            step = 1 if spec.endswith("8") else 1 / 255 + 1e-6
            assert np.abs(np.asarray(got, np.float64) - np.asarray(expected, np.float64)).max() \
                <= step
        else:
            assert np.array_equal(np.asarray(got), np.asarray(expected))


def test_shapes_of_the_specs():
    data = IMAGES["png_rgb"]
    shapes = {spec: tuple(decoded_in_pipeline(data, spec).shape) for spec in ARRAY_SPECS}
    assert shapes == {"l8": (20, 28), "rgb8": (20, 28, 3), "rgba8": (20, 28, 4), "l": (20, 28),
                      "rgb": (20, 28, 3), "rgba": (20, 28, 4), "torchl8": (20, 28),
                      "torchrgb8": (3, 20, 28), "torchrgba8": (4, 20, 28), "torchl": (20, 28),
                      "torchrgb": (3, 20, 28), "torch": (3, 20, 28), "torchrgba": (4, 20, 28)}
    assert decoded_in_pipeline(data, "rgba8")[..., 3].min() == 255  # no alpha: opaque


@pytest.mark.parametrize("spec,mode", [("pill", "L"), ("pil", "RGB"), ("pilrgb", "RGB"),
                                       ("pilrgba", "RGBA")])
def test_pil_specs_give_pil_images(spec, mode):
    got = decoded_in_pipeline(IMAGES["png_rgba"], spec)
    assert isinstance(got, PIL.Image.Image)
    assert got.mode == mode and got.size == (28, 20)
    expected = PIL.Image.open(io.BytesIO(IMAGES["png_rgba"])).convert(mode)
    assert np.array_equal(np.asarray(got), np.asarray(expected))


def test_formats_the_core_does_not_read_go_to_pil():
    gif = encode_image(RGB, "GIF")
    bmp = encode_image(RGB, "BMP")
    assert np.array_equal(decoded_in_pipeline(bmp, "rgb8", "bmp"), RGB)
    expected = np.asarray(PIL.Image.open(io.BytesIO(gif)).convert("RGB"))
    assert np.array_equal(decoded_in_pipeline(gif, "rgb8", "gif"), expected)
    assert decoded_in_pipeline(gif, "torchrgb8", "gif").shape == (3, 20, 28)


def test_unknown_spec_is_a_value_error():
    with pytest.raises(ValueError, match="^Unknown imagespec: RGB$"):
        wds.decode("RGB")
    with pytest.raises(ValueError, match="^Unknown imagespec: rgb9$"):
        wds.imagehandler("rgb9")
    with pytest.raises(TypeError, match="image specs or callables, got 3"):
        wds.decode(3)


def basic_sample():
    return {
        "__key__": "k1", "__url__": "shard.tar",
        "cls": b" 7\n", "class": b"3", "count": b"12", "txt": "héllo".encode(),
        "json": json.dumps({"a": [1, 2]}).encode(), "pyd": pickle.dumps({"x": (1, 2)}),
        "npy": _npy(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "npz": _npz(a=np.ones(2), b=np.zeros(3, np.uint8)),
        "txt.gz": gzip.compress(b"zipped"), "cls.gz": gzip.compress(b"5"),
        "weird.gz": gzip.compress(b"raw"), "bin": b"\x00\x01", "seg.cls": b"4",
    }


def _npy(array):
    stream = io.BytesIO()
    np.save(stream, array)
    return stream.getvalue()


def _npz(**arrays):
    stream = io.BytesIO()
    np.savez(stream, **arrays)
    return stream.getvalue()


def check_basic(got):
    assert list(got) == list(basic_sample())
    assert got["cls"] == 7 and got["class"] == 3 and got["count"] == 12
    assert got["txt"] == "héllo" and got["json"] == {"a": [1, 2]} and got["pyd"] == {"x": (1, 2)}
    assert got["npy"].dtype == np.int16 and got["npy"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert sorted(got["npz"]) == ["a", "b"] and got["npz"]["b"].dtype == np.uint8
    assert got["txt.gz"] == "zipped" and got["cls.gz"] == 5 and got["weird.gz"] == b"raw"
    assert got["bin"] == b"\x00\x01" and got["seg.cls"] == 4


def test_basic_handlers_in_a_native_stage_and_in_python():
    check_basic(next(iter(wds.decode()(iter([basic_sample()])))))
    check_basic(wds.Decoder([])(basic_sample()))


def test_custom_decoders_run_in_order_with_native_ones():
    calls = []

    def upper_txt(key, data):
        calls.append(key)
        return data.decode().upper() if key.endswith(".txt") else None

    sample = {"__key__": "k", "txt": b"abc", "cls": b"1", "png": IMAGES["png_gray"]}
    got = next(iter(wds.decode("l8", upper_txt)(iter([dict(sample)]))))
    assert got["txt"] == "ABC" and got["cls"] == 1 and got["png"].shape == (20, 28)
    assert calls == [".txt", ".cls"]  # the png went to the image handler first
    got = next(iter(wds.decode(upper_txt, "l8")(iter([dict(sample)]))))
    assert calls[2:] == [".txt", ".cls", ".png"]


def test_continue_and_handle_extension():
    def unwrap(key, data):
        if key.endswith(".box"):
            return wds.Continue(key[:-4], data[1:])
        return None

    triple = wds.handle_extension("seg.bin", lambda data: data * 3)
    sample = {"__key__": "k", "cls.box": b"x42", "a.seg.bin": b"ab", "b.bin": b"cd"}
    for got in (next(iter(wds.decode(unwrap, triple)(iter([dict(sample)])))),
                wds.Decoder([unwrap, triple])(dict(sample))):
        assert got == {"__key__": "k", "cls.box": 42, "a.seg.bin": b"ababab", "b.bin": b"cd"}


def test_torch_video_and_audio_read_a_temporary_file_of_the_fields_extension(monkeypatch):
    # torchvision and torchaudio read files only (stand-ins here: neither is a
    # dependency); the file must hold the field's bytes under its extension
    # and be gone once the decoder returns.
    seen = []

    def load(fname, **kwargs):
        with open(fname, "rb") as f:
            seen.append((os.path.basename(fname), f.read(), kwargs))
        return fname

    audio = types.ModuleType("torchaudio")
    audio.load = load
    vision, vision_io = types.ModuleType("torchvision"), types.ModuleType("torchvision.io")
    vision_io.read_video = load
    vision.io = vision_io
    monkeypatch.setitem(sys.modules, "torchaudio", audio)
    monkeypatch.setitem(sys.modules, "torchvision", vision)
    monkeypatch.setitem(sys.modules, "torchvision.io", vision_io)
    paths = [wds.torch_audio("a.seg.flac", b"fLaC"), wds.torch_video("v.mp4", b"\x00ftyp")]
    assert seen == [("file.flac", b"fLaC", {}), ("file.mp4", b"\x00ftyp", {"pts_unit": "sec"})]
    assert not any(os.path.exists(p) for p in paths)
    assert wds.torch_audio("a.mp4", b"") is None and wds.torch_video("v.flac", b"") is None
    assert len(seen) == 2


def test_only_and_partial():
    sample = {"__key__": "k", "cls": b"1", "txt": b"t"}
    got = next(iter(wds.decode(only="cls")(iter([dict(sample)]))))
    assert got == {"__key__": "k", "cls": 1, "txt": b"t"}
    decoded_once = {"__key__": "k", "cls": 1, "txt": b"t"}
    got = next(iter(wds.decode(partial=True)(iter([dict(decoded_once)]))))
    assert got == {"__key__": "k", "cls": 1, "txt": "t"}
    with pytest.raises(ValueError, match="field cls is already decoded"):
        next(iter(wds.decode()(iter([dict(decoded_once)]))))


def test_decoding_errors_name_the_shard_key_and_field(tmp_path):
    path = write_tar(tmp_path / "bad.tar", [("a.cls", b"1"), ("b.cls", b"x"), ("c.cls", b"3")])
    with pytest.raises(wds.DataError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode())
    assert str(e.value) == f'{path}: key b: field cls: "x" is not an integer'

    def broken(key, data):
        if key == ".cls" and data == b"x":
            raise KeyError("boom")
        return None

    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode(broken))
    assert str(e.value) == f"{path}: key b: field cls: KeyError('boom')"
    assert (e.value.url, e.value.key, e.value.k) == (path, "b", "cls")
    assert isinstance(e.value.__cause__, KeyError)
    kept = wds.WebDataset(path, shardshuffle=False).decode(broken,
                                                           handler=wds.ignore_and_continue)
    assert [s["cls"] for s in kept] == [1, 3]
    with pytest.warns(UserWarning, match="key b: field cls"):
        assert [s["cls"] for s in wds.WebDataset(path, shardshuffle=False).decode(
            handler=wds.warn_and_continue)] == [1, 3]
    seen = []
    ended = wds.WebDataset(path, shardshuffle=False).decode(
        handler=lambda exn: seen.append(exn) or False)
    assert [s["cls"] for s in ended] == [1]
    assert [type(x) for x in seen] == [wds.DecodingError]


class UnprintableError(Exception):
    def __repr__(self):
        raise RuntimeError("no repr")


def test_a_decoder_error_whose_repr_raises_is_named_by_its_type(tmp_path):
    path = write_tar(tmp_path / "r.tar", [("a.foo", b"x"), ("a.cls", b"1"), ("b.cls", b"2")])

    def decoder(key, data):
        if key == ".foo":
            raise UnprintableError("boom")

    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode(decoder))
    assert str(e.value) == f"{path}: key a: field foo: <UnprintableError whose repr raised>"
    assert isinstance(e.value.__cause__, UnprintableError)
    with pytest.warns(UserWarning) as caught:
        kept = list(wds.WebDataset(path, shardshuffle=False).decode(
            decoder, handler=wds.warn_and_continue))
    assert [s["cls"] for s in kept] == [2]
    assert [str(w.message) for w in caught] == [
        f"decode: ABORTED: {path}: key a: field foo: <UnprintableError whose repr raised>"]


def bad_json_shard(tmp_path):
    return write_tar(tmp_path / "j.tar", [("a.json", b"{not json"), ("b.json", b'{"x": [1]}')])


BAD_JSON = "key a: field json: invalid JSON at byte offset 1: expecting a property name in double quotes"


def test_invalid_json_is_a_decoding_error_of_the_decode_stage(tmp_path):
    # The reference's json.loads fails inside its decoder: DecodingError, k "json".
    path = bad_json_shard(tmp_path)
    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode())
    assert (e.value.url, e.value.key, e.value.k) == (path, "a", "json")
    assert str(e.value) == f"{path}: {BAD_JSON}"


def test_invalid_json_goes_to_the_decode_handler(tmp_path):
    path = bad_json_shard(tmp_path)
    kept = wds.WebDataset(path, shardshuffle=False).decode(handler=wds.ignore_and_continue)
    assert [s["json"] for s in kept] == [{"x": [1]}]
    with pytest.warns(UserWarning) as caught:
        kept = list(wds.WebDataset(path, shardshuffle=False).decode(
            handler=wds.warn_and_continue))
    assert [s["json"] for s in kept] == [{"x": [1]}]
    # Code and message only: no status payloads (error kind, sample URL).
    assert [str(w.message) for w in caught] == [f"decode: INVALID_ARGUMENT: {path}: {BAD_JSON}"]
    seen = []
    ended = wds.WebDataset(path, shardshuffle=False).decode(
        handler=lambda exn: seen.append(exn) or False)
    assert list(ended) == []
    assert [(type(x), x.k) for x in seen] == [(wds.DecodingError, "json")]


def test_json_beside_a_python_decoder_fails_in_the_decode_stage_too(tmp_path):
    path = bad_json_shard(tmp_path)
    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode(lambda key, data: None))
    assert (e.value.url, e.value.key, e.value.k) == (path, "a", "json")
    kept = wds.WebDataset(path, shardshuffle=False).decode(lambda key, data: None,
                                                           handler=wds.ignore_and_continue)
    assert [s["json"] for s in kept] == [{"x": [1]}]


def test_bad_text_and_pickle_fields_are_decoding_errors(tmp_path):
    for name, data in (("a.txt", b"ab\xff"), ("a.pyd", b"garbage"), ("a.json", b"\xff")):
        path = write_tar(tmp_path / "x.tar", [(name, data)])
        with pytest.raises(wds.DecodingError) as e:
            list(wds.WebDataset(path, shardshuffle=False).decode())
        assert (e.value.url, e.value.key, e.value.k) == (path, "a", name[2:])
        assert list(wds.WebDataset(path, shardshuffle=False).decode(
            handler=wds.ignore_and_continue)) == []


def test_corrupt_image_is_a_data_error():
    broken = IMAGES["jpeg_rgb"][:200]
    with pytest.raises(wds.DataError, match=r"^u: key k: field jpg: .*(truncated|corrupt)"):
        decoded_in_pipeline(broken, "rgb8", "jpg")


def area_weights(n_in, n_out):
    """w[i, j]: the share of input pixel j in output pixel i when n_in pixels
    are averaged down to n_out (each output pixel covers n_in / n_out inputs)."""
    step = n_in / n_out
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        for j in range(n_in):
            w[i, j] = max(0.0, min((i + 1) * step, j + 1) - max(i * step, j)) / step
    return w


def area_average(pixels, height, width):
    """The exact area average of an [H, W, C] image, in float (a reference
    computed independently of the package)."""
    x = pixels.astype(np.float64)
    return np.einsum("ij,jkc,lk->ilc", area_weights(x.shape[0], height), x,
                     area_weights(x.shape[1], width))


def pil_pixels(data, draft=None):
    img = PIL.Image.open(io.BytesIO(data))
    if draft is not None:
        img.draft("RGB", draft)  # libjpeg's DCT scaling, as the native decoder's
    return np.array(img.convert("RGB"))


@pytest.mark.parametrize("image", ["png_rgb", "webp_lossless", "jpeg_rgb"])
@pytest.mark.parametrize("size", [(10, 14), (8, 10), (12, 9)])
def test_shrinking_is_an_area_average(image, size):
    """Documented: shrinking averages areas; a JPEG is first decoded at the
    smallest DCT scale covering the target (PIL's draft picks the same)."""
    data = IMAGES[image]
    got = decoded_in_pipeline(data, wds.imagehandler("rgb8", size=size), "jpg")
    assert got.shape == size + (3,) and got.dtype == np.uint8
    source = pil_pixels(data, draft=size[::-1] if image.startswith("jpeg") else None)
    # Within 1 of the exact average: rounding (libwebp scales by itself).
    assert np.abs(got - area_average(source, *size)).max() <= 1.0


@pytest.mark.parametrize("image", ["png_rgb", "webp_lossless", "jpeg_rgb"])
def test_a_center_crop_is_the_middle_then_an_area_average(image):
    data = IMAGES[image]
    got = decoded_in_pipeline(data, wds.imagehandler("rgb8", size=(16, 16), crop="center"), "jpg")
    # 20 x 28 to a square: the middle 20 x 20 (columns 4..23), then 20 -> 16.
    expected = area_average(pil_pixels(data)[:, 4:24], 16, 16)
    assert np.abs(got - expected).max() <= 1.0
    as_torch = next(iter(wds.decode("torchrgb", size=(16, 16), crop="center")(
        iter([{"jpg": data}]))))["jpg"]
    assert tuple(as_torch.shape) == (3, 16, 16) and as_torch.dtype == torch.float32
    assert torch.equal(as_torch, torch.from_numpy(got.transpose(2, 0, 1) / np.float32(255)))


def test_enlarging_is_bilinear():
    data = IMAGES["png_rgb"]
    got = decoded_in_pipeline(data, wds.imagehandler("rgb8", size=(40, 56)), "jpg")
    expected = np.array(PIL.Image.open(io.BytesIO(data)).convert("RGB").resize(
        (56, 40), PIL.Image.BILINEAR))
    assert np.abs(got.astype(int) - expected).max() <= 1  # PIL's bilinear, up to rounding


def test_hflip_mirrors_the_resized_image():
    data = IMAGES["png_rgb"]
    plain = decoded_in_pipeline(data, wds.imagehandler("rgb8", size=(10, 14)), "jpg")
    flipped = decoded_in_pipeline(data, wds.imagehandler("rgb8", size=(10, 14), hflip=1.0), "jpg")
    assert np.array_equal(flipped, plain[:, ::-1])


def test_scaled_and_cropped_decode():
    data = IMAGES["jpeg_rgb"]

    def random_crops(seed):
        ds = wds.DataPipeline([[{"__key__": str(i), "jpg": data} for i in range(4)]],
                              wds.decode("rgb8", size=(12, 12), crop="random", hflip=0.5))
        ds.seed = seed
        return [s["jpg"] for s in ds]

    first, again, other = random_crops(1), random_crops(1), random_crops(2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    with pytest.raises(ValueError, match="crop must be None, 'center' or 'random'"):
        wds.decode("rgb8", size=8, crop="middle")
    with pytest.raises(ValueError, match="needs a size"):
        wds.decode("rgb8", crop="center")


def test_python_decoder_follows_the_cores_basic_rules():
    # Decoder called in Python decodes the core's types with the core (it had
    # its own int(), json.loads(bytes) and np.load, which accepted more).
    for field, data, why in (
            ("cls", b"1_000", '"1_000" is not an integer'),
            ("cls", b"99999999999999999999",
             '"99999999999999999999" is not an integer in the int64 range'),
            ("npy", _npy(np.zeros(2, np.complex64)),
             "npy dtype '<c8' is not supported (only bool, [u]int8..64 and float16/32/64 are)")):
        sample = {"__key__": "k", "__url__": "u.tar", field: data}
        for decode in (wds.Decoder([]), lambda s: next(iter(wds.decode()(iter([s]))))):
            with pytest.raises(wds.DecodingError) as e:
                decode(sample)
            assert (e.value.url, e.value.key, e.value.k) == ("u.tar", "k", field)
            assert str(e.value).startswith(f"u.tar: key k: field {field}: ") and why in str(e.value)
    # A byte-order mark is not JSON text (json.loads of bytes skipped it).
    with pytest.raises(wds.DecodingError) as e:
        wds.Decoder([])({"__key__": "k", "json": b'\xef\xbb\xbf{"a": 1}'})
    assert e.value.k == "json"
    assert wds.autodecode.basichandlers(".JSN", b'{"a": [1]}') == {"a": [1]}
    assert wds.autodecode.npy_loads(_npy(np.arange(3, dtype=np.uint16))).dtype == np.uint16
    assert set(wds.autodecode.decoders) == {"pkl", "pickle", "pyd", "pth", "ten", "tb", "mp",
                                            "msg", "npz", "cbor"}


def test_partial_leaves_a_json_field_that_is_already_a_str_as_the_reference():
    # A map may set a .json field to a str before decode(partial=True): the
    # reference's decoder leaves it as it is (not bytes: already decoded),
    # bytes fields beside it are parsed.
    samples = [{"__key__": "a", "json": "[1]", "txt": b"x"},
               {"__key__": "b", "json": "{bad"},
               {"__key__": "c", "json": b"[2]"}]
    out = list(wds.DataPipeline(lambda: iter(samples), wds.decode(partial=True)))
    assert out == [{"__key__": "a", "json": "[1]", "txt": "x"}, {"__key__": "b", "json": "{bad"},
                   {"__key__": "c", "json": [2]}]
