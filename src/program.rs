//! An exported program loaded to run: decoded, checked, compiled for a target, planned, and run
//! on buffers the caller owns (TensorFlow's tensors, without copies) or on host tensors.
//! [`crate::export::run_program`] and the TensorFlow bridge's `DynamicLib` kernel both run
//! programs through [`LoadedProgram`], and it runs graphs through the one [`crate::runner`].

use crate::export::{
    check_program, constant_tensor, open_program, tensorflow_dtype_name, SealError,
};
use crate::runner::{Input, Kernel, Output, Plan, RunFailure, Sig};
use crate::{executor, Options};
use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

/// Why a program could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The sealed program was modified or corrupted: its digest does not match (checked
    /// before decoding).
    #[error(transparent)]
    Modified(#[from] SealError),
    /// The bytes are not a valid program, or the program is malformed (its digest matched).
    #[error("the `program` attribute is not a valid ovl program ({0}); re-export the bundle")]
    Corrupt(String),
    /// Generating, compiling or loading an operator failed.
    #[error("program `{program}`: {source}")]
    Compile {
        /// The program.
        program: String,
        /// The cause (carries the compiler log and the source path).
        source: Box<crate::Error>,
    },
    /// Running an operator failed (for example an index out of bounds).
    #[error("program `{program}`: {source}")]
    Run {
        /// The program.
        program: String,
        /// The cause.
        source: Box<RunFailure>,
    },
    /// A tensor passed does not fit the program.
    #[error("program `{program}`: {message}")]
    Mismatch {
        /// The program.
        program: String,
        /// What does not fit.
        message: String,
    },
}

/// Where the data of one graph input comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Feed `k` of the call.
    Feed(usize),
    /// Constant `c` of the program.
    Constant(usize),
}

/// A program ready to run.
pub struct LoadedProgram {
    /// The program's name.
    pub name: String,
    /// One per feed: its name and type.
    pub feeds: Vec<(String, Sig)>,
    /// One per output.
    pub outputs: Vec<Sig>,
    plan: Plan,
    kernels: Vec<Kernel>,
    constants: Vec<HostTensor>,
    /// Per graph input: where its data comes from.
    sources: Vec<Source>,
}

impl fmt::Debug for LoadedProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedProgram")
            .field("name", &self.name)
            .field("kernels", &self.kernels.len())
            .finish_non_exhaustive()
    }
}

/// `float32[2, 3]`: a type as TensorFlow users read it.
pub fn tensorflow_type_name(sig: &Sig) -> String {
    format!("{}{:?}", tensorflow_dtype_name(sig.dtype), sig.shape)
}

impl LoadedProgram {
    /// Verifies the digest of a sealed program ([`crate::export::seal_program`]), decodes and
    /// checks it, and compiles its operators for `options.target` (or finds them in the
    /// operator cache).
    pub fn load(sealed: &[u8], options: &Options) -> Result<LoadedProgram, ProgramError> {
        let program = open_program(sealed, "the `program` attribute")?;
        LoadedProgram::new(program, options)
    }

    /// Checks a program and compiles its operators for `options.target`.
    pub fn new(program: ir::Program, options: &Options) -> Result<LoadedProgram, ProgramError> {
        check_program(&program).map_err(ProgramError::Corrupt)?;
        let mut sources = vec![None; program.graph.as_ref().map_or(0, |g| g.inputs.len())];
        let mut feeds = Vec::with_capacity(program.feeds.len());
        for (k, f) in program.feeds.iter().enumerate() {
            let sig = Sig::from_ir(f.r#type.as_ref().unwrap_or(&Default::default()))
                .map_err(ProgramError::Corrupt)?;
            feeds.push((f.name.clone(), sig));
            if let Some(i) = f.graph_input {
                sources[i as usize] = Some(Source::Feed(k));
            }
        }
        let mut constants = Vec::with_capacity(program.constants.len());
        for c in &program.constants {
            sources[c.graph_input as usize] = Some(Source::Constant(constants.len()));
            constants.push(constant_tensor(&program, c).map_err(ProgramError::Corrupt)?);
        }
        let sources = sources
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ProgramError::Corrupt("a graph input has no data".into()))?;
        let name = program.name;
        let dag = program.graph.unwrap_or_default();
        let kernels = executor::kernels(&dag, options).map_err(|e| ProgramError::Compile {
            program: name.clone(),
            source: Box::new(e),
        })?;
        let plan = Plan::new(Arc::new(dag)).map_err(ProgramError::Corrupt)?;
        Ok(LoadedProgram {
            outputs: plan.outputs().to_vec(),
            name,
            feeds,
            plan,
            kernels,
            constants,
            sources,
        })
    }

