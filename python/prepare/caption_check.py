#!/usr/bin/env python3
"""Captions held-out shapes with a model folder as transformers loads it, and
scores each word against the truth: what `make demo` runs on the model `loom
run --save` wrote, to show it learned from the images (not only the captions'
grammar) and that transformers reads what Loom trained.

    python3 caption_check.py MODEL_DIR [--count 60] [--seed 1000]

Draws --count new samples with make_shapes_dataset.py's generator (another
seed than the training set's), feeds each image with the caption template's
prompt (the image tokens, as `loom prepare --template caption` made them) to
LlavaForConditionalGeneration.generate (greedy), and prints the accuracy of the
count, colour and shape words, what chance would give, and a few captions.
"""
import argparse
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_shapes_dataset as shapes  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(prog="caption_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("model", metavar="MODEL_DIR")
    p.add_argument("--count", type=int, default=60)
    p.add_argument("--seed", type=int, default=1000)
    args = p.parse_args(argv)
    processor = transformers.AutoProcessor.from_pretrained(args.model, local_files_only=True)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(args.model, local_files_only=True,
                                                                       dtype=torch.float32).eval()
    eos = processor.tokenizer.eos_token_id
    right = {"count": 0, "colour": 0, "shape": 0}
    examples = []
    for i in range(args.count):
        image, truth = shapes.draw_sample(i, args.seed, 64)
        inputs = processor(text=processor.image_token, images=image, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        said = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).split()
        want = truth.split()
        for k, key in enumerate(("count", "colour", "shape")):
            right[key] += int(len(said) > k and said[k] == want[k])
        if len(examples) < 5:
            examples.append(f"  {truth!r:28} -> {' '.join(said)!r}")
    chance = {"count": 1 / 3, "colour": 1 / len(shapes.COLOURS), "shape": 1 / 3}
    print(f"transformers captions {args.count} unseen images with {args.model}:")
    for key in right:
        print(f"  {key:7} {100 * right[key] / args.count:5.1f}% right (chance {100 * chance[key]:.0f}%)")
    print("\n".join(examples))


if __name__ == "__main__":
    main()
