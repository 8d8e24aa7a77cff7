//! Readable text dump of the IR (to be written).
