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


if __name__ == "__main__":
    unittest.main()
