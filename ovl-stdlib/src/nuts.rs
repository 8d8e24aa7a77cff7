//! The No-U-Turn sampler (NUTS, Hoffman and Gelman 2014) as one operator: one worker per chain,
//! each running `transitions` NUTS transitions for a log density written in the DSL.
//!
//! The sampler is the iterative form (as NumPyro's iterative NUTS and Stan): the trajectory
//! doubles up to `max_depth` times in a random direction; each doubling builds its new subtree
//! leaf by leaf with a loop (no recursion), choosing the subtree's proposal by multinomial
//! sampling across its leaves (progressive, one uniform per leaf) and the trajectory's proposal
//! by biased progressive sampling between the old tree and the new subtree. The generalized
//! U-turn criterion (Betancourt 2017, with the momentum sum `rho`) is checked on every balanced
//! subtree of the new subtree as its last leaf arrives, from checkpoints kept in worker-local
//! arrays (`ckpt_p[i]`, `ckpt_rho[i]`: the momentum and the running momentum sum at the first
//! leaf of each pending subtree; leaf `n` uses the checkpoints `popcount(n >> 1)` downwards), and
//! on the whole trajectory after each doubling. A subtree that turns or diverges (energy error
//! over [`MAX_DELTA_ENERGY`]) ends the trajectory and is never proposed.
//!
//! The model is a type implementing [`LogDensity`]: an associated function that, given the
//! position (a worker-local tensor) and the model's data tensors, writes the gradient of the
//! log density and returns the log density. Its body must be DSL code: call a `#[helper]`
//! function from it (a plain Rust `for` in an unmarked function would be unrolled at trace
//! time). The DSL has no closures and an operator cannot take a function value, so the model
//! is a type parameter of the operator: `nuts::<MyModel>(..)`.
//!
//! Random numbers: every draw is `philox4x32(key, [chain, transition, draw, 0])`, with `draw`
//! counting within the transition: draws `0 .. ceil(dim / 2)` are the momentum (two normals
//! each, `normal_f64`), then one uniform (`uniform_f64` of words 0 and 1) per direction, per
//! leaf (the multinomial choice within the subtree) and per completed doubling (the choice
//! between the tree and the subtree), in the order the algorithm consumes them.

use ovl::prelude::*;

/// An energy error (the Hamiltonian's increase over the transition's start) above this is a
/// divergence: the trajectory stops (NumPyro's and Stan's default).
pub const MAX_DELTA_ENERGY: f64 = 1000.0;

/// A model: its log density and gradient in the DSL.
pub trait LogDensity {
    /// Writes the gradient of the log density at `q` into `grad` (both worker-local `[dim]`
    /// tensors) and returns the log density; `data` are the model's tensors (operator inputs).
    fn log_density(q: &Tensor<f64>, grad: &Tensor<f64>, data: &[Tensor<f64>]) -> Expr<f64>;
}

/// `log(exp(a) + exp(b))`, `-inf` when both are.
#[helper]
fn logaddexp(a: Expr<f64>, b: Expr<f64>) -> Expr<f64> {
    let m = max(a, b);
    let r = m + log1p(exp(-abs(a - b)));
    select(m == f64::NEG_INFINITY, m, r)
}

/// A uniform in [0, 1): draw `draw` of `transition` of `chain`.
#[helper]
fn uniform(
    key: &Tensor<u32>,
    chain: Expr<u32>,
    transition: Expr<u32>,
    draw: Expr<i64>,
) -> Expr<f64> {
    let w = philox4x32(
        [key[[0]], key[[1]]],
        [chain, transition, draw.cast::<u32>(), 0u32.into_expr()],
    );
    uniform_f64(w[0], w[1])
}

/// The number of one bits of `x` (`x < 2^bits`).
#[helper]
fn popcount(x: Expr<i64>, bits: usize) -> Expr<i64> {
    let mut n = variable(0i64);
    for b in 0..bits {
        n += (x >> b) & 1;
    }
    n.get()
}

/// `sum_j inv_mass[j] * a[j] * b[j]`.
#[helper]
fn dot_m(a: &Tensor<f64>, b: &Tensor<f64>, inv_mass: &Tensor<f64>) -> Expr<f64> {
    let d = inv_mass.dims::<1>()[0];
    let mut s = variable(0.0f64);
    for j in 0..d {
        s += inv_mass[[j]] * a[[j]] * b[[j]];
    }
    s.get()
}

