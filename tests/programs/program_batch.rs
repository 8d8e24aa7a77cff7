//! `ovl::program_batch::batch_program` and `batch_gradient_program`: an exported program batched over a
//! new leading axis. Slice `i` of the batched program's outputs equals, bit for bit, the program
//! run on slice `i` of the batched feeds (interpreter and C++); shared feeds, constants and
//! unbatched outputs; the batched gradient program, whose shared feeds' gradients are the sums
//! over the examples (in the accumulator order `proto/ovl.proto` defines); errors.

use crate::cumsum;

use cumsum::cumsum_rows;
use ovl::prelude::*;
use ovl::program::{run_program, seal_program};
use ovl::program_batch::{
    batch_gradient_program, batch_program, batch_sealed, BatchProgramError, BatchSize,
    BatchedProgram,
};
use ovl_core::{ir, HostTensor};

fn options(target: Options) -> Options {
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..target
        },
        None => target,
    }
}

fn targets() -> [Options; 2] {
    [options(Options::interpreter()), options(Options::cpu())]
}

#[operator]
fn mul_op(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = a.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&a);
    out[[p[0], p[1]]] = a[[p[0], p[1]]] * b[[p[0], p[1]]];
    out
}

#[operator]
fn tanh_add(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = a.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&a);
    out[[p[0], p[1]]] = tanh(a[[p[0], p[1]]]) + b[[p[0], p[1]]];
    out
}

/// A small pseudo-random generator (the values only need to differ).
struct Rng(u64);

impl Rng {
    fn values(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    fn tensor(&mut self, shape: &[usize]) -> HostTensor {
        let data = self.values(shape.iter().product());
        HostTensor::from_vec(shape, data).unwrap()
    }
}

fn data(t: &HostTensor) -> &[f32] {
    t.as_slice::<f32>().unwrap()
}

/// Example `i` of a batched f32 tensor.
fn slice(t: &HostTensor, i: usize) -> HostTensor {
    let per: usize = t.shape[1..].iter().product();
    HostTensor::from_vec(&t.shape[1..], data(t)[i * per..(i + 1) * per].to_vec()).unwrap()
}

/// The shape of feed `k` of `program` for the values `symbols` of its symbols (none for a
/// program of concrete sizes).
fn feed_shape_at(program: &ir::Program, k: usize, symbols: &[u64]) -> Vec<usize> {
    let t = program.feeds[k].r#type.as_ref().unwrap();
    let shape = ovl_core::symbolic::resolve_shape(t, symbols).unwrap();
    shape.iter().map(|&d| d as usize).collect()
}

/// Random feeds for `program` batched by `mask` over `n` examples, for the values `symbols` of
/// its symbols.
fn batched_feeds_at(
    program: &ir::Program,
    mask: &[bool],
    n: usize,
    symbols: &[u64],
    rng: &mut Rng,
) -> Vec<HostTensor> {
    (0..program.feeds.len())
        .map(|k| {
            let shape = feed_shape_at(program, k, symbols);
            if mask[k] {
                rng.tensor(&[&[n][..], &shape].concat())
            } else {
                rng.tensor(&shape)
            }
        })
        .collect()
}

/// Example `i` of the feeds.
fn example(feeds: &[HostTensor], mask: &[bool], i: usize) -> Vec<HostTensor> {
    feeds
        .iter()
        .zip(mask)
        .map(|(t, &b)| if b { slice(t, i) } else { t.clone() })
        .collect()
}

/// Batches `program` by `mask` over `n` and checks every example of every output against the
/// program run on that example, bit for bit, on every target. Returns which outputs are
/// batched.
fn check_slices(program: &ir::Program, mask: &[bool], n: usize) -> Vec<bool> {
    let batched = batch_program(program, mask, n as u64).unwrap();
    check_batched(program, &batched, mask, n, &[]);
    batched.batched_outputs
}

/// [`check_slices`] for a batched program made already (with `n` known or not), run over `n`
/// examples; `symbols` are the values of the program's own symbols.
fn check_batched(
    program: &ir::Program,
    batched: &BatchedProgram,
    mask: &[bool],
    n: usize,
    symbols: &[u64],
) {
    let expect_batched = &batched.batched_outputs;
    ovl::program::check_program(&batched.program).unwrap();
    let feeds = batched_feeds_at(program, mask, n, symbols, &mut Rng(n as u64 + 7));
    for target in targets() {
        let got = run_program(&batched.program, feeds.clone(), &target).unwrap();
        assert_eq!(got.len(), expect_batched.len());
        for i in 0..n {
            let want = run_program(program, example(&feeds, mask, i), &target).unwrap();
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                if expect_batched[o] {
                    assert_eq!(g.shape[0], n);
                    assert_eq!(&slice(g, i), w, "output {o}, example {i}, mask {mask:?}");
                } else {
                    assert_eq!(g, w, "unbatched output {o}, mask {mask:?}");
                }
            }
        }
        if n == 0 {
            for (g, &b) in got.iter().zip(expect_batched) {
                assert!(!b || g.shape[0] == 0 && g.is_empty());
            }
        }
    }
}

