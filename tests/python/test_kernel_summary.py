"""scripts/kernel-summary.py against traces whose answers are known: a
hand-made GPU trace (two streams overlapping, a gap, one kernel of each
kind) and a CPU trace `loom run --kernel-trace` writes (operators nested
in time: each one's own time is its time less its children's)."""
import importlib.util
import json
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "kernel-summary.py")
spec = importlib.util.spec_from_file_location("kernel_summary", SCRIPT)
ks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ks)


def kernel(name, ts, dur, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream}


class KernelSummaryTest(unittest.TestCase):
    def test_busy_time_is_the_union_over_streams_and_kinds_add_up(self):
        trace = {"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
            kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 10, 40),           # [10, 50)
            kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, cutlass::bfloat16_t>>",
                   30, 30, stream=9),                                   # [30, 60): overlaps
            kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", 80, 10),  # after a 20 us gap
            kernel("cunn_SoftMaxForward", 90, 5),
            kernel("vectorized_elementwise_kernel<mul>", 95, 5),
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 100, "dur": 10, "pid": 0, "tid": 7},
        ]}
        s = ks.summarize(trace, top=3)
        self.assertAlmostEqual(s["span_s"], 110e-6)
        self.assertAlmostEqual(s["gpu_busy_s"], (50 + 30) * 1e-6)  # [10, 60) and [80, 110)
        self.assertAlmostEqual(s["gpu_idle_s"], 30e-6)
        self.assertEqual(s["kernels"], 6)
        self.assertEqual({k: round(v * 1e6) for k, v in s["by_kind_s"].items()},
                         {"gemm": 40, "attention": 30, "adamw": 10, "loss": 5, "other elementwise": 5,
                          "copy/cast": 10})
        self.assertEqual([r["name"] for r in s["top"]],
                         ["sm90_xmma_gemm_bf16bf16_bf16f32",
                          "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, cutlass::bfloat16_t>>",
                          "multi_tensor_apply_kernel<FusedAdamMathFunctor>"])

    def test_attention_kernels_named_after_cutlass_are_attention(self):
        self.assertEqual(ks.kind_of("fmha_cutlassF_bf16_aligned_64x64_rf_sm80"), "attention")
        self.assertEqual(ks.kind_of("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8"), "gemm")

    def test_own_time_leaves_out_children(self):
        ops = [{"name": "outer", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
               {"name": "inner", "ts": 10, "dur": 30, "pid": 1, "tid": 1},
               {"name": "leaf", "ts": 15, "dur": 5, "pid": 1, "tid": 1},
               {"name": "inner", "ts": 50, "dur": 20, "pid": 1, "tid": 1},
               {"name": "other-thread", "ts": 0, "dur": 100, "pid": 1, "tid": 2}]
        own = ks.self_times(ops)
        self.assertEqual(dict(own), {"outer": 50, "inner": 45, "leaf": 5, "other-thread": 100})

    def test_a_loom_cpu_trace_shows_the_fused_adamw(self):
        loom = os.environ.get("LOOM_BINARY")
        if not loom:
            self.skipTest("LOOM_BINARY not set")
        model = os.path.join(HERE, "..", "data", "runtime", "tiny-llm.yaml")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "traces")
            subprocess.run([loom, "run", "--model", model, "--cluster", "h100:1x1", "--workload", "text",
                            "--global-batch", "4", "--seq-len", "32", "--steps", "2", "--kernel-trace", out],
                           check=True, capture_output=True)
            r = subprocess.run([SCRIPT, os.path.join(out, "process-0.json"), "--json", "--top", "200"],
                               check=True, capture_output=True, text=True)
            s = json.loads(r.stdout)
            names = [t["name"] for t in s["top"]]
            self.assertIn("aten::_fused_adamw_", names)
            self.assertLessEqual(sum(t["s"] for t in s["top"]), s["span_s"] * 1.01)
            bad = subprocess.run([SCRIPT, os.path.join(d, "missing.json")], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("missing.json", bad.stderr)


if __name__ == "__main__":
    unittest.main()
