#!/usr/bin/python3
"""Tests of the step-dump checker (`wg_twin.py make-dump` / `check` / `perturb`, docs/step-dump.md).

Owns: the checker passes on the twin's own dump (B = 2, two streams, level 2)
and on a forecast-mode dump; it fails (exit 1, naming the tensor) when one
gradient is scaled by 1 + 2e-5, when an out.* tensor or the loss is perturbed,
when a parameter name is wrong, or when hp_nbours differs; it passes when the
perturbation is well inside the tolerance (1 + 2e-6).
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io as st  # noqa: E402
import wg_step  # noqa: E402
import wg_synth  # noqa: E402
import wg_twin  # noqa: E402

TWIN = os.path.join(HERE, "wg_twin.py")
GRAD = "grads.ae_local_global_engine.ae_adapter.0.proj_heads_k.weight"


def cli(*args):
    p = subprocess.run([sys.executable, TWIN, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def check(path):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = wg_step.check_dump(path)
    return rc, buf.getvalue()


class CheckTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dump = os.path.join(cls.tmp.name, "own.st")
        with redirect_stdout(io.StringIO()):
            assert wg_twin.main(["make-dump", cls.dump]) == 0

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def edit(self, name, fn):
        tensors, meta = st.read(self.dump)
        fn(tensors, meta)
        st.write(self.path(name), tensors, meta)
        return self.path(name)

    def test_dump_contents(self):
        tensors, meta = st.read(self.dump)
        self.assertEqual(meta["format"], "wgtrain-step-dump/1")
        self.assertEqual((meta["batch_size"], meta["num_cells"], meta["forecast_steps"]), ("2", "192", "1"))
        cfg = json.loads(meta["model"])
        self.assertEqual([s["name"] for s in cfg["streams"]], ["ERA5", "OBS"])
        lens = tensors["batch.source_cell_lens"]
        self.assertEqual(lens.dtype, torch.int64)
        self.assertTrue(bool((lens[1:] == 0).any()))                               # empty cells
        self.assertTrue(bool((tensors["batch.ERA5.target_coords_idxs.0"][1:] == 0).any()))  # no targets
        dup = int(wg_synth.dup_cells(2)[0])
        self.assertGreater(int(tensors["batch.ERA5.target_coords_idxs.0"][1 + dup]), 0)  # repeated neighbour
        self.assertTrue(bool(torch.isnan(tensors["batch.0.ERA5.target_tokens.0"]).any()))
        self.assertEqual(float(tensors["batch.1.OBS.target_weight"]), 0.0)            # spoofed stream
        for k in ("out.embed", "out.ae_local", "out.ae_adapter", "out.ae_aggregation", "out.ae_global",
                  "out.pred.ERA5.0", "out.pred.OBS.0", "loss"):
            self.assertIn(k, tensors)
        self.assertEqual(tensors["out.pred.OBS.0"].shape[0], 2)                        # ens_size 2
        self.assertNotIn("grads.embed_engine.embeds.ERA5.embed_centroids.weight", tensors)  # dead

    def test_cli_pass_and_fail_on_gradient(self):
        rc, out = cli("check", self.dump)
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS", out)
        bad = self.path("grad_2e-5.st")
        with redirect_stdout(io.StringIO()):
            self.assertEqual(wg_twin.main(["perturb", self.dump, bad, "--tensor", GRAD, "--rel", "2e-5"]), 0)
        rc, out = cli("check", bad)
        self.assertEqual(rc, 1, out)
        self.assertIn("MISMATCH", out)
        self.assertIn(GRAD, [line.split()[0] for line in out.splitlines() if "MISMATCH" in line])
        self.assertIn(f"FAIL: 1 mismatch(es): {GRAD}", out)

    def test_small_perturbation_passes(self):
        p = self.edit("grad_2e-6.st", lambda t, m: t.__setitem__(GRAD, t[GRAD] * (1 + 2e-6)))
        rc, out = check(p)
        self.assertEqual(rc, 0, out)

    def test_out_and_loss_perturbed(self):
        p = self.edit("out.st", lambda t, m: t.__setitem__("out.ae_global", t["out.ae_global"] * (1 + 3e-5)))
        rc, out = check(p)
        self.assertEqual(rc, 1)
        self.assertIn("FAIL: 1 mismatch(es): out.ae_global", out)
        p = self.edit("loss.st", lambda t, m: t.__setitem__("loss", t["loss"] * (1 + 3e-5)))
        self.assertEqual(check(p)[0], 1)

    def test_wrong_param_name_and_table(self):
        def rename(t, m):
            t["params.q_cellz"] = t.pop("params.q_cells")
        rc, out = check(self.edit("names.st", rename))
        self.assertEqual(rc, 1)
        self.assertIn("q_cells", out)

        def nbours(t, m):
            h = t["tables.hp_nbours"].clone()
            h[5, 3] = h[5, 0]
            t["tables.hp_nbours"] = h
        rc, out = check(self.edit("nb.st", nbours))
        self.assertEqual(rc, 1)
        self.assertIn("tables.hp_nbours", out)

    def test_forecast_dump(self):
        p = self.path("forecast.st")
        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = wg_twin.main(["make-dump", p, "--config-json", json.dumps(wg_synth.FORECAST), "--seed", "3"])
        self.assertEqual(rc, 0)
        tensors, meta = st.read(p)
        self.assertIn("out.forecast.1", tensors)
        self.assertIn("out.pred.OBS.2", tensors)
        self.assertEqual(meta["forecast_steps"], "2")
        rc, out = check(p)
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
