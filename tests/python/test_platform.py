"""The platform (issue 39): the Python references the tests check Loom against
import on this machine's python3, at the versions requirements.txt pins, and
`loom` was built against that same PyTorch (its libtorch is the one loaded)."""
import os
import re
import subprocess
import tempfile
import unittest

import torch

LOOM = os.environ["LOOM_BINARY"]
REQUIREMENTS = os.path.join(os.path.dirname(__file__), "..", "..", "requirements.txt")


def pins():
    out = {}
    for line in open(REQUIREMENTS):
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            out[name.lower()] = version
    return out


class Platform(unittest.TestCase):
    def test_torch_is_the_pinned_2x(self):
        want = pins()["torch"]
        self.assertTrue(want.startswith("2."), want)
        # PyPI's wheel carries a local version: 2.11.0+cu130.
        self.assertEqual(torch.__version__.split("+")[0], want)

    def test_every_pin_is_what_is_installed(self):
        from importlib import metadata
        for name, want in pins().items():
            with self.subTest(package=name):
                self.assertEqual(metadata.version(name).split("+")[0], want)

    def test_loom_was_built_against_this_torch(self):
        version = subprocess.run([LOOM, "--version"], check=True, capture_output=True, text=True).stdout
        m = re.search(r"libtorch (\S+?),? ", version)
        self.assertIsNotNone(m, version)
        self.assertEqual(m.group(1), torch.__version__.split("+")[0], version)
        # The dynamic loader resolves libtorch_cpu to this interpreter's torch/lib.
        ldd = subprocess.run(["ldd", LOOM], check=True, capture_output=True, text=True).stdout
        line = next((l for l in ldd.splitlines() if "libtorch_cpu.so" in l), None)
        self.assertIsNotNone(line, ldd)
        path = os.path.realpath(line.split("=>")[1].split("(")[0].strip())
        self.assertEqual(os.path.dirname(path), os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib")))

    def test_transformers_trains_a_small_llama_on_this_torch(self):
        """A two-layer Llama from transformers: its loss is the cross-entropy of
        its own logits against the shifted labels, and one SGD step lowers it."""
        import transformers

        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
        model = transformers.LlamaForCausalLM(config)
        ids = torch.randint(0, 64, (2, 16))
        out = model(input_ids=ids, labels=ids)
        self.assertEqual(tuple(out.logits.shape), (2, 16, 64))
        manual = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
        self.assertAlmostEqual(out.loss.item(), manual.item(), places=5)
        out.loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        self.assertLess(model(input_ids=ids, labels=ids).loss.item(), out.loss.item())

    def test_safetensors_round_trips_a_state_dict(self):
        from safetensors.torch import load_file, save_file

        state = {"w": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.bfloat16)}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            save_file(state, path)
            back = load_file(path)
        self.assertEqual(set(back), set(state))
        for k in state:
            self.assertEqual(back[k].dtype, state[k].dtype)
            self.assertTrue(torch.equal(back[k], state[k]))

    def test_tokenizers_and_pillow_import_and_work(self):
        import numpy as np
        from PIL import Image
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "cat": 2}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        self.assertEqual(tok.encode("a cat sat").ids, [1, 2, 0])
        image = Image.fromarray(np.full((4, 6, 3), 200, dtype=np.uint8))
        self.assertEqual(np.asarray(image.resize((3, 2))).shape, (2, 3, 3))


if __name__ == "__main__":
    unittest.main()
