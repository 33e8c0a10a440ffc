#!/usr/bin/python3
"""Tests of the twin's attention variants, MLP and AdaLN against naive per-segment loops (float64).

Owns: random segment lengths including zeros, empty key segments (output 0, no
NaN in forward or backward), duplicated keys, every variant's forward and
gradients (inputs and weights) against wg_testlib's loop references, the
block-diagonal Local attention, and the head-dim scale / softcap path.
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wg_layers as L  # noqa: E402
import wg_testlib as N  # noqa: E402

TOL = 1e-10


def grads_of(fn, tensors):
    for t in tensors:
        t.grad = None
    y = fn()
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), [t.grad.clone() for t in tensors]


class AttentionTests(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(1)
        torch.set_default_dtype(torch.float64)

    def tearDown(self):
        torch.set_default_dtype(torch.float32)

    def assertClose(self, a, b, tol=TOL, what=""):
        self.assertEqual(a.shape, b.shape, what)
        self.assertTrue(torch.isfinite(a).all(), what)
        err = (a - b).abs().max().item() if a.numel() else 0.0
        self.assertLess(err, tol * max(1.0, b.abs().max().item() if b.numel() else 1.0), what)

    def lens(self, n, hi, zeros=True):
        x = torch.randint(0 if zeros else 1, hi + 1, (n,))
        if zeros:
            x[0], x[-1] = 0, 0
        return x

    def check_module(self, m, fn_model, fn_naive, inputs):
        params = list(m.parameters())
        y1, g1 = grads_of(fn_model, inputs + params)
        y2, g2 = grads_of(fn_naive, inputs + params)
        self.assertClose(y1, y2, what="forward")
        for a, b, name in zip(g1, g2, [f"input{i}" for i in range(len(inputs))] + [n for n, _ in m.named_parameters()]):
            self.assertClose(a, b, what=f"grad {name}")

    def test_self_varlen_with_empty_segments(self):
        for aux in (None, 5):
            m = L.MultiSelfAttentionHeadVarlen(12, 3, norm_eps=1e-4, dim_aux=aux)
            lens = self.lens(9, 5)
            x = torch.randn(int(lens.sum()), 12, requires_grad=True)
            a = torch.randn(x.shape[0], 5, requires_grad=True) if aux else None
            segs = L.Segments(lens)
            ins = [x] + ([a] if aux else [])
            self.check_module(m, lambda: m(x, segs, ada_ln_aux=a), lambda: N.n_self(m, x, lens, a), ins)

    def test_cross_varlen_empty_query_and_key_segments(self):
        m = L.MultiCrossAttentionHeadVarlen(8, 10, 2, norm_eps=1e-4, dim_aux=4)
        qlens, klens = self.lens(7, 4), self.lens(7, 5)
        klens[3] = 0
        qlens[3] = 2                                  # queries without keys: output = residual only
        xq = torch.randn(int(qlens.sum()), 8, requires_grad=True)
        xk = torch.randn(int(klens.sum()), 10, requires_grad=True)
        a = torch.randn(xq.shape[0], 4, requires_grad=True)
        self.check_module(m, lambda: m(xq, xk, L.Segments(qlens), L.Segments(klens), ada_ln_aux=a),
                          lambda: N.n_cross(m, xq, xk, qlens, klens, a), [xq, xk, a])
        # the attention part of the key-less queries is exactly 0, and gradients stay finite
        y = m(xq, xk, L.Segments(qlens), L.Segments(klens), ada_ln_aux=a)
        start = int(qlens[:3].sum())
        self.assertTrue(torch.equal(y[start:start + 2], xq[start:start + 2]))

    def test_cross_with_gathered_duplicate_keys(self):
        # the prediction's kv_index path (project unique rows, then gather) = the literal gather
        m = L.MultiCrossAttentionHeadVarlen(8, 6, 2, norm_eps=1e-4, dim_aux=3)
        lat = torch.randn(5, 6, requires_grad=True)
        idx = torch.tensor([0, 1, 1, 2, 4, 4, 4, 3, 0])       # duplicates get double weight
        qlens, klens = torch.tensor([2, 0, 3]), torch.tensor([3, 3, 3])
        xq = torch.randn(5, 8, requires_grad=True)
        a = torch.randn(5, 3)
        self.check_module(m, lambda: m(xq, lat, L.Segments(qlens), L.Segments(klens), ada_ln_aux=a, kv_index=idx),
                          lambda: N.n_cross(m, xq, lat[idx], qlens, klens, a), [xq, lat])

    def test_sliced_q(self):
        for nq in (1, 2):
            m = L.MultiCrossAttentionHeadVarlenSlicedQ(12, 8, nq, 3, 4, norm_eps=1e-4)
            klens = self.lens(6, 4, zeros=False)
            xq = torch.randn(6, nq, 12, requires_grad=True)
            xk = torch.randn(int(klens.sum()), 8, requires_grad=True)
            ones = L.Segments(torch.ones(6, dtype=torch.int64))
            self.check_module(m, lambda: m(xq, xk, ones, L.Segments(klens)),
                              lambda: N.n_sliced(m, xq, xk, klens), [xq, xk])

    def test_dense_batched_and_segmented(self):
        m = L.MultiSelfAttentionHead(12, 4, norm_eps=1e-4)
        x = torch.randn(3, 7, 12, requires_grad=True)
        naive = lambda: torch.stack([N.n_self(m, x[b], [7]) for b in range(3)])  # noqa: E731
        self.check_module(m, lambda: m(x), naive, [x])
        # packed rows [R, nq, d] with per-sample sequences (the aggregation's use), zero-length included
        lens = torch.tensor([4, 0, 5])
        xp = torch.randn(9, 2, 12, requires_grad=True)
        naive2 = lambda: torch.stack([N.n_self(m, xp[:, i], lens) for i in range(2)], 1)  # noqa: E731
        self.check_module(m, lambda: m(xp, segments=L.Segments(lens)), naive2, [xp])

    def test_local_block_diagonal(self):
        m = L.MultiSelfAttentionHead(8, 2, norm_eps=1e-4, local_block=4)
        x = torch.randn(2, 10, 8, requires_grad=True)   # blocks 4, 4, 2 per sample
        naive = lambda: torch.stack([N.n_self(m, x[b], [4, 4, 2]) for b in range(2)])  # noqa: E731
        self.check_module(m, lambda: m(x), naive, [x])

    def test_all_empty_and_no_nan(self):
        m = L.MultiSelfAttentionHeadVarlen(8, 2)
        x = torch.zeros(0, 8, requires_grad=True)
        y = m(x, L.Segments(torch.zeros(4, dtype=torch.int64)))
        self.assertEqual(tuple(y.shape), (0, 8))
        c = L.MultiCrossAttentionHeadVarlen(8, 8, 2)
        xq = torch.randn(3, 8, requires_grad=True)
        y = c(xq, torch.zeros(0, 8), L.Segments(torch.tensor([3])), L.Segments(torch.tensor([0])))
        y.sum().backward()
        self.assertTrue(torch.equal(y, xq))
        self.assertTrue(all(torch.isfinite(p.grad).all() for p in [xq] + [p for p in c.parameters() if p.grad is not None]))

    def test_softcap(self):
        q, k, v = torch.randn(3, 2, 4), torch.randn(5, 2, 4), torch.randn(5, 2, 4)
        o = L.attend(q, k, v, 0.5, softcap=2.0)
        s = torch.einsum("qhd,khd->hqk", q, k) * 0.5
        ref = torch.einsum("hqk,khd->qhd", torch.softmax(2.0 * torch.tanh(s / 2.0), -1), v)
        self.assertClose(o, ref)

    def test_mlp_and_adaln(self):
        m = L.MLP(6, 6, 2, norm_eps=1e-5, dim_aux=3)
        x, a = torch.randn(4, 6, requires_grad=True), torch.randn(4, 3, requires_grad=True)
        self.check_module(m, lambda: m(x, a), lambda: N.n_mlp(m, x, a), [x, a])
        m2 = L.MLP(6, 6, 2, norm_eps=1e-5)
        with torch.no_grad():
            m2.layers[0].weight.normal_()
            m2.layers[0].bias.normal_()
        self.check_module(m2, lambda: m2(x), lambda: N.n_mlp(m2, x), [x])
        self.assertEqual([n for n, _ in m.named_parameters()],
                         ["layers.0.embed_aux.0.weight", "layers.0.embed_aux.0.bias", "layers.0.embed_aux.2.weight",
                          "layers.0.embed_aux.2.bias", "layers.1.weight", "layers.1.bias", "layers.4.weight",
                          "layers.4.bias"])


if __name__ == "__main__":
    unittest.main()
