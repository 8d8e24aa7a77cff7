//! Bundle files (`ovl::as_tensorflow(..).write(path)`, `ovl::as_tensorflow_polymorphic`): JSON
//! whose `program` field is the base64 of the sealed program (`ovl::program::seal_program`).
//! Read here without Python: the bundle's `format` and `version`, the sealed program's bytes,
//! and how its inputs and outputs are typed (for messages and the `inputs`/`outputs`
//! properties; the program itself is the source of truth and is checked on load).

use ovl::export::{BUNDLE_FORMAT, BUNDLE_VERSION};
use serde_json::Value;

/// A dimension of a bundle's input or output: fixed, or known only at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A size fixed at export.
    Fixed(usize),
    /// `scale * symbol + offset`, `symbol` named (e.g. `batch`).
    Symbolic {
        /// The symbol's name.
        symbol: String,
        /// Its multiplier.
        scale: i64,
        /// Added after scaling.
        offset: i64,
    },
}

impl Dim {
    /// `4`, `batch`, `2*batch+1`.
    pub fn text(&self) -> String {
        match self {
            Dim::Fixed(n) => n.to_string(),
            Dim::Symbolic {
                symbol,
                scale,
                offset,
            } => {
                let scaled = if *scale == 1 {
                    symbol.clone()
                } else {
                    format!("{scale}*{symbol}")
                };
                match offset {
                    0 => scaled,
                    o if *o > 0 => format!("{scaled}+{o}"),
                    o => format!("{scaled}{o}"),
                }
            }
        }
    }
}

/// An input or output of a bundle as its JSON types it.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// The feed's name (outputs have none).
    pub name: Option<String>,
    /// NumPy's (and TensorFlow's) name of the dtype: `float32`, `int32`, `bool`, ...
    pub dtype: String,
    /// The dimensions.
    pub dims: Vec<Dim>,
}

impl TensorInfo {
    /// `float32[batch, 3]`.
    pub fn type_text(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(Dim::text).collect();
        format!("{}[{}]", self.dtype, dims.join(", "))
    }
}

/// A bundle file, read.
#[derive(Debug)]
pub struct BundleFile {
    /// The sealed program's bytes (not verified yet).
    pub sealed: Vec<u8>,
    /// The program's inputs, in call order.
    pub inputs: Vec<TensorInfo>,
    /// Its outputs, in order.
    pub outputs: Vec<TensorInfo>,
    /// The sealed gradient program's bytes (not verified yet), when the bundle carries one:
    /// it takes the inputs followed by one gradient per output and returns one gradient per
    /// input.
    pub gradient: Option<Vec<u8>>,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads the text of a bundle file. The error says what is wrong (without naming the file:
/// the caller prefixes it).
pub fn read(text: &[u8]) -> Result<BundleFile, String> {
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| format!("it is not JSON ({e}): not an ovl bundle file"))?;
    let obj = v.as_object().ok_or_else(|| {
        format!(
            "the file holds {}, not an object: not an ovl bundle file",
            kind(&v)
        )
    })?;
    let field = |key: &str| {
        obj.get(key)
            .ok_or(format!("the field \"{key}\" is missing"))
    };
    let format = field("format")?;
    if format.as_str() != Some(BUNDLE_FORMAT) {
        return Err(format!(
            "the field \"format\" is {format}, not \"{BUNDLE_FORMAT}\": not an ovl bundle file"
        ));
    }
    let version = field("version")?;
    if version.as_u64() != Some(u64::from(BUNDLE_VERSION)) {
        return Err(format!(
            "bundle version {version}, this ovl reads version {BUNDLE_VERSION}: export it again \
             with this version of ovl"
        ));
    }
    let symbols: Vec<String> = match obj.get("symbols") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("the field \"symbols\" must be an array of strings")?,
        Some(other) => {
            return Err(format!(
                "the field \"symbols\" must be an array, not {}",
                kind(other)
            ))
        }
    };
    let tensors = |key: &str, named: bool| -> Result<Vec<TensorInfo>, String> {
        let list = field(key)?
            .as_array()
            .ok_or(format!("the field \"{key}\" must be an array"))?;
        list.iter()
            .enumerate()
            .map(|(k, t)| tensor(t, &format!("{key}[{k}]"), named, &symbols))
            .collect()
    };
    let inputs = tensors("inputs", true)?;
    let outputs = tensors("outputs", false)?;
    let program = field("program")?.as_str().ok_or(format!(
        "the field \"program\" must be a base64 string, not {}",
        kind(field("program")?)
    ))?;
    let sealed = base64_decode(program)
        .ok_or("the field \"program\" is not valid base64: the bundle was modified or corrupted")?;
    let gradient = match obj.get("gradient") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(base64_decode(text).ok_or(
            "the field \"gradient\" is not valid base64: the bundle was modified or corrupted",
        )?),
        Some(other) => {
            return Err(format!(
                "the field \"gradient\" must be a base64 string, not {}",
                kind(other)
            ))
        }
    };
    Ok(BundleFile {
        sealed,
        inputs,
        outputs,
        gradient,
    })
}

/// One `{"name": .., "dtype": .., "shape": [..], "symbolic": [..]}`.
fn tensor(v: &Value, path: &str, named: bool, symbols: &[String]) -> Result<TensorInfo, String> {
    let bad = |what: &str| format!("the field \"{path}{what}\" is malformed");
    let name = if named {
        Some(v["name"].as_str().ok_or_else(|| bad(".name"))?.to_string())
    } else {
        None
    };
    let dtype = v["dtype"]
        .as_str()
        .ok_or_else(|| bad(".dtype"))?
        .to_string();
    let shape = v["shape"].as_array().ok_or_else(|| bad(".shape"))?;
    let mut dims = Vec::with_capacity(shape.len());
    for (k, d) in shape.iter().enumerate() {
        if let Some(n) = d.as_u64() {
            dims.push(Dim::Fixed(n as usize));
            continue;
        }
        if !d.is_null() {
            return Err(bad(".shape"));
        }
        let symbolic = v["symbolic"].as_array().ok_or_else(|| bad(".symbolic"))?;
        let entry = symbolic
            .iter()
            .find(|s| s["dim"].as_u64() == Some(k as u64))
            .ok_or_else(|| bad(".symbolic"))?;
        let symbol = entry["symbol"]
            .as_u64()
            .and_then(|s| symbols.get(s as usize))
            .ok_or_else(|| bad(".symbolic"))?;
        dims.push(Dim::Symbolic {
            symbol: symbol.clone(),
            scale: entry["scale"].as_i64().ok_or_else(|| bad(".symbolic"))?,
            offset: entry["offset"].as_i64().ok_or_else(|| bad(".symbolic"))?,
        });
    }
    Ok(TensorInfo { name, dtype, dims })
}

/// Standard base64 with padding (what `ovl::export` writes); `None` for anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let chunks = bytes.len() / 4;
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != chunks) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}
