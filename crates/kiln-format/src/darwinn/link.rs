//! Instruction linking: patching the base addresses of inputs, outputs, parameters and scratch
//! into the instruction bitstreams, as libedgetpu's `InstructionBuffers::LinkInstructionBuffers`
//! does, with the bounds checks it lacks.
//!
//! Each `FieldOffset` names a 32-bit field at `offset_bit` (LSB first: bit i of the value goes to
//! absolute bit `offset_bit + i`, bit p being bit `p % 8` of byte `p / 8`). A `LOWER_32BIT`
//! field receives `addr & 0xffff_ffff`, an `UPPER_32BIT` field `addr >> 32`. Surrounding bits
//! are kept. Per chunk the driver links scratch (only when `scratch_size_bytes > 0`), then
//! parameters (only when `parameters` is non-empty), then every named input, then every named
//! output; fields with no address stay as they are (0 in a compiled bitstream), which is not an
//! error. Where the driver would crash (`CHECK`) or write out of bounds, this returns an error.

use std::collections::BTreeMap;

use super::schema::{Description, Position};
use super::{description_kind, position_kind, Executable};
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.link";

/// The addresses to link into an executable.
#[derive(Clone, Debug, Default)]
pub struct Addresses {
    /// Input layer name -> device address of each batch's buffer.
    pub inputs: BTreeMap<String, Vec<u64>>,
    /// Output layer name -> device address of each batch's buffer.
    pub outputs: BTreeMap<String, Vec<u64>>,
    /// Device address of the parameter buffer.
    pub parameters: Option<u64>,
    /// Device address of the scratch buffer.
    pub scratch: Option<u64>,
}

/// One field of one bitstream, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Bitstream (chunk) index.
    pub chunk: usize,
    /// Index in the chunk's `field_offsets`.
    pub index: usize,
    /// Bit offset of the 32-bit field.
    pub offset_bit: i32,
    /// What it addresses.
    pub desc: Description,
    /// Layer name (inputs and outputs).
    pub name: String,
    /// Batch index.
    pub batch: i32,
    /// Which half of the address.
    pub position: Position,
}

impl Field {
    /// `chunk[c].field_offsets[i]`, for messages.
    pub fn path(&self) -> String {
        format!("instruction_bitstreams[{}].field_offsets[{}]", self.chunk, self.index)
    }

    /// A one-line description: `INPUT "name" batch 0 UPPER at bit 24134`.
    pub fn describe(&self) -> String {
        format!(
            "{} {:?} batch {} {} at bit {}",
            description_kind(self.desc),
            self.name,
            self.batch,
            position_kind(self.position),
            self.offset_bit
        )
    }
}

/// What linking did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Fields written, with the 32-bit value written.
    pub patched: Vec<(Field, u32)>,
    /// Fields left as they were, with the reason.
    pub unpatched: Vec<(Field, String)>,
}

/// Checks that a 32-bit field at `offset_bit` lies inside `len` bytes; returns the byte index
/// of its first byte, the bit shift and the number of bytes it touches.
fn span(len: usize, offset_bit: i64) -> Result<(usize, u32, usize)> {
    let bits = (len as u64).saturating_mul(8);
    if offset_bit < 0 || (offset_bit as u64).saturating_add(32) > bits {
        return Err(Error::invalid(
            FORMAT,
            "offset_bit",
            None,
            format!("32-bit field at bit {offset_bit} is outside the {len}-byte bitstream"),
        ));
    }
    let start = (offset_bit / 8) as usize;
    let shift = (offset_bit % 8) as u32;
    Ok((start, shift, if shift == 0 { 4 } else { 5 }))
}

/// Reads the 32-bit LSB-first field at `offset_bit`.
pub fn read_field(bitstream: &[u8], offset_bit: i64) -> Result<u32> {
    let (start, shift, n) = span(bitstream.len(), offset_bit)?;
    let mut window = [0u8; 8];
    for (i, b) in bitstream.iter().skip(start).take(n).enumerate() {
        window[i] = *b;
    }
    Ok((u64::from_le_bytes(window) >> shift) as u32)
}

