"""The NUTS benchmark's peers: NumPyro's NUTS (vectorized over the chains) and TensorFlow
Probability's NUTS on JAX (tfp.substrates.jax), both batching the chains in lock step, on the
inputs that examples/nuts.rs wrote (problems.json: data, step size, initial positions,
transitions per chain count). Same step size, identity mass matrix, maximum tree depth 10, no
adaptation, no warm-up phase; the first run compiles and is not timed; of `--repeats` timed
runs the fastest is kept. Effective sample size: the same batch-means estimator as
examples/nuts.rs (smallest over coordinates).

    python nuts_peers.py DIR --impl numpyro|tfp [--chains 1,16] [--repeats 3]

writes DIR/nuts-IMPL.json ({"rows": [...]}, one row per model and chain count).
"""

import argparse
import json
import os
import time

os.environ.setdefault("JAX_ENABLE_X64", "1")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)


def min_ess(samples, skip):
    """As examples/nuts.rs's min_ess: samples [chains, transitions, dim]."""
    chains, transitions, dim = samples.shape
    kept = transitions - skip
    per_chain = min(max(-(-20 // chains), 1), kept)
    length = kept // per_chain
    x = samples[:, skip : skip + per_chain * length, :]
    n = x.shape[0] * x.shape[1]
    flat = x.reshape(n, dim)
    mean = flat.mean(axis=0)
    s2 = flat.var(axis=0, ddof=1)
    means = x.reshape(chains * per_chain, length, dim).mean(axis=1)
    var_means = ((means - mean) ** 2).sum(axis=0) / (means.shape[0] - 1)
    return float(np.min(n * s2 / (length * var_means)))


def potential(problem):
    """The negative log density of one position (as ovl_stdlib::nuts_models)."""
    data = [jnp.asarray(d, dtype=jnp.float64) for d in problem["data"]]
    if problem["model"] == "gaussian100":
        (a,) = data

        def u(q):
            return 0.5 * q @ (a @ q)
    else:
        x, y = data

        def u(q):
            eta = x @ q
            return 0.5 * q @ q - jnp.sum(y * eta - jax.nn.softplus(eta))

    return u


def run_numpyro(problem, init, transitions, seed):
    """NumPyro's NUTS kernel, vmapped over the chains as MCMC's chain_method="vectorized" does,
    stepped by a jitted lax.scan (MCMC.run recompiles its collection loop on every call: 14 s
    a run here, which the timing would count)."""
    from numpyro.infer.hmc import hmc

    init_kernel, sample_kernel = hmc(potential_fn=potential(problem), algo="NUTS")

    def init_one(q, key):
        return init_kernel(
            q,
            num_warmup=0,
            step_size=problem["step"],
            adapt_step_size=False,
            adapt_mass_matrix=False,
            max_tree_depth=problem["max_depth"],
            rng_key=key,
        )

    keys = jax.random.split(jax.random.PRNGKey(seed), init.shape[0])
    states = jax.vmap(init_one)(jnp.asarray(init), keys)

    @jax.jit
    def sample(states):
        def body(s, _):
            s = jax.vmap(sample_kernel)(s)
            return s, (s.z, s.num_steps, s.diverging, s.accept_prob)

        return jax.lax.scan(body, states, None, length=transitions)[1]

    def go():
        z, steps, div, acc = sample(states)
        # [transitions, chains, ...] -> [chains, transitions, ...]
        return (
            np.swapaxes(np.asarray(z), 0, 1),
            np.asarray(steps).T,
            np.asarray(div).T,
            np.asarray(acc).T,
        )

    return go


def run_tfp(problem, init, transitions, seed):
    from tensorflow_probability.substrates import jax as tfp

    u = jax.vmap(potential(problem))
    kernel = tfp.mcmc.NoUTurnSampler(
        target_log_prob_fn=lambda q: -u(q),
        step_size=problem["step"],
        max_tree_depth=problem["max_depth"],
    )

    @jax.jit
    def sample(state, key):
        return tfp.mcmc.sample_chain(
            num_results=transitions,
            num_burnin_steps=0,
            current_state=state,
            kernel=kernel,
            trace_fn=lambda _, pkr: (
                pkr.leapfrogs_taken,
                pkr.has_divergence,
                jnp.exp(jnp.minimum(pkr.log_accept_ratio, 0.0)),
            ),
            seed=key,
        )

    def go():
        samples, (steps, div, acc) = sample(jnp.asarray(init), jax.random.PRNGKey(seed))
        # [transitions, chains, ...] -> [chains, transitions, ...]
        return (
            np.swapaxes(np.asarray(samples), 0, 1),
            np.asarray(steps).T,
            np.asarray(div).T,
            np.asarray(acc).T,
        )

    return go


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--impl", choices=["numpyro", "tfp"], required=True)
    ap.add_argument("--chains", default="1,16,256,4096")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "problems.json")) as f:
        problems = json.load(f)
    make = run_numpyro if args.impl == "numpyro" else run_tfp
    rows = []
    for problem in problems:
        all_init = np.asarray(problem["init"], dtype=np.float64)
        for chains in [int(c) for c in args.chains.split(",")]:
            transitions = problem["transitions"][str(chains)]
            go = make(problem, all_init[:chains], transitions, seed=chains)
            go()  # compiles
            best = None
            for _ in range(args.repeats):
                start = time.perf_counter()
                out = go()
                seconds = time.perf_counter() - start
                if best is None or seconds < best[0]:
                    best = (seconds, out)
            seconds, (samples, steps, div, acc) = best
            leapfrogs = float(steps.sum())
            ess = min_ess(samples, int(transitions * problem["warmup_fraction"]))
            row = {
                "model": problem["model"],
                "chains": chains,
                "impl": f"{args.impl}-jax-cpu",
                "transitions": transitions,
                "seconds": seconds,
                "leapfrogs": leapfrogs,
                "leapfrogs_per_s": leapfrogs / seconds,
                "ess": ess,
                "ess_per_s": ess / seconds,
                "mean_depth": float(np.mean(np.ceil(np.log2(steps + 1)))),
                "mean_accept": float(acc.mean()),
                "divergences": int(div.sum()),
                "repeats": args.repeats,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(os.path.join(args.dir, f"nuts-{args.impl}.json"), "w") as f:
        json.dump({"rows": rows}, f)


if __name__ == "__main__":
    main()
