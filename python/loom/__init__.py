"""Loom from Python: plan and simulate multimodal training, and feed a
DataLoader the microbatches a strategy's per-batch scheduler chooses.

    import loom
    best = loom.plan("vlm-s", "h800:2x8", workload="obelics", global_batch=32)["best"]
    sampler = loom.LoomBatchSampler(metadata, model="vlm-s", cluster="h800:2x8",
                                    strategy="mmscale", global_batch=32)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)

`metadata[i]` describes dataset item i in Loom's JSONL sample format
(docs/workloads.md): {"text_tokens": 812, "images": [[448, 448]]}.
"""
import json
import re

from . import _loom

LoomError = _loom.LoomError


# The most batches `plan` simulates: its result keeps every one (the CLI's
# limit where --json, --report or --run keep them).
MAX_PLAN_ITERATIONS = 10000


def _with_keywords(call, keywords):
    """`call()`, its LoomError naming this module's keyword arguments
    ("iterations") where the library names the CLI's flags ("--iterations")."""
    try:
        return call()
    except LoomError as e:
        text = str(e)
        for k in sorted(keywords, key=len, reverse=True):
            text = re.sub(r"--" + k.replace("_", "-") + r"\b", k, text)
        raise LoomError(text) from None


def plan(model, cluster, workload=None, global_batch=None, strategies="all", iterations=1, profile="default"):
    """`loom plan --json`: every strategy's plan and its simulated batches, as a dict."""
    if not 1 <= iterations <= MAX_PLAN_ITERATIONS:
        raise LoomError(f"iterations: must be 1..{MAX_PLAN_ITERATIONS} (every simulated batch is kept in the result), "
                        f"got {iterations}")
    return json.loads(_with_keywords(
        lambda: _loom.plan(model, cluster, workload, global_batch, strategies, iterations, profile),
        ("model", "cluster", "workload", "global_batch", "strategies", "iterations", "profile")))


_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


def simulate(model, cluster, tp=1, pp=1, dp=1, cp=1, vpp=1, microbatches=1, schedule="1f1b", recompute="none",
             workload=None, global_batch=None, profile="default"):
    """`loom simulate --json` of a Megatron-LM layout: iteration time, MFU, bubble, peak memory."""
    if schedule not in _SCHEDULES:  # the CLI's `custom` is a PyTorch CSV's, which this call does not read
        raise LoomError(f"schedule: '{schedule}'; valid: {', '.join(_SCHEDULES)}")
    return json.loads(_with_keywords(
        lambda: _loom.simulate(model, cluster, tp, pp, dp, cp, vpp, microbatches, schedule, recompute, workload,
                                   global_batch, profile),
        ("model", "cluster", "tp", "pp", "dp", "cp", "vpp", "microbatches", "schedule", "recompute", "workload",
         "global_batch", "profile")))


def strategies():
    return _loom.strategies()


try:
    import torch
    from torch.utils.data import Sampler
except ImportError:  # plan and simulate work without PyTorch
    torch = None
    Sampler = object