/// Writes `value` into the 32-bit LSB-first field at `offset_bit`, keeping every other bit
/// (libedgetpu `ExecutableUtil::CopyUint32`).
pub fn write_field(bitstream: &mut [u8], offset_bit: i64, value: u32) -> Result<()> {
    let (start, shift, n) = span(bitstream.len(), offset_bit)?;
    let mut window = [0u8; 8];
    for (i, b) in bitstream.iter().skip(start).take(n).enumerate() {
        window[i] = *b;
    }
    let mask = 0xffff_ffffu64 << shift;
    let w = (u64::from_le_bytes(window) & !mask) | (u64::from(value) << shift);
    for (dst, src) in bitstream.iter_mut().skip(start).take(n).zip(w.to_le_bytes()) {
        *dst = src;
    }
    Ok(())
}

/// The value a field receives from a 64-bit address.
pub fn half_of(addr: u64, position: Position, field: &Field) -> Result<u32> {
    match position {
        Position::LOWER_32BIT => Ok(addr as u32),
        Position::UPPER_32BIT => Ok((addr >> 32) as u32),
        other => Err(Error::invalid(
            FORMAT,
            format!("{}.meta.position", field.path()),
            None,
            format!("position {} is neither LOWER_32BIT nor UPPER_32BIT", other.0),
        )),
    }
}

/// Every field of every bitstream of `exe`, in order. A field without `meta` is an error (the
/// driver dereferences it unchecked).
pub fn fields(exe: &Executable<'_>) -> Result<Vec<Vec<Field>>> {
    let mut out = Vec::new();
    for (chunk, b) in exe.root().instruction_bitstreams().iter().flatten().enumerate() {
        let mut list = Vec::new();
        for (index, fo) in b.field_offsets().iter().flatten().enumerate() {
            let meta = fo.meta().ok_or_else(|| {
                Error::invalid(
                    FORMAT,
                    format!("instruction_bitstreams[{chunk}].field_offsets[{index}].meta"),
                    None,
                    "missing",
                )
            })?;
            list.push(Field {
                chunk,
                index,
                offset_bit: fo.offset_bit(),
                desc: meta.desc(),
                name: meta.name().unwrap_or_default().to_string(),
                batch: meta.batch(),
                position: meta.position(),
            });
        }
        out.push(list);
    }
    Ok(out)
}