    /// The number of kernels (compiled operators) a run launches.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    fn mismatch(&self, message: String) -> ProgramError {
        ProgramError::Mismatch {
            program: self.name.clone(),
            message,
        }
    }

    /// Checks that feed `k` may be a tensor of `dtype` and `shape`.
    pub fn check_feed(&self, k: usize, dtype: DType, shape: &[usize]) -> Result<(), ProgramError> {
        let (name, sig) = self
            .feeds
            .get(k)
            .ok_or_else(|| self.mismatch(format!("there is no input {k}")))?;
        if sig.dtype != dtype || sig.shape != shape {
            return Err(self.mismatch(format!(
                "input {k} (`{name}`) is {}{shape:?}, but the program was exported for {}",
                tensorflow_dtype_name(dtype),
                tensorflow_type_name(sig)
            )));
        }
        Ok(())
    }

    fn inputs<'a>(&'a self, feeds: &[Input<'a>]) -> Vec<Input<'a>> {
        self.sources
            .iter()
            .map(|s| match *s {
                Source::Feed(k) => feeds[k],
                Source::Constant(c) => Input::Host(&self.constants[c]),
            })
            .collect()
    }

    fn counts(&self, feeds: usize, outputs: usize) -> Result<(), ProgramError> {
        if feeds != self.feeds.len() || outputs != self.outputs.len() {
            return Err(self.mismatch(format!(
                "{feeds} inputs and {outputs} outputs given, the program has {} and {}",
                self.feeds.len(),
                self.outputs.len()
            )));
        }
        Ok(())
    }

    fn run_failure(&self, source: RunFailure) -> ProgramError {
        match source {
            RunFailure::Mismatch(message) => self.mismatch(message),
            source => ProgramError::Run {
                program: self.name.clone(),
                source: Box::new(source),
            },
        }
    }

    /// Runs the program on `threads` threads (0: one per core).
    ///
    /// # Safety
    /// `feeds[k]` must point to the elements of feed `k` (of its declared type, as checked by
    /// [`check_feed`](Self::check_feed)), readable for the call; `outputs[k]` to a writable
    /// buffer of [`outputs`](Self::outputs)`[k]`'s size, not overlapping any other buffer.
    /// Outputs no worker writes in full are zero-filled first.
    pub unsafe fn run(
        &self,
        feeds: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), ProgramError> {
        self.counts(feeds.len(), outputs.len())?;
        let feeds: Vec<Input> = feeds.iter().map(|&p| Input::Raw(p)).collect();
        let inputs = self.inputs(&feeds);
        let mut outs: Vec<Output> = outputs.iter().map(|&p| Output::Raw(p)).collect();
        // SAFETY: forwarded to the caller (feeds and outputs); constants are host tensors.
        unsafe {
            self.plan
                .run(&self.kernels, &inputs, &mut outs, threads, None)
        }
        .map_err(|e| self.run_failure(e))
    }

    /// Runs the program on host tensors (one per feed, of its type) and returns the outputs.
    pub fn run_host(
        &self,
        feeds: &[&HostTensor],
        threads: usize,
    ) -> Result<Vec<HostTensor>, ProgramError> {
        self.counts(feeds.len(), self.outputs.len())?;
        for (k, t) in feeds.iter().enumerate() {
            self.check_feed(k, t.dtype(), &t.shape)?;
        }
        let feeds: Vec<Input> = feeds.iter().map(|&t| Input::Host(t)).collect();
        let inputs = self.inputs(&feeds);
        let mut buffers: Vec<HostTensor> = self
            .outputs
            .iter()
            .map(|s| HostTensor::zeros(s.dtype, &s.shape))
            .collect();
        let mut outs: Vec<Output> = buffers
            .iter_mut()
            .map(|tensor| Output::Host {
                tensor,
                zeroed: true,
            })
            .collect();
        self.plan
            .run_host(&self.kernels, &inputs, &mut outs, threads, None)
            .map_err(|e| self.run_failure(e))?;
        drop(outs);
        Ok(buffers)
    }
}
