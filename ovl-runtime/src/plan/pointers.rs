//! The pointer lists a run hands to a compiled kernel, on the stack for the common case of few
//! tensors, so that running a small graph allocates nothing for them.

/// A kernel's pointer list: on the stack up to 8 entries, else on the heap.
pub(super) enum Pointers<T: Copy> {
    Inline([T; 8], usize),
    Heap(Vec<T>),
}

impl<T: Copy> Pointers<T> {
    pub(super) fn new(len: usize, fill: T) -> Pointers<T> {
        if len <= 8 {
            Pointers::Inline([fill; 8], len)
        } else {
            Pointers::Heap(vec![fill; len])
        }
    }

    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        match self {
            Pointers::Inline(a, len) => a[..*len].iter_mut(),
            Pointers::Heap(v) => v.iter_mut(),
        }
    }
}

impl<T: Copy> std::ops::Deref for Pointers<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Pointers::Inline(a, len) => &a[..*len],
            Pointers::Heap(v) => v,
        }
    }
}
