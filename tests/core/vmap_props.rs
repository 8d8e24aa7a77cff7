//! Property test of `ovl::vmap`: for the operators of the conformance suite and for random
//! graphs, `vmap(f)(X)[i] == f(X[i])` bit for bit (NaN equals NaN), on the interpreter and the
//! generated C++, for random data (drawn from the suite's edge values), random batch sizes
//! (0 included) and a random choice of batched and shared inputs.

use crate::conformance;

use conformance::support::Reference;
use conformance::{arithmetic, casts, control, math, paper};
use ndarray::{Array1, Array2, ArrayD, Axis, IxDyn};
use ovl::prelude::*;
use ovl::{Batched, DType, HostTensor, LazyTensor, VmapInput};
use proptest::prelude::*;

/// One input of a checked function: the whole (batched or shared) tensor, and how to get
/// example `i` of it (the tensor itself when shared).
struct In {
    full: LazyTensor,
    example: Box<dyn Fn(usize) -> LazyTensor>,
    batched: bool,
}

fn batched<T: Scalar>(a: ArrayD<T>) -> In {
    In {
        full: Lazy::from(a.clone()).into_untyped(),
        example: Box::new(move |i| Lazy::from(a.index_axis(Axis(0), i).to_owned()).into_untyped()),
        batched: true,
    }
}

fn shared<T: Scalar>(a: ArrayD<T>) -> In {
    let full = Lazy::from(a).into_untyped();
    let same = full.clone();
    In {
        full,
        example: Box::new(move |_| same.clone()),
        batched: false,
    }
}

/// Batched when `batch` is `Some`: `batch` examples, each shaped `shape`, from `gen`.
fn input<T: Scalar>(shape: &[usize], batch: Option<usize>, gen: &mut impl FnMut() -> T) -> In {
    match batch {
        Some(b) => {
            let full: Vec<usize> = std::iter::once(b).chain(shape.iter().copied()).collect();
            batched(ArrayD::from_shape_simple_fn(IxDyn(&full), gen))
        }
        None => shared(ArrayD::from_shape_simple_fn(IxDyn(shape), gen)),
    }
}

fn typed<T: Scalar>(t: &LazyTensor) -> Lazy<T> {
    Lazy::try_from(t.clone()).expect("the checked function's input dtype")
}

fn u<T: Scalar>(l: Lazy<T>) -> LazyTensor {
    l.into_untyped()
}

fn same_example<T: Scalar>(got: &HostTensor, i: usize, want: &HostTensor, float: bool) -> bool {
    let per = want.len();
    let g = &got.as_slice::<T>().unwrap()[i * per..(i + 1) * per];
    let w = want.as_slice::<T>().unwrap();
    let bytes = |s: &[T]| -> Vec<u8> {
        // SAFETY: tensor elements are plain numbers and bool (no padding); read as bytes.
        unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
            .to_vec()
    };
    if !float {
        return bytes(g) == bytes(w);
    }
    let size = std::mem::size_of::<T>();
    let (gb, wb) = (bytes(g), bytes(w));
    gb.chunks(size).zip(wb.chunks(size)).all(|(a, b)| {
        a == b || {
            let nan = |x: &[u8]| {
                if size == 4 {
                    f32::from_le_bytes(x.try_into().unwrap()).is_nan()
                } else {
                    f64::from_le_bytes(x.try_into().unwrap()).is_nan()
                }
            };
            nan(a) && nan(b)
        }
    })
}

fn same(got: &HostTensor, i: usize, want: &HostTensor) -> bool {
    let tail = got.shape.get(1..).unwrap_or(&[]);
    if tail != want.shape.as_slice() || got.dtype() != want.dtype() {
        return false;
    }
    match want.dtype() {
        DType::F32 => same_example::<f32>(got, i, want, true),
        DType::F64 => same_example::<f64>(got, i, want, true),
        DType::I8 => same_example::<i8>(got, i, want, false),
        DType::I16 => same_example::<i16>(got, i, want, false),
        DType::I32 => same_example::<i32>(got, i, want, false),
        DType::I64 => same_example::<i64>(got, i, want, false),
        DType::U8 => same_example::<u8>(got, i, want, false),
        DType::U16 => same_example::<u16>(got, i, want, false),
        DType::U32 => same_example::<u32>(got, i, want, false),
        DType::U64 => same_example::<u64>(got, i, want, false),
        DType::Bool => same_example::<bool>(got, i, want, false),
        DType::F16 => same_example::<ovl::half::f16>(got, i, want, false),
        DType::BF16 => same_example::<ovl::half::bf16>(got, i, want, false),
    }
}

