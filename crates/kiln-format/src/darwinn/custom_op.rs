//! Finding DarwiNN packages inside a `*_edgetpu.tflite`: the `edgetpu-custom-op` operators and
//! their FlexBuffer `custom_options` (libedgetpu `tflite/custom_op_data.cc`).
//!
//! Keys of the options map: "1" version (int), "2" deprecated chip name (string), "3" deprecated
//! parameter-caching executable (ignored by the driver), "4" the serialized Package (a string
//! holding binary), "5" execution preference (int), "6" one chip per executable (vector of
//! ints), "7" executables 2..n (vector of strings). When "6" is present it must be non-empty,
//! hold only ints and have one more entry than "7".

use crate::error::{Error, Result};
use crate::flexbuffer::{self, Reference};
use crate::tflite::{CustomOptions, Model};

const FORMAT: &str = "edgetpu";

/// `custom_code` of the Edge TPU operator (`edgetpu::kCustomOp`).
pub const CUSTOM_OP: &str = "edgetpu-custom-op";

/// A package blob found in the custom options.
#[derive(Clone, Copy, Debug)]
pub struct PackageBlob<'a> {
    /// File offset of the package's first byte.
    pub file_offset: u64,
    /// The serialized Package.
    pub bytes: &'a [u8],
}

/// The decoded custom options of one Edge TPU operator.
#[derive(Clone, Debug)]
pub struct CustomOpData<'a> {
    /// Key "1".
    pub version: Option<i64>,
    /// Key "2" (deprecated chip name; raw bytes).
    pub chip_name: Option<&'a [u8]>,
    /// Key "5".
    pub execution_preference: Option<i64>,
    /// Key "6": one chip id per package (internal enum values; not validated).
    pub chips: Option<Vec<i64>>,
    /// Key "4" then every entry of key "7", in order.
    pub packages: Vec<PackageBlob<'a>>,
    /// Every key with a display form of its value (binary strings as `"bytes[N]"`).
    pub keys: serde_json::Map<String, serde_json::Value>,
}

/// One `edgetpu-custom-op` node.
#[derive(Clone, Debug)]
pub struct EdgetpuOp<'a> {
    /// Subgraph index.
    pub subgraph: usize,
    /// Operator index in the subgraph.
    pub operator: usize,
    /// Input tensor indices (input i binds to the executable's input_layers\[i\]).
    pub inputs: Vec<i32>,
    /// Output tensor indices (output i binds to output_layers\[i\]).
    pub outputs: Vec<i32>,
    /// Where the custom options are.
    pub custom_options: CustomOptions<'a>,
    /// What they hold.
    pub data: CustomOpData<'a>,
}

/// Every `edgetpu-custom-op` node of `model`, in subgraph and operator order.
pub fn find_ops<'a>(model: &Model<'a>) -> Result<Vec<EdgetpuOp<'a>>> {
    let mut out = Vec::new();
    for op in model.operators()? {
        if !op.code.is_some_and(|c| c.is_custom(CUSTOM_OP)) {
            continue;
        }
        let field = format!("subgraphs[{}].operators[{}].custom_options", op.subgraph, op.index);
        let co = op.custom_options.ok_or_else(|| {
            Error::invalid(FORMAT, &field, None, "edgetpu-custom-op without custom options")
        })?;
        let data = parse_custom_options(co.bytes, co.offset).map_err(|e| match e {
            Error::Invalid { field: f, offset, reason, .. } => Error::Invalid {
                format: FORMAT,
                field: format!("{field}.{f}"),
                offset: offset.map(|o| o + co.offset),
                reason,
            },
            other => other,
        })?;
        out.push(EdgetpuOp {
            subgraph: op.subgraph,
            operator: op.index,
            inputs: op.inputs,
            outputs: op.outputs,
            custom_options: co,
            data,
        });
    }
    Ok(out)
}

/// True when `bytes` is a TFLite model with at least one `edgetpu-custom-op` operator code.
pub fn has_edgetpu_op(bytes: &[u8]) -> bool {
    Model::open(bytes).is_ok_and(|m| m.operator_codes().iter().any(|c| c.is_custom(CUSTOM_OP)))
}

fn int_of(r: &Reference<'_>, field: &str) -> Result<i64> {
    r.as_i64(field)
}

/// Decodes the FlexBuffer map of an Edge TPU operator; `base` is the options' file offset.
pub fn parse_custom_options(bytes: &[u8], base: u64) -> Result<CustomOpData<'_>> {
    let map = flexbuffer::root(bytes)?.as_map("root")?;
    let mut data = CustomOpData {
        version: None,
        chip_name: None,
        execution_preference: None,
        chips: None,
        packages: Vec::new(),
        keys: serde_json::Map::new(),
    };
    let mut extra = Vec::new();
    for i in 0..map.len() {
        let key = map.key(i, "root")?;
        let name = String::from_utf8_lossy(key).into_owned();
        let value = map.value(i, &name)?;
        data.keys.insert(name.clone(), value.to_json(&name)?);
        match key {
            b"1" => data.version = Some(int_of(&value, "1")?),
            b"2" => data.chip_name = Some(value.as_bytes("2")?),
            b"4" => {
                let (at, b) = value.as_bytes_at("4")?;
                data.packages.insert(0, PackageBlob { file_offset: base + at, bytes: b });
            }
            b"5" => data.execution_preference = Some(int_of(&value, "5")?),
            b"6" => {
                let v = value.as_vector("6")?;
                let mut chips = Vec::with_capacity(v.len());
                for j in 0..v.len() {
                    chips.push(int_of(&v.get(j, "6")?, &format!("6[{j}]"))?);
                }
                data.chips = Some(chips);
            }
            b"7" => {
                let v = value.as_vector("7")?;
                for j in 0..v.len() {
                    let (at, b) = v.get(j, "7")?.as_bytes_at(&format!("7[{j}]"))?;
                    extra.push(PackageBlob { file_offset: base + at, bytes: b });
                }
            }
            _ => {}
        }
    }
    if data.packages.is_empty() {
        return Err(Error::invalid(
            FORMAT,
            "4",
            None,
            "no package (key \"4\") in the custom options",
        ));
    }
    data.packages.extend(extra);
    if let Some(chips) = &data.chips {
        if chips.len() != data.packages.len() {
            return Err(Error::invalid(
                FORMAT,
                "6",
                None,
                format!(
                    "{} chips for {} executables (key \"6\" needs one more entry than key \"7\")",
                    chips.len(),
                    data.packages.len()
                ),
            ));
        }
    }
    Ok(data)
}
