# Writes the image test fixtures into argv[1]: source pictures for cjpeg and
# cwebp, PNGs of every colour type and bit depth (with a minimal encoder of
# its own, so no PNG library is involved), and the pixels each PNG must decode
# to, computed here with numpy (PIL cross-checks the gray conversion).
#
#   <name>.png              the PNG
#   <name>.<l8|rgb8|rgba8>  expected uint8 pixels, HWC (l8: HW)
#   <name>.<l|rgb|rgba>.f32 expected float32 pixels for 16-bit PNGs
# With "big" as argv[2] it writes only big.jpg (4000x3000).
import struct
import sys
import zlib

import numpy as np
from PIL import Image

out = sys.argv[1]
rng = np.random.default_rng(20240611)
W, H = 37, 23

if sys.argv[2:] == ["big"]:
    # A 4000x3000 JPEG for the DCT-scaling tests, kept out of the default set.
    x = np.arange(4000, dtype=np.uint16)[None, :]
    y = np.arange(3000, dtype=np.uint16)[:, None]
    planes = [(x // 16) % 256 + 0 * y, (y // 12) % 256 + 0 * x, ((x + y) // 28) % 256]
    big = np.dstack(planes).astype(np.uint8)
    Image.fromarray(big).save(f"{out}/big.jpg", quality=90)
    sys.exit(0)


def photo(h, w):
    """A smooth picture with noise, like a photograph to a JPEG encoder."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255.0 / w, y * 255.0 / h, (x + y) * 127.0 / (w + h) + 64], axis=2)
    img += rng.normal(0, 10, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def pack_row(row, depth):
    if depth >= 8:
        return row.astype(">u2" if depth == 16 else np.uint8).tobytes()
    per = 8 // depth
    padded = np.zeros(-(-len(row) // per) * per, np.uint16)
    padded[: len(row)] = row
    groups = padded.reshape(-1, per)
    packed = np.zeros(len(groups), np.uint16)
    for i in range(per):
        packed = (packed << depth) | groups[:, i]
    return packed.astype(np.uint8).tobytes()


def write_png(name, samples, color_type, depth, palette=None, trns=None):
    h, w = samples.shape[:2]
    flat = samples.reshape(h, -1)
    raw = b"".join(b"\x00" + pack_row(flat[y], depth) for y in range(h))
    header = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    if palette is not None:
        data += chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    if trns is not None:
        data += chunk(b"tRNS", trns)
    data += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(f"{out}/{name}.png", "wb") as f:
        f.write(data)


def luma(r, g, b):
    return (r.astype(np.uint64) * 19595 + g * 38470 + b * 7471 + 32768) >> 16


def save(name, array):
    with open(f"{out}/{name}", "wb") as f:
        f.write(np.ascontiguousarray(array).tobytes())


def expect(name, rgba, depth, gray):
    """rgba: the decoded pixels at the PNG's depth (8 for <= 8), shape HW4."""
    rgba = rgba.astype(np.uint64)
    u8 = (rgba >> 8) if depth == 16 else rgba
    l8 = u8[..., 0] if gray else luma(u8[..., 0], u8[..., 1], u8[..., 2])
    save(f"{name}.l8", l8.astype(np.uint8))
    save(f"{name}.rgb8", u8[..., :3].astype(np.uint8))
    save(f"{name}.rgba8", u8.astype(np.uint8))
    if depth == 16:
        l16 = rgba[..., 0] if gray else luma(rgba[..., 0], rgba[..., 1], rgba[..., 2])
        for mode, values in (("l", l16), ("rgb", rgba[..., :3]), ("rgba", rgba)):
            save(f"{name}.{mode}.f32", values.astype(np.float32) / np.float32(65535))


def gray_variant(name, depth, key=None):
    top = (1 << depth) - 1
    g = rng.integers(0, top + 1, (H, W), dtype=np.uint32)
    trns = None
    alpha = np.full((H, W), 65535 if depth == 16 else 255, np.uint32)
    if key is not None:
        g[::3, ::4] = key
        trns = struct.pack(">H", key)
        alpha[g == key] = 0
    write_png(name, g, 0, depth, trns=trns)
    scaled = g if depth == 16 else g * (255 // top)
    expect(name, np.stack([scaled, scaled, scaled, alpha], axis=2), depth, True)


def gray_alpha_variant(name, depth):
    ga = rng.integers(0, 1 << depth, (H, W, 2), dtype=np.uint32)
    write_png(name, ga, 4, depth)
    expect(name, np.stack([ga[..., 0], ga[..., 0], ga[..., 0], ga[..., 1]], axis=2), depth, True)


def rgb_variant(name, depth, key=None):
    top = (1 << depth) - 1
    rgb = rng.integers(0, top + 1, (H, W, 3), dtype=np.uint32)
    alpha = np.full((H, W, 1), top, np.uint32)
    trns = None
    if key is not None:
        rgb[1::5, ::3] = key
        trns = struct.pack(">HHH", *key)
        alpha[np.all(rgb == key, axis=2)] = 0
    write_png(name, rgb, 2, depth, trns=trns)
    expect(name, np.concatenate([rgb, alpha], axis=2), depth, False)


def rgba_variant(name, depth):
    rgba = rng.integers(0, 1 << depth, (H, W, 4), dtype=np.uint32)
    write_png(name, rgba, 6, depth)
    expect(name, rgba, depth, False)


def palette_variant(name, depth, with_trns):
    entries = 1 << depth
    palette = rng.integers(0, 256, (entries, 3), dtype=np.uint32)
    index = rng.integers(0, entries, (H, W), dtype=np.uint32)
    alpha_table = rng.integers(0, 256, entries // 2, dtype=np.uint32) if with_trns else np.zeros(0)
    alpha = np.full(entries, 255, np.uint32)
    alpha[: len(alpha_table)] = alpha_table
    trns = alpha_table.astype(np.uint8).tobytes() if with_trns else None
    write_png(name, index, 3, depth, palette=palette, trns=trns)
    expect(name, np.concatenate([palette[index], alpha[index][..., None]], axis=2), 8, False)


gray_variant("gray1", 1)
gray_variant("gray4", 4)
gray_variant("gray8", 8)
gray_variant("gray8_trns", 8, key=77)
gray_variant("gray16", 16)
gray_variant("gray16_trns", 16, key=4242)
gray_alpha_variant("gray_alpha8", 8)
gray_alpha_variant("gray_alpha16", 16)
rgb_variant("rgb8", 8)
rgb_variant("rgb8_trns", 8, key=(10, 20, 30))
rgb_variant("rgb16", 16)
rgba_variant("rgba8", 8)
rgba_variant("rgba16", 16)
palette_variant("palette8_trns", 8, True)
palette_variant("palette4", 4, False)

# The gray rule is PIL's "L".
rgb8 = np.fromfile(f"{out}/rgb8.rgb8", np.uint8).reshape(H, W, 3)
pil_l = np.asarray(Image.fromarray(rgb8).convert("L"))
assert np.array_equal(pil_l, np.fromfile(f"{out}/rgb8.l8", np.uint8).reshape(H, W))

# A PNG from PIL's encoder (adaptive filters), of a photo-like picture.
picture = photo(121, 161)
Image.fromarray(picture).save(f"{out}/photo.ppm")
Image.fromarray(picture).save(f"{out}/pil_rgb.png")
save("pil_rgb.rgb8", picture)
save("photo.l8", np.asarray(Image.fromarray(picture).convert("L")))
Image.fromarray(picture[:, :, 1]).save(f"{out}/gray.pgm")
alpha = rng.integers(0, 256, picture.shape[:2], dtype=np.uint8)
Image.fromarray(np.dstack([picture, alpha]), "RGBA").save(f"{out}/photo_alpha.png")
# PIL writes CMYK JPEGs Adobe-style (inverted, with the APP14 marker).
ink = np.dstack([255 - picture, rng.integers(0, 90, picture.shape[:2], dtype=np.uint8)])
Image.fromarray(ink, "CMYK").save(f"{out}/cmyk.jpg", quality=90)


def blocks(name, h, w, region, block_values, depth=8):
    """Noise everywhere, 2x2 blocks of known values inside `region` (x, y, w, h)."""
    x0, y0, rw, rh = region
    channels = block_values.shape[2] if block_values.ndim == 3 else 1
    top = (1 << depth) - 1
    img = rng.integers(0, top + 1, (h, w, channels), dtype=np.uint32)
    blocks_up = np.repeat(np.repeat(block_values.reshape(rh // 2, rw // 2, channels), 2, 0), 2, 1)
    img[y0 : y0 + rh, x0 : x0 + rw] = blocks_up
    write_png(name, img if channels > 1 else img[..., 0], 2 if channels == 3 else 0, depth)


values = rng.integers(0, 256, (10, 10, 3), dtype=np.uint32)
blocks("blocks_wide", 20, 40, (10, 0, 20, 20), values)
save("blocks_wide.expected", values.astype(np.uint8))
values = rng.integers(0, 256, (10, 10, 3), dtype=np.uint32)
blocks("blocks_tall", 40, 20, (0, 10, 20, 20), values)
save("blocks_tall.expected", values.astype(np.uint8))
values = rng.integers(0, 65536, (10, 10), dtype=np.uint32)
blocks("blocks16", 20, 40, (10, 0, 20, 20), values, depth=16)
save("blocks16.expected", values.astype(np.float32) / np.float32(65535))

