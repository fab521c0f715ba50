"""Today's VLM configs (issue 43) against transformers' own models: every
tests/data/hf/*/config.json that transformers can build is instantiated on
the meta device (no weights, no download) and its parameter count compared
with what `loom inspect --json` reads from the same file. Loom counts no
norm weights and stops a LLaVA tower at its feature layer, so 0.5% is the
bar, as for the model cards (tests/spec/hf_config_test.cpp)."""
import json
import os
import subprocess
import unittest

import torch
import transformers

LOOM = os.environ["LOOM_BINARY"]
DATA = os.path.join(os.path.dirname(__file__), "..", "data", "hf")


def transformers_params(config_path):
    with open(config_path) as f:
        raw = json.load(f)
    config = transformers.AutoConfig.for_model(**raw)
    # InternVLConfig ties the head by default, but its -hf checkpoints store
    # both matrices and from_pretrained keeps them apart; a file without the
    # key follows its text_config, as Loom reads it (spec/hf/vlm_families.cpp).
    if raw.get("model_type") == "internvl" and "tie_word_embeddings" not in raw:
        config.tie_word_embeddings = config.text_config.tie_word_embeddings
    with torch.device("meta"):
        try:
            model = transformers.AutoModelForImageTextToText.from_config(config)
        except ValueError:
            model = transformers.AutoModel.from_config(config)
    return sum(p.numel() for p in model.parameters())


def loom_params(config_path):
    out = subprocess.run([LOOM, "inspect", config_path, "--json"], check=True, capture_output=True, text=True).stdout
    return sum(m["params"] for m in json.loads(out)["modules"])


class HfCounts(unittest.TestCase):
    def test_loom_counts_what_transformers_builds(self):
        checked = []
        for name in sorted(os.listdir(DATA)):
            path = os.path.join(DATA, name, "config.json")
            with open(path) as f:
                if json.load(f).get("model_type") == "internvl_chat":
                    continue  # remote code (OpenGVLab's): transformers cannot build it
            with self.subTest(model=name):
                want, got = transformers_params(path), loom_params(path)
                self.assertAlmostEqual(got / want, 1.0, delta=0.005, msg=f"{name}: loom {got:,} transformers {want:,}")
                checked.append(name)
        self.assertGreaterEqual(len(checked), 12, checked)

    def test_a_bare_config_takes_transformers_class_defaults(self):
        """`{"model_type": T}` alone: every field comes from the config class's
        defaults, and nested ones from what the top class builds when the key
        is absent (LlavaConfig's CLIP-L/14 at 336 px, Gemma3Config's
        SiglipVisionConfig, MistralConfig's 8 key-value heads)."""
        import tempfile

        counted = {
            "llama": None, "mistral": None, "qwen2": None, "qwen3": None, "clip": None, "siglip": None,
            "clip_vision_model": None, "siglip_vision_model": None, "siglip2_vision_model": None,
            "vit": "no pooler", "siglip2": None, "llava": None, "llava_next": None, "llava_onevision": None,
            "mllama": None, "internvl": "untied", "gemma3_text": None, "whisper": "encoder",
        }
        # Defaults transformers builds but cannot run, which Loom refuses:
        # Qwen2-VL's merger emits 3584 features into an 8192-wide LLM;
        # Idefics3's and Gemma 3's poolers do not divide 7 or 14 patches a side.
        refused = {"qwen2_vl": "must equal", "qwen2_5_vl": "must equal", "idefics3": "must divide",
                   "gemma3": "patches a side"}
        with tempfile.TemporaryDirectory() as tmp:
            for model_type, how in sorted(counted.items()):
                with self.subTest(model=model_type):
                    path = os.path.join(tmp, model_type + ".json")
                    with open(path, "w") as f:
                        json.dump({"model_type": model_type}, f)
                    config = transformers.AutoConfig.for_model(model_type)
                    with torch.device("meta"):
                        if how == "no pooler":
                            model = transformers.ViTModel(config, add_pooling_layer=False)
                        elif how == "encoder":
                            model = transformers.WhisperModel(config).encoder
                        else:
                            if how == "untied":  # as a file without the key reads (see above)
                                config.tie_word_embeddings = config.text_config.tie_word_embeddings
                            model = None
                            for auto in (transformers.AutoModelForImageTextToText, transformers.AutoModelForCausalLM,
                                         transformers.AutoModel):
                                try:
                                    model = auto.from_config(config)
                                    break
                                except ValueError:
                                    continue
                    want, got = sum(p.numel() for p in model.parameters()), loom_params(path)
                    self.assertAlmostEqual(got / want, 1.0, delta=0.005,
                                           msg=f"{model_type}: loom {got:,} transformers {want:,}")
            for model_type, words in sorted(refused.items()):
                with self.subTest(model=model_type):
                    path = os.path.join(tmp, model_type + ".json")
                    with open(path, "w") as f:
                        json.dump({"model_type": model_type}, f)
                    run = subprocess.run([LOOM, "inspect", path], capture_output=True, text=True)
                    self.assertEqual(run.returncode, 2, run.stderr)
                    self.assertIn(words, run.stderr)


if __name__ == "__main__":
    unittest.main()
