#!/usr/bin/env python3
"""loom prepare: image-text data in the formats people have -> Loom's
pre-tokenized training samples (docs/data-prepare.md).

    python3 loom_prepare.py --model MODEL_DIR --input INPUT [--input INPUT ...] --out OUT_DIR
                            [--max-tokens N] [--template chat|caption] [--limit N] [--image-folder DIR]

It tokenizes with the model's own Hugging Face tokenizer, chat template and
image processor, so a sample's input_ids and pixel_values are what a
transformers user gets from the same folder; Loom's C++ runtime only reads
the result (docs/spec-format.md, "JSONL samples").

Inputs: LLaVA conversation data (a .json list or .jsonl lines of {"image",
"conversations"}) and WebDataset tar shards (KEY.jpg/png/... with KEY.txt or
KEY.json; brace patterns such as shard-{000..009}.tar). Output: OUT_DIR/
data.jsonl, OUT_DIR/pixels/NNNNNN.safetensors (one file per sample with
images, NNNNNN its line in data.jsonl) and OUT_DIR/prepare.json.

Standalone on purpose (it does not import the `loom` package): it needs only
transformers, tokenizers, torch, safetensors and Pillow, the Python packages
of requirements.txt. Bad input is one line on stderr, `loom prepare: error:
FILE: SAMPLE: what is wrong`, and exit status 2; nothing is skipped silently.
"""
import argparse
import errno
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import sys
import tarfile
import zlib

PROG = "loom prepare"
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
MARKER = "<image>"  # where an image goes in LLaVA's conversation data, whatever the model's own image token
STAGING = ".loom-prepare.tmp"  # inside OUT_DIR, so the final renames stay on one filesystem
PIXEL_FILE = re.compile(r"^\d{6,}\.safetensors$")
# The model folder's files that decide the output, hashed into prepare.json.
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja",
               "chat_template.json", "preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


class PrepareError(Exception):
    """Bad input: printed as one `loom prepare: error:` line, exit status 2."""


def fail(where, what):
    raise PrepareError(f"{where}: {what}")


# ---------------------------------------------------------------------------
# Inputs