class LoomBatchSampler(Sampler):
    """A batch sampler whose batches are a Loom strategy's microbatches.

    Iteration i takes the next `global_batch` indices of a seeded permutation
    of the dataset (epoch after epoch, as Loom's JSONL source does), asks the
    strategy's per-batch scheduler (MMScale's and DistTrain's reordering,
    PipeWeaver's woven schedule, Entrain's stratified assignment) which
    samples share each microbatch, and yields the microbatches in order, each
    a list of dataset indices. A static strategy (megatron) cuts the batch in
    the loader's order. `replica` / `num_replicas` yield one data-parallel
    replica's share (its own microbatches when the strategy assigns samples to
    replicas, as Entrain does; else every num_replicas-th sample of each
    microbatch, or every num_replicas-th microbatch where one holds fewer
    samples than there are replicas, as MMScale's one-sample microbatches do). Samples the strategy defers are dropped from the iteration.
    `last_prediction_s` is the simulator's time for the last batch scheduled.
    """

    def __init__(self, metadata, model, cluster, strategy, global_batch, iterations=None, seed=0, replica=0,
                 num_replicas=1, precision="bf16", profile="default"):
        if torch is None:
            raise ImportError("LoomBatchSampler needs PyTorch (requirements.txt; scripts/install-deps.sh installs it)")
        if len(metadata) == 0:
            raise ValueError("metadata: empty; give one entry per sample of the dataset")
        if global_batch < 1 or global_batch > len(metadata):
            raise ValueError(f"global_batch: must be 1..{len(metadata)} (the dataset's size), got {global_batch}")
        if iterations is not None and iterations < 1:
            raise ValueError(f"iterations: must be None (endless) or >= 1, got {iterations}")
        if num_replicas < 1:
            raise ValueError(f"num_replicas: must be >= 1, got {num_replicas}")
        if not 0 <= replica < num_replicas:
            raise ValueError(f"replica: must be 0..{num_replicas - 1}, got {replica}")
        self.lines = [json.dumps(m) for m in metadata]
        self.global_batch = global_batch
        self.iterations = iterations
        self.seed = seed
        self.replica = replica
        self.num_replicas = num_replicas
        self.last_prediction_s = None
        self.last_schedule = None
        self._order = []
        self._epoch = -1
        self._next = 0
        first = self._batch_indices()
        self._scheduler = _loom.Scheduler(model, cluster, strategy, [self.lines[i] for i in first], precision,
                                         profile)
        self._reset()
        # Microbatches of fewer samples than replicas (MMScale's and DistTrain's
        # one-sample microbatches) cannot be cut sample by sample, which left
        # every replica but the first empty: the replicas take them in turn.
        plan = json.loads(self._scheduler.plan_json())
        self._entrain = plan["strategy"].startswith("entrain")
        self._microbatches = plan["units"][0]["pipelines"][0]["microbatches"]
        self._by_microbatch = not self._entrain and global_batch // self._microbatches < num_replicas
        if self._by_microbatch and self._microbatches % num_replicas != 0:
            raise ValueError(f"num_replicas: {strategy}'s plan cuts a batch of {global_batch} into "
                             f"{self._microbatches} microbatches of {global_batch // self._microbatches} sample(s), "
                             f"which neither split over nor take turns among {num_replicas} replicas; valid: a "
                             f"divisor of {self._microbatches}")

    def _reset(self):
        self._order, self._epoch, self._next = [], -1, 0

    def _batch_indices(self):
        if self._next + self.global_batch > len(self._order):
            self._epoch += 1
            g = torch.Generator().manual_seed(self.seed * 1000003 + self._epoch)
            self._order = torch.randperm(len(self.lines), generator=g).tolist()
            self._next = 0
        out = self._order[self._next:self._next + self.global_batch]
        self._next += self.global_batch
        return out

    def schedule(self, indices, iteration):
        """The strategy's microbatches of the batch `indices` (dataset indices)."""
        s = self._scheduler.schedule([self.lines[i] for i in indices], iteration)
        self.last_prediction_s = s["predicted_iteration_time_s"]
        self.last_schedule = s
        if "replicas" in s:
            return [[[indices[p] for p in mb] for mb in rep] for rep in s["replicas"]]
        return [[indices[p] for p in mb] for mb in s["microbatches"]]

    def __iter__(self):
        self._reset()
        i = 0
        while self.iterations is None or i < self.iterations:
            indices = self._batch_indices()
            mbs = self.schedule(indices, i)
            if "replicas" in self.last_schedule:
                per_replica = mbs
                if len(per_replica) % self.num_replicas != 0:
                    raise ValueError(f"the plan has {len(per_replica)} replicas; num_replicas must divide it")
                k = len(per_replica) // self.num_replicas
                for rep in per_replica[self.replica * k:(self.replica + 1) * k]:
                    yield from rep
            elif self._by_microbatch:
                yield from mbs[self.replica::self.num_replicas]
            else:
                for mb in mbs:
                    mine = mb[self.replica::self.num_replicas]
                    if mine:
                        yield mine
            i += 1

    def __len__(self):
        """Batches over all iterations: the plan's microbatches per iteration (Entrain's vary: no length)."""
        if self.iterations is None:
            raise TypeError("an endless LoomBatchSampler (iterations=None) has no length")
        if self._entrain:
            raise TypeError("Entrain's microbatches per replica vary from batch to batch: no length")
        if self._by_microbatch:
            return self.iterations * self._microbatches // self.num_replicas
        return self.iterations * self._microbatches