/// Three operators and a constant: `y = tanh(x * w) + c`, `cumsum_rows(y)`, and
/// `cumsum_rows(w)`, which depends on `w` alone. At `opt_level` 0 every operator is a kernel;
/// at 3 the siblings fuse (so `cumsum_rows(w)` shares a kernel with `cumsum_rows(y)`).
fn chain(opt_level: u8) -> ir::Program {
    let x = ovl::placeholder::<f32>("x", &[3, 4]);
    let w = ovl::placeholder::<f32>("w", &[3, 4]);
    let c = ndarray::Array2::from_shape_fn((3, 4), |(r, k)| r as f32 - 0.25 * k as f32);
    let y = tanh_add(mul_op(&x, &w), &c);
    let bundle = ovl::as_tensorflow((&x, &w), (&y, &cumsum_rows(&y), &cumsum_rows(&w)))
        .name("chain")
        .options(&Options::interpreter().with_opt_level(opt_level))
        .build()
        .unwrap();
    bundle.program
}

#[test]
fn each_example_of_a_batched_program_is_the_program_on_that_example() {
    let program = chain(0);
    assert_eq!(
        check_slices(&program, &[true, false], 5),
        [true, true, false]
    );
    assert_eq!(
        check_slices(&program, &[false, true], 3),
        [true, true, true]
    );
    assert_eq!(check_slices(&program, &[true, true], 4), [true, true, true]);
    assert_eq!(check_slices(&program, &[false, false], 2), [false; 3]);
    // Fused: the kernel that makes cumsum_rows(w) also reads x.
    let fused = chain(3);
    assert!(fused.graph.as_ref().unwrap().operators.len() < program.graph.unwrap().operators.len());
    assert_eq!(check_slices(&fused, &[true, false], 5), [true, true, true]);
    assert_eq!(check_slices(&fused, &[false, true], 3), [true, true, true]);
}

#[test]
fn batches_of_one_and_of_none() {
    let program = chain(0);
    assert_eq!(
        check_slices(&program, &[true, false], 1),
        [true, true, false]
    );
    assert_eq!(check_slices(&program, &[true, true], 0), [true, true, true]);
}

