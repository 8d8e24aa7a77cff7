//! The arguments and results of [`super::vmap`]: batched and shared inputs, typed or untyped,
//! and the arrangements of outputs.

use crate::host::Scalar;
use crate::lazy::{Lazy, LazyTensor};

/// An input of [`super::vmap`] batched along its leading axis: the function sees one example (the
/// shape without the leading axis).
pub struct Batched<'a, T>(pub &'a Lazy<T>);

/// An input of [`super::vmap`] shared by every example: the function sees the tensor itself.
pub struct Shared<'a, T>(pub &'a Lazy<T>);

/// An untyped input of [`super::vmap`] (a `Vec` or slice of them is an argument list whose function
/// takes a `Vec<LazyTensor>`).
#[derive(Clone, Copy, Debug)]
pub enum VmapInput<'a> {
    /// Batched along its leading axis.
    Batched(&'a LazyTensor),
    /// Shared by every example.
    Shared(&'a LazyTensor),
}

/// The arguments of [`super::vmap`]: a [`Batched`] or [`Shared`] input, a tuple of up to six of
/// them (tuples nest), or a `Vec`/slice of [`VmapInput`].
pub trait VmapArgs {
    /// What the function receives: the per-example stand-ins, in the same arrangement.
    type PerExample;
    /// Each input, and whether it is batched, in order.
    fn describe(&self) -> Vec<(LazyTensor, bool)>;
    /// Builds the function's argument from the stand-ins, in the order of [`Self::describe`].
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Self::PerExample;
}

fn next(stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> LazyTensor {
    stand_ins
        .next()
        .expect("vmap makes one stand-in per described input")
}

impl<T: Scalar> VmapArgs for Batched<'_, T> {
    type PerExample = Lazy<T>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        vec![(self.0.inner.clone(), true)]
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Lazy<T> {
        Lazy::from_untyped(next(stand_ins))
    }
}

impl<T: Scalar> VmapArgs for Shared<'_, T> {
    type PerExample = Lazy<T>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        vec![(self.0.inner.clone(), false)]
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Lazy<T> {
        Lazy::from_untyped(next(stand_ins))
    }
}

impl VmapArgs for [VmapInput<'_>] {
    type PerExample = Vec<LazyTensor>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        self.iter()
            .map(|i| match i {
                VmapInput::Batched(t) => ((*t).clone(), true),
                VmapInput::Shared(t) => ((*t).clone(), false),
            })
            .collect()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Vec<LazyTensor> {
        (0..self.len()).map(|_| next(stand_ins)).collect()
    }
}

impl<A: VmapArgs + ?Sized> VmapArgs for &A {
    type PerExample = A::PerExample;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        (**self).describe()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> A::PerExample {
        (**self).per_example(stand_ins)
    }
}

impl VmapArgs for Vec<VmapInput<'_>> {
    type PerExample = Vec<LazyTensor>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        self.as_slice().describe()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Vec<LazyTensor> {
        self.as_slice().per_example(stand_ins)
    }
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: VmapArgs),+> VmapArgs for ($($name,)+) {
            type PerExample = ($($name::PerExample,)+);
            fn describe(&self) -> Vec<(LazyTensor, bool)> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.describe());)+
                v
            }
            fn per_example(
                &self,
                stand_ins: &mut dyn Iterator<Item = LazyTensor>,
            ) -> Self::PerExample {
                ($(self.$idx.per_example(stand_ins),)+)
            }
        }
    };
}
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);

/// What the function given to [`super::vmap`] returns: a `Lazy<T>`, a `LazyTensor`, a `Vec` of either,
/// or a tuple of up to six of these. [`super::vmap`] returns the batched outputs in the same
/// arrangement.
pub trait VmapOutputs: Sized {
    /// The output tensors, in order.
    fn tensors(&self) -> Vec<LazyTensor>;
    /// The same arrangement holding `batched` (in the order of [`Self::tensors`]).
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self;
}

impl<T: Scalar> VmapOutputs for Lazy<T> {
    fn tensors(&self) -> Vec<LazyTensor> {
        vec![self.inner.clone()]
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        Lazy::from_untyped(next(batched))
    }
}

impl VmapOutputs for LazyTensor {
    fn tensors(&self) -> Vec<LazyTensor> {
        vec![self.clone()]
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        next(batched)
    }
}

impl<O: VmapOutputs> VmapOutputs for Vec<O> {
    fn tensors(&self) -> Vec<LazyTensor> {
        self.iter().flat_map(|o| o.tensors()).collect()
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        self.iter().map(|o| o.with_tensors(batched)).collect()
    }
}

macro_rules! tuple_outputs {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: VmapOutputs),+> VmapOutputs for ($($name,)+) {
            fn tensors(&self) -> Vec<LazyTensor> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.tensors());)+
                v
            }
            fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
                ($(self.$idx.with_tensors(batched),)+)
            }
        }
    };
}
tuple_outputs!(A 0);
tuple_outputs!(A 0, B 1);
tuple_outputs!(A 0, B 1, C 2);
tuple_outputs!(A 0, B 1, C 2, D 3);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5);
