//! The summary behind `kiln inspect --json` for an Edge TPU model: per package its runtime
//! and compiler versions, and per executable its type, chip, sizes, instruction bitstreams
//! (with the fields linking patches) and input and output layers.

use serde::Serialize;

use super::found::Found;
use super::package::Executable;
use super::{data_type_name, description_kind, executable_type_name, position_kind, schema};

/// `kiln inspect --json` for an Edge TPU model.
#[derive(Serialize)]
pub struct Summary {
    /// Every package, in the order [`super::found::open`] finds them.
    pub packages: Vec<PackageSummary>,
}

/// One package.
#[derive(Serialize)]
pub struct PackageSummary {
    /// Subgraph of its `edgetpu-custom-op` node (`None` for a bare package).
    pub subgraph: Option<usize>,
    /// Operator index of the node in its subgraph.
    pub operator: Option<usize>,
    /// `min_runtime_version`.
    pub min_runtime_version: i32,
    /// `compiler_version` (empty when absent).
    pub compiler_version: String,
    /// Its executables, in MultiExecutable order.
    pub executables: Vec<ExecutableSummary>,
}

/// One executable of a package.
#[derive(Serialize)]
pub struct ExecutableSummary {
    /// `type`, by its schema name.
    #[serde(rename = "type")]
    pub type_: String,
    /// `name`.
    pub name: String,
    /// `chip`.
    pub chip: String,
    /// `batch_size`.
    pub batch_size: i32,
    /// `scratch_size_bytes`.
    pub scratch_size_bytes: i32,
    /// Bytes of parameters.
    pub parameters_bytes: usize,
    /// `parameter_caching_token` in hex.
    pub parameter_caching_token: String,
    /// The instruction bitstreams, in chunk order.
    pub instruction_bitstreams: Vec<BitstreamSummary>,
    /// `input_layers`.
    pub input_layers: Vec<LayerSummary>,
    /// `output_layers`.
    pub output_layers: Vec<LayerSummary>,
}

/// One instruction bitstream.
#[derive(Serialize)]
pub struct BitstreamSummary {
    /// Its length in bytes.
    pub bytes: usize,
    /// The fields linking patches, in file order.
    pub field_offsets: Vec<FieldSummary>,
}

/// One `FieldOffset` of a bitstream.
#[derive(Serialize)]
pub struct FieldSummary {
    /// Bit offset of the field in the bitstream.
    pub offset_bit: i32,
    /// Whose base address the field takes: `INPUT`, `OUTPUT`, `PARAMETER` or `SCRATCH`
    /// (`NONE` without `meta`).
    pub desc: String,
    /// The layer it names.
    pub name: String,
    /// The batch it is for.
    pub batch: i32,
    /// Which half of the address: `LOWER` or `UPPER` (`NONE` without `meta`).
    pub position: String,
}

/// One input or output layer.
#[derive(Serialize)]
pub struct LayerSummary {
    /// `name`.
    pub name: String,
    /// `size_bytes`.
    pub size_bytes: i32,
    /// `y_dim`.
    pub y_dim: i32,
    /// `x_dim`.
    pub x_dim: i32,
    /// `z_dim`.
    pub z_dim: i32,
    /// `data_type`, by its schema name.
    pub data_type: String,
    /// `numerics.zero_point` (0 without numerics).
    pub zero_point: i32,
    /// `numerics.dequantization_factor` (0 without numerics).
    pub dequantization_factor: f32,
    /// `execution_count_per_inference`.
    pub execution_count_per_inference: i32,
}

/// The summary of the packages of a model.
pub fn summarize(found: &[Found<'_>]) -> Summary {
    let packages = found
        .iter()
        .map(|f| {
            let root = f.package.root();
            PackageSummary {
                subgraph: f.op.as_ref().map(|op| op.subgraph),
                operator: f.op.as_ref().map(|op| op.operator),
                min_runtime_version: root.min_runtime_version(),
                compiler_version: root.compiler_version().unwrap_or_default().to_string(),
                executables: f.package.executables().iter().map(executable).collect(),
            }
        })
        .collect();
    Summary { packages }
}

fn layer(l: &schema::Layer<'_>) -> LayerSummary {
    let numerics = l.numerics();
    LayerSummary {
        name: l.name().unwrap_or_default().to_string(),
        size_bytes: l.size_bytes(),
        y_dim: l.y_dim(),
        x_dim: l.x_dim(),
        z_dim: l.z_dim(),
        data_type: data_type_name(l.data_type()),
        zero_point: numerics.map_or(0, |n| n.zero_point()),
        dequantization_factor: numerics.map_or(0.0, |n| n.dequantization_factor()),
        execution_count_per_inference: l.execution_count_per_inference(),
    }
}

fn executable(e: &Executable<'_>) -> ExecutableSummary {
    let root = e.root();
    let bitstreams = root
        .instruction_bitstreams()
        .map(|v| {
            v.iter()
                .map(|b| BitstreamSummary {
                    bytes: b.bitstream().map_or(0, |x| x.len()),
                    field_offsets: b
                        .field_offsets()
                        .map(|f| f.iter().map(|fo| field(&fo)).collect())
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    ExecutableSummary {
        type_: executable_type_name(root.type_()),
        name: root.name().unwrap_or_default().to_string(),
        chip: root.chip().unwrap_or_default().to_string(),
        batch_size: root.batch_size(),
        scratch_size_bytes: root.scratch_size_bytes(),
        parameters_bytes: e.parameters().len(),
        parameter_caching_token: format!("0x{:016x}", root.parameter_caching_token()),
        instruction_bitstreams: bitstreams,
        input_layers: e.input_layers().iter().map(layer).collect(),
        output_layers: e.output_layers().iter().map(layer).collect(),
    }
}

fn field(fo: &schema::FieldOffset<'_>) -> FieldSummary {
    let meta = fo.meta();
    FieldSummary {
        offset_bit: fo.offset_bit(),
        desc: meta.map_or_else(|| "NONE".to_string(), |m| description_kind(m.desc())),
        name: meta.and_then(|m| m.name()).unwrap_or_default().to_string(),
        batch: meta.map_or(0, |m| m.batch()),
        position: meta.map_or_else(|| "NONE".to_string(), |m| position_kind(m.position())),
    }
}
