//! Canonical structural hashing of the IR (stub: replaced by the real implementation).
use crate::ir;

/// A 256-bit digest of a canonical walk of the IR.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Digest(pub [u8; 32]);

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Hash of an operator, independent of protobuf serialization details.
pub fn canonical_hash(dag: &ir::ExpressionDag) -> Digest {
    use prost::Message;
    use sha2::Digest as _;
    Digest(sha2::Sha256::digest(dag.encode_to_vec()).into())
}
