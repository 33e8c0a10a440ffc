#!/usr/bin/python3
"""Tests of the twin's training benchmark (`wg_twin.py bench`, wg_bench.py) on the CPU.

Owns: a plain run reports finite losses on the CPU (no reserved peak there); --device cuda without a CUDA device is one clear error (exit 2);
--bf16 (the GPU check's autocast) runs every mode of the small synthetic
model with finite losses, with layer_norm run in float32 as CUDA's autocast
runs it (torch 1.13's CPU autocast leaves it in bfloat16, where the affine
LayerNorm's float32 weights then fail); to_device keeps every tensor of a
Batch.
"""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_bench  # noqa: E402
import wg_step  # noqa: E402
import wg_twin  # noqa: E402

MODES = "none,full,selective,every_n=2"


@contextlib.contextmanager
def layer_norm_in_float32_under_autocast():
    """F.layer_norm as CUDA's autocast runs it (in its float32 list)."""
    plain = F.layer_norm

    def ln(x, shape, weight=None, bias=None, eps=1e-5):
        if not torch.is_autocast_cpu_enabled():
            return plain(x, shape, weight, bias, eps)
        with torch.autocast("cpu", enabled=False):
            return plain(x.float(), shape, None if weight is None else weight.float(),
                         None if bias is None else bias.float(), eps)

    F.layer_norm = ln
    try:
        yield
    finally:
        F.layer_norm = plain


class Bench(unittest.TestCase):
    _plain = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dump = os.path.join(cls.tmp.name, "step0.safetensors")
        with contextlib.redirect_stdout(io.StringIO()):
            assert wg_twin.main(["make-dump", cls.dump]) == 0

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def bench(self, *extra, modes=MODES):
        out = os.path.join(self.tmp.name, "bench.json")
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = wg_twin.main(["bench", self.dump, "--modes", modes, "--warmup", "0", "--steps", "1",
                               "--profiled-steps", "1", "--out", out, *extra])
        if rc != 0:
            return rc, err.getvalue(), None
        with open(out) as f:
            return rc, err.getvalue(), json.load(f)

    def plain(self):
        """The plain run's (rc, stderr, JSON), run once for the class."""
        if Bench._plain is None:
            Bench._plain = self.bench(modes="none")
        return Bench._plain

    def check_modes(self, doc, modes=MODES):
        self.assertEqual([m["mode"] for m in doc["modes"]], modes.split(","))
        for m in doc["modes"]:
            self.assertEqual(len(m["losses"]), 2, m["mode"])
            self.assertTrue(all(math.isfinite(v) for v in m["losses"]), m["mode"])
            self.assertEqual(m["skipped_steps"], [], m["mode"])
            self.assertGreater(m["step_peak_bytes"], 0, m["mode"])

    def test_plain_run_on_the_cpu(self):
        rc, err, doc = self.plain()
        self.assertEqual(rc, 0, err)
        self.assertEqual(doc["device"], "cpu")
        self.assertIsNone(doc["autocast"])
        self.check_modes(doc, "none")
        self.assertTrue(all(m["peak_reserved_bytes"] is None for m in doc["modes"]))

    @unittest.skipIf(torch.cuda.is_available(), "a CUDA device is here")
    def test_cuda_without_a_device_is_one_clear_error(self):
        rc, err, _ = self.bench("--device", "cuda")
        self.assertEqual(rc, 2)
        self.assertIn("--device cuda", err)
        self.assertIn("no CUDA device", err)

    def test_an_unknown_device_is_refused(self):
        rc, err, _ = self.bench("--device", "meta")
        self.assertEqual(rc, 2)
        self.assertIn("cpu or cuda", err)

    def test_bf16_autocast_runs_every_mode(self):
        with layer_norm_in_float32_under_autocast():
            rc, err, doc = self.bench("--bf16")
        self.assertEqual(rc, 0, err)
        self.assertEqual(doc["autocast"], "bfloat16")
        self.check_modes(doc)
        # not the float32 run's losses: the products ran in bfloat16
        rc, err, plain = self.plain()
        self.assertEqual(rc, 0, err)
        self.assertNotEqual(doc["modes"][0]["losses"], plain["modes"][0]["losses"])

    def test_to_device_keeps_every_tensor(self):
        tensors, _, cfg, B = wg_step.read_dump(self.dump)
        batch = wg_step.batch_from_tensors(tensors, cfg, B)
        moved = wg_bench.to_device(batch, torch.device("cpu"))
        want, got = wg_step.batch_tensors(batch, cfg), wg_step.batch_tensors(moved, cfg)
        self.assertEqual(list(want), list(got))
        for k in want:  # targets hold NaN (missing values): equal where both are NaN
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0, equal_nan=True, msg=k)


if __name__ == "__main__":
    unittest.main()