/// `vmap(f)` over `inputs` (batch size `batch`) equals `f` on each example, on both targets.
fn check(
    name: &str,
    batch: usize,
    inputs: &[In],
    f: &dyn Fn(&[LazyTensor]) -> Vec<LazyTensor>,
) -> Result<(), TestCaseError> {
    let args: Vec<VmapInput> = inputs
        .iter()
        .map(|i| {
            if i.batched {
                VmapInput::Batched(&i.full)
            } else {
                VmapInput::Shared(&i.full)
            }
        })
        .collect();
    let outputs = ovl::vmap(|xs: Vec<LazyTensor>| f(&xs), args)
        .map_err(|e| TestCaseError::fail(format!("{name}: vmap: {e}")))?;
    for (target, options) in [
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ] {
        let got = ovl::evaluate_with(&outputs, &options)
            .map_err(|e| TestCaseError::fail(format!("{name} on {target}: {e}")))?;
        for (k, g) in got.iter().enumerate() {
            prop_assert_eq!(
                g.shape.first().copied(),
                Some(batch),
                "{} output {}",
                name,
                k
            );
        }
        for i in 0..batch {
            let example: Vec<LazyTensor> = inputs.iter().map(|x| (x.example)(i)).collect();
            let want = ovl::evaluate_with(&f(&example), &options)
                .map_err(|e| TestCaseError::fail(format!("{name} example {i} on {target}: {e}")))?;
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(
                    same(g, i, w),
                    "{} on {}: output {} of example {} differs: {:?} vs {:?}",
                    name,
                    target,
                    k,
                    i,
                    g,
                    w
                );
            }
        }
    }
    Ok(())
}

/// A deterministic stream of pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// One of the conformance suite's edge values of `T`.
    fn edge<T: Reference>(&mut self) -> T {
        let e = T::edges();
        e[self.below(e.len() as u64) as usize]
    }
    fn float(&mut self) -> f32 {
        (self.below(2001) as f32 - 1000.0) / 250.0
    }
}

/// What one case draws: data, a batch size and which inputs are batched.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    batch: usize,
    shared_mask: u8,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop_oneof![Just(0usize), 1usize..4],
        any::<u8>(),
    )
        .prop_map(|(seed, batch, shared_mask)| Case {
            seed: seed | 1,
            batch,
            shared_mask,
        })
}

impl Case {
    /// Whether input `k` is batched (input 0 always is).
    fn batched(&self, k: usize) -> Option<usize> {
        (k == 0 || self.shared_mask & (1 << k) == 0).then_some(self.batch)
    }
}

fn binary<T: Reference + Num>(c: &Case) -> Result<(), TestCaseError> {
    let mut r = Rng(c.seed);
    let ins = [
        input(&[6], c.batched(0), &mut || r.edge::<T>()),
        input(&[6], c.batched(1), &mut || r.edge::<T>()),
    ];
    check("binary_ops", c.batch, &ins, &|x| {
        let o = arithmetic::binary_ops(typed::<T>(&x[0]), typed::<T>(&x[1]));
        vec![u(o.0), u(o.1), u(o.2), u(o.3), u(o.4), u(o.5), u(o.6)]
    })?;
    check("unary_ops", c.batch, &ins[..1], &|x| {
        let o = arithmetic::unary_ops(typed::<T>(&x[0]));
        vec![u(o.0), u(o.1)]
    })?;
    check("compare_all", c.batch, &ins, &|x| {
        let o = control::compare_all(typed::<T>(&x[0]), typed::<T>(&x[1]));
        vec![u(o.0), u(o.1), u(o.2), u(o.3), u(o.4), u(o.5)]
    })
}

