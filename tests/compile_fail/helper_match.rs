use ovl::prelude::*;

#[helper]
fn pick(v: Expr<f32>, mode: u8) -> Expr<f32> {
    match mode {
        0 => v,
        _ => v * 2.0,
    }
}

fn main() {}