#[test]
fn shared_operators_and_constants_stay_unbatched() {
    let program = chain(0);
    let batched = batch_program(&program, &[true, false], 6).unwrap();
    assert_eq!(batched.program.constants, program.constants);
    assert_eq!(batched.program.name, "chain batched over 6");
    let g = batched.program.graph.as_ref().unwrap();
    let original = program.graph.as_ref().unwrap();
    assert_eq!(g.operators.len(), original.operators.len());
    for (b, o) in g.operators.iter().zip(&original.operators) {
        // The cumsum of w alone is the original operator; the others gained the batch axis.
        let reads_x_or_y = b.workgroup_shape.len() != o.workgroup_shape.len();
        if reads_x_or_y {
            assert_eq!(b.workgroup_shape[0], 6);
            assert_eq!(&b.workgroup_shape[1..], &o.workgroup_shape[..]);
        } else {
            assert_eq!(b, o);
        }
    }
    // The feeds keep their names; x gains the axis.
    let feed = |k: usize| batched.program.feeds[k].clone();
    assert_eq!(feed(0).name, "x");
    assert_eq!(feed(0).r#type.unwrap().shape, vec![6, 3, 4]);
    assert_eq!(feed(1).r#type.unwrap().shape, vec![3, 4]);
}

/// The LSTM cell from ovl-stdlib with the gradient program `ovl::backward` derives, as
/// `ovl-tf-bridge/examples/make_bundles.rs` exports it.
fn lstm_cell(batch: usize, hidden: usize) -> (ir::Program, ir::Program) {
    let bundle = lstm_export(batch, hidden).build().unwrap();
    (bundle.program, bundle.gradient.unwrap())
}

/// The export of [`lstm_cell`].
fn lstm_export(batch: usize, hidden: usize) -> ovl::export::TfExport {
    let z = ovl::placeholder::<f32>("z", &[batch, 4 * hidden]);
    let c = ovl::placeholder::<f32>("c", &[batch, hidden]);
    let gates = ovl_stdlib::split(&z, 1, 4);
    let forget_bias = ndarray::arr0(1.0f32);
    let new_c = ovl_stdlib::add(
        ovl_stdlib::mul(
            &c,
            ovl_stdlib::sigmoid(ovl_stdlib::add(&gates[2], forget_bias)),
        ),
        ovl_stdlib::mul(ovl_stdlib::sigmoid(&gates[0]), ovl_stdlib::tanh(&gates[1])),
    );
    let new_h = ovl_stdlib::mul(ovl_stdlib::tanh(&new_c), ovl_stdlib::sigmoid(&gates[3]));
    let d_new_c = ovl::placeholder::<f32>("d_new_c", &[batch, hidden]);
    let d_new_h = ovl::placeholder::<f32>("d_new_h", &[batch, hidden]);
    let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c]).unwrap();
    let (dz, dc) = (grads.of(&z).unwrap(), grads.of(&c).unwrap());
    ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
        .name("lstm_cell")
        .gradient((&d_new_c, &d_new_h), (&dz, &dc))
        .options(&Options::interpreter())
}

/// The sum in the order of an accumulator over the batch (`proto/ovl.proto`): lane `t % 16`,
/// then the lanes folded pairwise.
fn lane_sum(values: impl Iterator<Item = f32>) -> f32 {
    let mut lanes = vec![0.0f32; 16];
    for (t, v) in values.enumerate() {
        lanes[t % 16] += v;
    }
    while lanes.len() > 1 {
        lanes = lanes.chunks(2).map(|p| p[0] + p[1]).collect();
    }
    0.0 + lanes[0]
}

#[test]
fn the_lstm_cell_batches_forward() {
    let (program, _) = lstm_cell(2, 3);
    assert_eq!(check_slices(&program, &[true, false], 3), [true, true]);
    assert_eq!(check_slices(&program, &[false, true], 2), [true, true]);
    assert_eq!(check_slices(&program, &[true, true], 9), [true, true]);
}

/// The batched gradient program against the gradient program run per example: batched feeds'
/// gradients slice by slice, shared feeds' gradients summed over the examples in the
/// accumulator's order; bit for bit, on every target.
fn check_gradient(
    program: &ir::Program,
    gradient: &ir::Program,
    mask: &[bool],
    n: usize,
    rng: &mut Rng,
) {
    let batched = batch_program(program, mask, n as u64).unwrap();
    let bgrad = batch_gradient_program(gradient, mask, &batched.batched_outputs, n as u64).unwrap();
    check_batched_gradient(
        program,
        gradient,
        &bgrad,
        &batched.batched_outputs,
        mask,
        n,
        &[],
        rng,
    );
}

