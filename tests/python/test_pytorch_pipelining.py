"""PyTorch runs Loom's schedules (issue 43): a plan Loom makes for a small
transformers Llama is exported as PyTorch pipelining's CSV (`loom simulate
--plan ... --export-pytorch-csv`), and torch.distributed.pipelining's own
CSV runtime (_PipelineScheduleRuntime, what torchtitan's
pipeline_parallel_schedule_csv feeds) executes it in Gloo processes on the
CPU: each rank builds the stages its CSV row names, with the plan's layers.
Two AdamW steps on the same data reach the losses `loom run` reaches under
the same plan."""
import dataclasses
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types
import uuid
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import transformers

LOOM = os.environ["LOOM_BINARY"]
SAMPLES, SEQ, STEPS, LR = 8, 16, 2, 0.01


def loom(*args):
    out = subprocess.run([LOOM, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"loom {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out.stdout


class LlamaStage(nn.Module):
    """Layers [begin, end) of Loom's `llm` module over a transformers Llama:
    0 the embedding, 1..N the decoder layers, N + 1 the final norm and head.
    Only hidden states cross stages, so each stage makes the positions, the
    rotary cos/sin and the causal mask itself (LlamaModel.forward does the
    same once)."""

    def __init__(self, model, begin, end):
        super().__init__()
        n = model.config.num_hidden_layers
        self.config = model.config
        self.embed = model.model.embed_tokens if begin == 0 else None
        self.layers = nn.ModuleList(model.model.layers[i - 1] for i in range(max(begin, 1), min(end, n + 1)))
        self.rotary = model.model.rotary_emb
        self.norm, self.head = (model.model.norm, model.lm_head) if end == n + 2 else (None, None)

    def forward(self, x):
        from transformers.masking_utils import create_causal_mask

        h = self.embed(x) if self.embed is not None else x
        pos = torch.arange(h.shape[1]).unsqueeze(0)
        mask = create_causal_mask(config=self.config, inputs_embeds=h, attention_mask=None, cache=None,
                                  position_ids=pos)
        rope = self.rotary(h, position_ids=pos)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_embeddings=rope, position_ids=pos)
        return self.head(self.norm(h)) if self.head is not None else h


def shifted_loss(logits, labels):  # transformers' causal-LM loss: predict token t + 1
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def run_rank(rank, world, store, folder, plan_stages, csv_path, csv_format, microbatches, out_path):
    torch.set_num_threads(1)
    # A file store: a TCP port picked free beforehand can be taken by another
    # test's process before rank 0 binds it (ctest -j).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.config._attn_implementation = "eager"
    model.train()
    mine = [s for s, st in enumerate(plan_stages) if st["rank"] == rank]
    modules = [LlamaStage(model, plan_stages[s]["begin"], plan_stages[s]["end"]) for s in mine]
    stages = [PipelineStage(m, s, len(plan_stages), torch.device("cpu")) for m, s in zip(modules, mine)]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=microbatches, loss_fn=shifted_loss, scale_grads=True)
    # compute_only: torch adds the sends, receives and gradient scaling; compute_comms: Loom wrote them.
    schedule._load_csv(csv_path, format=csv_format)
    params = [p for m in modules for p in m.parameters()]
    # loom run's AdamW: decay on matrices and embeddings only; the global norm clipped to 1.
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=LR)
    with open(os.path.join(folder, "data.jsonl")) as f:
        batch = torch.tensor([json.loads(line)["input_ids"] for line in f])
    first, last = 0 in mine, len(plan_stages) - 1 in mine
    step_losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        losses = []
        schedule.step(*((batch,) if first else ()), target=batch if last else None, losses=losses)
        squares = torch.stack([p.grad.pow(2).sum() for p in params if p.grad is not None]).sum()
        dist.all_reduce(squares)
        scale = min(1.0, 1.0 / (squares.sqrt().item() + 1e-6))
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        opt.step()
        step_losses.append(sum(l.item() for l in losses) / len(losses) if last else None)
    if last:
        with open(out_path, "w") as f:
            json.dump(step_losses, f)
    dist.barrier()
    dist.destroy_process_group()


