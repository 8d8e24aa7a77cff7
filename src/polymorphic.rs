//! Exporting a program whose sizes are known only when it runs (a batch dimension, typically).
//!
//! [`as_tensorflow_polymorphic`] calls the user's export function at three sizes of the
//! symbol (a *trace* each: graph built, fused and packed, nothing compiled), unifies the three
//! programs into one whose differing sizes and literals are affine in the symbol
//! ([`ovl_core::unify`]), and compiles that program once: its kernels take the symbol's value
//! at run time ([`crate::program::LoadedProgram::bind`]).

use crate::error::export::{ExportError, UnifyProgramError};
use crate::export::{Bundle, TfExport};
use crate::program::check_program;
use crate::Error;
use ovl_core::ir;
use ovl_core::unify::{unify_graphs, unify_type};

/// The sizes the export function is traced with: two to find each affine size, one to check
/// it. Large and prime, so that they do not coincide with the literals of the user's code or
/// with each other's multiples, and so that fusion sees realistic sizes.
pub const TRACE_SIZES: [usize; 3] = [1009, 1013, 1019];

/// The symbol's name when none is given.
pub const DEFAULT_SYMBOL: &str = "batch";

/// Starts exporting a program with a dimension sized at run time: `export(n)` builds the export
/// for size `n` (placeholders whose shape uses `n`, the outputs, options and gradient, exactly as
/// for [`crate::as_tensorflow`]); every dimension and literal that changes with `n` becomes a
/// function of the size fed at run time. TensorFlow sees those dimensions as `None`.
///
/// ```
/// use ovl::prelude::*;
///
/// #[operator]
/// fn scale_rows(x: Tensor<f32>) -> Tensor<f32> {
///     let [rows, cols] = x.dims::<2>();
///     let p = position_in([rows, cols]);
///     let out = output_like(&x);
///     out[[p[0], p[1]]] = 2.0 * x[[p[0], p[1]]];
///     out
/// }
///
/// let bundle = ovl::as_tensorflow_polymorphic(|batch| {
///     let x = ovl::placeholder::<f32>("x", &[batch, 3]);
///     ovl::as_tensorflow(&x, scale_rows(&x)).options(&Options::interpreter())
/// })
/// .build()
/// .unwrap();
/// assert_eq!(bundle.program.graph.as_ref().unwrap().symbols, ["batch"]);
/// for batch in [0, 1, 5] {
///     let x = ovl::HostTensor::from_vec(&[batch, 3], vec![1.5f32; batch * 3]).unwrap();
///     let y = ovl::program::run_program(&bundle.program, vec![x], &Options::interpreter())
///         .unwrap();
///     assert_eq!(y[0], ovl::HostTensor::from_vec(&[batch, 3], vec![3.0f32; batch * 3]).unwrap());
/// }
/// ```
pub fn as_tensorflow_polymorphic<F, R>(export: F) -> PolymorphicExport<F>
where
    F: Fn(usize) -> R,
    R: IntoExport,
{
    PolymorphicExport {
        export,
        symbol: DEFAULT_SYMBOL.to_string(),
    }
}

/// What the export function of [`as_tensorflow_polymorphic`] returns: a [`TfExport`], or a
/// `Result` of one (its error, for example from `ovl::backward`, becomes the export's error).
pub trait IntoExport {
    /// The export, or the error that prevented it.
    fn into_export(self) -> Result<TfExport, Error>;
}

impl IntoExport for TfExport {
    fn into_export(self) -> Result<TfExport, Error> {
        Ok(self)
    }
}

impl<E: std::fmt::Display> IntoExport for Result<TfExport, E> {
    fn into_export(self) -> Result<TfExport, Error> {
        self.map_err(|e| Error::Export {
            name: String::new(),
            why: Box::new(ExportError::ExportFunction(e.to_string())),
        })
    }
}

/// An export with a dimension sized at run time, in preparation (see
/// [`as_tensorflow_polymorphic`]).
pub struct PolymorphicExport<F> {
    export: F,
    symbol: String,
}

impl<F: Fn(usize) -> R, R: IntoExport> PolymorphicExport<F> {
    /// The symbol's name, used in messages and shown to TensorFlow users (default `batch`).
    pub fn symbol(mut self, name: &str) -> Self {
        self.symbol = name.to_string();
        self
    }