/// One leapfrog step of signed size `eps` from `(q, p)` with `g` the gradient at `q`, in place;
/// returns the log density at the new `q` (whose gradient is left in `g`).
#[helper]
#[allow(clippy::too_many_arguments)]
fn leapfrog<M: LogDensity>(
    q: &Tensor<f64>,
    p: &Tensor<f64>,
    g: &Tensor<f64>,
    inv_mass: &Tensor<f64>,
    eps: Expr<f64>,
    data: &[Tensor<f64>],
) -> Expr<f64> {
    let d = inv_mass.dims::<1>()[0];
    let half = 0.5 * eps;
    for j in 0..d {
        p[[j]] = p[[j]] + half * g[[j]];
        q[[j]] = q[[j]] + eps * inv_mass[[j]] * p[[j]];
    }
    let lp = M::log_density(q, g, data);
    for j in 0..d {
        p[[j]] = p[[j]] + half * g[[j]];
    }
    lp
}

/// The deepest tree [`nuts`] accepts: its leapfrog counts (`2^depth - 1` at most) are `i32`.
pub const MAX_TREE_DEPTH: usize = 30;

/// Bytes of one worker-local tensor on every backend (`ovl_ir::limits::PORTABLE_LOCAL_BYTES`).
const LOCAL_TENSOR_BYTES: usize = 64 * 1024;

/// Trace-time errors for arguments [`nuts`] cannot run with.
fn check_arguments(
    key: &Tensor<u32>,
    step_size: &Tensor<f64>,
    inv_mass: &Tensor<f64>,
    chains: usize,
    dim: usize,
    max_depth: usize,
) {
    if key.shape() != [2] {
        trace_error(format!(
            "nuts: the key must be two u32 words, shape [2], not {:?}",
            key.shape()
        ));
    }
    if step_size.shape() != [chains] {
        trace_error(format!(
            "nuts: step_size must have one step per chain, shape [{chains}], not {:?}",
            step_size.shape()
        ));
    }
    if inv_mass.shape() != [dim] {
        trace_error(format!(
            "nuts: inv_mass (the inverse mass matrix's diagonal) must have shape [{dim}], not {:?}",
            inv_mass.shape()
        ));
    }
    let checkpoint_bytes = max_depth * dim * 8;
    if max_depth == 0 || max_depth > MAX_TREE_DEPTH {
        trace_error(format!(
            "nuts: max_depth {max_depth} is out of range: 1 to {MAX_TREE_DEPTH}"
        ));
    } else if checkpoint_bytes > LOCAL_TENSOR_BYTES {
        trace_error(format!(
            "nuts: max_depth {max_depth} in {dim} dimensions needs U-turn checkpoints of \
             {checkpoint_bytes} bytes per chain, over the {LOCAL_TENSOR_BYTES} bytes of a \
             worker-local tensor: use max_depth {} or less",
            LOCAL_TENSOR_BYTES / (dim * 8)
        ));
    }
}

