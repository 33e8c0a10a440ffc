#!/usr/bin/env python3
"""HEALPix part of the numpy reference (wg-data.md §2), written from the
spec with upstream's library, astropy_healpix (Debian
python3-astropy-healpix): upstream's float32 θ/φ and point -> cell, and the
per-level tables of §2.3-2.5 (vertex and centre vectors through the lon/lat
round trip, rotations, verts_local, neighbours, hp_nbours, neighbour frames).
Imported by pipeline_reference.py.
"""
import warnings

import numpy as np
import astropy.units as u
from astropy_healpix import healpix_to_lonlat, neighbours
from astropy_healpix import healpy as ahp

# astropy_healpix's neighbours() warns about the -1 entries it returns.
warnings.filterwarnings("ignore", category=RuntimeWarning, module="astropy_healpix")

F32 = np.float32
PI32 = F32(np.pi)
# (dx, dy) of the vertices S, E, N, W and the centre (§2.3).
VERTEX_OFFSETS = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0), (0.5, 0.5)]
# others(k) of §6.3, vertex indices S=0 E=1 N=2 W=3 C=4.
OTHERS = [[1, 2, 3, 4], [0, 2, 3, 4], [0, 1, 3, 4], [0, 2, 1, 4], [0, 1, 2, 3]]


# ---------------------------------------------------------------- HEALPix (§2)

def theta_phi32(lat, lon):
    """§2.2 steps 1-2: every op in float32, in upstream's order."""
    lat = np.asarray(lat, dtype=F32)
    lon = np.asarray(lon, dtype=F32)
    theta = ((F32(90.0) - lat) / F32(180.0)) * PI32
    phi = (((lon + F32(180.0)) / F32(360.0)) * F32(2.0)) * PI32
    return theta, phi


def cell_of(lat, lon, level):
    theta, phi = theta_phi32(lat, lon)
    # astropy's healpy shim forms lat = pi/2 - theta in float32 itself.
    return np.asarray(ahp.ang2pix(2 ** level, theta, phi, nest=True), dtype=np.int64)


def s2tor3(theta, phi):
    return np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], axis=-1)


def vecs_to_rots(v):
    """§2.5, evaluated in v's dtype. v: [..., 3] -> [..., 3, 3]."""
    c1, c2, c3 = v[..., 0], v[..., 1], v[..., 2]
    s = c2 ** 2 + c3 ** 2
    off = (c1 - 1) * c2 * c3 / s
    r = np.empty(v.shape[:-1] + (3, 3), dtype=v.dtype)
    r[..., 0, 0], r[..., 0, 1], r[..., 0, 2] = c1, c2, c3
    r[..., 1, 0], r[..., 1, 1], r[..., 1, 2] = -c2, (c1 * c2 ** 2 + c3 ** 2) / s, off
    r[..., 2, 0], r[..., 2, 1], r[..., 2, 2] = -c3, off, (c2 ** 2 + c1 * c3 ** 2) / s
    return r


class Tables:
    """Per-level tables of §2.3-2.5, built with astropy_healpix."""

    def __init__(self, level):
        self.level = level
        self.nside = 2 ** level
        self.ncell = 12 * self.nside ** 2
        pix = np.arange(self.ncell)
        self.lonlat = np.empty((5, self.ncell, 2))
        self.V = np.empty((5, self.ncell, 3))
        for k, (dx, dy) in enumerate(VERTEX_OFFSETS):
            lon, lat = healpix_to_lonlat(pix, self.nside, dx=dx, dy=dy, order="nested")
            lon, lat = lon.to_value(u.rad), lat.to_value(u.rad)
            self.lonlat[k, :, 0], self.lonlat[k, :, 1] = lon, lat
            self.V[k] = s2tor3(np.pi / 2 - lat, lon)
        R64 = vecs_to_rots(self.V)                       # [5, C, 3, 3] float64
        self.R = R64.astype(F32)
        vl = np.empty((self.ncell, 5, 12))
        for k in range(5):
            for o, other in enumerate(OTHERS[k]):
                rv = np.einsum("cij,cj->ci", R64[k], self.V[other])
                loc = -rv
                loc[:, 0] += 1.0
                vl[:, k, 3 * o:3 * o + 3] = loc
        self.verts_local = vl.astype(F32)                # [C, 5, 12]
        self.nbr_raw = np.asarray(neighbours(pix, self.nside, order="nested"), dtype=np.int64)  # [8, C]
        nbr = np.where(self.nbr_raw < 0, pix[None, :], self.nbr_raw)
        self.hp_nbours = np.ascontiguousarray(np.concatenate([pix[None, :], nbr], axis=0).T, dtype=np.int32)  # [C, 9]
        self.ctr32 = self.V[4].astype(F32)               # [C, 3]
        self.nctrs = self.ctr32[nbr]                     # [8, C, 3] float32
        self.R_nbr = vecs_to_rots(self.nctrs)            # float32 arithmetic