def expand_braces(pattern):
    """shard-{000..003}.tar -> shard-000.tar ... shard-003.tar (the width of
    the bounds kept, as WebDataset's braceexpand), {a,b} -> a, b."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    body = m.group(1)
    r = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if r:
        lo, hi = r.groups()
        width = len(lo) if len(lo) == len(hi) else 0
        step = 1 if int(hi) >= int(lo) else -1
        items = [str(i).zfill(width) for i in range(int(lo), int(hi) + step, step)]
    elif "," in body:
        items = body.split(",")
    else:
        return [pattern]
    out = []
    for item in items:
        out += expand_braces(pattern[:m.start()] + item + pattern[m.end():])
    return out


def input_kind(path):
    lower = path.lower()
    for ext, kind in ((".jsonl", "llava-jsonl"), (".json", "llava-json"), (".tar", "wds")):
        if lower.endswith(ext):
            return kind
    fail(path, "unknown input extension; valid: .json (a LLaVA list), .jsonl (LLaVA lines), .tar (WebDataset)")


def resolve_inputs(patterns):
    files = []
    for pattern in patterns:
        paths = [pattern] if os.path.exists(pattern) else expand_braces(pattern)
        for path in paths:
            input_kind(path)
            if not os.path.isfile(path):
                fail(path, "no such file" + (f" (from --input {pattern})" if path != pattern else ""))
            files.append(path)
    return files


class Sample:
    """One sample read from an input: `where` names it in errors; images are
    (name, path or bytes); either conversations (LLaVA's list of
    {"from", "value"}) or a caption."""

    __slots__ = ("where", "images", "conversations", "caption")

    def __init__(self, where, images, conversations=None, caption=None):
        self.where, self.images, self.conversations, self.caption = where, images, conversations, caption


def check_conversations(convs, where):
    if not isinstance(convs, list) or not convs:
        fail(where, "conversations: expected a non-empty list of {\"from\": ..., \"value\": ...}")
    for i, turn in enumerate(convs):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            fail(where, f"conversations[{i}]: expected {{\"from\": \"human\" or \"gpt\", \"value\": TEXT}}")
        if turn.get("from") not in ROLES:
            fail(where, f"conversations[{i}].from: {json.dumps(turn.get('from'))}; valid: human, gpt, system "
                        "(also user, assistant)")
    return convs


def llava_sample(item, where, base):
    if not isinstance(item, dict):
        fail(where, "expected an object {\"image\": ..., \"conversations\": [...]}")
    if "id" in item:
        where = f"{where} (id {json.dumps(item['id'])})"
    if "conversations" not in item:
        fail(where, "no conversations (LLaVA's format: {\"image\": PATH, \"conversations\": [...]})")
    image = item.get("image")
    names = [] if image is None else [image] if isinstance(image, str) else image
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        fail(where, "image: expected a path or a list of paths")
    return Sample(where, [(n, os.path.join(base, n)) for n in names], check_conversations(item["conversations"], where))


def read_llava(path, kind, image_folder):
    base = image_folder if image_folder is not None else os.path.dirname(path)
    try:
        with open(path, encoding="utf-8") as f:
            if kind == "llava-jsonl":
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError as e:
                        fail(f"{path}:{n}", f"malformed JSON: {e}")
                    yield llava_sample(item, f"{path}:{n}", base)
                return
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                fail(path, f"malformed JSON: {e}")
    except UnicodeDecodeError as e:
        fail(path, f"not UTF-8 text: {e}")
    if not isinstance(data, list):
        fail(path, "expected a JSON list of samples (LLaVA's format); one sample a line is a .jsonl file")
    for i, item in enumerate(data):
        yield llava_sample(item, f"{path}: [{i}]", base)  # the list's index


def wds_sample(path, key, members):
    where = f"{path}: sample {key}"
    images = [ext for ext in members if ext in IMAGE_EXTENSIONS]
    if len(images) != 1:
        names = ", ".join(members[e][0] for e in images) or "none of " + "/".join(IMAGE_EXTENSIONS)
        fail(where, f"expected one image member, found {names}")
    image = [members[images[0]]]
    if "json" in members:
        name, data = members["json"]
        try:
            meta = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            fail(f"{path}: member {name}", f"malformed JSON: {e}")
        # img2dataset's .json is metadata without conversations: the caption is then the .txt.
        if isinstance(meta, dict) and "conversations" in meta:
            return Sample(where, image, check_conversations(meta["conversations"], f"{path}: member {name}"))
    if "txt" not in members:
        fail(where, "no caption: expected KEY.txt, or KEY.json with conversations")
    name, data = members["txt"]
    try:
        caption = data.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        fail(f"{path}: member {name}", f"not UTF-8 text: {e}")
    return Sample(where, image, caption=caption)


def read_wds(path):
    """A WebDataset shard, streamed: a sample is the consecutive members that
    share a key (the member's name up to the first dot of its file name, its
    folder included), as webdataset's tarfile_to_samples groups them."""
    try:
        tar = tarfile.open(path, mode="r|*")
    except (tarfile.TarError, OSError) as e:
        fail(path, f"not a readable tar file: {e}")
    key, members, seen = None, {}, set()
    with tar:
        try:
            for m in tar:
                if m.isdir():
                    continue
                if not m.isfile():
                    fail(f"{path}: member {m.name}", "not a regular file (a link or device)")
                folder, base = posixpath.split(m.name)
                stem, dot, ext = base.partition(".")
                if not stem or not dot:
                    fail(f"{path}: member {m.name}", "expected a name KEY.EXTENSION (WebDataset's layout)")
                k = posixpath.join(folder, stem)
                if k != key:
                    if key is not None:
                        yield wds_sample(path, key, members)
                    if k in seen:
                        fail(f"{path}: member {m.name}", f"key {k} appears again after other keys (a sample's "
                                                         "members must be adjacent, as WebDataset writes them)")
                    seen.add(k)
                    key, members = k, {}
                ext = ext.lower()
                if ext in members:
                    fail(f"{path}: member {m.name}", f"a second .{ext} for key {k}")
                members[ext] = (m.name, tar.extractfile(m).read())
            if key is not None:
                yield wds_sample(path, key, members)
        except (tarfile.TarError, EOFError, zlib.error) as e:
            fail(path, f"corrupt tar file: {e}")


