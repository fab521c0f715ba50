#!/usr/bin/env python3
"""A real-size LLaVA for the runtime's GPU check (docs/results/runtime.md, "On a GPU").

  hf-vlm-step.py make DIR [SAMPLES] [SEQ] [small|tiny]
      writes DIR/config.json and random bf16 weights (CLIP ViT-L/14-336 tower,
      Llama-3.2-1B language model, LLaVA-1.5 projector; `small` shrinks every
      width for a CPU rehearsal, `tiny` also the vocabulary (512) and the
      images (32 px, 8 px patches: 16 image tokens), for README's example), and
      DIR/data.jsonl: SAMPLES samples of SEQ tokens, each one image (its image
      tokens after the BOS token, labels -100 there) and random text, pixels
      in DIR/pixels/NNNN.safetensors.
  hf-vlm-step.py train DIR STEPS [LR] [MICRO]
      transformers' training step on the same model and batch, as its Trainer
      runs it with bf16=True: fp32 weights, torch.autocast(bf16), SDPA attention,
      fused torch AdamW; each step accumulates the samples' gradients in
      microbatches of MICRO samples (default 1), every microbatch's loss
      weighted by its share of the batch's label tokens (Loom's loss: the mean
      over the whole batch's scored tokens). Prints one JSON line.
  hf-vlm-step.py loss DIR [DATA_DIR]
      transformers' loss of the model in DIR (fp32) on DATA_DIR's batch (default
      DIR's): the mean over the batch's scored tokens, as `loom run` reports it.
  hf-vlm-step.py flops DIR [SAMPLES] [SEQ]
      the model FLOPs of one training step (3x the forward's matmuls and
      attention; causal attention counts half the scores), as JSON.
"""
import json
import os
import sys
import time

import torch
import transformers
from safetensors.torch import save_file

IMAGE_TOKEN = 128011  # a reserved id of Llama 3's vocabulary


def config(size):
    vision = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                  image_size=336, patch_size=14, hidden_act="quick_gelu", projection_dim=768)
    text = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0,
                rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=8192),
                rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001)
    image_token = IMAGE_TOKEN
    if size in ("small", "tiny"):
        vision.update(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4)
        text.update(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2)
    if size == "tiny":
        vision.update(image_size=32, patch_size=8)
        text.update(vocab_size=512, bos_token_id=1, eos_token_id=2)
        image_token = 511
    return transformers.LlavaConfig(vision_config=transformers.CLIPVisionConfig(**vision),
                                    text_config=transformers.LlamaConfig(**text), image_token_index=image_token,
                                    vision_feature_layer=-2, vision_feature_select_strategy="default",
                                    tie_word_embeddings=True)


