"""`loom prepare`'s Python half (python/prepare/loom_prepare.py,
docs/data-prepare.md): its samples are what transformers makes of the same
data with the model's own processor, computed here independently
(processor.apply_chat_template(tokenize=True), processor(text=..., images=...),
the image processor alone), on a tiny LLaVA made by make_tiny_llava.py and the
shapes data of make_shapes_dataset.py, and on a text-only model with a
ChatML template built here. LLaVA JSONL and WebDataset inputs of the same
samples prepare to the same bytes; bad input is exit status 2 and a message
naming the file and the sample; two runs are byte-identical.

The CLI runs in this process (its main(argv) returns the exit status) to keep
the file short on two cores; two tests run it as its own process."""
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import torch
import transformers
from PIL import Image
from safetensors.torch import load_file

PREPARE_DIR = os.environ.get("LOOM_PREPARE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                 "..", "python", "prepare")
SCRIPT = os.path.join(PREPARE_DIR, "loom_prepare.py")
SAMPLES = 12
IMAGE_TOKENS = (32 // 8) ** 2  # make_tiny_llava's defaults: 32-pixel images, 8-pixel patches, class token dropped

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(PREPARE_DIR, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLI = script("loom_prepare")


def prepare(*args):
    """The CLI in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = CLI.main([str(a) for a in args])
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def prepare_process(*args):
    r = subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def lines(out):
    with open(os.path.join(out, "data.jsonl")) as f:
        return [json.loads(line) for line in f]


def tree(folder):
    """{relative path: bytes} of every file under folder."""
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                files[os.path.relpath(path, folder)] = f.read()
    return files


def scored_runs(labels):
    """The scored labels, one list per contiguous run."""
    runs, run = [], []
    for t in labels:
        if t != -100:
            run.append(t)
        elif run:
            runs, run = runs + [run], []
    return runs + ([run] if run else [])


def build_chatml_model(folder):
    """A text-only model folder: a tiny Llama config and a word-level
    tokenizer (words, punctuation and newlines are tokens) with ChatML's
    template, whose eos <|im_end|> is followed by a newline."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    words = ["<unk>", "<|im_start|>", "<|im_end|>", "\n", "system", "user", "assistant", "You", "describe", "shapes",
             ".", "what", "is", "this", "?", "and", "now", "one", "two", "red", "blue", "circle", "squares"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed"),
                                                 pre_tokenizers.Split(Regex(r"\n|[^\w\s]+"), behavior="isolated")])
    tok.add_special_tokens(["<unk>", "<|im_start|>", "<|im_end|>"])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", unk_token="<unk>",
                                                     pad_token="<|im_end|>", chat_template=CHATML)
    tokenizer.save_pretrained(folder)
    # A Llama config: transformers 5's AutoTokenizer replaces a qwen2 folder's tokenizer by its own byte-level
    # Qwen2Tokenizer whatever tokenizer_config.json says (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS), and this
    # word-level one would not survive that; llama trusts tokenizer_config.json's TokenizersBackend.
    transformers.LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, bos_token_id=None,
                             eos_token_id=tokenizer.eos_token_id).save_pretrained(folder)


