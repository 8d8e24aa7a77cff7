//! The errors of the optimizer and of its Graphviz output.

use thiserror::Error;

/// What can go wrong while fusing an operator DAG or drawing it.
#[derive(Debug, Error)]
pub enum FuseError {
    /// The operator DAG given to the optimizer is not valid IR.
    #[error("cannot fuse an invalid operator DAG: {0}")]
    InvalidInput(#[from] ovl_ir::validate::ValidationError),
    /// The operator DAG is malformed in a way validation does not name.
    #[error("cannot fuse the operator DAG: {0}")]
    InvalidGraph(String),
    /// The optimizer produced an invalid graph (a bug in ovl-fuse; please report it).
    #[error("internal error in the operator merger: {0}; evaluate with opt_level 0 to work around it and please report it")]
    Internal(String),
    /// The Graphviz `dot` program is not installed (or not on `PATH`).
    #[error(
        "cannot render {format}: the Graphviz `dot` program was not found on PATH ({source}); \
         install Graphviz (for example `apt-get install graphviz`), or write the DOT text from \
         `to_dot()` to a file and render it elsewhere"
    )]
    DotNotFound {
        /// The requested format.
        format: String,
        /// The error from starting `dot`.
        source: std::io::Error,
    },
    /// `dot` ran but failed.
    #[error("Graphviz `dot -T{format}` failed ({status}): {stderr}")]
    DotFailed {
        /// The requested format.
        format: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Reading or writing a file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
}