fn casts_from<S: Reference>(c: &Case) -> Result<(), TestCaseError> {
    let mut r = Rng(c.seed);
    let ins = [input(&[5], c.batched(0), &mut || r.edge::<S>())];
    check("cast_all", c.batch, &ins, &|x| {
        let o = casts::cast_all(typed::<S>(&x[0]));
        vec![
            u(o.0),
            u(o.1),
            u(o.2),
            u(o.3),
            u(o.4),
            u(o.5),
            u(o.6),
            u(o.7),
            u(o.8),
            u(o.9),
            u(o.10),
        ]
    })
}

fn float_math<T: Reference + Float>(c: &Case) -> Result<(), TestCaseError> {
    let mut r = Rng(c.seed);
    let ins = [
        input(&[5], c.batched(0), &mut || r.edge::<T>()),
        input(&[5], c.batched(1), &mut || r.edge::<T>()),
    ];
    check("unary_all", c.batch, &ins[..1], &|x| {
        math::unary_all(typed::<T>(&x[0]))
            .into_iter()
            .map(u)
            .collect()
    })?;
    check("binary_all", c.batch, &ins, &|x| {
        let o = math::binary_all(typed::<T>(&x[0]), typed::<T>(&x[1]));
        vec![u(o.0), u(o.1), u(o.2), u(o.3), u(o.4), u(o.5)]
    })
}

fn control_flow(c: &Case) -> Result<(), TestCaseError> {
    let mut r = Rng(c.seed);
    let b = c.batch;
    let x = [input(&[9], Some(b), &mut || r.edge::<f64>())];
    check("classify", b, &x, &|x| {
        vec![u(control::classify(typed::<f64>(&x[0])))]
    })?;
    let ab = [
        input(&[4], Some(b), &mut || r.below(2) == 1),
        input(&[4], c.batched(1), &mut || r.below(2) == 1),
    ];
    check("logic", b, &ab, &|x| {
        let o = control::logic(typed::<bool>(&x[0]), typed::<bool>(&x[1]));
        vec![u(o.0), u(o.1), u(o.2), u(o.3)]
    })?;
    let m = [input(&[3, 5], Some(b), &mut || r.float() as f64)];
    check("cumsum_cumprod", b, &m, &|x| {
        let o = control::cumsum_cumprod(typed::<f64>(&x[0]));
        vec![u(o.0), u(o.1)]
    })?;
    check("chained cumsum_cumprod", b, &m, &|x| {
        let once = control::cumsum_cumprod(typed::<f64>(&x[0])).0;
        vec![u(control::cumsum_cumprod(&once).0)]
    })?;
    let counts = [input(&[5], Some(b), &mut || r.below(24) as i64 - 4)];
    check("loops", b, &counts, &|x| {
        let o = control::loops(typed::<i64>(&x[0]));
        vec![u(o.0), u(o.1), u(o.2)]
    })?;
    let n = [input(&[5], Some(b), &mut || 1 + r.below(300) as u32)];
    check("collatz", b, &n, &|x| {
        vec![u(control::collatz(typed::<u32>(&x[0])))]
    })?;
    let v = [input(&[4], Some(b), &mut || r.float())];
    let (taps, scale) = (1 + r.below(4) as usize, r.below(2) == 1);
    check("unrolled", b, &v, &|x| {
        vec![u(control::unrolled(typed::<f32>(&x[0]), taps, scale))]
    })?;
    let (lo, hi) = (-r.float().abs(), r.float().abs());
    check("clamp", b, &v, &|x| {
        vec![u(control::clamp(typed::<f32>(&x[0]), lo, hi))]
    })?;
    let h = [input(&[3, 9], Some(b), &mut || r.edge::<u8>())];
    check("local_histogram", b, &h, &|x| {
        vec![u(control::local_histogram(typed::<u8>(&x[0])))]
    })?;
    let t = [input(&[2, 3, 4], Some(b), &mut || r.edge::<i16>())];
    check("transpose_3d", b, &t, &|x| {
        let o = control::transpose_3d(typed::<i16>(&x[0]));
        vec![u(o.0), u(o.1)]
    })?;
    let g = [
        input(&[10], c.batched(1), &mut || r.float()),
        input(&[5], Some(b), &mut || r.below(10) as u16),
    ];
    check("gather", b, &g, &|x| {
        vec![u(control::gather(typed::<f32>(&x[0]), typed::<u16>(&x[1])))]
    })?;
    let l = [input(&[3], Some(b), &mut || r.below(3) as i32)];
    check("limits", b, &l, &|x| {
        let o = math::limits(typed::<i32>(&x[0]));
        vec![u(o.0), u(o.1), u(o.2)]
    })?;
    let lit = [
        input(&[4], Some(b), &mut || r.edge::<f32>()),
        input(&[4], c.batched(1), &mut || r.edge::<i64>()),
    ];
    check("with_literals", b, &lit, &|x| {
        let o = arithmetic::with_literals(typed::<f32>(&x[0]), typed::<i64>(&x[1]));
        vec![u(o.0), u(o.1)]
    })
}