/// NUTS for the model `M`: `transitions` transitions of every chain, one worker per chain.
///
/// Inputs: `key` `[2]` (the Philox key, the seed), `init` `[chains, dim]` (initial positions),
/// `step_size` `[chains]`, `inv_mass` `[dim]` (the diagonal of the inverse mass matrix), `data`
/// (the model's tensors). Outputs: the samples `[chains, transitions, dim]` and per chain and
/// transition the tree depth (doublings), the leapfrog steps, the divergence flag (0/1) and the
/// acceptance statistic (the mean over the trajectory's new points of `min(1, exp(-dH))`).
#[operator]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub fn nuts<M: LogDensity>(
    key: Tensor<u32>,
    init: Tensor<f64>,
    step_size: Tensor<f64>,
    inv_mass: Tensor<f64>,
    data: Vec<Tensor<f64>>,
    transitions: usize,
    max_depth: usize,
) -> (
    Tensor<f64>,
    Tensor<i32>,
    Tensor<i32>,
    Tensor<i32>,
    Tensor<f64>,
) {
    let [chains, dim] = init.dims::<2>();
    check_arguments(&key, &step_size, &inv_mass, chains, dim, max_depth);
    let c = position_in([chains])[0];
    let samples = output([chains, transitions, dim]);
    let depths = output([chains, transitions]);
    let leapfrogs = output([chains, transitions]);
    let divergent = output([chains, transitions]);
    let accept = output([chains, transitions]);
    let eps0 = step_size[[c]];
    let chain = c.cast::<u32>();
    let half = dim.div_ceil(2);
    let slots = max_depth.clamp(1, (LOCAL_TENSOR_BYTES / (dim.max(1) * 8)).max(1));

    // The chain's state (also the trajectory's proposal while it is built).
    let q = zeros::<f64>([dim]);
    let g = zeros::<f64>([dim]);
    for j in 0..dim {
        q[[j]] = init[[c, j]];
    }
    let mut logp = variable(M::log_density(&q, &g, &data));
    // The trajectory's ends (row 0 backward, row 1 forward), the moving end, the subtree's
    // proposal, the momentum sums of the tree and of the subtree, and the checkpoints.
    let edge_q = zeros::<f64>([2, dim]);
    let edge_p = zeros::<f64>([2, dim]);
    let edge_g = zeros::<f64>([2, dim]);
    let cq = zeros::<f64>([dim]);
    let cp = zeros::<f64>([dim]);
    let cg = zeros::<f64>([dim]);
    let sub_q = zeros::<f64>([dim]);
    let sub_g = zeros::<f64>([dim]);
    let rho = zeros::<f64>([dim]);
    let sub_rho = zeros::<f64>([dim]);
    let normals = zeros::<f64>([2 * half]);
    let ckpt_p = zeros::<f64>([slots, dim]);
    let ckpt_rho = zeros::<f64>([slots, dim]);
    let pa = zeros::<f64>([dim]);
    let pb = zeros::<f64>([dim]);
    let rs = zeros::<f64>([dim]);

    let mut kinetic = variable(0.0f64);
    let mut h0 = variable(0.0f64);
    let mut log_w = variable(0.0f64);
    let mut depth = variable(0i64);
    let mut stop = variable(0i32);
    let mut diverged = variable(0i32);
    let mut n_leap = variable(0i64);
    let mut sum_acc = variable(0.0f64);
    let mut draw = variable(0i64);
    let mut side = variable(0i64);
    let mut eps = variable(0.0f64);
    let mut size = variable(0i64);
    let mut n = variable(0i64);
    let mut sub_w = variable(0.0f64);
    let mut sub_lp = variable(0.0f64);
    let mut sub_turn = variable(0i32);

    for t in 0..transitions {
        let tr = t.cast::<u32>();
        // The momentum: p = z / sqrt(inv_mass), z standard normal.
        for k in 0..half {
            let w = philox4x32(
                [key[[0]], key[[1]]],
                [chain, tr, k.cast::<u32>(), 0u32.into_expr()],
            );
            let (z0, z1) = normal_f64(w);
            normals[[2 * k]] = z0;
            normals[[2 * k + 1]] = z1;
        }
        kinetic = 0.0f64;
        for j in 0..dim {
            let pj = normals[[j]] / sqrt(inv_mass[[j]]);
            kinetic += inv_mass[[j]] * pj * pj;
            rho[[j]] = pj;
            edge_p[[0, j]] = pj;
            edge_p[[1, j]] = pj;
            edge_q[[0, j]] = q[[j]];
            edge_q[[1, j]] = q[[j]];
            edge_g[[0, j]] = g[[j]];
            edge_g[[1, j]] = g[[j]];
        }
        h0 = 0.5 * kinetic - logp;
        log_w = 0.0f64;
        depth = 0i64;
        stop = 0i32;
        diverged = 0i32;
        n_leap = 0i64;
        sum_acc = 0.0f64;
        draw = half as i64;
        size = 1i64;
        while depth < max_depth as i64 && stop == 0 {
            // The direction, and the new subtree of `size` leaves from that end.
            let u = uniform(&key, chain, tr, draw.get());
            draw += 1;
            side = select(u < 0.5, 0i64, 1i64);
            eps = select(u < 0.5, -eps0, eps0);
            for j in 0..dim {
                cq[[j]] = edge_q[[side, j]];
                cp[[j]] = edge_p[[side, j]];
                cg[[j]] = edge_g[[side, j]];
                sub_rho[[j]] = 0.0f64;
            }
            n = 0i64;
            sub_w = f64::NEG_INFINITY;
            sub_turn = 0i32;
            while n < size && sub_turn == 0 && diverged == 0 {
                let lp = leapfrog::<M>(&cq, &cp, &cg, &inv_mass, eps.get(), &data);
                n_leap += 1;
                let delta = 0.5 * dot_m(&cp, &cp, &inv_mass) - lp - h0;
                let delta = select(delta == delta, delta, f64::INFINITY);
                if delta > MAX_DELTA_ENERGY {
                    diverged = 1i32;
                }
                sum_acc += min(exp(-delta), 1.0f64);
                // Multinomial sampling within the subtree: the new leaf replaces the subtree's
                // proposal with probability its weight over the subtree's so far.
                let w = -delta;
                let total = logaddexp(sub_w.get(), w);
                let u = uniform(&key, chain, tr, draw.get());
                draw += 1;
                if u < exp(w - total) {
                    for j in 0..dim {
                        sub_q[[j]] = cq[[j]];
                        sub_g[[j]] = cg[[j]];
                    }
                    sub_lp = lp;
                }
                sub_w = total;
                for j in 0..dim {
                    sub_rho[[j]] = sub_rho[[j]] + cp[[j]];
                }
                let hi = popcount(n >> 1, slots);
                if n % 2 == 0 {
                    // The first leaf of pending subtrees: a checkpoint.
                    for j in 0..dim {
                        ckpt_p[[hi, j]] = cp[[j]];
                        ckpt_rho[[hi, j]] = sub_rho[[j]];
                    }
                } else {
                    // The last leaf of the balanced subtrees ending here (as many as the
                    // trailing ones of n): the U-turn check of each.
                    let trailing = popcount((!n & (n + 1)) - 1, slots + 1);
                    for i in (hi - trailing + 1)..(hi + 1) {
                        for j in 0..dim {
                            pa[[j]] = ckpt_p[[i, j]];
                            rs[[j]] = sub_rho[[j]] - ckpt_rho[[i, j]] + ckpt_p[[i, j]]
                                - 0.5 * (ckpt_p[[i, j]] + cp[[j]]);
                        }
                        if dot_m(&pa, &rs, &inv_mass) <= 0.0 || dot_m(&cp, &rs, &inv_mass) <= 0.0 {
                            sub_turn = 1i32;
                        }
                    }
                }
                n += 1;
            }
            for j in 0..dim {
                edge_q[[side, j]] = cq[[j]];
                edge_p[[side, j]] = cp[[j]];
                edge_g[[side, j]] = cg[[j]];
            }
            depth += 1;
            size = size * 2;
            if sub_turn == 0 && diverged == 0 {
                // Biased progressive sampling: the subtree's proposal replaces the tree's with
                // probability min(1, W_subtree / W_tree).
                let u = uniform(&key, chain, tr, draw.get());
                draw += 1;
                if u < exp(sub_w - log_w) {
                    for j in 0..dim {
                        q[[j]] = sub_q[[j]];
                        g[[j]] = sub_g[[j]];
                    }
                    logp = sub_lp;
                }
                log_w = logaddexp(log_w.get(), sub_w.get());
                for j in 0..dim {
                    rho[[j]] = rho[[j]] + sub_rho[[j]];
                    pa[[j]] = edge_p[[0, j]];
                    pb[[j]] = edge_p[[1, j]];
                    rs[[j]] = rho[[j]] - 0.5 * (edge_p[[0, j]] + edge_p[[1, j]]);
                }
                if dot_m(&pa, &rs, &inv_mass) <= 0.0 || dot_m(&pb, &rs, &inv_mass) <= 0.0 {
                    stop = 1i32;
                }
            } else {
                stop = 1i32;
            }
        }
        for j in 0..dim {
            samples[[c, t, j]] = q[[j]];
        }
        depths[[c, t]] = depth.get().cast::<i32>();
        leapfrogs[[c, t]] = n_leap.get().cast::<i32>();
        divergent[[c, t]] = diverged.get();
        accept[[c, t]] = sum_acc.get() / n_leap.get().cast::<f64>();
    }
    (samples, depths, leapfrogs, divergent, accept)
}
