"""The `loom` Python module (issue 22): plan and simulate agree with the
`loom` command on the same inputs (its JSON, run as a separate process), and
LoomBatchSampler feeds a torch DataLoader every sample of every batch exactly
once, in the microbatches the strategy's scheduler chose."""
import json
import os
import random
import subprocess
import unittest

import torch

import loom

LOOM = os.environ["LOOM_BINARY"]


def cli_json(*args):
    out = subprocess.run([LOOM, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def metadata(n, seed=1):
    """Image-text samples of varied size, in Loom's JSONL sample format."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        images = [[rng.choice([224, 448, 672]), rng.choice([224, 448])] for _ in range(rng.randint(0, 3))]
        out.append({"text_tokens": rng.randint(32, 1024), "images": images})
    return out


class Index(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class LoomModule(unittest.TestCase):
    def test_simulate_equals_the_command(self):
        args = dict(model="llama3-8b", cluster="h100:1x8", tp=2, pp=4, dp=1, microbatches=8, schedule="zb-h1",
                    workload="text", global_batch=16)
        mine = loom.simulate(**args)
        cli = cli_json("simulate", "--model", "llama3-8b", "--cluster", "h100:1x8", "--tp", "2", "--pp", "4", "--dp",
                       "1", "--microbatches", "8", "--schedule", "zb-h1", "--workload", "text", "--global-batch", "16",
                       "--json")
        self.assertEqual(mine["iteration_time_s"], cli["iteration_time_s"])
        self.assertEqual(mine["peak_mem_bytes"], cli["peak_mem_bytes"])

    def test_plan_equals_the_command(self):
        mine = loom.plan("vlm-s", "h800:2x8", workload="obelics", global_batch=16, strategies="megatron,mmscale",
                         iterations=1)
        path = "/tmp/loom-python-plan.json"
        subprocess.run([LOOM, "plan", "--model", "vlm-s", "--cluster", "h800:2x8", "--workload", "obelics",
                        "--global-batch", "16", "--strategy", "megatron,mmscale", "--iterations", "1", "--json", path],
                       check=True, capture_output=True)
        with open(path) as f:
            cli = json.load(f)
        self.assertEqual(mine["best"], cli["best"])
        for a, b in zip(mine["strategies"], cli["strategies"]):
            self.assertEqual(a["name"], b["name"])
            self.assertEqual(a["iteration_time_s"], b["iteration_time_s"])

    def test_errors_are_value_errors(self):
        with self.assertRaises(ValueError) as e:
            loom.simulate("no-such-model", "h100:1x8")
        self.assertIn("unknown model 'no-such-model'", str(e.exception))
        with self.assertRaises(ValueError):
            loom.LoomBatchSampler(metadata(8), "vlm-s", "h800:1x8", "megatron", global_batch=9)

    def check_partition(self, strategy, replicas_expected):
        meta = metadata(64)
        sampler = loom.LoomBatchSampler(meta, "vlm-s", "h800:1x8", strategy, global_batch=16, iterations=3, seed=7)
        loader = torch.utils.data.DataLoader(Index(len(meta)), batch_sampler=sampler)
        batches = [b.tolist() for b in loader]
        # Re-derive each iteration's indices by the sampler's rule (seeded permutation, in order).
        order = torch.randperm(64, generator=torch.Generator().manual_seed(7 * 1000003)).tolist()
        seen = [i for b in batches for i in b]
        deferred = len(sampler.last_schedule["deferred"])
        self.assertEqual(sorted(seen), sorted(order[:48])[:len(seen)] if deferred else sorted(order[:48]))
        self.assertGreater(sampler.last_prediction_s, 0)
        self.assertEqual("replicas" in sampler.last_schedule, replicas_expected)
        return batches, order

    def test_static_plans_cut_the_loaders_order(self):
        batches, order = self.check_partition("megatron", False)
        self.assertEqual([i for b in batches for i in b], order[:48])  # megatron keeps the order

    def test_reordering_strategies_regroup_every_sample_once(self):
        # MMScale's reordering and PipeWeaver's per-batch (woven) schedule.
        for strategy in ("mmscale", "pipeweaver"):
            with self.subTest(strategy=strategy):
                batches, order = self.check_partition(strategy, False)
                flat = [i for b in batches for i in b]
                self.assertEqual(sorted(flat), sorted(order[:48]))

    def test_entrain_assigns_samples_to_replicas(self):
        self.check_partition("entrain", True)

    def test_replicas_split_the_batch(self):
        meta = metadata(32)
        common = dict(metadata=meta, model="vlm-s", cluster="h800:1x8", strategy="megatron", global_batch=16,
                      iterations=1, seed=3)
        parts = [list(loom.LoomBatchSampler(replica=r, num_replicas=2, **common)) for r in range(2)]
        whole = list(loom.LoomBatchSampler(**common))
        self.assertEqual(sorted(i for p in parts for b in p for i in b), sorted(i for b in whole for i in b))
        self.assertFalse(set(i for b in parts[0] for i in b) & set(i for b in parts[1] for i in b))

    def test_replicas_take_turns_at_one_sample_microbatches(self):
        # Audit A5-10: MMScale's one-sample microbatches went whole to replica 0.
        meta = metadata(32)
        common = dict(metadata=meta, model="vlm-s", cluster="h800:1x8", strategy="mmscale", global_batch=16,
                      iterations=1, seed=3)
        whole = list(loom.LoomBatchSampler(**common))
        for n in (2, 4):
            with self.subTest(num_replicas=n):
                samplers = [loom.LoomBatchSampler(replica=r, num_replicas=n, **common) for r in range(n)]
                parts = [list(s) for s in samplers]
                for s, p in zip(samplers, parts):
                    self.assertEqual(len(p), len(s))  # len() is what iterating yields
                    self.assertEqual(sum(len(b) for b in p), 16 // n)
                self.assertEqual(sorted(i for p in parts for b in p for i in b),
                                 sorted(i for b in whole for i in b))
        with self.assertRaisesRegex(ValueError, "num_replicas: mmscale's plan cuts a batch of 16 into 16"):
            loom.LoomBatchSampler(replica=0, num_replicas=3, **common)

    def test_plan_and_simulate_errors_name_their_keywords(self):
        # Audit A5-11: the library's messages named the CLI's flags ("--vpp 2 needs --pp >= 2").
        for call, says in ((lambda: loom.simulate("llama3-8b", "h100:1x8", dp=8, vpp=2), "vpp 2 needs pp >= 2"),
                           (lambda: loom.simulate("llama3-8b", "h100:1x8", schedule="custom"),
                            "schedule: 'custom'; valid: gpipe, 1f1b, interleaved, zb-h1"),
                           (lambda: loom.plan("llama3-8b", "h100:1x8", iterations=0), "iterations: must be 1..10000"),
                           (lambda: loom.plan("llama3-8b", "h100:1x8", iterations=10 ** 9),
                            "iterations: must be 1..10000")):
            with self.subTest(says=says):
                with self.assertRaisesRegex(loom.LoomError, says) as caught:
                    call()
                self.assertNotIn("--", str(caught.exception))

    def test_bad_arguments_name_the_keyword(self):
        meta = metadata(8)
        common = dict(model="vlm-s", cluster="h800:1x8", strategy="megatron")
        for kwargs, says in ((dict(metadata=meta, global_batch=4, num_replicas=0), "num_replicas: must be >= 1"),
                             (dict(metadata=meta, global_batch=4, iterations=-1), "iterations: must be None"),
                             (dict(metadata=[], global_batch=1), "metadata: empty"),
                             # Audit A5-13: clips for a model without a video encoder were priced as text.
                             (dict(metadata=[{"text_tokens": 10, "videos": [[16, 512, 512]]}] * 4, global_batch=4),
                              "metadata: sample 0 carries video clips, which no module of model vlm-s reads")):
            with self.subTest(says=says):
                with self.assertRaisesRegex(ValueError, says):
                    loom.LoomBatchSampler(**common, **kwargs)


if __name__ == "__main__":
    unittest.main()
