//! Every layout into row-major order and back, against an index-by-index reference.

use super::{assign_standard_order, standard_order};
use ndarray::{s, Array, ArrayD, ArrayViewMutD, IxDyn, ShapeBuilder};

std::thread_local! {
    /// Forces the transposing copy's choice of non-temporal stores on this thread
    /// (`tiles::streams`), which depends on the size of the machine's last-level cache.
    pub(super) static FORCE_STREAM: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    /// Forces the transposing copy's registers on this thread (`tiles::registers`), which
    /// depend on the CPU and `OVL_CPU_ISA`.
    pub(super) static FORCE_REGISTERS: std::cell::Cell<Option<super::tiles::Registers>> = const { std::cell::Cell::new(None) };
}

fn reference<T: Copy>(a: &ndarray::ArrayViewD<'_, T>) -> Vec<T> {
    // Index by index, in row-major order: independent of any iterator.
    ndarray::indices(a.raw_dim())
        .into_iter()
        .map(|i| a[i])
        .collect()
}

#[test]
fn every_layout_comes_out_in_row_major_order() {
    let c = Array::from_shape_fn((37, 70), |(i, j)| (i * 1000 + j) as f32);
    let f = Array::from_shape_fn((37, 70).f(), |(i, j)| (i * 1000 + j) as f32);
    let cube = Array::from_shape_fn((5, 33, 41), |(i, j, k)| (i * 100_000 + j * 100 + k) as i64);
    let cube_f = Array::from_shape_fn((5, 33, 41).f(), |(i, j, k)| {
        (i * 100_000 + j * 100 + k) as i64
    });
    let views: Vec<(&str, ArrayD<f64>)> = vec![
        ("c", c.mapv(f64::from).into_dyn()),
        ("fortran", f.mapv(f64::from).into_dyn()),
        ("transposed", c.t().mapv(f64::from).into_dyn()),
        ("empty", ArrayD::zeros(IxDyn(&[0, 3]))),
    ];
    for (name, a) in &views {
        assert_eq!(standard_order(a.view()), reference(&a.view()), "{name}");
    }
    let cases: Vec<(&str, ndarray::ArrayViewD<'_, f32>)> = vec![
        ("c", c.view().into_dyn()),
        ("fortran", f.view().into_dyn()),
        ("transposed view", c.t().into_dyn()),
        ("stepped rows", c.slice(s![..;3, ..]).into_dyn()),
        ("stepped columns", c.slice(s![.., ..;2]).into_dyn()),
        ("stepped fortran", f.slice(s![1..;2, ..;3]).into_dyn()),
        ("reversed", c.slice(s![..;-1, ..;-1]).into_dyn()),
        ("reversed fortran", f.slice(s![..;-2, 3..]).into_dyn()),
        ("one row", c.slice(s![4..5, ..]).into_dyn()),
        ("one column of fortran", f.slice(s![.., 7..8]).into_dyn()),
    ];
    for (name, v) in cases {
        assert_eq!(standard_order(v.view()), reference(&v), "{name}");
    }
    let row = ndarray::Array1::from_shape_fn(70, |j| j as f32);
    let broadcast = row.broadcast((37, 70)).unwrap().into_dyn();
    let column = ndarray::Array2::from_shape_fn((37, 1), |(i, _)| i as f32);
    let broadcast_col = column.broadcast((37, 70)).unwrap().into_dyn();
    for (name, v) in [
        ("broadcast rows", broadcast),
        ("broadcast column", broadcast_col),
    ] {
        assert_eq!(standard_order(v.view()), reference(&v), "{name}");
    }
    let cubes: Vec<(&str, ndarray::ArrayViewD<'_, i64>)> = vec![
        ("fortran cube", cube_f.view().into_dyn()),
        (
            "permuted cube",
            cube.view().permuted_axes([2, 0, 1]).into_dyn(),
        ),
        (
            "middle axis last",
            cube.view().permuted_axes([0, 2, 1]).into_dyn(),
        ),
        (
            "stepped permuted cube",
            cube.slice(s![..;2, 1.., ..;-3])
                .permuted_axes([1, 2, 0])
                .into_dyn(),
        ),
    ];
    for (name, v) in cubes {
        assert_eq!(standard_order(v.view()), reference(&v), "{name}");
    }
    // Several groups of tiles along both axes, with partial tiles and groups; 4-byte
    // elements of every kind (through registers) and 8-byte ones (element by element).
    let big = Array::from_shape_fn((1100, 300).f(), |(i, j)| (i * 1000 + j) as u32);
    let big_i = big.mapv(|v| v as i32 - 7);
    let big_d = big.mapv(|v| f64::from(v) * 0.5);
    let nan = big.mapv(|v| f32::from_bits(0x7fc0_0000 | v));
    assert_eq!(
        standard_order(big.view()),
        reference(&big.view().into_dyn())
    );
    assert_eq!(
        standard_order(big_i.view()),
        reference(&big_i.view().into_dyn())
    );
    assert_eq!(
        standard_order(big_d.view()),
        reference(&big_d.view().into_dyn())
    );
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(
        bits(standard_order(nan.view())),
        bits(reference(&nan.view().into_dyn())),
        "NaN payloads move unchanged"
    );
    // Above PARALLEL_BYTES the copies are split over the cores: contiguous chunks, and
    // planes times groups of rows (several planes, partial groups).
    let large_f = Array::from_shape_fn((1100, 1000).f(), |(i, j)| (i * 1000 + j) as u32);
    assert!(large_f.len() * 4 >= super::PARALLEL_BYTES);
    assert_eq!(
        standard_order(large_f.view()),
        reference(&large_f.view().into_dyn())
    );
    let large_c = large_f.as_standard_layout().to_owned();
    assert_eq!(
        standard_order(large_c.view()),
        reference(&large_c.view().into_dyn())
    );
    let planes = Array::from_shape_fn((3, 700, 300).f(), |(i, j, k)| {
        (i * 1_000_000 + j * 1000 + k) as f64
    });
    assert!(planes.len() * 8 >= super::PARALLEL_BYTES);
    let planes_t = planes.view().permuted_axes([0, 2, 1]);
    assert_eq!(
        standard_order(planes_t.view()),
        reference(&planes_t.into_dyn())
    );
    // Tiles start where source and destination lines are aligned cache lines (strides of
    // 16 or 64 elements), wherever the array begins: partial tiles at every edge, of every
    // width, through masks.
    let aligned = Array::from_shape_fn((1024, 96).f(), |(i, j)| (i * 1000 + j) as u32);
    for off in 0..=17 {
        for (rows, cols) in [(1024 - off, 96 - off), (21, 64), (3, 5), (16 + off, 17)] {
            let v = aligned.slice(s![off..off + rows, off % 7..off % 7 + cols]);
            assert_eq!(
                standard_order(v),
                reference(&v.into_dyn()),
                "offset {off}, {rows} x {cols}"
            );
        }
    }
    // Rows in order, large enough for several tasks on several threads: a sub-block, stepped
    // and reversed rows and columns, broadcast rows, axes of length 1 among the others.
    let grid = Array::from_shape_fn((1100, 2000), |(i, j)| (i * 10_000 + j) as f32);
    let row = ndarray::Array1::from_shape_fn(1500, |j| j as f32);
    let in_rows: Vec<(&str, ndarray::ArrayViewD<'_, f32>)> = vec![
        ("sub-block", grid.slice(s![50..1050, 7..1507]).into_dyn()),
        ("stepped rows", grid.slice(s![..;2, 100..]).into_dyn()),
        ("reversed rows", grid.slice(s![..;-1, ..1500]).into_dyn()),
        ("stepped columns", grid.slice(s![3.., ..;3]).into_dyn()),
        ("reversed columns", grid.slice(s![.., ..;-1]).into_dyn()),
        (
            "broadcast rows",
            row.broadcast((2000, 1500)).unwrap().into_dyn(),
        ),
        (
            "3-d broadcast",
            row.broadcast((3, 700, 1500)).unwrap().into_dyn(),
        ),
        ("a strided column", grid.slice(s![.., 9..10]).into_dyn()),
        (
            "unit axes",
            grid.slice(s![4..5, ..;2])
                .insert_axis(ndarray::Axis(0))
                .into_dyn(),
        ),
        ("one element", grid.slice(s![3..4, 8..9]).into_dyn()),
    ];
    for (name, v) in in_rows {
        assert_eq!(standard_order(v.view()), reference(&v), "{name}");
    }
    let wide = Array::from_shape_fn((40, 700), |(i, j)| (i * 1000 + j) as f32);
    let wide_t = wide.t();
    assert_eq!(standard_order(wide_t), reference(&wide_t.into_dyn()));
}

