use ovl::prelude::*;

#[operator]
struct NotAFunction;

fn main() {}
