//! The fused kernel's buffers: how many there are, and the address window the device maps
//! each at.

/// The device address of buffer 0 (DynamicDispatch's `DDR_AIE_ADDR_OFFSET`).
pub const DDR_BASE: u64 = 0x8000_0000;

/// The size of each buffer's address window: buffer `k` starts at `DDR_BASE + k × WINDOW`, and
/// no buffer may be larger.
pub const WINDOW: u64 = 0x1000_0000;

/// The number of fused buffers.
pub const BUFFERS: usize = 5;