/// [`check_gradient`] for a batched gradient program made already (with `n` known or not), run
/// over `n` examples; `symbols` are the values of the program's own symbols.
#[allow(clippy::too_many_arguments)]
fn check_batched_gradient(
    program: &ir::Program,
    gradient: &ir::Program,
    bgrad: &ir::Program,
    batched_outputs: &[bool],
    mask: &[bool],
    n: usize,
    symbols: &[u64],
    rng: &mut Rng,
) {
    ovl::program::check_program(bgrad).unwrap();
    let forward_feeds = batched_feeds_at(program, mask, n, symbols, rng);
    // The upstream gradients: batched for batched outputs, unbatched for the others.
    let upstream_mask = batched_outputs.to_vec();
    let upstream: Vec<HostTensor> = (0..upstream_mask.len())
        .map(|j| {
            let shape = feed_shape_at(gradient, mask.len() + j, symbols);
            if upstream_mask[j] {
                rng.tensor(&[&[n][..], &shape].concat())
            } else {
                rng.tensor(&shape)
            }
        })
        .collect();
    let feeds: Vec<HostTensor> = forward_feeds.iter().chain(&upstream).cloned().collect();
    let full_mask: Vec<bool> = mask.iter().chain(&upstream_mask).copied().collect();
    for target in targets() {
        let got = run_program(bgrad, feeds.clone(), &target).unwrap();
        assert_eq!(got.len(), mask.len());
        let per_example: Vec<Vec<HostTensor>> = (0..n)
            .map(|i| {
                let mut fed = example(&feeds, &full_mask, i);
                // An unbatched output's upstream gradient counts once: at example 0.
                for (j, &b) in upstream_mask.iter().enumerate() {
                    if !b && i > 0 {
                        let t = &mut fed[mask.len() + j];
                        *t = HostTensor::from_vec(&t.shape, vec![0.0f32; t.len()]).unwrap();
                    }
                }
                run_program(gradient, fed, &target).unwrap()
            })
            .collect();
        for (k, &b) in mask.iter().enumerate() {
            if b {
                assert_eq!(got[k].shape[0], n);
                for (i, want) in per_example.iter().enumerate() {
                    assert_eq!(slice(&got[k], i), want[k], "gradient {k}, example {i}");
                }
            } else {
                let shape = feed_shape_at(program, k, symbols);
                assert_eq!(got[k].shape, shape);
                let len: usize = shape.iter().product();
                let want: Vec<f32> = (0..len)
                    .map(|e| lane_sum(per_example.iter().map(|g| data(&g[k])[e])))
                    .collect();
                assert_eq!(
                    data(&got[k]),
                    &want[..],
                    "summed gradient {k}, mask {mask:?}"
                );
            }
        }
    }
}

#[test]
fn the_gradient_of_a_batched_program_is_batched_and_summed_over_shared_feeds() {
    let (program, gradient) = lstm_cell(2, 3);
    let mut rng = Rng(99);
    check_gradient(&program, &gradient, &[true, false], 11, &mut rng);
    check_gradient(&program, &gradient, &[false, true], 3, &mut rng);
    check_gradient(&program, &gradient, &[true, true], 2, &mut rng);
    check_gradient(&program, &gradient, &[true, false], 1, &mut rng);
    check_gradient(&program, &gradient, &[true, false], 0, &mut rng);
}

#[operator]
fn mul_grad(x: Tensor<f32>, w: Tensor<f32>, dy: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let dx = output_like(&x);
    let dw = output_like(&w);
    dx[[p[0], p[1]]] = w[[p[0], p[1]]] * dy[[p[0], p[1]]];
    dw[[p[0], p[1]]] = x[[p[0], p[1]]] * dy[[p[0], p[1]]];
    (dx, dw)
}

#[operator]
fn twice(w: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = w.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&w);
    out[[p[0], p[1]]] = 2.0 * w[[p[0], p[1]]];
    out
}

#[operator]
fn add2(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = a.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&a);
    out[[p[0], p[1]]] = a[[p[0], p[1]]] + b[[p[0], p[1]]];
    out
}

/// Outputs `x * w` and `2 w`: with `x` batched and `w` shared, the second output is unbatched,
/// and the gradient flowing into it must count once in `w`'s gradient.
#[test]
fn an_unbatched_output_gradient_counts_once() {
    let x = ovl::placeholder::<f32>("x", &[2, 2]);
    let w = ovl::placeholder::<f32>("w", &[2, 2]);
    let dy = ovl::placeholder::<f32>("dy", &[2, 2]);
    let dv = ovl::placeholder::<f32>("dv", &[2, 2]);
    let (dx, dw) = mul_grad(&x, &w, &dy);
    let dw = add2(&dw, twice(&dv));
    let bundle = ovl::as_tensorflow((&x, &w), (&mul_op(&x, &w), &twice(&w)))
        .name("two_outputs")
        .gradient((&dy, &dv), (&dx, &dw))
        // Unfused, so that `2 w` is a kernel of its own.
        .options(&Options::interpreter().with_opt_level(0))
        .build()
        .unwrap();
    let (program, gradient) = (bundle.program, bundle.gradient.unwrap());
    assert_eq!(
        batch_program(&program, &[true, false], 4)
            .unwrap()
            .batched_outputs,
        vec![true, false]
    );
    let mut rng = Rng(5);
    check_gradient(&program, &gradient, &[true, false], 4, &mut rng);
    check_gradient(&program, &gradient, &[false, true], 3, &mut rng);
    check_gradient(&program, &gradient, &[true, true], 2, &mut rng);
}

