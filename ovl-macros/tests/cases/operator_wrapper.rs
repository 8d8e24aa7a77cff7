// The wrapper: generics and `where` kept, doc comments and attributes kept, visibility kept;
// tensor, tensor-list and constant parameters; a tuple of outputs.

/// Scales each row of `x` and adds every tensor of `ys`.
#[operator]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scale_add<T: Num, const N: usize>(
    x: Tensor<T>,
    mut w: ovl::Tensor<f32>,
    ys: Vec<Tensor<T>>,
    k: T,
    (rows, cols): (usize, usize),
) -> (Tensor<T>, Tensor<f32>)
where
    T: Copy,
{
    let i = position_in([rows, cols]);
    let out = output_like(&x);
    let aux = output_like(&w);
    out[i] = x[i] * k;
    (out, aux)
}