/// Random CSR graphs on `V` vertices (sorted neighbour lists padded to a fixed length), one per
/// example, and a shared list of candidate edges.
fn triangles(c: &Case) -> Result<(), TestCaseError> {
    const V: usize = 6;
    let mut r = Rng(c.seed);
    let b = c.batch;
    let mut row_ptr = Array2::<i32>::zeros((b, V + 1));
    let mut cols = Array2::<i32>::zeros((b, V * V));
    for e in 0..b {
        let mut k = 0;
        for v in 0..V {
            row_ptr[[e, v]] = k as i32;
            for w in 0..V {
                if w != v && r.below(2) == 1 {
                    cols[[e, k]] = w as i32;
                    k += 1;
                }
            }
        }
        row_ptr[[e, V]] = k as i32;
    }
    let pairs: Vec<(i32, i32)> = (0..V as i32)
        .flat_map(|a| (a + 1..V as i32).map(move |b| (a, b)))
        .collect();
    let src = Array1::from_iter(pairs.iter().map(|p| p.0)).into_dyn();
    let dst = Array1::from_iter(pairs.iter().map(|p| p.1)).into_dyn();
    let ins = [
        batched(row_ptr.into_dyn()),
        batched(cols.into_dyn()),
        shared(src),
        shared(dst),
    ];
    check("triangles_per_edge", b, &ins, &|x| {
        vec![u(paper::triangles_per_edge(
            typed::<i32>(&x[0]),
            typed::<i32>(&x[1]),
            typed::<i32>(&x[2]),
            typed::<i32>(&x[3]),
        ))]
    })?;
    let mut r = Rng(c.seed ^ 0x5555);
    let conv = [
        input(&[8], Some(b), &mut || r.float()),
        input(&[3], c.batched(1), &mut || r.float()),
    ];
    check("conv1d", b, &conv, &|x| {
        vec![u(paper::conv1d(typed::<f32>(&x[0]), typed::<f32>(&x[1])))]
    })?;
    let lx = [input(&[6], Some(b), &mut || r.edge::<f64>())];
    check("log1p_expm1", b, &lx, &|x| {
        let o = paper::log1p_expm1(typed::<f64>(&x[0]));
        vec![u(o.0), u(o.1)]
    })
}

// ---- random graphs

const N: usize = 4;

#[operator]
fn stencil_left(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    if p[1] > 0 {
        out[[p[0], p[1]]] = x[[p[0], p[1]]] + x[[p[0], p[1] - 1]];
    } else {
        out[[p[0], p[1]]] = x[[p[0], p[1]]];
    }
    out
}

#[operator]
fn transpose(x: Tensor<f32>) -> Tensor<f32> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([c, r]);
    out[[p[1], p[0]]] = x[[p[0], p[1]]];
    out
}

/// A running sum along rows (a loop-carried variable) and each row's maximum (an accumulator).
#[operator]
fn scan_and_max(x: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let top = output([rows, 1]);
    let mut acc = variable(0.0f32);
    let mut m = max_of(f32::NEG_INFINITY);
    for j in 0..cols {
        acc += x[[r, j]];
        out[[r, j]] = acc;
        m.update(x[[r, j]]);
    }
    top[[r, 0]] = m;
    (out, top)
}