def make(d, samples, seq, size):
    torch.manual_seed(0)
    cfg = config(size)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = transformers.LlavaForConditionalGeneration(cfg).to(torch.bfloat16)
    model.save_pretrained(d)
    v, t = cfg.vision_config, cfg.text_config
    image_tokens = (v.image_size // v.patch_size) ** 2  # 576 for CLIP-L/14-336: the class token dropped ("default")
    image_token = cfg.image_token_index
    os.makedirs(os.path.join(d, "pixels"), exist_ok=True)
    g = torch.Generator().manual_seed(1)
    with open(os.path.join(d, "data.jsonl"), "w") as f:
        for i in range(samples):
            text = torch.randint(0, min(t.vocab_size - 1, 128000), (seq - 1 - image_tokens,), generator=g).tolist()
            ids = [t.bos_token_id] + [image_token] * image_tokens + text
            labels = [-100] * (1 + image_tokens) + text
            name = f"pixels/{i:04d}.safetensors"
            pixels = torch.randn(1, 3, v.image_size, v.image_size, generator=g)
            save_file({"pixel_values": pixels}, os.path.join(d, name))
            f.write(json.dumps({"input_ids": ids, "labels": labels, "image_token_id": image_token,
                                "pixel_values": name}) + "\n")


def read_samples(d):
    from safetensors.torch import load_file
    out = []
    with open(os.path.join(d, "data.jsonl")) as f:
        for line in f:
            s = json.loads(line)
            pixels = load_file(os.path.join(d, s["pixel_values"]))["pixel_values"]
            out.append((torch.tensor([s["input_ids"]]), torch.tensor([s["labels"]]), pixels))
    return out


def flops(d, samples=None, seq=None):
    cfg = transformers.AutoConfig.from_pretrained(d)
    v, t = cfg.vision_config, cfg.text_config
    data = read_samples(d) if samples is None else None
    n = len(data) if data is not None else samples
    s = data[0][0].shape[1] if data is not None else seq
    # Vision: the layers up to the feature layer (Loom builds no more; the
    # last layer transformers runs is not read), 577 tokens per image.
    vl = v.num_hidden_layers + 1 + cfg.vision_feature_layer if cfg.vision_feature_layer < 0 else cfg.vision_feature_layer
    vt = (v.image_size // v.patch_size) ** 2 + 1
    vh, vi = v.hidden_size, v.intermediate_size
    vision = vt * (2 * 3 * v.patch_size ** 2 * vh + vl * (2 * (4 * vh * vh + 2 * vh * vi) + 4 * vt * vh))
    projector = (vt - 1) * 2 * (vh * t.hidden_size + t.hidden_size * t.hidden_size)
    h, kv = t.hidden_size, t.num_key_value_heads * (t.hidden_size // t.num_attention_heads)
    per_token = t.num_hidden_layers * 2 * (2 * h * h + 2 * h * kv + 3 * h * t.intermediate_size) + 2 * h * t.vocab_size
    attention = t.num_hidden_layers * 4 * h * s * (s + 1) / 2  # causal: each query's keys up to itself
    forward = n * (vision + projector + s * per_token + attention)
    return {"flops_per_step": 3 * forward, "tokens_per_step": n * s}


def train(d, steps, lr, micro):
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU for a rehearsal
    model = transformers.LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.float32,
                                                                       attn_implementation="sdpa").to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                            fused=dev == "cuda")
    data = [(i.to(dev), l.to(dev), p.to(dev)) for i, l, p in read_samples(d)]
    scored = sum(int((l[0, 1:] != -100).sum()) for _, l, _ in data)
    losses, times = [], []
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for b in range(0, len(data), micro):
            chunk = data[b:b + micro]
            ids = torch.cat([c[0] for c in chunk])
            labels = torch.cat([c[1] for c in chunk])
            pixels = torch.cat([c[2] for c in chunk])
            n = int((labels[:, 1:] != -100).sum())
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = model(input_ids=ids, pixel_values=pixels, labels=labels).loss * (n / scored)
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total.item())  # synchronizes
        times.append(time.perf_counter() - t0)
    f = flops(d)
    cuda = dev == "cuda"
    print(json.dumps({"losses": losses, "step_s": times,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu", **f}))


def loss(d, data_dir):
    model = transformers.LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    data = read_samples(data_dir)
    scored = sum(int((l[0, 1:] != -100).sum()) for _, l, _ in data)
    total = 0.0
    with torch.no_grad():
        for ids, labels, pixels in data:
            n = int((labels[0, 1:] != -100).sum())
            total += model(input_ids=ids, pixel_values=pixels, labels=labels).loss.item() * n / scored
    print(f"transformers: {type(model).__name__} from {d}: loss {total:.6f} on {len(data)} samples")


if __name__ == "__main__":
    what, d = sys.argv[1], sys.argv[2]
    if what == "make":
        make(d, int(sys.argv[3]) if len(sys.argv) > 3 else 8, int(sys.argv[4]) if len(sys.argv) > 4 else 4096,
             sys.argv[5] if len(sys.argv) > 5 else "full")
    elif what == "train":
        train(d, int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5,
              int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    elif what == "loss":
        loss(d, sys.argv[3] if len(sys.argv) > 3 else d)
    elif what == "flops":
        print(json.dumps(flops(d, *(int(a) for a in sys.argv[3:5])) if len(sys.argv) > 3 else flops(d)))
    else:
        sys.exit(f"hf-vlm-step.py: unknown command '{what}': make, train, loss or flops")
