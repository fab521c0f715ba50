#!/usr/bin/env python3
"""The peer of BM_LoomStepVsTransformers (bench/runtime/runtime_bench.cpp).

  hf_llama_step.py make DIR SAMPLES SEQ
      a tiny random Llama saved by transformers (fp32) and DIR/data.jsonl:
      SAMPLES tokenized samples of SEQ random tokens (seeded).
  hf_llama_step.py step DIR STEPS MICROBATCHES THREADS
      transformers' eager training step on CPU with THREADS intra-op threads:
      fp32, SDPA attention, torch.optim.AdamW (foreach, PyTorch's CPU default),
      the batch's samples in MICROBATCHES gradient-accumulation microbatches,
      each weighted by its share of the batch's scored tokens (Loom's loss).
      Prints {"step_s": [...], "losses": [...]}.
"""
import json
import os
import sys
import time

import torch
import transformers


def make(d, samples, seq):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                                      tie_word_embeddings=False)
    transformers.LlamaForCausalLM(config).save_pretrained(d)
    g = torch.Generator().manual_seed(1)
    with open(os.path.join(d, "data.jsonl"), "w") as f:
        for _ in range(samples):
            f.write(json.dumps({"input_ids": torch.randint(0, 4096, (seq,), generator=g).tolist()}) + "\n")


def step(d, steps, microbatches, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    with open(os.path.join(d, "data.jsonl")) as f:
        ids = torch.tensor([json.loads(line)["input_ids"] for line in f])
    chunks = ids.chunk(microbatches)
    scored = ids.numel() - ids.shape[0]  # every position but each sample's last predicts a token
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        total = 0.0
        for c in chunks:
            loss = model(input_ids=c, labels=c).loss * ((c.numel() - c.shape[0]) / scored)
            loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(total)
    print(json.dumps({"step_s": times, "losses": losses}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        step(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