    /// Traces the export at [`TRACE_SIZES`], unifies the programs (and gradient programs) and
    /// compiles the result once. An operator that cannot be written for every size (a literal
    /// that is not a whole multiple of the size plus a constant, a path that depends on it) is
    /// an error naming the operator and its line.
    pub fn build(&self) -> Result<Bundle, Error> {
        let exports: Vec<TfExport> = TRACE_SIZES
            .iter()
            .map(|&n| (self.export)(n).into_export())
            .collect::<Result<_, _>>()?;
        let name = exports[0].resolved_name();
        let err = |why: ExportError| Error::Export {
            name: name.clone(),
            why: Box::new(why),
        };
        let unify = |gradient: bool| move |why| err(ExportError::Unify { gradient, why });
        let mut forward = Vec::new();
        let mut gradients = Vec::new();
        // Row buffers are added after unifying: a loop whose length is the traced size becomes
        // a loop over a size known at run time, which no buffer can hold (and is left alone).
        for e in &exports {
            let (p, g) = e.pack(ovl_fuse::RowReuse::Skip)?;
            forward.push(p);
            gradients.push(g);
        }
        let sizes: Vec<u64> = TRACE_SIZES.iter().map(|&n| n as u64).collect();
        let mut program = unify_programs(&sizes, &forward, &self.symbol).map_err(unify(false))?;
        exports[0].reuse_rows(&mut program);
        let depends = |p: &ir::Program| p.graph.as_ref().is_some_and(|g| !g.symbols.is_empty());
        if !depends(&program) {
            return Err(err(ExportError::SizeIndependent {
                sizes: TRACE_SIZES.to_vec(),
            }));
        }
        let gradient = match gradients.iter().filter(|g| g.is_some()).count() {
            0 => None,
            n if n == gradients.len() => {
                let g: Vec<ir::Program> = gradients.into_iter().flatten().collect();
                let mut gradient = unify_programs(&sizes, &g, &self.symbol).map_err(unify(true))?;
                exports[0].reuse_rows(&mut gradient);
                Some(gradient)
            }
            _ => return Err(err(ExportError::GradientAtSomeSizes)),
        };
        exports[0].compile(program, gradient)
    }

    /// [`build`](Self::build), then [`Bundle::write`].
    pub fn write(&self, path: impl AsRef<std::path::Path>) -> Result<Bundle, Error> {
        let bundle = self.build()?;
        bundle.write(path)?;
        Ok(bundle)
    }
}

/// One program from the same program packed at `sizes` (see [`ovl_core::unify`]): the graphs
/// unified, feeds with equal names whose types unify, constants that do not depend on the size.
/// The programs may already have sizes known at run time (in other symbols, the same in each);
/// the new symbol `symbol` comes after them.
pub fn unify_programs(
    sizes: &[u64],
    programs: &[ir::Program],
    symbol: &str,
) -> Result<ir::Program, UnifyProgramError> {
    use UnifyProgramError as U;
    let first = &programs[0];
    let graphs: Vec<&ir::OperatorDag> = programs
        .iter()
        .map(|p| p.graph.as_ref().ok_or(U::NoGraph))
        .collect::<Result<_, _>>()?;
    let graph = unify_graphs(sizes, &graphs, symbol)?;
    // The new symbol's number (see `unify_graphs`).
    let index = graphs[0].symbols.len() as u32;
    if programs.iter().any(|p| p.feeds.len() != first.feeds.len()) {
        return Err(U::InputCount);
    }
    let mut feeds = Vec::with_capacity(first.feeds.len());
    for (k, f) in first.feeds.iter().enumerate() {
        let all: Vec<&ir::ProgramFeed> = programs.iter().map(|p| &p.feeds[k]).collect();
        if all
            .iter()
            .any(|g| g.name != f.name || g.graph_input != f.graph_input)
        {
            return Err(U::InputDiffers {
                input: k,
                name: f.name.clone(),
            });
        }
        let types: Vec<&ir::TensorType> = all
            .iter()
            .map(|g| g.r#type.as_ref().ok_or(U::UntypedFeed))
            .collect::<Result<_, _>>()?;
        let t = unify_type(sizes, &types, index).map_err(|why| U::InputType {
            input: k,
            name: f.name.clone(),
            why,
        })?;
        feeds.push(ir::ProgramFeed {
            r#type: Some(t),
            ..f.clone()
        });
    }
    if programs.iter().any(|p| p.constants != first.constants) {
        return Err(U::ConstantDiffers {
            sizes: sizes.to_vec(),
        });
    }
    let program = ir::Program {
        version: first.version,
        name: first.name.clone(),
        graph: Some(graph),
        feeds,
        constants: first.constants.clone(),
        libraries: Vec::new(),
    };
    check_program(&program).map_err(|e| U::Malformed(Box::new(e)))?;
    Ok(program)
}