/// Writes row-major values into the view of a sentinel-filled parent that `view` takes, and
/// checks every element of the view (index by index, in row-major order) and that nothing else
/// of the parent changed.
fn assign_into<T>(
    name: &str,
    parent: &mut ArrayD<T>,
    view: impl Fn(ArrayViewMutD<'_, T>) -> ArrayViewMutD<'_, T>,
) where
    T: Copy + PartialEq + std::fmt::Debug + Send + Sync + From<u16>,
{
    let sentinel = T::from(u16::MAX);
    parent.fill(sentinel);
    let mut v = view(parent.view_mut());
    let values: Vec<T> = (0..v.len()).map(|k| T::from((k % 65_000) as u16)).collect();
    assert!(
        !assign_standard_order(&mut v, &values[1..]),
        "{name}: a short source"
    );
    assert!(v.iter().all(|&x| x == sentinel), "{name}: nothing written");
    assert!(assign_standard_order(&mut v, &values), "{name}");
    let got = reference(&v.view());
    assert_eq!(got, values, "{name}");
    let n = v.len();
    let untouched = parent.iter().filter(|&&x| x == sentinel).count();
    assert_eq!(untouched, parent.len() - n, "{name}: only the view written");
}

#[test]
fn row_major_values_go_into_views_of_every_layout() {
    let mut m = ArrayD::<f32>::zeros(IxDyn(&[70, 37]));
    assign_into("c", &mut m, |v| v);
    assign_into("transposed", &mut m, |v| v.reversed_axes());
    assign_into("stepped rows", &mut m, |v| {
        v.slice_move(s![..;3, ..]).into_dyn()
    });
    assign_into("stepped columns", &mut m, |v| {
        v.slice_move(s![.., ..;2]).into_dyn()
    });
    assign_into("reversed", &mut m, |v| {
        v.slice_move(s![..;-1, ..;-2]).into_dyn()
    });
    assign_into("reversed columns", &mut m, |v| {
        v.slice_move(s![.., ..;-1]).into_dyn()
    });
    assign_into("transposed sub-block", &mut m, |v| {
        v.slice_move(s![3..60, 2..30]).reversed_axes().into_dyn()
    });
    assign_into("one column", &mut m, |v| {
        v.slice_move(s![.., 4..5]).into_dyn()
    });
    let mut f = Array::<u32, _>::zeros((1024, 96).f()).into_dyn();
    for off in [0, 1, 5, 12, 16, 17] {
        assign_into(&format!("fortran, offset {off}"), &mut f, |v| {
            v.slice_move(s![off.., off % 7..]).into_dyn()
        });
    }
    let mut cube = ArrayD::<i64>::zeros(IxDyn(&[5, 33, 41]));
    assign_into("permuted cube", &mut cube, |v| {
        v.permuted_axes(vec![2, 0, 1])
    });
    assign_into("middle axis last", &mut cube, |v| {
        v.permuted_axes(vec![0, 2, 1])
    });
    assign_into("stepped permuted cube", &mut cube, |v| {
        v.slice_move(s![..;2, 1.., ..;-3])
            .into_dyn()
            .permuted_axes(vec![1, 2, 0])
    });
    // Large enough for several tasks on several threads: a Fortran-order array (transposed
    // tiles), a sub-block of a larger matrix (lines), f32 and f64.
    let mut big = Array::<f32, _>::zeros((1100, 1000).f()).into_dyn();
    assert!(big.len() * 4 >= super::PARALLEL_BYTES);
    assign_into("large fortran", &mut big, |v| v);
    let mut grid = ArrayD::<f64>::zeros(IxDyn(&[1100, 1200]));
    assign_into("large sub-block", &mut grid, |v| {
        v.slice_move(s![50..1050, 7..1107]).into_dyn()
    });
    assign_into("large transposed", &mut grid, |v| v.reversed_axes());
}

#[test]
fn transposing_copies_with_non_temporal_stores_give_the_same_elements() {
    // Whole tiles streamed to memory, partial ones at every offset through masks, on several
    // threads (above `PARALLEL_BYTES`), then written back into a Fortran-order view.
    let f = Array::from_shape_fn((1100, 1000).f(), |(i, j)| (i * 1000 + j) as f32);
    assert!(f.len() * 4 >= super::PARALLEL_BYTES);
    for stream in [true, false] {
        FORCE_STREAM.with(|c| c.set(Some(stream)));
        for off in [0, 1, 5, 16, 17] {
            let v = f.slice(s![off.., off % 7..]).into_dyn();
            assert_eq!(
                standard_order(v.view()),
                reference(&v.view()),
                "stream {stream}, offset {off}"
            );
        }
        let mut back = Array::<f32, _>::zeros((1100, 1000).f()).into_dyn();
        assign_into(&format!("large fortran, stream {stream}"), &mut back, |v| v);
    }
    FORCE_STREAM.with(|c| c.set(None));
}

/// The transposing copy through AVX-512 registers, AVX2 registers and neither gives the same
/// bits (NaN payloads included) for whole and partial tiles at every alignment, with and without
/// non-temporal stores: the AVX2 kernel is what `OVL_CPU_ISA=avx2` and CPUs without AVX-512 run.
#[test]
fn transposing_copies_through_avx2_and_avx512_registers_agree() {
    use super::tiles::Registers;
    #[cfg(target_arch = "x86_64")]
    let kinds: Vec<Registers> = [
        (Registers::None, true),
        (Registers::Avx2, std::arch::is_x86_feature_detected!("avx2")),
        (
            Registers::Avx512,
            std::arch::is_x86_feature_detected!("avx512f"),
        ),
    ]
    .into_iter()
    .filter_map(|(r, has)| {
        if !has {
            eprintln!("DID NOT RUN: {r:?}: this CPU lacks it");
        }
        has.then_some(r)
    })
    .collect();
    #[cfg(not(target_arch = "x86_64"))]
    let kinds = vec![Registers::None];
    let aligned = Array::from_shape_fn((1024, 96).f(), |(i, j)| {
        f32::from_bits(0x7fc0_0000 | (i * 1000 + j) as u32)
    });
    let large = Array::from_shape_fn((1100, 1000).f(), |(i, j)| (i * 1000 + j) as f32);
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let mut results: Vec<Vec<Vec<u32>>> = Vec::new();
    for &kind in &kinds {
        FORCE_REGISTERS.with(|c| c.set(Some(kind)));
        let mut got = Vec::new();
        for stream in [false, true] {
            FORCE_STREAM.with(|c| c.set(Some(stream)));
            for off in 0..=17 {
                for (rows, cols) in [(1024 - off, 96 - off), (21, 64), (3, 5), (16 + off, 17)] {
                    let v = aligned.slice(s![off..off + rows, off % 7..off % 7 + cols]);
                    let out = bits(standard_order(v));
                    assert_eq!(
                        out,
                        bits(reference(&v.into_dyn())),
                        "{kind:?}, stream {stream}, offset {off}, {rows} x {cols}"
                    );
                    got.push(out);
                }
            }
            let v = large.slice(s![3.., 5..]).into_dyn();
            let out = bits(standard_order(v.view()));
            assert_eq!(out, bits(reference(&v.view())), "{kind:?}, stream {stream}");
            got.push(out);
            let mut back = Array::<f32, _>::zeros((1100, 1000).f()).into_dyn();
            assign_into(&format!("{kind:?}, stream {stream}"), &mut back, |v| v);
        }
        results.push(got);
    }
    FORCE_REGISTERS.with(|c| c.set(None));
    FORCE_STREAM.with(|c| c.set(None));
    for (kind, r) in kinds.iter().zip(&results) {
        assert_eq!(r, &results[0], "{kind:?} against {:?}", kinds[0]);
    }
    assert!(results.iter().all(|r| r.len() == 2 * (18 * 4 + 1)));
}