/// Halvings until below 1 (a `while`), and a data-dependent read.
#[operator]
fn halvings_and_pick(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    let mut v = variable(abs(x[[p[0], p[1]]]));
    let mut k = variable(0.0f32);
    while v >= 1.0 && k < 100.0 {
        v = v / 2.0;
        k += 1.0;
    }
    let j = (abs(y[[p[0], p[1]]]) * 3.0).cast::<i64>() % cols as i64;
    out[[p[0], p[1]]] = k + x[[p[0], j]];
    out
}

/// Adds a column vector (a broadcast read).
#[operator]
fn add_column(x: Tensor<f32>, col: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] + col[[p[0], 0]];
    out
}

#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: usize,
    b: usize,
}

fn build(steps: &[Step], x: &Lazy<f32>, y: &Lazy<f32>) -> Vec<Lazy<f32>> {
    let mut pool: Vec<Lazy<f32>> = vec![x.clone(), y.clone()];
    for s in steps {
        let a = pool[s.a % pool.len()].clone();
        let b = pool[s.b % pool.len()].clone();
        let v = match s.kind % 8 {
            0 => &a + &b,
            1 => &a * 0.5f32 - 1.25f32,
            2 => stencil_left(&a),
            3 => transpose(&a),
            4 => {
                let (scan, top) = scan_and_max(&a);
                add_column(&scan, &top)
            }
            5 => halvings_and_pick(&a, &b),
            6 => ovl_stdlib::softmax(&a),
            _ => ovl_stdlib::maximum(&a, &b),
        };
        pool.push(v);
    }
    let last = pool.len() - 1;
    vec![pool[last].clone(), pool[2 + steps.len() / 2].clone()]
}

fn step() -> impl Strategy<Value = Step> {
    (0u8..8, 0usize..16, 0usize..16).prop_map(|(kind, a, b)| Step { kind, a, b })
}

fn cases(default: u32) -> u32 {
    std::env::var("OVL_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig {
        // OVL_PROP_CASES=100 for a longer run; the default keeps CI (2 cores) quick.
        cases: cases(3),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arithmetic_and_comparisons(c in case()) {
        binary::<f32>(&c)?;
        binary::<i8>(&c)?;
        binary::<u64>(&c)?;
    }

    #[test]
    fn casts(c in case()) {
        casts_from::<f32>(&c)?;
        casts_from::<i32>(&c)?;
        casts_from::<u8>(&c)?;
    }

    #[test]
    fn math_functions(c in case()) {
        float_math::<f32>(&c)?;
        float_math::<f64>(&c)?;
    }

    #[test]
    fn control_flow_locals_and_indices(c in case()) {
        control_flow(&c)?;
    }

    #[test]
    fn paper_operators(c in case()) {
        triangles(&c)?;
    }

    #[test]
    fn random_graphs(
        steps in proptest::collection::vec(step(), 1..7),
        c in case(),
    ) {
        let mut r = Rng(c.seed);
        let ins = [
            input(&[N, N], Some(c.batch), &mut || r.float()),
            input(&[N, N], c.batched(1), &mut || r.float()),
        ];
        let graph = |x: &[LazyTensor]| -> Vec<LazyTensor> {
            build(&steps, &typed::<f32>(&x[0]), &typed::<f32>(&x[1]))
                .into_iter()
                .map(u)
                .collect()
        };
        check("random graph", c.batch, &ins, &graph)?;
        // With every input batched, every operator is batched: a batch of one example fuses
        // into the same kernels as the example alone. (Only a batch of one: fusion prices
        // merges at the graph's sizes, so at a larger batch a merge that saves a kernel launch
        // but computes elements twice can be refused where the example alone takes it.)
        if ins[1].batched && c.batch > 0 {
            let mut data = |shape: &[usize]| {
                Lazy::from(ArrayD::from_shape_simple_fn(IxDyn(shape), || r.float()))
            };
            let (x, y) = (data(&[1, N, N]), data(&[1, N, N]));
            let batched = ovl::vmap(
                |(x, y): (Lazy<f32>, Lazy<f32>)| build(&steps, &x, &y),
                (Batched(&x), Batched(&y)),
            ).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let one = build(&steps, &data(&[N, N]), &data(&[N, N]));
            let after = |o: &Vec<Lazy<f32>>| ovl::fusion(o, 3).map(|f| f.report.kernels_after);
            prop_assert_eq!(after(&batched).unwrap(), after(&one).unwrap());
        }
    }
}