def read_samples(files, image_folder):
    for path in files:
        kind = input_kind(path)
        yield from read_wds(path) if kind == "wds" else read_llava(path, kind, image_folder)


def what_is(path):
    """What stands at a path that is not a regular file (what the error says)."""
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as e:
            return "a symbolic link loop" if e.errno == errno.ELOOP else "a dangling symbolic link"
    if os.path.isdir(path):
        return "a folder"
    if os.path.exists(path):
        return "a pipe, socket or device"
    return "no such file"


# PIL modes of more than 8 bits a channel: convert("RGB"), as transformers'
# processors and LLaVA's training code convert, clips them to 0..255, so a
# 16-bit image turns almost white. Loom converts as they do, and says so once.
WIDE_MODES = {"I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
_wide_images_seen = []


def warn_wide_image(name, mode):
    if not _wide_images_seen:
        print(f"{PROG}: warning: image {name} is {mode} (more than 8 bits a channel): converted to RGB as "
              "transformers' image processors do, which clips values above 255 (a 16-bit image turns almost "
              "white); convert such images to 8 bits first (later ones are not named)", file=sys.stderr)
    _wide_images_seen.append(name)


def load_image(name, src, where):
    """A PIL image, decoded whole (a truncated or corrupt file fails here, not
    in the processor), in RGB as LLaVA's training code converts it."""
    from PIL import Image

    if isinstance(src, str) and not os.path.isfile(src):
        fail(where, f"image {name}: {what_is(src)}, not an image file ({src})")
    try:
        with Image.open(src if isinstance(src, str) else io.BytesIO(src)) as im:
            im.load()
            if im.mode in WIDE_MODES:
                warn_wide_image(name, im.mode)
            return im.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        fail(where, f"image {name}: cannot be decoded ({type(e).__name__}: {e})")


# ---------------------------------------------------------------------------
# Tokenizing


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Preparer:
    """The model folder's tokenizer (or processor) and the template: one
    Sample in, (input_ids, labels, pixel_values or None) out."""

    def __init__(self, model_dir, template):
        config_path = os.path.join(model_dir, "config.json")
        if not os.path.isdir(model_dir):
            fail(model_dir, "--model: no such folder")
        if not os.path.isfile(config_path):
            fail(model_dir, "--model: no config.json (a Hugging Face model folder)")
        try:
            with open(config_path, encoding="utf-8") as f:
                self.config = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            fail(config_path, f"malformed JSON: {e}")
        if not isinstance(self.config, dict):
            fail(config_path, "expected a JSON object (a Hugging Face config)")
        if not any(os.path.isfile(os.path.join(model_dir, n)) for n in TOKENIZER_FILES):
            fail(model_dir, f"--model: no tokenizer (none of {', '.join(TOKENIZER_FILES)}); loom prepare tokenizes "
                            "with the model's own tokenizer")
        import transformers

        transformers.utils.logging.set_verbosity_error()  # the backend fallback notices are not the user's problem
        transformers.utils.logging.disable_progress_bar()
        self.transformers_version = transformers.__version__
        # A vision-language model (LLaVA, LLaVA-Next, Qwen2-VL, ...) has a
        # vision_config: its processor pairs the tokenizer with the image
        # processor and expands the image token; anything else is text only.
        self.processor = None
        try:
            if "vision_config" in self.config:
                proc = transformers.AutoProcessor.from_pretrained(model_dir, local_files_only=True)
                if hasattr(proc, "image_processor") and hasattr(proc, "tokenizer"):
                    self.processor = proc
                    self.tokenizer = proc.tokenizer
                else:  # no processor files: AutoProcessor hands back the tokenizer alone
                    self.tokenizer = proc
            else:
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        except Exception as e:  # transformers raises OSError, ValueError, KeyError... for a folder it cannot read
            fail(model_dir, f"--model: transformers cannot load its tokenizer/processor: {type(e).__name__}: {e}")
        self.chat = self.processor if self.processor is not None else self.tokenizer
        has_template = bool(getattr(self.chat, "chat_template", None) or self.tokenizer.chat_template)
        self.template = template or ("chat" if has_template else "caption")
        if self.template == "chat" and not has_template:
            fail(model_dir, "--template chat: the model has no chat template (chat_template.jinja or the "
                            "tokenizer's chat_template); use --template caption")
        self.eos_id = self.tokenizer.eos_token_id
        if self.eos_id is None:
            fail(model_dir, "--model: the tokenizer has no eos token (it ends each scored text)")
        # The ids that end a turn: the tokenizer's eos and generation_config's
        # (Llama 3 instruct: <|end_of_text|> and <|eot_id|>).
        self.eos_ids = {self.eos_id}
        gen = os.path.join(model_dir, "generation_config.json")
        if os.path.isfile(gen):
            try:
                with open(gen, encoding="utf-8") as f:
                    e = json.load(f).get("eos_token_id")
                self.eos_ids |= set(e if isinstance(e, list) else [] if e is None else [e])
            except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
                fail(gen, f"malformed: {err}")
        self.image_token_id = None
        if self.processor is not None:
            self.image_token = getattr(self.processor, "image_token", None)
            if self.image_token is None:
                fail(model_dir, f"--model: {type(self.processor).__name__} names no image token")
            self.image_token_id = getattr(self.processor, "image_token_id", None)
            if self.image_token_id is None:
                self.image_token_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
            want = self.config.get("image_token_index", self.config.get("image_token_id"))
            if want is not None and want != self.image_token_id:
                fail(config_path, f"image_token_index {want} but the processor's {self.image_token} is "
                                  f"{self.image_token_id}: the model would not find its images")
        text = self.config.get("text_config", self.config)
        self.vocab = text.get("vocab_size") if isinstance(text, dict) else None
        self.model_files = {n: sha256(os.path.join(model_dir, n)) for n in MODEL_FILES
                            if os.path.isfile(os.path.join(model_dir, n))}

    # -- the two templates: text, label spans, and whether eos is appended

    def messages(self, s):
        """LLaVA's turns -> transformers' chat messages. Under a processor a
        message's content is transformers' list of items, {"type": "image"}
        at each <image> and {"type": "text"} around it (each piece stripped:
        the template decides the separators); under a bare tokenizer it is
        the text."""
        convs = s.conversations
        if convs is None:  # a caption sample: the image(s) asked about, the caption answered
            convs = [{"from": "human", "value": MARKER * len(s.images)}, {"from": "gpt", "value": s.caption}]
        convs = self.place_images(convs, len(s.images), s.where)
        out = []
        for turn in convs:
            role = ROLES[turn["from"]]
            if self.processor is None:
                out.append({"role": role, "content": turn["value"]})
                continue
            content = []
            for i, piece in enumerate(turn["value"].split(MARKER)):
                if i:
                    content.append({"type": "image"})
                if piece.strip():
                    content.append({"type": "text", "text": piece.strip()})
            out.append({"role": role, "content": content})
        return out

    def place_images(self, convs, n, where):
        markers = sum(t["value"].count(MARKER) for t in convs)
        if n and not markers:
            # LLaVA's preprocess_multimodal: an image without a marker goes first, in the first human turn.
            first = next((i for i, t in enumerate(convs) if ROLES[t["from"]] == "user"), None)
            if first is None:
                fail(where, "has an image but no human turn to hold it")
            convs = [dict(t) for t in convs]
            convs[first]["value"] = MARKER * n + "\n" + convs[first]["value"]
        elif markers != n:
            fail(where, f"{markers} {MARKER} in the conversation for {n} image(s); give one {MARKER} per image")
        if n and self.processor is None:
            fail(where, "has images but the model has no image processor (a text-only model folder)")
        return convs

    def render(self, messages, generation_prompt, where):
        try:
            return self.chat.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as e:  # the template's own raise_exception, jinja errors
            fail(where, f"the chat template refuses the conversation: {type(e).__name__}: {e}")

    def chat_text(self, s):
        """Template `chat`: the conversation rendered by
        apply_chat_template(tokenize=False), and per assistant message the
        text before its content and the text through its end.

        Labels by prefixes: for assistant message i, P = render(messages[:i],
        add_generation_prompt=True) ends where its content starts and R =
        render(messages[:i+1]) ends after what the template writes for it
        (its end-of-turn). Both must be prefixes of the whole rendering F, as
        text and (checked in tokenize) as tokens; a template that renders a
        turn differently once later turns follow (one that drops earlier
        turns' reasoning, say) breaks this and is refused by name rather
        than mislabelled. This works with any template, unlike
        return_assistant_tokens_mask, which needs {% generation %} tags most
        templates lack."""
        messages = self.messages(s)
        assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not assistant:
            fail(s.where, "no assistant (gpt) turn: nothing to train on")
        if assistant[0] == 0:
            fail(s.where, "starts with an assistant turn; the template renders each assistant turn after a prompt")
        full = self.render(messages, False, s.where)
        spans = []
        for i in assistant:
            p = self.render(messages[:i], True, s.where)
            r = self.render(messages[:i + 1], False, s.where)
            if not (r.startswith(p) and full.startswith(r)):
                fail(s.where, f"the chat template does not render assistant turn {i} as a prefix of the whole "
                              "conversation, so its tokens cannot be told apart; use --template caption or a "
                              "template that renders conversations incrementally")
            spans.append((p, r))
        return full, spans, False

    def caption_text(self, s):
        """Template `caption`: the images' tokens, the caption, eos; the
        caption and eos scored. A conversation must be one human turn and
        one gpt answer, the human text dropped: LLaVA's `plain` pretraining
        template (preprocess_plain)."""
        caption = s.caption
        if caption is None:
            turns = [ROLES[t["from"]] for t in s.conversations]
            if turns != ["user", "assistant"]:
                fail(s.where, f"--template caption takes a caption, or a conversation of one human turn and one "
                              f"gpt answer (LLaVA's pretraining data); this one has turns {', '.join(turns)}")
            self.place_images(s.conversations, len(s.images), s.where)
            caption = s.conversations[1]["value"].strip()
        if not caption:
            fail(s.where, "an empty caption")
        elif s.images and self.processor is None:
            fail(s.where, "has images but the model has no image processor (a text-only model folder)")
        prefix = self.image_token * len(s.images) if s.images else ""
        return prefix + caption, [(prefix, prefix + caption)], True

    # -- tokenizing

    def tokenize(self, s, images):
        text, spans, append_eos = self.chat_text(s) if self.template == "chat" else self.caption_text(s)
        bos = self.tokenizer.bos_token
        if self.template == "chat" and self.processor is None:
            # tokenizer.apply_chat_template(tokenize=True) never adds special tokens: the template writes them.
            special = False
        elif self.template == "chat":
            # ProcessorMixin.apply_chat_template(tokenize=True): the processor adds them unless the rendered
            # text already starts with bos.
            special = not (bos is not None and text.startswith(bos))
        else:
            special = True  # a caption is plain text: tokenized as tokenizer(text) / processor(text=...) do

        def ids(t):
            return self.tokenizer(t, add_special_tokens=special)["input_ids"]

        # The labels are found on the tokenizer's ids of the unexpanded text
        # (one image token per image), then carried over to the processor's
        # ids (each image's run of tokens): the tokenizer is what the
        # processor calls on the expanded text.
        plain = ids(text)
        scored = [False] * len(plain)
        for p, r in spans:
            a, b = ids(p), ids(r)
            if plain[:len(a)] != a or plain[:len(b)] != b:
                fail(s.where, "the tokens of the text before an answer are not a prefix of the whole text's "
                              "(the tokenizer merges across the boundary or adds tokens at the end), so the "
                              "answer's tokens cannot be told apart")
            end = len(b)
            # Scored: the answer through its first end-of-turn. What a template writes after the eos
            # (ChatML's newline after <|im_end|>) is never generated, so not trained.
            for q in range(len(a), len(b)):
                if plain[q] in self.eos_ids:
                    end = q + 1
                    break
            for q in range(len(a), end):
                scored[q] = True
        pixel_values = None
        if self.processor is not None:
            # What a transformers user runs: processor(text=..., images=...).
            try:
                out = self.processor(text=text, images=images or None, add_special_tokens=special, return_tensors="pt")
            except Exception as e:
                fail(s.where, f"the processor refuses the sample: {type(e).__name__}: {e}")
            final = out["input_ids"][0].tolist()
            if images:
                pixel_values = out["pixel_values"]
                if pixel_values.dim() != 4 or pixel_values.shape[0] != len(images):
                    fail(s.where, f"the processor's pixel_values are {list(pixel_values.shape)}; Loom reads "
                                  f"[images, channels, height, width], one per image ({len(images)}), as "
                                  "LLaVA-1.5's processor makes them")
            labels = self.carry_labels(plain, scored, final, s.where)
        else:
            final = plain
            labels = [t if f else -100 for t, f in zip(plain, scored)]
        if append_eos:
            final.append(self.eos_id)
            labels.append(self.eos_id)
        return final, labels, pixel_values

    def carry_labels(self, plain, scored, final, where):
        """The labels of `plain` (one image token per image) on `final` (the
        processor's ids: each image token a run): text tokens must be the
        same in both, in order; image tokens are never scored."""
        img = self.image_token_id
        labels, i, j = [], 0, 0
        while i < len(plain) or j < len(final):
            if i < len(plain) and plain[i] == img:
                c = 0
                while i + c < len(plain) and plain[i + c] == img:
                    c += 1
                run = 0
                while j + run < len(final) and final[j + run] == img:
                    run += 1
                if run < c:
                    break
                labels += [-100] * run
                i, j = i + c, j + run
            elif i < len(plain) and j < len(final) and plain[i] == final[j]:
                labels.append(final[j] if scored[i] else -100)
                i, j = i + 1, j + 1
            else:
                break
        if len(labels) != len(final):
            fail(where, "the processor's input_ids are not the tokenizer's with each image token expanded into a "
                        "run, so loom prepare cannot place the labels on them")
        return labels

    def prepare(self, s, max_tokens):
        images = [load_image(name, src, s.where) for name, src in s.images]
        ids, labels, pixel_values = self.tokenize(s, images)
        for im in images:
            im.close()
        if max_tokens is not None and len(ids) > max_tokens:
            fail(s.where, f"{len(ids)} tokens, longer than --max-tokens {max_tokens}")
        if not any(t != -100 for t in labels):
            fail(s.where, "no token is scored (an empty answer)")
        if self.vocab is not None:
            bad = next((t for t in ids if t >= self.vocab), None)
            if bad is not None:
                fail(s.where, f"token id {bad} is at or past the model's vocabulary ({self.vocab})")
        if images:
            runs = sum(1 for p, t in enumerate(ids) if t == self.image_token_id and (p == 0 or ids[p - 1] != t))
            if runs != len(images):
                # Loom reads each run of image_token_id as one image (docs/spec-format.md).
                fail(s.where, f"{len(images)} images make {runs} runs of image tokens: images must not be adjacent "
                              "(put text between them)")
        elif self.image_token_id is not None and self.image_token_id in ids:
            fail(s.where, f"the text holds the image token {self.image_token} but the sample has no image")
        return ids, labels, pixel_values


# ---------------------------------------------------------------------------
# Output


def check_out(out, files, model_dir, image_folder):
    """OUT_DIR is new, empty or loom prepare's own earlier output; never an
    input's folder (nor above one), the model's, or the image folder."""
    real = os.path.realpath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        fail(out, "--out: exists and is not a folder")
    named = [(f"--input {f}", os.path.dirname(os.path.realpath(f))) for f in files]
    named.append((f"--model {model_dir}", os.path.realpath(model_dir)))
    if image_folder is not None:
        named.append((f"--image-folder {image_folder}", os.path.realpath(image_folder)))
    for flag, folder in named:
        if folder == real or folder.startswith(real + os.sep):
            fail(out, f"--out: is the folder of {flag}; write the prepared data to a folder of its own")
    if not os.path.isdir(out):
        return
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        ours = (name in ("data.jsonl", "prepare.json") and os.path.isfile(path)) or name == STAGING or (
            name == "pixels" and os.path.isdir(path) and all(PIXEL_FILE.match(p) for p in os.listdir(path)))
        if not ours:
            what = "pixels/ holds files" if name == "pixels" else f"holds {name}"
            fail(out, f"--out: {what} that loom prepare did not write; give a new or empty folder (it replaces only "
                      "its own data.jsonl, pixels/ and prepare.json)")


def sync_filesystem(folder):
    """syncfs(2) on the folder's filesystem: one call for every file of the
    run (an fsync per pixel file would cost minutes on a large dataset), and
    unlike os.sync() it leaves other filesystems alone."""
    try:
        import ctypes

        fd = os.open(folder, os.O_RDONLY)
        try:
            if ctypes.CDLL(None, use_errno=True).syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):  # no syncfs (not Linux)
        pass
    os.sync()


