//! The DarwiNN packages of an Edge TPU model (every package of every `edgetpu-custom-op`
//! node) or of a bare package file, each opened and verified, with the node it belongs to:
//! what `kiln edgetpu` and the Edge TPU arms of `kiln inspect` and `kiln verify` start from.

use std::path::Path;

use super::custom_op::{self, EdgetpuOp};
use super::package::{self, Package};
use crate::error::{Error, Result};
use crate::tflite::Model;

/// One package found in a model, with the node it belongs to (none for a bare package).
pub struct Found<'a> {
    /// The `edgetpu-custom-op` node holding the package; `None` for a bare package file.
    pub op: Option<EdgetpuOp<'a>>,
    /// Index among the node's packages (0 = key "4").
    pub index: usize,
    /// The package, verified.
    pub package: Package<'a>,
}

impl Found<'_> {
    /// Where the package is, for messages.
    pub fn place(&self) -> String {
        match &self.op {
            Some(op) => {
                format!("subgraph {} operator {} package {}", op.subgraph, op.operator, self.index)
            }
            None => "package".to_string(),
        }
    }

    /// Offset of the package in the file.
    pub fn file_offset(&self) -> Option<u64> {
        match &self.op {
            Some(op) => op.data.packages.get(self.index).map(|b| b.file_offset),
            None => Some(0),
        }
    }
}

/// Opens `bytes` as an Edge TPU model, or a bare DarwiNN package, and every package in it; the
/// model is `None` for a bare package. Errors name `file` and the package that fails.
pub fn open<'a>(file: &Path, bytes: &'a [u8]) -> Result<(Option<Model<'a>>, Vec<Found<'a>>)> {
    let name = file.display();
    if package::is_package(bytes) {
        let package =
            Package::open(bytes).map_err(|e| e.context(format!("{name}: DarwiNN package")))?;
        return Ok((None, vec![Found { op: None, index: 0, package }]));
    }
    let model = Model::open(bytes)
        .map_err(|e| e.context(format!("{name}: not a readable TFLite model")))?;
    let ops = custom_op::find_ops(&model)
        .map_err(|e| e.context(format!("{name}: bad edgetpu-custom-op")))?;
    if ops.is_empty() {
        let what = format!("{} operator", custom_op::CUSTOM_OP);
        return Err(Error::Absent { what, container: "model" }.in_file(file));
    }
    let mut found = Vec::new();
    for op in ops {
        for (index, blob) in op.data.packages.iter().enumerate() {
            let package = Package::open(blob.bytes).map_err(|e| {
                e.context(format!(
                    "{name}: subgraph {} operator {}: package {index} at file offset {}",
                    op.subgraph, op.operator, blob.file_offset
                ))
            })?;
            found.push(Found { op: Some(op.clone()), index, package });
        }
    }
    Ok((Some(model), found))
}
