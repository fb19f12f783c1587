//! The DMA-hint walk of libedgetpu's `DmaInfoExtractor::ExtractDmaHints`: one step per hint, in
//! order, then a global fence unless the hints are fully deterministic and requests overlap.
//! Where the driver would `LOG(FATAL)` or `CHECK`-fail, this returns an error; every slice is
//! checked to stay inside the last page of its buffer (overflow past the end of a buffer is
//! allowed up to its page boundary, as in the driver).

use std::collections::BTreeMap;

use super::schema::{AnyHint, Description, Direction};
use super::Executable;
use crate::bytes::align_up;
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.dma";

/// Host page size the driver maps buffers with.
pub const PAGE: u64 = 4096;

/// Which buffer a DMA step moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// Input activations of a layer and batch.
    Input {
        /// Layer name.
        name: String,
        /// Batch index.
        batch: i32,
    },
    /// Output activations of a layer and batch.
    Output {
        /// Layer name.
        name: String,
        /// Batch index.
        batch: i32,
    },
    /// The parameter buffer.
    Parameters,
    /// The scratch buffer.
    Scratch,
}

/// One step of the DMA sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The whole instruction chunk.
    Instructions {
        /// Chunk index.
        chunk: usize,
        /// Its size in bytes.
        bytes: usize,
    },
    /// A slice of a buffer.
    Data {
        /// The buffer.
        buffer: Buffer,
        /// INFEED (host to device) or OUTFEED.
        direction: Direction,
        /// Byte offset from the buffer's base.
        offset: u64,
        /// Bytes moved.
        size: u64,
    },
    /// Scalar core interrupt 0..3.
    Interrupt(i16),
    /// `kLocalFence`.
    LocalFence,
    /// `kGlobalFence`.
    GlobalFence,
}

/// Padded sizes (`size_bytes * execution_count_per_inference`) of layers by name.
fn layer_sizes(layers: Vec<super::schema::Layer<'_>>) -> BTreeMap<String, u64> {
    layers
        .into_iter()
        .map(|l| {
            let size = u64::try_from(l.size_bytes()).unwrap_or(0);
            let count = u64::try_from(l.execution_count_per_inference()).unwrap_or(0);
            (l.name().unwrap_or_default().to_string(), size.saturating_mul(count))
        })
        .collect()
}

/// Size of the buffer a descriptor hint addresses, per batch; `sizes` holds the input and
/// output layer sizes by name.
fn buffer_size(
    exe: &Executable<'_>,
    sizes: &[BTreeMap<String, u64>; 2],
    buffer: &Buffer,
) -> Result<u64> {
    let layer_size = |name: &str, input: bool| -> Result<u64> {
        sizes[usize::from(!input)].get(name).copied().ok_or_else(|| Error::NotFound {
            format: FORMAT,
            what: if input { "input layer" } else { "output layer" },
            name: name.to_string(),
        })
    };
    let check_batch = |batch: i32| -> Result<()> {
        if batch < 0 || batch >= exe.root().batch_size() {
            return Err(Error::invalid(
                FORMAT,
                "meta.batch",
                None,
                format!("batch {batch} but batch_size is {}", exe.root().batch_size()),
            ));
        }
        Ok(())
    };
    match buffer {
        Buffer::Input { name, batch } => {
            check_batch(*batch)?;
            layer_size(name, true)
        }
        Buffer::Output { name, batch } => {
            check_batch(*batch)?;
            layer_size(name, false)
        }
        Buffer::Parameters => Ok(exe.parameters().len() as u64),
        Buffer::Scratch => Ok(u64::try_from(exe.root().scratch_size_bytes()).unwrap_or(0)),
    }
}

