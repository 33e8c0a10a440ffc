#!/usr/bin/python3
"""Tests of the twin's non-trainable tables against the statements of wg-model.md §3 and wg-data.md §2.

Owns: pe_embed (base 1024, bf16-rounded, values of row 0 and 1), pe_global (the
q = 0 simplification, the 0.5·sin/cos(8q·x) slot term for nq = 2, fp32 argument
recipe), hp_nbours (golden rows of wg-data.md §2.7 at level 5, 24 rows that
repeat their own cell, first column = self), tokens_lens and q_cells_lens.
"""
import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_tables as T  # noqa: E402


def bf16(x):
    return x.to(torch.bfloat16).float()


class TableTests(unittest.TestCase):
    def test_pe_embed(self):
        pe = T.pe_embed(64)
        self.assertEqual(list(pe.shape), [1024, 64])
        self.assertTrue(torch.equal(pe, bf16(pe)))                            # bf16 values in fp32
        self.assertTrue(torch.equal(pe[0, 0::2], torch.zeros(32)))
        self.assertTrue(torch.equal(pe[0, 1::2], torch.ones(32)))
        # row 1: sin/cos(ω_k), ω_k = exp(2k · (−ln 1024 / 64)) (base 1024, not 10000)
        w = torch.tensor([math.exp(2 * k * (-math.log(1024) / 64)) for k in range(32)])
        self.assertLess((pe[1, 0::2] - torch.sin(w)).abs().max().item(), 4e-3)
        self.assertLess((pe[1, 1::2] - torch.cos(w)).abs().max().item(), 4e-3)
        self.assertLess((pe[1000, 1::2] - torch.cos(1000 * w)).abs().max().item(), 4e-3)

    def test_pe_global_q0(self):
        C, D = 12 * 16, 32
        pe = T.pe_global(C, 1, D)
        x = (torch.tensor(2 * math.pi, dtype=torch.float32) * torch.arange(0, D, 2, dtype=torch.float32)) / D
        arg = torch.arange(C, dtype=torch.float32)[:, None] * x[None]             # one fp32 product
        even = bf16(torch.sin(arg.double()).float())
        odd = bf16(torch.cos(arg.double()).float() + 0.5)
        self.assertTrue(torch.equal(pe[:, 0, 0::2], even))
        self.assertTrue(torch.equal(pe[:, 0, 1::2], odd))
        self.assertEqual(float(torch.tensor(2 * math.pi, dtype=torch.float32)), 6.2831854820251465)

    def test_pe_global_slots(self):
        pe = T.pe_global(48, 2, 16)
        x = (torch.tensor(2 * math.pi, dtype=torch.float32) * torch.arange(0, 16, 2, dtype=torch.float32)) / 16
        slot = bf16(0.5 * torch.sin((8.0 * x).double()).float())
        cell = torch.sin((torch.arange(48, dtype=torch.float32)[:, None] * x).double()).float()
        self.assertTrue(torch.equal(pe[:, 1, 0::2], bf16(slot + cell)))
        self.assertTrue(torch.equal(pe[:, 0, 0::2], bf16(cell)))

    def test_pe_global_level5_close_to_torch_fp32(self):
        # upstream evaluated sin/cos in torch fp32: the tables may differ only by one
        # bf16 ulp in rare entries (ties of the two fp32 evaluations)
        pe = T.pe_global(12288, 1, 256)
        x = (torch.tensor(2 * math.pi, dtype=torch.float32) * torch.arange(0, 256, 2, dtype=torch.float32)) / 256
        arg = torch.arange(12288, dtype=torch.float32)[:, None] * x[None]
        up = bf16(torch.sin(arg))
        diff = pe[:, 0, 0::2] != up
        self.assertLess(int(diff.sum()), up.numel() // 10000 + 1)
        self.assertTrue(bool(((pe[:, 0, 0::2] - up).abs() <= 2 ** -7).all()))

    def test_hp_nbours_level5(self):
        nb = T.hp_nbours(5)
        self.assertEqual(list(nb.shape), [12288, 9])
        self.assertTrue(torch.equal(nb[:, 0], torch.arange(12288)))
        golden = {0: [4437, 4439, 2, 3, 1, 5803, 5802, 9215], 1: [0, 2, 3, 6, 4, 5806, 5803, 5802],
                  4095: [4094, 3069, 3071, 2047, 1023, 1022, 4093, 4092],
                  4864: [4693, 4695, 4866, 4867, 4865, 4523, 4522, 4351],
                  6912: [6741, 6743, 6914, 6915, 6913, 6571, 6570, 6399],
                  12287: [12286, 7508, 7509, 3072, 4778, 4776, 12285, 12284]}
        for c, row in golden.items():
            self.assertEqual(nb[c, 1:].tolist(), row, c)
        repeats = (nb[:, 1:] == nb[:, :1])
        self.assertEqual(int(repeats.any(1).sum()), 24)       # 24 rows repeat their own cell
        self.assertEqual(int(repeats.sum()), 24)              # one missing neighbour each
        # missing neighbours are only W, N, E or S (columns 2, 4, 6, 8)
        cols = torch.nonzero(repeats)[:, 1] + 1
        self.assertTrue(set(cols.tolist()) <= {2, 4, 6, 8})
        self.assertTrue(bool((nb >= 0).all() and (nb < 12288).all()))

    def test_lens(self):
        self.assertEqual(T.tokens_lens(2, 3, 1).tolist(), [0, 9, 9, 9, 9, 9, 9])
        self.assertEqual(T.tokens_lens(1, 2, 2).tolist(), [0, 18, 18])
        self.assertEqual(T.q_cells_lens(4).tolist(), [0, 1, 1, 1, 1])


if __name__ == "__main__":
    unittest.main()
