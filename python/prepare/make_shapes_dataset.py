#!/usr/bin/env python3
"""A small image-caption dataset a tiny LLaVA can learn: coloured shapes on a
plain background, captioned by count, colour and shape ("two red circles").

    python3 make_shapes_dataset.py OUT_DIR [--count 300] [--seed 0] [--size 64]
                                   [--format llava|wds] [--shard-size 100]

--format llava (default) writes OUT_DIR/data.jsonl, one LLaVA conversation a
line ({"id", "image": "images/NNNNNN.png", "conversations": [human "<image>\\n
Describe the image.", gpt CAPTION]}), and the images under OUT_DIR/images/.
--format wds writes WebDataset shards OUT_DIR/shapes-000000.tar, ... holding
NNNNNN.png and NNNNNN.txt (the caption) per sample, --shard-size samples each.
The same seed draws the same images and captions in either format, so the two
prepare to the same samples (docs/data-prepare.md). Output is byte-identical
for the same arguments: each image is drawn from its own seeded generator,
PNGs carry no timestamp and tar members have fixed owners, modes and times.

Only the standard library and Pillow are needed.
"""
import argparse
import io
import json
import os
import random
import sys
import tarfile

from PIL import Image, ImageDraw

# The small closed vocabulary (make_tiny_llava.py builds its tokenizer from it).
COUNTS = ["one", "two", "three"]
COLOURS = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 215),
    "yellow": (235, 200, 30),
    "purple": (140, 60, 180),
}
SHAPES = ["circle", "square", "triangle"]
PROMPT = "Describe the image."
BACKGROUND = (245, 245, 245)


def caption_words():
    """Every word a caption can hold."""
    return COUNTS + list(COLOURS) + SHAPES + [s + "s" for s in SHAPES]


def caption(count, colour, shape):
    return f"{COUNTS[count - 1]} {colour} {shape}{'s' if count > 1 else ''}"


def draw_sample(index, seed, size):
    """Sample `index`: (PIL image, caption). Its own generator, so one sample
    does not depend on how many were drawn before it."""
    rng = random.Random(seed * 1_000_003 + index)
    count = rng.randint(1, 3)
    colour = rng.choice(sorted(COLOURS))
    shape = rng.choice(SHAPES)
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    # Three by three cells, the shapes in distinct ones, jittered inside: no two
    # overlap (a count is what one sees) and placing always terminates.
    cell = size // 3
    r = max(2, cell * 3 // 10)  # half a shape's side
    slack = max(0, cell // 2 - r - 1)
    centres = []
    for c in rng.sample(range(9), count):
        centres.append((c % 3 * cell + cell // 2 + rng.randint(-slack, slack),
                        c // 3 * cell + cell // 2 + rng.randint(-slack, slack)))
    fill = COLOURS[colour]
    for x, y in centres:
        if shape == "circle":
            draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)
        elif shape == "square":
            draw.rectangle([x - r, y - r, x + r, y + r], fill=fill)
        else:
            draw.polygon([(x, y - r), (x + r, y + r), (x - r, y + r)], fill=fill)
    return image, caption(count, colour, shape)


def png_bytes(image):
    buf = io.BytesIO()
    image.save(buf, format="PNG")  # no tEXt/tIME chunks unless asked: deterministic
    return buf.getvalue()


def tar_add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def write_llava(out, count, seed, size):
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    with open(os.path.join(out, "data.jsonl"), "w", encoding="utf-8") as f:
        for i in range(count):
            image, text = draw_sample(i, seed, size)
            key = f"{i:06d}"
            with open(os.path.join(out, "images", key + ".png"), "wb") as img:
                img.write(png_bytes(image))
            sample = {"id": key, "image": f"images/{key}.png",
                      "conversations": [{"from": "human", "value": "<image>\n" + PROMPT},
                                        {"from": "gpt", "value": text}]}
            f.write(json.dumps(sample) + "\n")


def write_wds(out, count, seed, size, shard_size):
    os.makedirs(out, exist_ok=True)
    for shard, start in enumerate(range(0, count, shard_size)):
        # GNU format: no PAX headers (they would carry the writer's times).
        with tarfile.open(os.path.join(out, f"shapes-{shard:06d}.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(start, min(count, start + shard_size)):
                image, text = draw_sample(i, seed, size)
                key = f"{i:06d}"
                tar_add(tar, key + ".png", png_bytes(image))
                tar_add(tar, key + ".txt", text.encode("utf-8"))


def main(argv=None):
    p = argparse.ArgumentParser(prog="make_shapes_dataset.py", description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="OUT_DIR")
    p.add_argument("--count", type=int, default=300, help="samples (default 300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    p.add_argument("--format", choices=["llava", "wds"], default="llava")
    p.add_argument("--shard-size", type=int, default=100, help="samples per tar shard with --format wds")
    a = p.parse_args(argv)
    if a.count < 1 or a.size < 16 or a.shard_size < 1:
        p.error("--count and --shard-size must be at least 1 and --size at least 16")
    if a.format == "llava":
        write_llava(a.out, a.count, a.seed, a.size)
    else:
        write_wds(a.out, a.count, a.seed, a.size, a.shard_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
