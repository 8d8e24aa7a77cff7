//! Times bringing a 16 MB f32 array into row-major order: Fortran order (the tiled transpose of
//! `standard_order`) against C order (a plain copy of the same bytes). Minimum of many runs.
//! `cargo run --release -p ovl-core --example layout_copy [ROWS COLS]`
use ndarray::{Array, ShapeBuilder};
use ovl_core::lazy::layout::standard_order;
use std::time::Instant;

fn best(runs: usize, mut f: impl FnMut() -> Vec<f32>) -> f64 {
    let mut t = f64::INFINITY;
    for _ in 0..runs {
        let s = Instant::now();
        let v = f();
        t = t.min(s.elapsed().as_secs_f64());
        std::hint::black_box(v);
    }
    t * 1e3
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (r, c) = (
        *args.first().unwrap_or(&1024),
        *args.get(1).unwrap_or(&4096),
    );
    let f = Array::from_shape_fn((r, c).f(), |(i, j)| (i * c + j) as f32);
    let cc = f.as_standard_layout().to_owned();
    assert_eq!(standard_order(f.view()), cc.as_slice().unwrap());
    let tf = best(50, || standard_order(f.view()));
    let tc = best(50, || standard_order(cc.view()));
    let mb = (r * c * 4) as f64 / 1e6;
    println!(
        "[{r}, {c}] f32 ({mb:.1} MB): fortran {tf:.3} ms, c-order copy {tc:.3} ms, ratio {:.2}x; copy {:.1} GB/s read+write",
        tf / tc,
        2.0 * mb / tc
    );
}
