// Writes: `t[[..]] = v` is a WRITE; `t[[..]] op= v` reads and writes, evaluating the indices
// once; `t[idx] = v` with another index goes through `IndexAssign`.
#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let i = position_in([n])[0];
    let out = output_like(&x);
    let local = zeros::<f32>([4]);
    out[[i]] = x[[i]];
    local[[0]] += x[[i]];
    local[[1]] -= x[[i]] - 1.0;
    local[[2]] *= 2.0;
    local[[3]] /= x[[i]].abs() + 1.0;
    local[[i % 4]] %= 3.0;
    (local)[[0]] += 1.0;
    out[i] = local[[0]];
    let mut v = vec![0usize; 3];
    v[1] = n;
    v[2] += 1;
    out
}