def write_output(prep, samples, out, args, files):
    """Everything goes to OUT/.loom-prepare.tmp first; only a whole run is
    moved in place, data.jsonl last (its presence marks a complete output).
    A failed run leaves the previous output as it was."""
    from safetensors.torch import save_file

    created = not os.path.exists(out)
    staging = os.path.join(out, STAGING)
    if os.path.exists(staging):
        shutil.rmtree(staging)  # a crashed run's leftovers
    os.makedirs(os.path.join(staging, "pixels"))
    stats = {"samples": 0, "images": 0, "tokens": 0, "scored_tokens": 0, "longest_sample_tokens": 0}
    try:
        with open(os.path.join(staging, "data.jsonl"), "w", encoding="utf-8") as data:
            for s in samples:
                if args.limit is not None and stats["samples"] >= args.limit:
                    break
                ids, labels, pixel_values = prep.prepare(s, args.max_tokens)
                n = stats["samples"] + 1
                line = {"input_ids": ids, "labels": labels}
                if pixel_values is not None:
                    name = f"pixels/{n:06d}.safetensors"
                    save_file({"pixel_values": pixel_values.contiguous()}, os.path.join(staging, name))
                    line["image_token_id"] = prep.image_token_id
                    line["pixel_values"] = name
                    stats["images"] += pixel_values.shape[0]
                data.write(json.dumps(line, separators=(",", ":")) + "\n")
                stats["samples"] = n
                stats["tokens"] += len(ids)
                stats["scored_tokens"] += sum(1 for t in labels if t != -100)
                stats["longest_sample_tokens"] = max(stats["longest_sample_tokens"], len(ids))
        if not stats["samples"]:
            fail(", ".join(files), "no samples: the dataset is empty")
        summary = {
            "arguments": {"model": args.model, "input": args.input, "out": args.out, "max_tokens": args.max_tokens,
                          "template": args.template, "limit": args.limit, "image_folder": args.image_folder},
            "inputs": files,
            "template": prep.template,
            "model_config_sha256": prep.model_files["config.json"],
            "model_files_sha256": prep.model_files,
            "tokenizer": type(prep.tokenizer).__name__,
            "processor": type(prep.processor).__name__ if prep.processor is not None else None,
            "image_processor": type(prep.processor.image_processor).__name__ if prep.processor is not None else None,
            "image_token_id": prep.image_token_id,
            "transformers_version": prep.transformers_version,
            **stats,
        }
        with open(os.path.join(staging, "prepare.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(summary, indent=2) + "\n")
        sync_filesystem(out)  # the new files on disk before any old one goes
        final = {n: os.path.join(out, n) for n in ("data.jsonl", "pixels", "prepare.json")}
        if os.path.exists(final["data.jsonl"]):
            os.remove(final["data.jsonl"])  # from here until the last rename, no data.jsonl: visibly incomplete
        if os.path.exists(final["pixels"]):
            os.rename(final["pixels"], os.path.join(staging, "old-pixels"))
        if stats["images"]:
            os.rename(os.path.join(staging, "pixels"), final["pixels"])
        os.replace(os.path.join(staging, "prepare.json"), final["prepare.json"])
        os.replace(os.path.join(staging, "data.jsonl"), final["data.jsonl"])
        shutil.rmtree(staging)
        sync_filesystem(out)  # the renames too
        return stats
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            try:
                os.rmdir(out)
            except OSError:
                pass
        raise


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="Turn image-text data into Loom's pre-tokenized samples "
                                "with the model's own tokenizer, chat template and image processor "
                                "(docs/data-prepare.md).")
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="a Hugging Face model folder")
    p.add_argument("--input", required=True, action="append", metavar="INPUT",
                   help="LLaVA .json/.jsonl or WebDataset .tar (brace patterns: shard-{000..009}.tar); repeatable")
    p.add_argument("--out", required=True, metavar="OUT_DIR", help="a new or empty folder, or an earlier output")
    p.add_argument("--max-tokens", type=int, metavar="N", help="refuse a sample of more tokens (images included)")
    p.add_argument("--template", choices=["chat", "caption"],
                   help="chat: the model's chat template, assistant turns scored (default when it has one); "
                        "caption: image tokens + caption + eos, the caption scored")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N samples")
    p.add_argument("--image-folder", metavar="DIR",
                   help="the folder LLaVA image paths are relative to (default: the data file's folder)")
    a = p.parse_args(argv)
    if a.max_tokens is not None and a.max_tokens < 1:
        p.error(f"--max-tokens: expected a count of at least 1, got {a.max_tokens}")
    if a.limit is not None and a.limit < 1:
        p.error(f"--limit: expected a count of at least 1, got {a.limit}")
    return a


def main(argv=None):
    args = parse_args(argv)
    _wide_images_seen.clear()  # a warning per run, also when main runs twice in one process
    try:
        files = resolve_inputs(args.input)
        if args.image_folder is not None and not os.path.isdir(args.image_folder):
            fail(args.image_folder, "--image-folder: no such folder")
        check_out(args.out, files, args.model, args.image_folder)
        try:
            import PIL  # noqa: F401
            import safetensors  # noqa: F401
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            fail(sys.executable, "needs the Python packages of Loom's requirements.txt (transformers, tokenizers, "
                                 f"torch, safetensors, pillow; scripts/install-deps.sh installs them): {e}")
        prep = Preparer(args.model, args.template)
        stats = write_output(prep, read_samples(files, args.image_folder), args.out, args, files)
    except PrepareError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"{PROG}: {stats['samples']} samples, {stats['tokens']} tokens ({stats['scored_tokens']} scored), "
          f"{stats['images']} images -> {os.path.join(args.out, 'data.jsonl')} (template {prep.template})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
