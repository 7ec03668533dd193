#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_dsa into fuzz/corpus/dsa/.

    python3 fuzz/seed_dsa_corpus.py

Standard library only; seeded, so the same files each time. The input format
is fuzz_dsa.c's: a flags byte (bit 0 cyclic, bits 1-4 the alignment's log2,
bits 5-7 the sizes' shift: 0, 5, 9, 12, 20, 24, 30 or 36 bits), the period
less one (16 bits), then 6 bytes a block (size less one, start, length less
one; 16 bits each, little-endian). The seeds reach what fuzz_plan_csv does
not: hundreds of blocks live together (the radix sort, over narrow and wide
offsets), step-shaped lifetimes, linear and cyclic, in which orders and rounds
run, and a few small problems.
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'corpus', 'dsa')
SHIFTS = [0, 5, 9, 12, 20, 24, 30, 36]


def problem(cyclic, align_log2, shift, period, blocks):
    flags = (1 if cyclic else 0) | align_log2 << 1 | SHIFTS.index(shift) << 5
    out = struct.pack('<BH', flags, (period - 1) if cyclic else 0)
    for size, start, length in blocks:
        out += struct.pack('<HHH', size - 1, start, length - 1)
    return out


def stacked(rng, n):
    """n blocks all live together: each is placed above all before it."""
    return [(rng.randrange(1, 1 << 16), 0, 10) for _ in range(n)]


def step_shaped(rng, n, horizon):
    """A few long-lived blocks and many short ones, sizes of every scale."""
    blocks = []
    for _ in range(n):
        size = rng.randrange(1, 1 << 16) if rng.random() < 0.75 else rng.randrange(1, 9) << 12
        start = rng.randrange(horizon)
        long_lived = rng.random() < 0.125
        length = rng.randrange(1, horizon) if long_lived else rng.randrange(1, horizon // 20 + 2)
        blocks.append((size, start, min(length, horizon)))
    return blocks


def main():
    rng = random.Random(20261206)
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        'tiny.bin': problem(False, 0, 0, 1, [(3, 0, 4), (5, 2, 6), (2, 5, 3), (4, 1, 1)]),
        'tiny_cyclic.bin': problem(True, 9, 12, 10, [(3, 8, 4), (5, 2, 6), (2, 5, 3), (4, 9, 1)]),
        'stacked_200_narrow.bin': problem(False, 0, 0, 1, stacked(rng, 200)),
        'stacked_200_aligned.bin': problem(False, 9, 20, 1, stacked(rng, 200)),
        'stacked_150_wide.bin': problem(False, 15, 36, 1, stacked(rng, 150)),
        'steps_300_linear.bin': problem(False, 9, 12, 1, step_shaped(rng, 300, 3000)),
        'steps_250_cyclic.bin': problem(True, 9, 12, 2000, step_shaped(rng, 250, 2000)),
        'steps_200_dense.bin': problem(True, 0, 20, 200, step_shaped(rng, 200, 200)),
        'steps_120_sparse.bin': problem(False, 4, 5, 1, step_shaped(rng, 120, 20000)),
        'steps_300_dense_linear.bin': problem(False, 9, 24, 1, step_shaped(rng, 300, 300)),
        'steps_250_mid_cyclic.bin': problem(True, 12, 9, 1000, step_shaped(rng, 250, 1000)),
        'steps_180_dense_cyclic.bin': problem(True, 2, 30, 100, step_shaped(rng, 180, 100)),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), 'wb') as f:
            f.write(data)
    print('wrote %d seeds to %s' % (len(seeds), OUT))


if __name__ == '__main__':
    main()