class PytorchRunsLoomsSchedules(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.folder = os.path.join(self.dir.name, "tiny-llama")
        torch.manual_seed(0)
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                          max_position_embeddings=256, tie_word_embeddings=False)
        transformers.LlamaForCausalLM(config).save_pretrained(self.folder)
        g = torch.Generator().manual_seed(3)
        with open(os.path.join(self.folder, "data.jsonl"), "w") as f:
            for _ in range(SAMPLES):  # equal lengths: each microbatch scores the same number of tokens
                f.write(json.dumps({"input_ids": torch.randint(0, 128, (SEQ,), generator=g).tolist()}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_both(self, plans, plan, comms=False):
        """`loom run` and PyTorch's CSV runtime under the plan `plans` holds
        (strategy megatron, whose `plan` is given): their losses per step.
        `comms`: Loom's compute_comms form, run verbatim."""
        d, folder = self.dir.name, self.folder
        data = os.path.join(folder, "data.jsonl")
        pipeline = plan["units"][0]["pipelines"][0]
        stages = [{"rank": s["rank"], "begin": s["layers"][0]["begin"], "end": s["layers"][-1]["end"]}
                  for s in pipeline["stages"]]
        csv_path = os.path.join(d, "schedule.csv")
        loom("simulate", "--plan", plans, "--strategy", "megatron", "--export-pytorch-csv", csv_path,
             *(["--pytorch-csv-comms"] if comms else []))
        ran = json.loads(loom("run", "--model", folder, "--data", data, "--plan", plans, "--strategy", "megatron",
                              "--cluster", "h100:1x2", "--global-batch", str(SAMPLES), "--steps", str(STEPS),
                              "--lr", str(LR), "--precision", "fp32", "--json"))
        out = os.path.join(d, "torch_losses.json")
        form = "compute_comms" if comms else "compute_only"
        store = os.path.join(d, f"store-{uuid.uuid4().hex}")  # a new file each run: FileStore must not find an old one
        mp.spawn(run_rank, args=(2, store, folder, stages, csv_path, form, pipeline["microbatches"], out), nprocs=2)
        with open(out) as f:
            return ran["losses"], json.load(f)

    def plan(self):
        plans = os.path.join(self.dir.name, "plans.json")
        loom("plan", "--model", self.folder, "--cluster", "h100:1x2", "--workload",
             os.path.join(self.folder, "data.jsonl"), "--global-batch", str(SAMPLES), "--precision", "fp32",
             "--strategy", "megatron", "--pp", "2", "--json", plans)
        with open(plans) as f:
            everything = json.load(f)
        return plans, everything, next(s["plan"] for s in everything["strategies"] if s["name"] == "megatron")

    def check(self, loom_losses, torch_losses):
        self.assertEqual(len(torch_losses), STEPS)
        for step, (mine, theirs) in enumerate(zip(loom_losses, torch_losses)):
            self.assertAlmostEqual(theirs / mine, 1.0, delta=1e-5, msg=f"step {step}: loom {mine} torch {theirs}")
        self.assertNotAlmostEqual(torch_losses[0], torch_losses[1], delta=1e-4)  # the step changed the weights

    def test_the_plan_loom_picks_interleaved(self):
        plans, _, plan = self.plan()
        self.assertEqual(plan["units"][0]["pipelines"][0]["schedule"], "interleaved")  # 4 stages on 2 ranks
        self.check(*self.run_both(plans, plan))
        # The compute_comms form: Loom's sends, receives and REDUCE_GRADs, which PyTorch runs as written.
        self.check(*self.run_both(plans, plan, comms=True))

    def test_the_same_layers_under_zero_bubble(self):
        # The plan rewritten as a user may: 2 stages under ZB-H1 (split backward: I and W cells), 4 microbatches.
        plans, everything, plan = self.plan()
        pipeline = plan["units"][0]["pipelines"][0]
        layers = pipeline["stages"]
        pipeline["stages"] = [
            {"rank": 0, "layers": [{"module": "llm", "begin": 0, "end": layers[1]["layers"][-1]["end"]}]},
            {"rank": 1, "layers": [{"module": "llm", "begin": layers[1]["layers"][-1]["end"],
                                    "end": layers[-1]["layers"][-1]["end"]}]}]
        pipeline["schedule"], pipeline["microbatches"] = "zb-h1", 4
        for s in everything["strategies"]:
            if s["name"] == "megatron":
                s["plan"] = plan
                s.pop("schedules", None)
        with open(plans, "w") as f:
            json.dump(everything, f)
        self.check(*self.run_both(plans, plan))
        with open(os.path.join(self.dir.name, "schedule.csv")) as f:
            self.assertIn("1W0", f.read())

# torchtitan's config fields as its source declares them (torchtitan/config/configs.py,
# ParallelismConfig and TrainingConfig at commit b5bcd76, 2026-08-21; the fields the
# export sets): slots, so that a name torchtitan does not have is an AttributeError.
@dataclasses.dataclass(slots=True)
class TitanParallelism:
    data_parallel_replicate_degree: int = 1
    data_parallel_shard_degree: int = -1
    tensor_parallel_degree: int = 1
    pipeline_parallel_degree: int = 1
    module_fqns_per_model_part: list | None = None
    pipeline_parallel_schedule: str = "1F1B"
    pipeline_parallel_schedule_csv: str | None = ""
    num_pp_microbatches: int = 1
    context_parallel_degree: int = 1


@dataclasses.dataclass(slots=True)
class TitanTraining:
    num_tokens_per_microbatch_per_dp_rank: int = 16384
    num_tokens_per_train_step: int = -1
    max_context_length: int = 2048


@dataclasses.dataclass(slots=True)
class TitanConfig:
    parallelism: TitanParallelism = dataclasses.field(default_factory=TitanParallelism)
    training: TitanTraining = dataclasses.field(default_factory=TitanTraining)
    activation_checkpoint: object = None


class TorchtitanConfig(unittest.TestCase):
    def test_the_exported_module_sets_torchtitans_fields_for_the_plan(self):
        d = tempfile.mkdtemp()
        csv_path, module_path = os.path.join(d, "s.csv"), os.path.join(d, "loom_titan.py")
        loom("simulate", "--model", "llama3-1b", "--cluster", "h100:1x8", "--workload", "text", "--global-batch", "16",
             "--seq-len", "2048", "--tp", "2", "--pp", "2", "--dp", "2", "--vpp", "2", "--schedule", "interleaved",
             "--microbatches", "4", "--recompute", "full", "--export-pytorch-csv", csv_path,
             "--export-torchtitan", module_path, "--torchtitan-base", "fake_recipes:llama3_1b")
        # Stand-ins for what the module imports: torchtitan's activation checkpointing and a recipe.
        ac = types.ModuleType("torchtitan.distributed.activation_checkpoint")
        ac.FullAC = types.SimpleNamespace(Config=lambda: "full")
        ac.SelectiveAC = types.SimpleNamespace(Config=lambda: "selective")
        recipes = types.ModuleType("fake_recipes")
        recipes.llama3_1b = TitanConfig
        stubs = {"torchtitan": types.ModuleType("torchtitan"),
                 "torchtitan.distributed": types.ModuleType("torchtitan.distributed"),
                 "torchtitan.distributed.activation_checkpoint": ac, "fake_recipes": recipes}
        saved = {k: sys.modules.get(k) for k in stubs}
        sys.modules.update(stubs)
        try:
            spec = importlib.util.spec_from_file_location("loom_titan", module_path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            config = module.loom_plan()
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        p = config.parallelism
        self.assertEqual((p.tensor_parallel_degree, p.pipeline_parallel_degree, p.context_parallel_degree), (2, 2, 1))
        self.assertEqual(p.data_parallel_replicate_degree * p.data_parallel_shard_degree, 2)
        self.assertEqual(p.num_pp_microbatches, 4)
        self.assertEqual(p.pipeline_parallel_schedule_csv, csv_path)
        self.assertEqual(config.activation_checkpoint, "full")
        # 16 samples over DP 2 and 4 microbatches: 2 samples of 2048 tokens a microbatch.
        self.assertEqual(config.training.num_tokens_per_microbatch_per_dp_rank, 2 * 2048)
        # Every module of torchtitan's 16-layer Llama once, in order, over pp x vpp = 4 parts.
        parts = p.module_fqns_per_model_part
        self.assertEqual(len(parts), 4)
        want = ["tok_embeddings"] + [f"layers.{i}" for i in range(16)] + ["norm", "output"]
        self.assertEqual([m for part in parts for m in part], want)
        # torchtitan's "loop" placement (_get_pp_rank_to_stage_indices_mapping) is the CSV's:
        # PipelineScheduleMulti is neither ZBVZeroBubble nor DualPipeV, so stage v runs on rank v mod pp.
        self.assertEqual(p.pipeline_parallel_schedule, "PipelineScheduleMulti")
        with open(csv_path) as f:
            rows = [line.strip().split(",") for line in f if line.strip()]
        self.assertEqual(len(rows), 2)
        for rank, row in enumerate(rows):
            stages = {int(cell[0]) for cell in row if cell}
            self.assertEqual(stages, {rank, rank + 2})

    def test_what_torchtitan_cannot_run_is_refused_by_name(self):
        d = tempfile.mkdtemp()
        llava = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hf", "llava-1.5-7b")
        out = subprocess.run([LOOM, "simulate", "--model", llava, "--cluster", "h100:1x8", "--workload", "obelics",
                              "--global-batch", "8", "--pp", "2", "--tp", "4", "--microbatches", "4", "--recompute", "full",
                              "--export-pytorch-csv", os.path.join(d, "s.csv"), "--export-torchtitan",
                              os.path.join(d, "t.py")], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("torchtitan cannot run this plan: model llava-1.5-7b has 3 modules", out.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "t.py")))


if __name__ == "__main__":
    unittest.main()
