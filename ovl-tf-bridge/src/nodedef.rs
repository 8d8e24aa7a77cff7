//! Decoding the attributes of a `DynamicLib` node from its serialized `NodeDef`.
//!
//! TensorFlow's C API has no getter for `list(shape)` attributes, so the kernel reads every
//! attribute from the `NodeDef` that `TF_OpKernelConstruction_GetNodeDef` returns. The messages
//! below hold only the fields the bridge reads, with the field numbers of TensorFlow's
//! `node_def.proto`, `attr_value.proto` and `tensor_shape.proto` (prost skips the others).

use std::collections::HashMap;

/// `tensorflow.NodeDef` (the fields read here).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    #[prost(map = "string, message", tag = "5")]
    pub attr: HashMap<String, AttrValue>,
}

/// `tensorflow.AttrValue` (the variants read here).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrValue {
    #[prost(oneof = "attr_value::Value", tags = "1, 2, 3, 6")]
    pub value: Option<attr_value::Value>,
}

/// The `value` oneof of [`AttrValue`].
pub mod attr_value {
    /// `AttrValue.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(message, tag = "1")]
        List(super::ListValue),
        #[prost(bytes, tag = "2")]
        S(Vec<u8>),
        #[prost(int64, tag = "3")]
        I(i64),
        #[prost(int32, tag = "6")]
        Type(i32),
    }
}

/// `tensorflow.AttrValue.ListValue` (the fields read here).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
}

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `tensorflow.TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// The attributes of a `DynamicLib` node.
#[derive(Clone, Debug, PartialEq)]
pub struct Attrs {
    /// The node's name (for messages).
    pub node: String,
    /// `in_types`: TensorFlow dtypes of the inputs.
    pub in_types: Vec<i32>,
    /// `out_types`: TensorFlow dtypes of the outputs.
    pub out_types: Vec<i32>,
    /// `out_shapes`: `None` for an unknown rank, `-1` for an unknown dimension.
    pub out_shapes: Vec<Option<Vec<i64>>>,
    /// `program`: the sealed `ovl.ir.Program` (`ovl::program::seal_program`).
    pub program: Vec<u8>,
    /// `gradient`: the sealed gradient program, empty when there is none (or when the node
    /// does not set it).
    pub gradient: Vec<u8>,
}

/// Why a `NodeDef` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NodeDefError {
    /// The bytes are not a `NodeDef`.
    #[error("the node definition does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    /// An attribute is missing or has another kind.
    #[error("node `{node}`: attribute `{attr}` is missing or is not a {kind}")]
    Attr {
        /// The node.
        node: String,
        /// The attribute.
        attr: &'static str,
        /// What it should be.
        kind: &'static str,
    },
}

impl Attrs {
    /// Decodes the serialized `NodeDef` of a `DynamicLib` node.
    pub fn decode(bytes: &[u8]) -> Result<Attrs, NodeDefError> {
        use attr_value::Value;
        let def = <NodeDef as prost::Message>::decode(bytes)?;
        let node = def.name.clone();
        let get = |attr: &'static str, kind: &'static str| {
            def.attr
                .get(attr)
                .and_then(|a| a.value.clone())
                .ok_or_else(|| NodeDefError::Attr {
                    node: node.clone(),
                    attr,
                    kind,
                })
        };
        let wrong = |attr: &'static str, kind: &'static str| NodeDefError::Attr {
            node: node.clone(),
            attr,
            kind,
        };
        // An empty list may be encoded as an AttrValue with no value at all.
        let list = |attr: &'static str, kind: &'static str| match def
            .attr
            .get(attr)
            .map(|a| a.value.clone())
        {
            Some(Some(Value::List(l))) => Ok(l),
            Some(None) => Ok(ListValue::default()),
            _ => Err(wrong(attr, kind)),
        };
        let in_types = list("in_types", "list(type)")?.r#type;
        let out_types = list("out_types", "list(type)")?.r#type;
        let out_shapes = list("out_shapes", "list(shape)")?
            .shape
            .into_iter()
            .map(|s| (!s.unknown_rank).then(|| s.dim.iter().map(|d| d.size).collect()))
            .collect();
        let program = match get("program", "string")? {
            Value::S(s) => s,
            _ => return Err(wrong("program", "string")),
        };
        let gradient = match def.attr.get("gradient").map(|a| a.value.clone()) {
            None | Some(None) => Vec::new(),
            Some(Some(Value::S(s))) => s,
            Some(Some(_)) => return Err(wrong("gradient", "string")),
        };
        Ok(Attrs {
            node,
            in_types,
            out_types,
            out_shapes,
            program,
            gradient,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn list(types: Vec<i32>, shapes: Vec<TensorShapeProto>) -> AttrValue {
        AttrValue {
            value: Some(attr_value::Value::List(ListValue {
                r#type: types,
                shape: shapes,
            })),
        }
    }

    #[test]
    fn decodes_list_shape_and_string_attributes() {
        let shape = |dims: &[i64]| TensorShapeProto {
            dim: dims.iter().map(|&size| Dim { size }).collect(),
            unknown_rank: false,
        };
        let mut attr = HashMap::new();
        attr.insert("in_types".to_string(), list(vec![1, 3], vec![]));
        attr.insert("out_types".to_string(), list(vec![1], vec![]));
        attr.insert(
            "out_shapes".to_string(),
            list(
                vec![],
                vec![
                    shape(&[2, 3]),
                    TensorShapeProto {
                        dim: vec![],
                        unknown_rank: true,
                    },
                ],
            ),
        );
        attr.insert(
            "program".to_string(),
            AttrValue {
                value: Some(attr_value::Value::S(vec![1, 2, 3])),
            },
        );
        let def = NodeDef {
            name: "n".into(),
            op: "DynamicLib".into(),
            attr,
        };
        let attrs = Attrs::decode(&def.encode_to_vec()).unwrap();
        assert_eq!(attrs.in_types, vec![1, 3]);
        assert_eq!(attrs.out_types, vec![1]);
        assert_eq!(attrs.out_shapes, vec![Some(vec![2, 3]), None]);
        assert_eq!(attrs.program, vec![1, 2, 3]);
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let def = NodeDef {
            name: "n".into(),
            op: "DynamicLib".into(),
            attr: HashMap::new(),
        };
        let e = Attrs::decode(&def.encode_to_vec()).unwrap_err().to_string();
        assert!(e.contains("in_types"), "{e}");
        assert!(Attrs::decode(&[0xff, 0xff]).is_err());
    }
}
