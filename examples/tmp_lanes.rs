use ovl::prelude::*;
use ovl_stdlib as ops;
fn cell(z: &Lazy<f32>, c: &Lazy<f32>) -> (Lazy<f32>, Lazy<f32>) {
    let gates = ops::split(z, 1, 4);
    let bias = Lazy::from(ndarray::arr0(1.0f32));
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(ops::add(&gates[2], bias))),
        ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(&gates[3]));
    (new_c, new_h)
}
fn main() -> anyhow::Result<()> {
    let (b, h) = (1024, 4096);
    let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f32>("c", &[b, h]);
    let dc = ovl::placeholder::<f32>("dc", &[b, h]);
    let dh = ovl::placeholder::<f32>("dh", &[b, h]);
    let (nc, nh) = cell(&z, &c);
    let grads = ovl::backward(&[(&nc, &dc), (&nh, &dh)], &[&z, &c])?;
    let dz = grads.of(&z).unwrap();
    let dcp = grads.of(&c).unwrap();
    for (name, outs) in [
        ("fwd", vec![nc.clone(), nh.clone()]),
        ("fwdbwd", vec![nc, nh, dz, dcp]),
    ] {
        let f = ovl::fusion_with(outs.as_slice(), &Options::cuda_validate())?;
        for op in &f.after.operators {
            let src = ovl::cuda::generate_cuda(op, "x")?;
            println!(
                "{name} {}: lanes={} ld4={} st4={} wg={:?}",
                op.name,
                src.contains("Vector lanes"),
                src.matches("ovl::ld4(").count(),
                src.matches("ovl::st4(").count(),
                op.workgroup_shape
            );
            std::fs::write(format!("/tmp/{name}_{}.cu", op.name), src)?;
        }
    }
    Ok(())
}
