//! Names of the AIE2/AIE2P registers that transactions write most: the DMA buffer descriptors
//! and channel control/queue registers of shim, memory and core tiles.
//!
//! Addresses are `col << 25 | row << 20 | offset` (aie-rt `XAIE_COL_SHIFT`/`XAIE_ROW_SHIFT`
//! for AIE2 and AIE2P). Row 0 is the shim row, the next `num_mem_tile_rows` rows are memory
//! tiles, the rest core tiles. Offsets and names follow the public AIE2 register map (XRT's
//! `aie2_registers.h`): shim BDs at 0x1D000 (16 × 8 words), shim S2MM/MM2S channel control and
//! task queue at 0x1D200/0x1D210; memory-tile BDs at 0xA0000 (48 × 8 words), channels at
//! 0xA0600 (6 S2MM) and 0xA0630 (6 MM2S); core-tile BDs at 0x1D000 (16 × 6 words), channels at
//! 0x1DE00/0x1DE10; core control and status at 0x32000/0x32004.

/// Bits of the column number in a register address.
pub const COL_SHIFT: u32 = 25;
/// Bits of the row number in a register address.
pub const ROW_SHIFT: u32 = 20;

/// The tile and (where known) register name of an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterName {
    /// Column.
    pub col: u64,
    /// Row.
    pub row: u64,
    /// Offset inside the tile.
    pub offset: u64,
    /// Register name, such as `shim_dma_bd1_1`, when the offset is one kiln knows.
    pub name: Option<String>,
}

impl std::fmt::Display for RegisterName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tile({},{})", self.col, self.row)?;
        match &self.name {
            Some(name) => write!(f, " {name}"),
            None => write!(f, " +0x{:05x}", self.offset),
        }
    }
}

/// Splits `addr` into tile and offset and names the register when known.
pub fn register_name(addr: u64, num_mem_tile_rows: u8) -> RegisterName {
    let col = addr >> COL_SHIFT;
    let row = (addr >> ROW_SHIFT) & 0x1f;
    let offset = addr & ((1 << ROW_SHIFT) - 1);
    let name = if row == 0 {
        dma_name("shim", offset, 0x1D000, 16, 8, 0x1D200, 2, 0x1D210, 2)
    } else if row <= u64::from(num_mem_tile_rows) {
        dma_name("mem", offset, 0xA0000, 48, 8, 0xA0600, 6, 0xA0630, 6)
    } else {
        match offset {
            0x32000 => Some("core_control".to_string()),
            0x32004 => Some("core_status".to_string()),
            _ => dma_name("mm", offset, 0x1D000, 16, 6, 0x1DE00, 2, 0x1DE10, 2),
        }
    };
    RegisterName { col, row, offset, name }
}

/// Names a DMA register of one tile kind: `bds` buffer descriptors of `words` words each at
/// `bd_base` (stride 0x20), `s2mm` channels at `s2mm_base` and `mm2s` channels at `mm2s_base`
/// (control register, then task queue, 8 bytes per channel).
#[allow(clippy::too_many_arguments)]
fn dma_name(
    prefix: &str,
    offset: u64,
    bd_base: u64,
    bds: u64,
    words: u64,
    s2mm_base: u64,
    s2mm: u64,
    mm2s_base: u64,
    mm2s: u64,
) -> Option<String> {
    if !offset.is_multiple_of(4) {
        return None;
    }
    if (bd_base..bd_base + bds * 0x20).contains(&offset) {
        let bd = (offset - bd_base) / 0x20;
        let word = (offset - bd_base) % 0x20 / 4;
        return (word < words).then(|| format!("{prefix}_dma_bd{bd}_{word}"));
    }
    for (dir, base, count) in [("s2mm", s2mm_base, s2mm), ("mm2s", mm2s_base, mm2s)] {
        if (base..base + count * 8).contains(&offset) {
            let ch = (offset - base) / 8;
            let reg = if (offset - base).is_multiple_of(8) { "ctrl" } else { "task_queue" };
            return Some(format!("{prefix}_dma_{dir}_{ch}_{reg}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_dma_registers_by_tile_kind() {
        // The DDR-patch target of the mlir-aie add_one_two sample: shim BD1 word 1.
        assert_eq!(register_name(0x1D024, 1).to_string(), "tile(0,0) shim_dma_bd1_1");
        assert_eq!(register_name(0x1D214, 1).name.as_deref(), Some("shim_dma_mm2s_0_task_queue"));
        assert_eq!(register_name(0x1D204, 1).name.as_deref(), Some("shim_dma_s2mm_0_task_queue"));
        let mem = register_name((2 << 25) | (1 << 20) | 0xA0604, 1);
        assert_eq!(
            (mem.col, mem.row, mem.name.as_deref()),
            (2, 1, Some("mem_dma_s2mm_0_task_queue"))
        );
        assert_eq!(register_name((3 << 20) | 0x1D014, 1).name.as_deref(), Some("mm_dma_bd0_5"));
        // Core BDs have 6 words: word 6 is not a register kiln names.
        assert_eq!(register_name((3 << 20) | 0x1D018, 1).name, None);
        assert_eq!(register_name((3 << 20) | 0x12345, 1).to_string(), "tile(0,3) +0x12345");
    }
}