/// The DMA steps of `exe`. `overlap_requests` is true on USB by default (a global fence then
/// follows only non-deterministic hints); `false` always appends the global fence.
pub fn steps(exe: &Executable<'_>, overlap_requests: bool) -> Result<Vec<Step>> {
    let Some(hints) = exe.root().dma_hints() else {
        return Err(Error::invalid(FORMAT, "dma_hints", None, "absent"));
    };
    let chunks = exe.bitstreams();
    let sizes = [layer_sizes(exe.input_layers()), layer_sizes(exe.output_layers())];
    let mut out = Vec::new();
    for (i, h) in hints.hints().iter().flatten().enumerate() {
        let field = format!("dma_hints.hints[{i}]");
        let step = match h.any_hint_type() {
            AnyHint::DmaDescriptorHint => {
                let d = h.any_hint_as_dma_descriptor_hint().ok_or_else(|| {
                    Error::invalid(FORMAT, &field, None, "descriptor hint without a table")
                })?;
                let meta = d.meta().ok_or_else(|| {
                    Error::invalid(FORMAT, format!("{field}.meta"), None, "missing")
                })?;
                let name = meta.name().unwrap_or_default().to_string();
                let buffer = match meta.desc() {
                    Description::BASE_ADDRESS_INPUT_ACTIVATION => {
                        Buffer::Input { name, batch: meta.batch() }
                    }
                    Description::BASE_ADDRESS_OUTPUT_ACTIVATION => {
                        Buffer::Output { name, batch: meta.batch() }
                    }
                    Description::BASE_ADDRESS_PARAMETER => Buffer::Parameters,
                    Description::BASE_ADDRESS_SCRATCH => Buffer::Scratch,
                    other => {
                        return Err(Error::invalid(
                            FORMAT,
                            format!("{field}.meta.desc"),
                            None,
                            format!("unknown description {}", other.0),
                        ))
                    }
                };
                let (offset, size) = (d.offset_in_bytes(), d.size_in_bytes());
                let (Ok(offset), Ok(size)) = (u64::try_from(offset), u64::try_from(size)) else {
                    return Err(Error::invalid(
                        FORMAT,
                        &field,
                        None,
                        format!("negative offset {offset} or size {size}"),
                    ));
                };
                let limit = align_up(
                    buffer_size(exe, &sizes, &buffer)
                        .map_err(|e| Error::invalid(FORMAT, &field, None, e.to_string()))?,
                    PAGE,
                )
                .unwrap_or(u64::MAX);
                if offset.saturating_add(size) > limit {
                    return Err(Error::invalid(
                        FORMAT,
                        &field,
                        None,
                        format!(
                            "bytes {offset}..{} cross the buffer's last page (ends at {limit})",
                            offset + size
                        ),
                    ));
                }
                Step::Data { buffer, direction: h.direction(), offset, size }
            }
            AnyHint::InstructionHint => {
                let ih = h.any_hint_as_instruction_hint().ok_or_else(|| {
                    Error::invalid(FORMAT, &field, None, "instruction hint without a table")
                })?;
                let chunk = usize::try_from(ih.instruction_chunk_index())
                    .ok()
                    .filter(|&c| c < chunks.len())
                    .ok_or_else(|| {
                        Error::invalid(
                            FORMAT,
                            format!("{field}.instruction_chunk_index"),
                            None,
                            format!(
                                "{} but there are {} chunks",
                                ih.instruction_chunk_index(),
                                chunks.len()
                            ),
                        )
                    })?;
                Step::Instructions { chunk, bytes: chunks.get(chunk).map_or(0, |c| c.len()) }
            }
            AnyHint::InterruptHint => {
                let t = h.any_hint_as_interrupt_hint().map(|x| x.type_().0).unwrap_or(0);
                if !(0..4).contains(&t) {
                    return Err(Error::invalid(
                        FORMAT,
                        &field,
                        None,
                        format!("interrupt {t} (0..3 exist)"),
                    ));
                }
                Step::Interrupt(t)
            }
            AnyHint::FenceHint => Step::LocalFence,
            other => {
                return Err(Error::invalid(
                    FORMAT,
                    &field,
                    None,
                    format!("hint type {} (the driver aborts)", other.0),
                ))
            }
        };
        out.push(step);
    }
    if !hints.fully_deterministic() || !overlap_requests {
        out.push(Step::GlobalFence);
    }
    Ok(out)
}
