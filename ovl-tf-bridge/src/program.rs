//! A program loaded for the kernel: decoded, checked, compiled into the operator cache, and
//! run on buffers the caller owns (TensorFlow's tensors), without copying them.

use ovl::export::{
    check_program, constant_tensor, open_program, tensor_type_of, tensorflow_dtype_name, SealError,
};
use ovl_codegen::{CompileOptions, CompiledOperator};
use ovl_core::ir::{self, value_ref::Source};
use ovl_core::{DType, HostTensor};
use std::ffi::c_void;
use std::sync::Arc;

/// Why a program could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The `program` attribute was modified or corrupted: its digest does not match (checked
    /// before decoding).
    #[error(transparent)]
    Modified(#[from] SealError),
    /// The `program` attribute is not a valid program (its digest matched).
    #[error("the `program` attribute is not a valid ovl program ({0}); re-export the bundle")]
    Corrupt(String),
    /// Generating, compiling or loading an operator failed.
    #[error("program `{program}`: {source}")]
    Compile {
        /// The program.
        program: String,
        /// The cause (carries the compiler log and the source path).
        source: Box<ovl_codegen::CodegenError>,
    },
    /// Running an operator failed (for example an index out of bounds).
    #[error("program `{program}`: {source}")]
    Run {
        /// The program.
        program: String,
        /// The cause.
        source: ovl_codegen::RunError,
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

/// The dtype and shape of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sig {
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Vec<usize>,
}

impl Sig {
    fn from_ir(t: &ir::TensorType) -> Result<Sig, ProgramError> {
        let (dtype, shape) = tensor_type_of(t).map_err(ProgramError::Corrupt)?;
        Ok(Sig { dtype, shape })
    }

    /// The number of bytes of the elements.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", tensorflow_dtype_name(self.dtype), self.shape)
    }
}

/// Where a value of the graph lives during a run.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// A fed tensor (index into the feeds).
    Feed(usize),
    /// A constant of the program (index into `constants`).
    Constant(usize),
    /// A caller-owned output buffer (index into the outputs).
    Output(usize),
    /// A buffer the run allocates (index into the run's intermediates).
    Temp(usize),
}

/// A program ready to run.
pub struct LoadedProgram {
    /// The program's name.
    pub name: String,
    /// One per feed: its name and type.
    pub feeds: Vec<(String, Sig)>,
    /// One per output.
    pub outputs: Vec<Sig>,
    dag: ir::OperatorDag,
    kernels: Vec<Arc<CompiledOperator>>,
    constants: Vec<HostTensor>,
    /// Per graph input: where its data is.
    graph_inputs: Vec<Slot>,
    /// Per operator and output: where it is written.
    op_slots: Vec<Vec<Slot>>,
    /// Per operator and output: whether every element is written by some worker.
    written: Vec<Vec<bool>>,
    /// The types of the intermediates.
    temps: Vec<Sig>,
    /// Graph outputs that are not written in place: (output, source) to copy after the run.
    copies: Vec<(usize, Slot)>,
}

impl std::fmt::Debug for LoadedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedProgram")
            .field("name", &self.name)
            .field("kernels", &self.kernels.len())
            .finish_non_exhaustive()
    }
}