#[test]
fn sealed_programs_batch_and_stay_sealed() {
    let (program, gradient) = lstm_cell(2, 3);
    let sealed = batch_sealed(
        &seal_program(&program),
        &seal_program(&gradient),
        &[true, false],
        4,
    )
    .unwrap();
    assert_eq!(sealed.batched_outputs, vec![true, true]);
    let p = ovl::program::open_program(&sealed.program, "test").unwrap();
    assert_eq!(
        p,
        batch_program(&program, &[true, false], 4).unwrap().program
    );
    let g = ovl::program::open_program(&sealed.gradient, "test").unwrap();
    assert_eq!(g.feeds.len(), 4);
    // Without a gradient program.
    let sealed = batch_sealed(&seal_program(&program), &[], &[true, true], 4).unwrap();
    assert!(sealed.gradient.is_empty());
}

#[test]
fn bad_input_is_a_clear_error() {
    let program = chain(3);
    let e = batch_program(&program, &[true], 3).unwrap_err();
    assert!(matches!(e, BatchProgramError::Description { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("program `chain`") && msg.contains("2 feed(s) but 1"),
        "{msg}"
    );

    // A batch too large for memory.
    let e = batch_program(&program, &[true, false], u64::MAX / 4).unwrap_err();
    assert!(matches!(e, BatchProgramError::Operator { .. }), "{e}");
    assert!(
        e.to_string().contains("cannot batch program `chain`"),
        "{e}"
    );

    // The same description errors when the size is known only at run time.
    let e = batch_program(&program, &[true], BatchSize::RunTime).unwrap_err();
    assert!(e.to_string().contains("2 feed(s) but 1"), "{e}");

    // A malformed program.
    let mut broken = program.clone();
    broken.constants.clear();
    let e = batch_program(&broken, &[true, false], 3).unwrap_err();
    assert!(matches!(e, BatchProgramError::Malformed { .. }), "{e}");

    // A gradient program that does not fit the program.
    let (_, gradient) = lstm_cell(2, 3);
    let e = batch_gradient_program(&gradient, &[true, false], &[true], 3).unwrap_err();
    assert!(e.to_string().contains("gradient program"), "{e}");

    // Modified sealed bytes.
    let mut sealed = seal_program(&program);
    let last = sealed.len() - 1;
    sealed[last] ^= 1;
    let e = batch_sealed(&sealed, &[], &[true, false], 3).unwrap_err();
    assert!(e.to_string().contains("modified or corrupted"), "{e}");
}

/// The LSTM cell exported for any batch size (`ovl::as_tensorflow_polymorphic`), with its
/// gradient program, as `make_bundles` exports `lstm_cell_any_batch`.
fn lstm_cell_any_batch(hidden: usize) -> (ir::Program, ir::Program) {
    let bundle = ovl::as_tensorflow_polymorphic(|batch| lstm_export(batch, hidden))
        .build()
        .unwrap();
    (bundle.program, bundle.gradient.unwrap())
}

#[test]
fn an_any_batch_program_batches_over_a_known_size_and_runs_at_every_batch() {
    let (program, gradient) = lstm_cell_any_batch(3);
    assert_eq!(program.graph.as_ref().unwrap().symbols, ["batch"]);
    for mask in [[true, false], [true, true], [false, true]] {
        let batched = batch_program(&program, &mask, 3).unwrap();
        assert_eq!(batched.batched_outputs, [true, true]);
        // The batched feeds' batch dimension moved behind the new axis; the symbol stays.
        let g = batched.program.graph.as_ref().unwrap();
        assert_eq!(g.symbols, ["batch"]);
        let z = batched.program.feeds[0].r#type.clone().unwrap();
        let dims: Vec<u32> = z.symbolic.iter().map(|d| d.dim).collect();
        assert_eq!(dims, [if mask[0] { 1 } else { 0 }]);
        let bgrad = batch_gradient_program(&gradient, &mask, &batched.batched_outputs, 3).unwrap();
        let mut rng = Rng(31);
        for batch in [1u64, 2, 5] {
            check_batched(&program, &batched, &mask, 3, &[batch]);
            check_batched_gradient(
                &program,
                &gradient,
                &bgrad,
                &batched.batched_outputs,
                &mask,
                3,
                &[batch],
                &mut rng,
            );
        }
    }
}

#[test]
fn a_size_known_only_at_run_time_is_a_new_symbol_determined_by_the_batched_feeds() {
    // Concrete sizes: `pfor` is the only symbol.
    let (program, gradient) = lstm_cell(2, 3);
    let batched = batch_program(&program, &[true, false], BatchSize::RunTime).unwrap();
    assert_eq!(batched.program.name, "lstm_cell batched over pfor");
    assert_eq!(batched.program.graph.as_ref().unwrap().symbols, ["pfor"]);
    let bgrad = batch_gradient_program(
        &gradient,
        &[true, false],
        &batched.batched_outputs,
        BatchSize::RunTime,
    )
    .unwrap();
    let mut rng = Rng(77);
    for n in [0, 1, 4, 9] {
        check_batched(&program, &batched, &[true, false], n, &[]);
        check_batched_gradient(
            &program,
            &gradient,
            &bgrad,
            &batched.batched_outputs,
            &[true, false],
            n,
            &[],
            &mut rng,
        );
    }
}

#[test]
fn an_any_batch_program_batches_over_a_size_known_only_at_run_time() {
    let (program, gradient) = lstm_cell_any_batch(3);
    for mask in [[true, false], [false, true], [true, true]] {
        let batched = batch_program(&program, &mask, BatchSize::RunTime).unwrap();
        assert_eq!(batched.batched_outputs, [true, true]);
        let g = batched.program.graph.as_ref().unwrap();
        assert_eq!(g.symbols, ["batch", "pfor"]);
        // A batched feed: [pfor, batch, ..].
        let k = mask.iter().position(|&b| b).unwrap();
        let t = batched.program.feeds[k].r#type.clone().unwrap();
        let dims: Vec<(u32, u32)> = t.symbolic.iter().map(|d| (d.dim, d.symbol)).collect();
        assert_eq!(dims, [(0, 1), (1, 0)]);
        let bgrad = batch_gradient_program(
            &gradient,
            &mask,
            &batched.batched_outputs,
            BatchSize::RunTime,
        )
        .unwrap();
        assert_eq!(bgrad.graph.as_ref().unwrap().symbols, ["batch", "pfor"]);
        let mut rng = Rng(13);
        for (n, batch) in [(3, 2u64), (1, 5), (4, 1)] {
            check_batched(&program, &batched, &mask, n, &[batch]);
            check_batched_gradient(
                &program,
                &gradient,
                &bgrad,
                &batched.batched_outputs,
                &mask,
                n,
                &[batch],
                &mut rng,
            );
        }
    }
    // Batched feeds that disagree about the loop length are refused by name.
    let batched = batch_program(&program, &[true, true], BatchSize::RunTime).unwrap();
    let feeds = vec![
        HostTensor::from_vec(&[2, 1, 12], vec![0.5f32; 24]).unwrap(),
        HostTensor::from_vec(&[3, 1, 3], vec![0.5f32; 9]).unwrap(),
    ];
    let e = run_program(&batched.program, feeds, &options(Options::interpreter())).unwrap_err();
    assert!(
        matches!(&e, ovl::Error::Program(p) if matches!(&**p,
            ovl::program::ProgramError::Mismatch { problem, .. }
                if matches!(**problem, ovl::program::ProgramMismatch::Symbols(_)))),
        "{e}"
    );
    assert!(e.to_string().contains("pfor"), "{e}");
}

#[test]
fn a_loop_inside_a_loop_gets_a_second_symbol() {
    let (program, _) = lstm_cell(2, 3);
    let inner = batch_program(&program, &[true, false], BatchSize::RunTime).unwrap();
    let outer = batch_program(&inner.program, &[true, true], BatchSize::RunTime).unwrap();
    assert_eq!(
        outer.program.graph.as_ref().unwrap().symbols,
        ["pfor", "pfor2"]
    );
    let feeds = vec![Rng(3).tensor(&[2, 3, 2, 12]), Rng(4).tensor(&[2, 2, 3])];
    for target in targets() {
        let got = run_program(&outer.program, feeds.clone(), &target).unwrap();
        for i in 0..2 {
            let want = run_program(
                &inner.program,
                vec![slice(&feeds[0], i), slice(&feeds[1], i)],
                &target,
            )
            .unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(&slice(g, i), w);
            }
        }
    }
}
