"""Philox4x64-10 (Random123's algorithm), written from its definition: the
counter-based generator gnnrt's ops/rng.h wraps, for the references that must
draw gnnrt's numbers (reparameterize noise, neighbour sampling)."""

MASK = (1 << 64) - 1
PHILOX_M = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
PHILOX_W = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)


def philox4x64(counter, key):
    c, k = list(counter), list(key)
    for r in range(10):
        if r > 0:
            k = [(k[0] + PHILOX_W[0]) & MASK, (k[1] + PHILOX_W[1]) & MASK]
        p0, p1 = PHILOX_M[0] * c[0], PHILOX_M[1] * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 64) ^ c[3] ^ k[1], p0 & MASK]
    return c


def below(word, n):
    """A draw in [0, n) from one 64-bit word (ops::below: the high half of word * n)."""
    return (word * n) >> 64