impl LoadedProgram {
    /// Verifies the digest of a sealed program (`ovl::export::seal_program`), decodes and
    /// checks it, and compiles its operators (or finds them in the operator cache).
    pub fn load(sealed: &[u8], options: &CompileOptions) -> Result<LoadedProgram, ProgramError> {
        let program = open_program(sealed, "the `program` attribute")?;
        check_program(&program).map_err(ProgramError::Corrupt)?;
        let name = program.name.clone();
        let dag = program.graph.clone().unwrap_or_default();
        let mut graph_inputs = vec![Slot::Temp(usize::MAX); dag.inputs.len()];
        let mut feeds = Vec::with_capacity(program.feeds.len());
        for (k, f) in program.feeds.iter().enumerate() {
            feeds.push((
                f.name.clone(),
                Sig::from_ir(f.r#type.as_ref().unwrap_or(&Default::default()))?,
            ));
            if let Some(i) = f.graph_input {
                graph_inputs[i as usize] = Slot::Feed(k);
            }
        }
        let mut constants = Vec::with_capacity(program.constants.len());
        for c in &program.constants {
            graph_inputs[c.graph_input as usize] = Slot::Constant(constants.len());
            constants.push(constant_tensor(&program, c).map_err(ProgramError::Corrupt)?);
        }

        // Requested outputs are written in place where possible: the first request of each
        // operator output; other requests (repeats, graph inputs) are copied after the run.
        let mut op_slots: Vec<Vec<Option<Slot>>> = dag
            .operators
            .iter()
            .map(|op| vec![None; op.outputs.len()])
            .collect();
        let mut outputs = Vec::with_capacity(dag.outputs.len());
        let mut copies = Vec::new();
        for (k, out) in dag.outputs.iter().enumerate() {
            match &out.source {
                Some(Source::GraphInput(i)) => {
                    outputs.push(Sig::from_ir(&dag.inputs[*i as usize])?);
                    copies.push((k, graph_inputs[*i as usize]));
                }
                Some(Source::OpOutput(o)) => {
                    let t = dag
                        .operators
                        .get(o.operator as usize)
                        .and_then(|op| op.outputs.get(o.output as usize))
                        .ok_or_else(|| {
                            corrupt("an output names an operator that does not exist")
                        })?;
                    outputs.push(Sig::from_ir(t)?);
                    let slot = &mut op_slots[o.operator as usize][o.output as usize];
                    match slot {
                        None => *slot = Some(Slot::Output(k)),
                        Some(s) => copies.push((k, *s)),
                    }
                }
                None => return Err(corrupt("an output has no source")),
            }
        }
        let mut temps = Vec::new();
        let mut slots = Vec::with_capacity(dag.operators.len());
        for (op, op_slot) in dag.operators.iter().zip(op_slots) {
            let mut s = Vec::with_capacity(op_slot.len());
            for (t, slot) in op.outputs.iter().zip(op_slot) {
                s.push(slot.unwrap_or_else(|| {
                    temps.push(t);
                    Slot::Temp(temps.len() - 1)
                }));
            }
            slots.push(s);
        }
        let temps = temps
            .into_iter()
            .map(Sig::from_ir)
            .collect::<Result<Vec<_>, _>>()?;
        // Operator inputs must name earlier operators (a topological order), with the types
        // the operator reads: the run hands raw buffers to the generated code.
        for (i, wiring) in dag.operator_inputs.iter().enumerate() {
            if wiring.inputs.len() != dag.operators[i].inputs.len() {
                return Err(corrupt("an operator's wiring does not match its inputs"));
            }
            for (v, want) in wiring.inputs.iter().zip(&dag.operators[i].inputs) {
                let got = match &v.source {
                    Some(Source::OpOutput(o)) if (o.operator as usize) < i => dag.operators
                        [o.operator as usize]
                        .outputs
                        .get(o.output as usize)
                        .ok_or_else(|| corrupt("an operator input names a missing output"))?,
                    Some(Source::GraphInput(g)) if (*g as usize) < dag.inputs.len() => {
                        &dag.inputs[*g as usize]
                    }
                    _ => return Err(corrupt("the operators are not in a topological order")),
                };
                if got != want {
                    return Err(corrupt(
                        "an operator input has another type than its source",
                    ));
                }
            }
        }
        let kernels = dag
            .operators
            .iter()
            .map(|op| ovl_codegen::compile(op, options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ProgramError::Compile {
                program: name.clone(),
                source: Box::new(source),
            })?;
        let written = dag
            .operators
            .iter()
            .map(ovl_core::analysis::written_everywhere)
            .collect();
        Ok(LoadedProgram {
            name,
            feeds,
            outputs,
            dag,
            kernels,
            constants,
            graph_inputs,
            op_slots: slots,
            written,
            temps,
            copies,
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
                "input {k} (`{name}`) is {}{shape:?}, but the program was exported for {sig}",
                tensorflow_dtype_name(dtype)
            )));
        }
        Ok(())
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
        if feeds.len() != self.feeds.len() || outputs.len() != self.outputs.len() {
            return Err(self.mismatch(format!(
                "{} inputs and {} outputs given, the program has {} and {}",
                feeds.len(),
                outputs.len(),
                self.feeds.len(),
                self.outputs.len()
            )));
        }
        let mut temps: Vec<HostTensor> = self
            .temps
            .iter()
            .map(|s| HostTensor::zeros(s.dtype, &s.shape))
            .collect();
        let read = |slot: Slot, temps: &[HostTensor]| -> *const c_void {
            match slot {
                Slot::Feed(k) => feeds[k],
                Slot::Constant(c) => self.constants[c].data.as_ptr().cast(),
                Slot::Output(k) => outputs[k].cast_const(),
                Slot::Temp(t) => temps[t].data.as_ptr().cast(),
            }
        };
        let mut in_ptrs = Vec::new();
        let mut out_ptrs = Vec::new();
        for (i, kernel) in self.kernels.iter().enumerate() {
            in_ptrs.clear();
            for v in &self.dag.operator_inputs[i].inputs {
                let slot = match &v.source {
                    Some(Source::GraphInput(g)) => self.graph_inputs[*g as usize],
                    Some(Source::OpOutput(o)) => {
                        self.op_slots[o.operator as usize][o.output as usize]
                    }
                    None => return Err(corrupt("an operator input has no source")),
                };
                in_ptrs.push(read(slot, &temps));
            }
            out_ptrs.clear();
            for (j, slot) in self.op_slots[i].iter().enumerate() {
                out_ptrs.push(match *slot {
                    Slot::Output(k) => {
                        if !self.written[i].get(j).copied().unwrap_or(false) {
                            // SAFETY: the caller's buffer holds outputs[k].bytes() bytes.
                            unsafe {
                                std::ptr::write_bytes(
                                    outputs[k].cast::<u8>(),
                                    0,
                                    self.outputs[k].bytes(),
                                )
                            };
                        }
                        outputs[k]
                    }
                    Slot::Temp(t) => temps[t].data.as_mut_ptr().cast(),
                    Slot::Feed(_) | Slot::Constant(_) => {
                        return Err(corrupt("an operator output is placed in an input"))
                    }
                });
            }
            // SAFETY: every pointer names a buffer of the type the operator declares: feeds by
            // the caller's contract, constants and intermediates by construction (checked by
            // `check_program` against the operators' types through the wiring), outputs by the
            // caller's contract; the buffers written are distinct from those read (a DAG).
            unsafe { kernel.run_raw(&in_ptrs, &out_ptrs, threads) }.map_err(|source| {
                ProgramError::Run {
                    program: self.name.clone(),
                    source,
                }
            })?;
        }
        for &(k, slot) in &self.copies {
            let src = read(slot, &temps);
            // SAFETY: source and destination hold outputs[k].bytes() bytes and are distinct
            // buffers (an output is never its own source).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.cast::<u8>(),
                    outputs[k].cast::<u8>(),
                    self.outputs[k].bytes(),
                )
            };
        }
        Ok(())
    }
}