/// Links one chunk in place. `scratch_size` and `parameters_len` decide, as in the driver,
/// whether scratch and parameter fields are linked at all.
pub fn link_chunk(
    bitstream: &mut [u8],
    fields: &[Field],
    addrs: &Addresses,
    scratch_size: i32,
    parameters_len: usize,
    report: &mut Report,
) -> Result<()> {
    let mut done = vec![false; fields.len()];
    let patch = |f: &Field, addr: u64, bitstream: &mut [u8]| -> Result<u32> {
        let value = half_of(addr, f.position, f)?;
        write_field(bitstream, i64::from(f.offset_bit), value)
            .map_err(|e| Error::invalid(FORMAT, f.path(), None, e.to_string()))?;
        Ok(value)
    };
    // 1. scratch, 2. parameters.
    for (i, f) in fields.iter().enumerate() {
        let addr = match f.desc {
            Description::BASE_ADDRESS_SCRATCH if scratch_size > 0 => addrs.scratch,
            Description::BASE_ADDRESS_PARAMETER if parameters_len > 0 => addrs.parameters,
            _ => None,
        };
        let Some(addr) = addr else { continue };
        if f.desc == Description::BASE_ADDRESS_SCRATCH && f.batch != 0 {
            return Err(Error::unsupported(
                FORMAT,
                format!("{}.meta.batch", f.path()),
                None,
                format!("scratch field for batch {} (the driver supports batch 0 only)", f.batch),
            ));
        }
        report.patched.push((f.clone(), patch(f, addr, bitstream)?));
        done[i] = true;
    }
    // 3. inputs, 4. outputs, by exact name and batch (one pass each, names looked up).
    for (desc, map) in [
        (Description::BASE_ADDRESS_INPUT_ACTIVATION, &addrs.inputs),
        (Description::BASE_ADDRESS_OUTPUT_ACTIVATION, &addrs.outputs),
    ] {
        for (i, f) in fields.iter().enumerate() {
            if f.desc != desc {
                continue;
            }
            let Some(per_batch) = map.get(&f.name) else { continue };
            let addr =
                usize::try_from(f.batch).ok().and_then(|b| per_batch.get(b)).ok_or_else(|| {
                    Error::invalid(
                        FORMAT,
                        format!("{}.meta.batch", f.path()),
                        None,
                        format!(
                            "batch {} of {:?} but {} address(es) given",
                            f.batch,
                            f.name,
                            per_batch.len()
                        ),
                    )
                })?;
            report.patched.push((f.clone(), patch(f, *addr, bitstream)?));
            done[i] = true;
        }
    }
    for (f, _) in fields.iter().zip(&done).filter(|(_, d)| !**d) {
        let reason = match f.desc {
            Description::BASE_ADDRESS_SCRATCH if scratch_size <= 0 => {
                "scratch_size_bytes is 0".to_string()
            }
            Description::BASE_ADDRESS_PARAMETER if parameters_len == 0 => {
                "the executable has no parameters".to_string()
            }
            Description::BASE_ADDRESS_SCRATCH | Description::BASE_ADDRESS_PARAMETER => {
                "no address given".to_string()
            }
            Description::BASE_ADDRESS_INPUT_ACTIVATION
            | Description::BASE_ADDRESS_OUTPUT_ACTIVATION => {
                format!("no address given for {:?}", f.name)
            }
            other => format!("unknown description {}", other.0),
        };
        report.unpatched.push((f.clone(), reason));
    }
    Ok(())
}

/// Links copies of every bitstream of `exe`; returns the linked bitstreams and the report.
pub fn link(exe: &Executable<'_>, addrs: &Addresses) -> Result<(Vec<Vec<u8>>, Report)> {
    let root = exe.root();
    let layers: std::collections::BTreeSet<&str> = exe
        .input_layers()
        .iter()
        .chain(exe.output_layers().iter())
        .filter_map(|l| l.name())
        .collect();
    if let Some(name) =
        addrs.inputs.keys().chain(addrs.outputs.keys()).find(|n| !layers.contains(n.as_str()))
    {
        return Err(Error::NotFound { format: FORMAT, what: "layer", name: name.clone() });
    }
    let mut report = Report::default();
    let mut out = Vec::new();
    for (bits, fields) in exe.bitstreams().into_iter().zip(fields(exe)?) {
        let mut buf = bits.to_vec();
        link_chunk(
            &mut buf,
            &fields,
            addrs,
            root.scratch_size_bytes(),
            exe.parameters().len(),
            &mut report,
        )?;
        out.push(buf);
    }
    Ok((out, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_writes_are_lsb_first_and_keep_neighbours() {
        let mut buf = vec![0xffu8; 8];
        write_field(&mut buf, 3, 0).unwrap();
        // Bits 3..35 cleared: byte 0 keeps bits 0..3, byte 4 keeps bits 3..8.
        assert_eq!(buf, [0x07, 0, 0, 0, 0xf8, 0xff, 0xff, 0xff]);
        write_field(&mut buf, 3, 0x8000_0001).unwrap();
        assert_eq!(buf, [0x0f, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff]);
        assert_eq!(read_field(&buf, 3).unwrap(), 0x8000_0001);
        let mut aligned = vec![0u8; 4];
        write_field(&mut aligned, 0, 0x1234_5678).unwrap();
        assert_eq!(aligned, [0x78, 0x56, 0x34, 0x12]);
    }

    #[test]
    fn out_of_range_fields_are_errors() {
        let mut buf = vec![0u8; 8];
        assert!(write_field(&mut buf, 33, 1).is_err());
        assert!(write_field(&mut buf, 32, 1).is_ok());
        assert!(write_field(&mut buf, -1, 1).is_err());
        assert!(read_field(&buf, i64::from(i32::MAX)).is_err());
    }
}