class Prepare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="loom_prepare_test_")
        cls.model = os.path.join(cls.tmp, "tiny-llava")
        with contextlib.redirect_stdout(io.StringIO()):
            script("make_tiny_llava").main([cls.model])
            shapes = script("make_shapes_dataset")
            shapes.main([os.path.join(cls.tmp, "llava"), "--count", str(SAMPLES)])
            shapes.main([os.path.join(cls.tmp, "wds"), "--count", str(SAMPLES), "--format", "wds",
                         "--shard-size", "5"])
        cls.llava = os.path.join(cls.tmp, "llava", "data.jsonl")
        cls.processor = transformers.AutoProcessor.from_pretrained(cls.model, local_files_only=True)
        cls.samples = lines_of(cls.llava)
        # The same samples as WebDataset shards with conversations (KEY.png + KEY.json).
        cls.wds_json = os.path.join(cls.tmp, "wds-json", "shard.tar")
        os.makedirs(os.path.dirname(cls.wds_json))
        with tarfile.open(cls.wds_json, "w") as tar:
            for s in cls.samples:
                tar.add(os.path.join(cls.tmp, "llava", s["image"]), arcname=s["id"] + ".png")
                tar.add(write(os.path.join(cls.tmp, "conv.json"), json.dumps({"conversations": s["conversations"]})),
                        arcname=s["id"] + ".json")
        cls.chat_out = os.path.join(cls.tmp, "chat")
        rc, out, err = prepare("--model", cls.model, "--input", cls.llava, "--out", cls.chat_out)
        assert rc == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def image(self, s):
        return Image.open(os.path.join(self.tmp, "llava", s["image"])).convert("RGB")

    def assert_answer(self, labels, answer):
        """The scored labels are the answer's words, then eos."""
        tokenizer = self.processor.tokenizer
        runs = scored_runs(labels)
        self.assertEqual(len(runs), 1, runs)
        self.assertEqual(runs[0][-1], tokenizer.eos_token_id)
        self.assertEqual(tokenizer.decode(runs[0][:-1]), answer)

    def test_chat_samples_are_what_the_processor_makes(self):
        got = lines(self.chat_out)
        self.assertEqual(len(got), SAMPLES)
        model = transformers.LlavaForConditionalGeneration.from_pretrained(self.model, dtype=torch.float32)
        for n, (line, s) in enumerate(zip(got, self.samples), 1):
            with self.subTest(sample=n):
                image = self.image(s)
                answer = s["conversations"][1]["value"]
                messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                                         {"type": "text", "text": "Describe the image."}]},
                            {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
                reference = self.processor.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                               return_tensors="pt")
                self.assertEqual(line["input_ids"], reference["input_ids"][0].tolist())
                text = self.processor.apply_chat_template(messages, tokenize=False)
                direct = self.processor(text=text, images=[image], return_tensors="pt")
                self.assertEqual(line["input_ids"], direct["input_ids"][0].tolist())
                pixels = load_file(os.path.join(self.chat_out, line["pixel_values"]))["pixel_values"]
                self.assertEqual(line["pixel_values"], f"pixels/{n:06d}.safetensors")
                self.assertEqual(pixels.dtype, torch.float32)
                self.assertTrue(torch.equal(pixels, self.processor.image_processor([image], return_tensors="pt")
                                            ["pixel_values"]))
                self.assertTrue(torch.equal(pixels, reference["pixel_values"]))
                # One run of the image token per image, as many as the tower's features (the class token dropped).
                image_id = self.processor.image_token_id
                self.assertEqual(line["image_token_id"], image_id)
                self.assertEqual(line["input_ids"].count(image_id), IMAGE_TOKENS)
                self.assertEqual(len(line["labels"]), len(line["input_ids"]))
                for t, label in zip(line["input_ids"], line["labels"]):
                    self.assertIn(label, (-100, t))
                    if t == image_id:
                        self.assertEqual(label, -100)
                self.assert_answer(line["labels"], answer)
                if n == 1:  # transformers' LLaVA takes the sample as it is (image tokens = its features)
                    with torch.no_grad():
                        loss = model(input_ids=torch.tensor([line["input_ids"]]), pixel_values=pixels,
                                     labels=torch.tensor([line["labels"]])).loss
                    self.assertTrue(torch.isfinite(loss))
        with open(os.path.join(self.chat_out, "prepare.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["samples"], SAMPLES)
        self.assertEqual(summary["images"], SAMPLES)
        self.assertEqual(summary["tokens"], sum(len(x["input_ids"]) for x in got))
        self.assertEqual(summary["template"], "chat")
        self.assertEqual(len(summary["model_config_sha256"]), 64)
        self.assertEqual(sorted(os.listdir(self.chat_out)), ["data.jsonl", "pixels", "prepare.json"])

    def test_caption_template_from_llava_and_webdataset_is_the_same(self):
        llava, wds = os.path.join(self.tmp, "cap-llava"), os.path.join(self.tmp, "cap-wds")
        self.assertEqual(prepare("--model", self.model, "--input", self.llava, "--out", llava,
                                 "--template", "caption")[0], 0)
        pattern = os.path.join(self.tmp, "wds", "shapes-{000000..000002}.tar")  # 5 + 5 + 2 samples
        rc, out, err = prepare("--model", self.model, "--input", pattern, "--out", wds, "--template", "caption")
        self.assertEqual(rc, 0, err)
        self.assertIn(f"{SAMPLES} samples", out)
        a, b = tree(llava), tree(wds)
        a.pop("prepare.json"), b.pop("prepare.json")
        self.assertEqual(a, b)
        eos = self.processor.tokenizer.eos_token_id
        for line, s in zip(lines(llava), self.samples):
            caption = s["conversations"][1]["value"]
            reference = self.processor(text="<image>" + caption, images=[self.image(s)], return_tensors="pt")
            self.assertEqual(line["input_ids"], reference["input_ids"][0].tolist() + [eos])
            self.assert_answer(line["labels"], caption)
            self.assertEqual(line["labels"][:IMAGE_TOKENS + 1], [-100] * (IMAGE_TOKENS + 1))  # bos, the image

    def test_webdataset_conversations_equal_llava_jsonl(self):
        out = os.path.join(self.tmp, "chat-wds")
        rc, _, err = prepare("--model", self.model, "--input", self.wds_json, "--out", out)
        self.assertEqual(rc, 0, err)
        a, b = tree(self.chat_out), tree(out)
        a.pop("prepare.json"), b.pop("prepare.json")
        self.assertEqual(a, b)

    def test_two_images_in_a_multi_turn_conversation(self):
        """An image in each human turn, the second inside its text: each is its
        own run of image tokens, each answer is scored, nothing else."""
        conv = [{"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "two red circles"},
                {"from": "human", "value": "and this <image>?"}, {"from": "gpt", "value": "one yellow circle"}]
        sample = {"id": "multi", "image": ["images/000000.png", "images/000001.png"], "conversations": conv}
        data = self.llava_copy("multi", samples=[sample])
        out = os.path.join(self.tmp, "multi-out")
        rc, _, err = prepare("--model", self.model, "--input", data, "--out", out)
        self.assertEqual(rc, 0, err)
        [line] = lines(out)
        a, b = self.image(self.samples[0]), self.image(self.samples[1])
        messages = [{"role": "user", "content": [{"type": "image", "image": a},
                                                 {"type": "text", "text": "What is this?"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "two red circles"}]},
                    {"role": "user", "content": [{"type": "text", "text": "and this"}, {"type": "image", "image": b},
                                                 {"type": "text", "text": "?"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "one yellow circle"}]}]
        reference = self.processor.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                       return_tensors="pt")
        self.assertEqual(line["input_ids"], reference["input_ids"][0].tolist())
        pixels = load_file(os.path.join(out, line["pixel_values"]))["pixel_values"]
        self.assertEqual(list(pixels.shape), [2, 3, 32, 32])
        self.assertTrue(torch.equal(pixels, self.processor.image_processor([a, b], return_tensors="pt")
                                    ["pixel_values"]))
        image_id = self.processor.image_token_id
        runs = [t == image_id for t in line["input_ids"]]
        self.assertEqual(sum(1 for p in range(len(runs)) if runs[p] and (p == 0 or not runs[p - 1])), 2)
        tokenizer = self.processor.tokenizer
        self.assertEqual([tokenizer.decode(r[:-1]) for r in scored_runs(line["labels"])],
                         ["two red circles", "one yellow circle"])
        self.assertEqual([r[-1] for r in scored_runs(line["labels"])], [tokenizer.eos_token_id] * 2)

    def test_text_only_chatml_scores_each_answer_through_its_eos(self):
        model = os.path.join(self.tmp, "chatml")
        build_chatml_model(model)
        tokenizer = transformers.AutoTokenizer.from_pretrained(model, local_files_only=True)
        conv = [{"from": "system", "value": "You describe shapes."}, {"from": "human", "value": "what is this?"},
                {"from": "gpt", "value": "one red circle"}, {"from": "human", "value": "and now?"},
                {"from": "gpt", "value": "two blue squares"}]
        data = write(os.path.join(self.tmp, "text", "data.json"),
                     json.dumps([{"id": 0, "conversations": conv}, {"id": 1, "conversations": conv[:3]}]))
        out = os.path.join(self.tmp, "text-out")
        rc, _, err = prepare("--model", model, "--input", data, "--out", out)
        self.assertEqual(rc, 0, err)
        got = lines(out)
        roles = {"system": "system", "human": "user", "gpt": "assistant"}
        eos = tokenizer.eos_token_id
        for line, turns in zip(got, [conv, conv[:3]]):
            messages = [{"role": roles[t["from"]], "content": t["value"]} for t in turns]
            self.assertEqual(line["input_ids"], tokenizer.apply_chat_template(messages, tokenize=True,
                                                                              return_dict=True)["input_ids"])
            self.assertEqual(set(line), {"input_ids", "labels"})
            answers = [t["value"] for t in turns if t["from"] == "gpt"]
            runs = scored_runs(line["labels"])
            self.assertEqual([tokenizer.decode(r[:-1]) for r in runs], answers)
            self.assertEqual([r[-1] for r in runs], [eos] * len(answers))
            # The newline ChatML writes after <|im_end|> is in the ids, not scored.
            last = len(line["labels"]) - 1
            self.assertEqual(tokenizer.convert_ids_to_tokens(line["input_ids"][last]), "\n")
            self.assertEqual(line["labels"][last], -100)

    def test_two_runs_are_byte_identical(self):
        out = os.path.join(self.tmp, "twice")
        rc, stdout, err = prepare_process("--model", self.model, "--input", self.llava, "--out", out)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"{SAMPLES} samples", stdout)
        first = tree(out)
        rc, _, err = prepare("--model", self.model, "--input", self.llava, "--out", out)  # over its own output
        self.assertEqual(rc, 0, err)
        self.assertEqual(tree(out), first)
        # A run with fewer samples replaces the earlier output whole: no stale pixel files.
        rc, _, err = prepare("--model", self.model, "--input", self.llava, "--out", out, "--limit", 3)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(lines(out)), 3)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "pixels"))),
                         ["000001.safetensors", "000002.safetensors", "000003.safetensors"])

    # -- errors: exit status 2, one line naming the file and the sample, no output left behind

    def assert_error(self, args, *needles, out=None, process=False):
        out = out or os.path.join(self.tmp, "error-out")
        before = tree(out) if os.path.isdir(out) else None
        rc, stdout, err = (prepare_process if process else prepare)("--model", self.model, *args, "--out", out)
        self.assertEqual(rc, 2, err)
        self.assertTrue(err.startswith("loom prepare: error: "), err)
        self.assertNotIn("Traceback", err)
        for needle in needles:
            self.assertIn(str(needle), err)
        self.assertEqual(tree(out) if os.path.isdir(out) else None, before)  # nothing written, nothing left
        return err

    def llava_copy(self, name, edit=None, samples=None):
        """The LLaVA data (images linked) in a folder of its own, edited."""
        folder = os.path.join(self.tmp, name)
        os.makedirs(folder)
        os.symlink(os.path.join(self.tmp, "llava", "images"), os.path.join(folder, "images"))
        samples = [dict(s) for s in (samples if samples is not None else self.samples)]
        if edit:
            edit(samples)
        return write(os.path.join(folder, "data.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))

    def test_corrupt_image(self):
        folder = os.path.join(self.tmp, "corrupt")
        os.makedirs(os.path.join(folder, "images"))
        with open(os.path.join(self.tmp, "llava", "images", "000002.png"), "rb") as f:
            png = f.read()
        write(os.path.join(folder, "images", "000002.png"), png[:len(png) // 2], "wb")  # truncated
        for s in self.samples[:2]:
            shutil.copy(os.path.join(self.tmp, "llava", s["image"]), os.path.join(folder, s["image"]))
        data = write(os.path.join(folder, "data.jsonl"), "".join(json.dumps(s) + "\n" for s in self.samples[:3]))
        self.assert_error(["--input", data], f"{data}:3", "000002.png", "cannot be decoded", process=True)

    def test_missing_image(self):
        data = self.llava_copy("missing", lambda s: s[4].update(image="images/nowhere.png"))
        self.assert_error(["--input", data], f"{data}:5", "images/nowhere.png", "no such file")

    def test_image_paths_that_are_not_files_say_what_they_are(self):
        # Runtime audit R4-15: a folder or a link loop was "no such file".
        folder = os.path.join(self.tmp, "notfiles")
        images = os.path.join(folder, "images")
        os.makedirs(images)
        samples = [dict(s) for s in self.samples[:3]]
        shutil.copy(os.path.join(self.tmp, "llava", samples[0]["image"]), os.path.join(folder, samples[0]["image"]))
        samples[1]["image"], samples[2]["image"] = "images/adir.png", "images/loop.png"
        os.makedirs(os.path.join(images, "adir.png"))
        os.symlink("loop.png", os.path.join(images, "loop.png"))
        data = write(os.path.join(folder, "data.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))
        self.assert_error(["--input", data], f"{data}:2", "images/adir.png", "a folder, not an image file")
        shutil.rmtree(os.path.join(images, "adir.png"))
        shutil.copy(os.path.join(self.tmp, "llava", self.samples[1]["image"]), os.path.join(images, "adir.png"))
        self.assert_error(["--input", data], f"{data}:3", "images/loop.png", "a symbolic link loop")
        shutil.rmtree(folder)  # other tests walk the temporary folder: no loop left in it

    def test_a_16_bit_image_is_converted_as_transformers_does_and_said(self):
        # Runtime audit R4-08: convert("RGB") clips a 16-bit grayscale PNG to
        # 0..255 (almost white), as transformers' processors do; said once.
        from PIL import Image
        import numpy as np
        folder = os.path.join(self.tmp, "wide")
        os.makedirs(os.path.join(folder, "images"))
        samples = [dict(s) for s in self.samples[:2]]
        shutil.copy(os.path.join(self.tmp, "llava", samples[0]["image"]), os.path.join(folder, samples[0]["image"]))
        Image.fromarray(np.full((40, 40), 40000, dtype=np.uint16)).save(os.path.join(folder, samples[1]["image"]))
        data = write(os.path.join(folder, "data.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))
        rc, _, err = prepare("--model", self.model, "--input", data, "--out", os.path.join(self.tmp, "wide-out"))
        self.assertEqual(rc, 0, err)
        self.assertIn("warning: image", err)
        self.assertIn("converted to RGB as transformers' image processors do, which clips values above 255", err)
        self.assertEqual(err.count("warning"), 1, err)

    def test_empty_dataset(self):
        data = write(os.path.join(self.tmp, "empty", "data.jsonl"), "\n")
        self.assert_error(["--input", data], data, "no samples")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "error-out")))

    def test_sample_longer_than_max_tokens(self):
        length = len(lines(self.chat_out)[0]["input_ids"])
        self.assert_error(["--input", self.llava, "--max-tokens", length - 1], f"{self.llava}:1", f"{length} tokens",
                          f"--max-tokens {length - 1}")

    def test_no_assistant_turn(self):
        data = self.llava_copy("no-answer", lambda s: s[1].update(conversations=s[1]["conversations"][:1]))
        self.assert_error(["--input", data], f"{data}:2", "no assistant")

    def test_image_marker_count(self):
        def two_markers(s):
            s[0]["conversations"] = [{"from": "human", "value": "<image> and <image>"}, s[0]["conversations"][1]]

        data = self.llava_copy("markers", two_markers)
        self.assert_error(["--input", data], f"{data}:1", "2 <image>", "1 image")

    def test_webdataset_sample_without_caption(self):
        shard = os.path.join(self.tmp, "nocaption", "shard.tar")
        os.makedirs(os.path.dirname(shard))
        with tarfile.open(shard, "w") as tar:
            tar.add(os.path.join(self.tmp, "llava", "images", "000000.png"), arcname="a/000000.png")
        self.assert_error(["--input", shard], shard, "sample a/000000", "no caption")

    def test_unknown_extension_and_missing_input(self):
        self.assert_error(["--input", os.path.join(self.tmp, "data.csv")], "data.csv", "unknown input extension")
        self.assert_error(["--input", os.path.join(self.tmp, "none-{0..1}.tar")], "none-0.tar", "no such file")

    def test_model_folder_without_tokenizer(self):
        model = os.path.join(self.tmp, "no-tokenizer")
        os.makedirs(model)
        shutil.copy(os.path.join(self.model, "config.json"), model)
        rc, _, err = prepare("--model", model, "--input", self.llava, "--out", os.path.join(self.tmp, "x"))
        self.assertEqual(rc, 2)
        self.assertIn(f"{model}: --model: no tokenizer", err)

    def test_output_folder_must_be_its_own(self):
        foreign = os.path.join(self.tmp, "foreign")
        write(os.path.join(foreign, "notes.txt"), "mine")
        self.assert_error(["--input", self.llava], "foreign", "did not write", out=foreign)
        self.assertEqual(os.listdir(foreign), ["notes.txt"])
        self.assert_error(["--input", self.llava], "is the folder of --input", out=os.path.dirname(self.llava))
        self.assert_error(["--input", self.llava], "is the folder of --input", out=self.tmp)  # above the input


def lines_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)
    return path


if __name__ == "__main__":
    unittest.main()