fn corrupt(message: &str) -> ProgramError {
    ProgramError::Corrupt(message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl::prelude::*;

    #[operator]
    fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
        let [rows, cols] = x.dims::<2>();
        let row = position_in([rows])[0];
        let out = output_like(&x);
        let mut acc = variable(0.0f32);
        for j in 0..cols {
            acc += x[[row, j]];
            out[[row, j]] = acc;
        }
        out
    }

    fn options() -> CompileOptions {
        let dir = std::env::var_os("OVL_CACHE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("ovl-tf-bridge-test-cache"));
        CompileOptions::default().with_cache_dir(dir)
    }

    #[test]
    fn runs_on_caller_buffers_with_intermediates_copies_and_passthrough() {
        // Two kernels (a cumsum does not fuse into a cumsum); the intermediate is requested
        // twice and the feed once: written in place, copied, and copied from the feed.
        let x = ovl::placeholder::<f32>("x", &[2, 3]);
        let c1 = cumsum_rows(&x);
        let c2 = cumsum_rows(&c1);
        let bundle = ovl::as_tensorflow(&x, (&c2, &c1, &c1, &x))
            .options(&Options::interpreter())
            .build()
            .unwrap();
        let bytes = ovl::export::seal_program(&bundle.program);
        let program = LoadedProgram::load(&bytes, &options()).unwrap();
        assert_eq!(program.kernel_count(), 2);
        assert_eq!(program.outputs.len(), 4);
        program.check_feed(0, DType::F32, &[2, 3]).unwrap();
        let e = program.check_feed(0, DType::F32, &[3, 2]).unwrap_err();
        assert!(
            e.to_string().contains(
                "input 0 (`x`) is float32[3, 2], but the program was exported for float32[2, 3]"
            ),
            "{e}"
        );

        let input = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut outs = vec![[f32::NAN; 6]; 4];
        let out_ptrs: Vec<*mut c_void> = outs.iter_mut().map(|o| o.as_mut_ptr().cast()).collect();
        // SAFETY: each buffer holds the 6 f32 of its declared type.
        unsafe { program.run(&[input.as_ptr().cast()], &out_ptrs, 0) }.unwrap();
        let c1 = [1.0, 3.0, 6.0, 4.0, 9.0, 15.0];
        let c2 = [1.0, 4.0, 10.0, 4.0, 13.0, 28.0];
        assert_eq!(outs, vec![c2, c1, c1, input]);
    }

    #[test]
    fn garbage_is_reported_as_a_modified_program() {
        let e = LoadedProgram::load(&[0xff, 0x01, 0x02], &CompileOptions::default()).unwrap_err();
        assert!(
            matches!(e, ProgramError::Modified(SealError::NoHeader { .. })),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("the `program` attribute: the program was modified or corrupted"),
            "{e}"
        );
    }

    #[test]
    fn every_single_bit_flip_is_refused_before_decoding() {
        let x = ovl::placeholder::<f32>("x", &[2, 3]);
        let bundle = ovl::as_tensorflow(&x, cumsum_rows(&x))
            .options(&Options::interpreter())
            .build()
            .unwrap();
        let sealed = ovl::export::seal_program(&bundle.program);
        assert!(LoadedProgram::load(&sealed, &options()).is_ok());
        for bit in 0..sealed.len() * 8 {
            let mut flipped = sealed.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let e = LoadedProgram::load(&flipped, &options()).unwrap_err();
            assert!(matches!(e, ProgramError::Modified(_)), "bit {bit}: {e}");
            assert!(
                e.to_string()
                    .contains("the program was modified or corrupted"),
                "bit {bit}: {e}"
            );
        }
    }
}
