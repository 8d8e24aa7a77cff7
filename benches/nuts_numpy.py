"""A NumPy transcription of ovl's NUTS operator (ovl-stdlib/src/nuts.rs), with the same generator.

Philox-4x32-10 is written here from the SC'11 paper's definition with uint64 arithmetic, so
that every momentum, direction and multinomial choice is the operator's: the same chain from
the same key gives the same trajectory, draw for draw (floating-point results equal up to the
order of summation in dot products and the last bits of exp / log).

Used by tests/core/nuts.rs: `python nuts_numpy.py IN.json OUT.json`, IN holding the operator's
inputs (`model`: "gaussian" or "logistic", `key`, `init` [chains][dim], `step`, `inv_mass`,
`data` (a list of nested lists), `transitions`, `max_depth`), OUT the outputs (`samples`,
`depth`, `leapfrogs`, `divergent`, `accept`).
"""

import json
import sys

import numpy as np

MULTIPLIERS = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
WEYL = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))
MASK32 = np.uint64(0xFFFFFFFF)
MAX_DELTA_ENERGY = 1000.0


def philox4x32(key, counter):
    """Philox-4x32-10 of counters [n, 4] under key [2] (integers below 2^32): words [n, 4]."""
    c = [np.asarray(counter, dtype=np.uint64)[..., i] for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r > 0:
            k0 = (k0 + WEYL[0]) & MASK32
            k1 = (k1 + WEYL[1]) & MASK32
        p0 = MULTIPLIERS[0] * c[0]  # below 2^64: no wrap
        p1 = MULTIPLIERS[1] * c[2]
        c = [
            (p1 >> np.uint64(32)) ^ c[1] ^ k0,
            p1 & MASK32,
            (p0 >> np.uint64(32)) ^ c[3] ^ k1,
            p0 & MASK32,
        ]
    return np.stack(c, axis=-1)


def uniform_f64(hi, lo):
    bits = (np.uint64(hi) << np.uint64(21)) | (np.uint64(lo) >> np.uint64(11))
    return float(bits) * (1.0 / 9007199254740992.0)


def normal_f64(w):
    u1 = 1.0 - uniform_f64(w[0], w[1])
    theta = uniform_f64(w[2], w[3]) * (2.0 * np.pi)
    r = np.sqrt(-2.0 * np.log(u1))
    return r * np.cos(theta), r * np.sin(theta)


def logaddexp(a, b):
    m = max(a, b)
    if m == -np.inf:
        return m
    return m + np.log1p(np.exp(-abs(a - b)))


def gaussian(precision):
    def log_density(q):
        s = precision @ q
        return -0.5 * float(q @ s), -s

    return log_density


def logistic(x, y):
    def log_density(q):
        eta = x @ q
        softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
        lp = -0.5 * float(q @ q) + float(np.sum(y * eta - softplus))
        r = y - 1.0 / (1.0 + np.exp(-eta))
        return lp, -q + x.T @ r

    return log_density


def popcount(x):
    return bin(x).count("1")


def turning(pa, pb, rs, inv_mass):
    return float(np.sum(inv_mass * pa * rs)) <= 0.0 or float(np.sum(inv_mass * pb * rs)) <= 0.0


def chain(log_density, key, c, q, step, inv_mass, transitions, max_depth):
    """One chain's transitions, as the operator's worker `c` runs them."""
    dim = q.size
    half = (dim + 1) // 2
    slots = max(max_depth, 1)
    q = q.copy()
    logp, g = log_density(q)
    out = {"samples": [], "depth": [], "leapfrogs": [], "divergent": [], "accept": []}

    for t in range(transitions):
        def uniform(d):
            w = philox4x32(key, [[c, t, d, 0]])[0]
            return uniform_f64(w[0], w[1])

        words = philox4x32(key, [[c, t, k, 0] for k in range(half)])
        z = np.array([v for w in words for v in normal_f64(w)])[:dim]
        p = z / np.sqrt(inv_mass)
        h0 = 0.5 * float(np.sum(inv_mass * p * p)) - logp
        edge_q = [q.copy(), q.copy()]
        edge_p = [p.copy(), p.copy()]
        edge_g = [g.copy(), g.copy()]
        rho = p.copy()
        log_w, depth, stop, diverged, n_leap, sum_acc = 0.0, 0, False, False, 0, 0.0
        draw, size = half, 1
        while depth < max_depth and not stop:
            u = uniform(draw)
            draw += 1
            side = 0 if u < 0.5 else 1
            eps = -step if u < 0.5 else step
            cq, cp, cg = edge_q[side].copy(), edge_p[side].copy(), edge_g[side].copy()
            sub_rho = np.zeros(dim)
            sub_q, sub_g, sub_lp = np.zeros(dim), np.zeros(dim), 0.0
            ckpt_p, ckpt_rho = np.zeros((slots, dim)), np.zeros((slots, dim))
            n, sub_w, sub_turn = 0, -np.inf, False
            while n < size and not sub_turn and not diverged:
                cp = cp + (0.5 * eps) * cg
                cq = cq + (eps * inv_mass) * cp
                lp, cg = log_density(cq)
                cp = cp + (0.5 * eps) * cg
                n_leap += 1
                delta = 0.5 * float(np.sum(inv_mass * cp * cp)) - lp - h0
                if delta != delta:
                    delta = np.inf
                if delta > MAX_DELTA_ENERGY:
                    diverged = True
                sum_acc += min(np.exp(-delta), 1.0)
                w = -delta
                total = logaddexp(sub_w, w)
                u = uniform(draw)
                draw += 1
                if u < np.exp(w - total):
                    sub_q, sub_g, sub_lp = cq.copy(), cg.copy(), lp
                sub_w = total
                sub_rho = sub_rho + cp
                hi = popcount(n >> 1)
                if n % 2 == 0:
                    ckpt_p[hi], ckpt_rho[hi] = cp, sub_rho
                else:
                    trailing = popcount((~n & (n + 1)) - 1)
                    for i in range(hi - trailing + 1, hi + 1):
                        rs = sub_rho - ckpt_rho[i] + ckpt_p[i] - 0.5 * (ckpt_p[i] + cp)
                        if turning(ckpt_p[i], cp, rs, inv_mass):
                            sub_turn = True
                n += 1
            edge_q[side], edge_p[side], edge_g[side] = cq, cp, cg
            depth += 1
            size *= 2
            if not sub_turn and not diverged:
                u = uniform(draw)
                draw += 1
                if u < np.exp(sub_w - log_w):
                    q, g, logp = sub_q.copy(), sub_g.copy(), sub_lp
                log_w = logaddexp(log_w, sub_w)
                rho = rho + sub_rho
                rs = rho - 0.5 * (edge_p[0] + edge_p[1])
                if turning(edge_p[0], edge_p[1], rs, inv_mass):
                    stop = True
            else:
                stop = True
        out["samples"].append(q.tolist())
        out["depth"].append(depth)
        out["leapfrogs"].append(n_leap)
        out["divergent"].append(int(diverged))
        out["accept"].append(sum_acc / n_leap)
    return out


def sample(spec):
    """The operator's outputs for the inputs of `spec` (a dict as IN.json)."""
    data = [np.asarray(d, dtype=np.float64) for d in spec["data"]]
    log_density = gaussian(data[0]) if spec["model"] == "gaussian" else logistic(data[0], data[1])
    inv_mass = np.asarray(spec["inv_mass"], dtype=np.float64)
    chains = [
        chain(log_density, spec["key"], c, np.asarray(q0, dtype=np.float64), spec["step"],
              inv_mass, spec["transitions"], spec["max_depth"])
        for c, q0 in enumerate(spec["init"])
    ]
    return {name: [ch[name] for ch in chains] for name in chains[0]}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with open(sys.argv[2], "w") as f:
        json.dump(sample(spec), f)
