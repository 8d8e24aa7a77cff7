// A helper may be a method: `self` and generics are kept.
#[helper]
pub fn gate<T: Float>(&self, x: Expr<T>) -> Expr<T> {
    let y = if self.relu { x } else { x * 0.5 };
    let mut r = variable(y);
    if r < 0.0 {
        r = 0.0;
    }
    r.get()
}
