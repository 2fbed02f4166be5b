"""fca's random number generator (src/core/rng.h) in Python, bit for bit, so that a peer draws what
fca draws: fca_torch's trainer takes its training windows from it (micro-batch k of step s from
Rng(derive_seed(seed, s, k)), as `fca train`), and the bench scripts replay fca's batches and audit
randomisations with it (bench/compare_pytorch.py, bench/compare_audit_pytorch.py).

fca draws everything random from xoshiro256** seeded through SplitMix64, with unbiased integers by
Lemire's multiply-and-reject and uniform permutations by Fisher-Yates (src/audit/conditions.cpp).
The generator is platform-independent by design, so a peer that runs the same algorithm from the
same seeds gets the same numbers, and two tools then do the same work or replay the same
randomisations, which makes their randomised results comparable value for value instead of only
within Monte-Carlo error.

Rng is the scalar generator in Python integers; permutations() runs many generators at once in numpy
uint64 lanes (the audit's token permutations: one generator per randomisation, window, layer and
stream), bit for bit the scalar algorithm in each lane. The windows the trainer draws are checked
against fca's (tests/torch_engine_test.cpp, OneAdamWStepGivesTheSameWeights: a window drawn from
another stream moves the weights by 2e-2, against 1e-7 when they agree).
"""

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
DERIVE_A, DERIVE_B = 0xA0761D6478BD642F, 0xE7037ED1A0B428DB


def _mix(z):
    """SplitMix64's output function of an advanced state (Python int)."""
    z = ((z ^ (z >> 30)) * MIX1) & MASK
    z = ((z ^ (z >> 27)) * MIX2) & MASK
    return z ^ (z >> 31)


def derive_seed(seed, a, b=0):
    """fca's derive_seed: a seed mixed with two stream identifiers."""
    s = (seed ^ (DERIVE_A * (a + 1))) & MASK
    s = (s + GOLDEN) & MASK                 # splitmix64(s), its output discarded: s advances
    s ^= (DERIVE_B * (b + 1)) & MASK
    return _mix((s + GOLDEN) & MASK)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Rng:
    """fca's Rng: xoshiro256**, its state the SplitMix64 sequence from the seed."""

    def __init__(self, seed):
        self.s = []
        state = seed & MASK
        for _ in range(4):
            state = (state + GOLDEN) & MASK
            self.s.append(_mix(state))

    def next_u64(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform in [0, n), Lemire's multiply-and-reject."""
        m = self.next_u64() * n
        if (m & MASK) < n:
            threshold = ((1 << 64) - n) % n
            while (m & MASK) < threshold:
                m = self.next_u64() * n
        return m >> 64

    def permutation(self, n):
        """fca's uniform_permutation: Fisher-Yates from the top."""
        p = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.below(i + 1)
            p[i], p[j] = p[j], p[i]
        return p


# ------------------------------------------------------------------------------------------------
# Many generators at once: numpy uint64 arrays wrap modulo 2^64 as the C++ does.

def _u64(x):
    return np.uint64(x)


def _mix_lanes(z):
    z = (z ^ (z >> _u64(30))) * _u64(MIX1)
    z = (z ^ (z >> _u64(27))) * _u64(MIX2)
    return z ^ (z >> _u64(31))


def _rotl_lanes(x, k):
    return (x << _u64(k)) | (x >> _u64(64 - k))


def permutations(seeds, n):
    """Row g: the permutation of range(n) that Rng(seeds[g]).permutation(n) draws. seeds: Python
    ints (any length G); returns int64 [G, n]. Every lane advances its own xoshiro256** state in
    step; a lane whose draw is rejected (probability below n / 2^64 per draw) draws again alone."""
    G = len(seeds)
    state = np.array([s & MASK for s in seeds], dtype=np.uint64)
    words = []
    for _ in range(4):
        state = state + _u64(GOLDEN)
        words.append(_mix_lanes(state))
    s0, s1, s2, s3 = words

    def step(a0, a1, a2, a3):
        """xoshiro256**: (output, the next state)."""
        result = _rotl_lanes(a1 * _u64(5), 7) * _u64(9)
        t = a1 << _u64(17)
        a2 = a2 ^ a0
        a3 = a3 ^ a1
        a1 = a1 ^ a2
        a0 = a0 ^ a3
        a2 = a2 ^ t
        return result, (a0, a1, a2, _rotl_lanes(a3, 45))

    def advance(lanes):
        """The next output of the given lanes (an index array), their states advanced."""
        result, (s0[lanes], s1[lanes], s2[lanes], s3[lanes]) = step(s0[lanes], s1[lanes], s2[lanes], s3[lanes])
        return result

    def product(x, bound):
        """(high, low) 64-bit halves of x * bound for bound < 2^32: x = hi 2^32 + lo, so
        x * bound = hi bound 2^32 + lo bound, each partial product below 2^64."""
        hi, lo = x >> _u64(32), x & _u64(0xFFFFFFFF)
        a, b = lo * _u64(bound), hi * _u64(bound)
        return (b + (a >> _u64(32))) >> _u64(32), a + (b << _u64(32))

    if n >= 1 << 32:
        raise ValueError(f"permutations of {n} elements: this lane arithmetic takes n < 2^32")
    rows = np.arange(G)
    p = np.tile(np.arange(n, dtype=np.int64), (G, 1))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        x, (s0, s1, s2, s3) = step(s0, s1, s2, s3)           # every lane draws
        high, low = product(x, bound)
        threshold = _u64(((1 << 64) - bound) % bound)
        redraw = np.nonzero(low < threshold)[0]       # low < threshold implies low < bound: Lemire's test
        while redraw.size:
            h, lw = product(advance(redraw), bound)
            high[redraw], low[redraw] = h, lw
            redraw = redraw[lw < threshold]
        j = high.astype(np.int64)
        p[rows, i], p[rows, j] = p[rows, j], p[rows, i].copy()
    return p
