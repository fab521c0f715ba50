#!/usr/bin/env python3
"""A tiny LLaVA model folder that transformers and Loom both load, for the
shapes demo (make_shapes_dataset.py) and the tests of loom_prepare.py.

    python3 make_tiny_llava.py OUT_DIR [--seed 0] [--image-size 32] [--patch 8]

OUT_DIR gets what `LlavaForConditionalGeneration.from_pretrained` and
`AutoProcessor.from_pretrained` read (transformers 5):
- config.json: a LlavaConfig with a tiny CLIP tower (hidden 32, 2 layers, 2
  heads, image-size pixels in patch-size patches) and a tiny Llama (hidden 64,
  2 layers, 4 heads, 2 key/value heads, MLP 128, the tokenizer's vocabulary),
  image_token_index the id of `<image>`, vision_feature_layer -2 and
  vision_feature_select_strategy "default" (transformers' defaults, which Loom
  reads: src/loom/spec/hf_config.cpp EmitLlava, docs/runtime.md "LLaVA");
- model.safetensors: the model initialised by transformers under
  torch.manual_seed(seed), float32;
- a word-level tokenizer (tokenizer.json, tokenizer_config.json) over the
  shapes captions' words, a prompt's words and <unk> <s> </s> <pad> <image>;
  it adds <s> in front of what it encodes, like Llama's;
- a chat template, USER: ... ASSISTANT: ...</s> (the end of an assistant
  turn is the eos, so a model trained on it stops by itself);
- preprocessor_config.json (a CLIP image processor: the shorter side resized
  to image-size, a centre crop of image-size squared, CLIP's mean and std) and
  processor_config.json (a LlavaProcessor: (image-size / patch)^2 image tokens
  per image).

The folder is under 1 MB. Needs torch, transformers and tokenizers.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_shapes_dataset  # noqa: E402  (the captions' vocabulary)

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]  # ids 0..4, Llama's order for the first three
# Words beyond the captions: the template's, the shapes prompt's and a few a
# person might type at the demo. Anything else encodes as <unk>.
EXTRA_WORDS = ["USER", "ASSISTANT", ":", ".", ",", "?", "Describe", "describe", "the", "image", "What", "what",
               "is", "are", "in", "this", "How", "how", "many", "shapes", "shape", "colour", "color", "a", "and"]

# USER/ASSISTANT turns, no system prompt (a system message is refused by
# name). Content may be a string or transformers' list of {"type": "image"} /
# {"type": "text"} items; an image item renders as <image>, which
# LlavaProcessor expands to the image's tokens. The tokenizer adds <s>, so the
# template does not.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{{- 'USER: ' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- ' ASSISTANT: ' -}}"
    "{%- else -%}{{- raise_exception('only user and assistant messages, got ' + message['role']) -}}{%- endif -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}{{- eos_token -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- ' ASSISTANT:' -}}{%- endif -%}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = []
    for w in make_shapes_dataset.caption_words() + make_shapes_dataset.PROMPT.replace(".", " .").split() + EXTRA_WORDS:
        if w not in words:
            words.append(w)
    vocab = {t: i for i, t in enumerate(SPECIAL + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words and runs of punctuation
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", vocab["<s>"])])
    tok.add_special_tokens(SPECIAL)  # never split, matched before pre-tokenizing (<image> inside text too)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", extra_special_tokens={"image_token": "<image>"},
                                   chat_template=CHAT_TEMPLATE, model_max_length=512)


def image_processor(size):
    import transformers

    # transformers 5's CLIPImageProcessor needs torchvision and falls back to
    # the PIL backend with a warning; both save as "CLIPImageProcessor", so the
    # folder loads with whichever backend the reader has.
    try:
        import torchvision  # noqa: F401
        cls = transformers.CLIPImageProcessor
    except ImportError:
        cls = transformers.CLIPImageProcessorPil
    return cls(size={"shortest_edge": size}, crop_size={"height": size, "width": size})


def main(argv=None):
    p = argparse.ArgumentParser(prog="make_tiny_llava.py", description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="OUT_DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--patch", type=int, default=8)
    a = p.parse_args(argv)
    if a.patch < 1 or a.image_size < a.patch or a.image_size % a.patch:
        p.error("--image-size must be a positive multiple of --patch")

    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    tokenizer = build_tokenizer()
    tokens_per_image = (a.image_size // a.patch) ** 2
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    # num_additional_image_tokens=1: LlavaProcessor counts (size / patch)^2
    # + num_additional_image_tokens tokens per image, less one under the
    # "default" strategy (LlavaProcessor.replace_image_token). Its default 0
    # would give one token fewer than the features the model hands on (CLIP's
    # patches and class token, the class token dropped): real llava-hf
    # checkpoints set 1 for that reason.
    processor = transformers.LlavaProcessor(image_processor=image_processor(a.image_size), tokenizer=tokenizer,
                                            patch_size=a.patch, vision_feature_select_strategy="default",
                                            num_additional_image_tokens=1, image_token="<image>",
                                            chat_template=CHAT_TEMPLATE)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, image_size=a.image_size, patch_size=a.patch)
    text = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                                    eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token_id,
                                      vision_feature_layer=-2, vision_feature_select_strategy="default",
                                      image_seq_length=tokens_per_image)
    torch.manual_seed(a.seed)
    model = transformers.LlavaForConditionalGeneration(config).to(torch.float32).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out)
    processor.save_pretrained(a.out)
    print(f"make_tiny_llava: {a.out}: {sum(t.numel() for t in model.parameters())} parameters, "
          f"vocabulary {len(tokenizer)}, {tokens_per_image} image tokens per image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
