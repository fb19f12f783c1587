//! What the int8 quad loops of every instruction set share (`xnn_qgemm`'s AVX-512 ones and
//! [`super::xnn_avxvnni`]'s): the panel width, the mark of a padded tap, and the pointers a
//! block's windows and its requantization reach the vector loops through.

use super::xnn_qmath::Qs8Out;

/// Output channels per packed panel (one 512-bit vector of `i32`, two 256-bit ones).
pub(crate) const NR: usize = 16;

/// The offset of a padded tap among a block's window offsets (`xnn_qgemm::TapRows`): the tap
/// reads the zero-point row instead.
pub(crate) const PADDED: usize = usize::MAX;

/// The windows of a block of rows read in place (`xnn_qgemm::TapRows`) as pointers.
#[cfg(target_arch = "x86_64")]
pub(crate) struct TapSrc {
    pub x: *const u8,
    pub zp_row: *const u8,
    /// `taps` groups of `rows` offsets.
    pub offsets: *const usize,
    pub rows: usize,
    pub taps: usize,
    pub c: usize,
}

/// The channels' requantization for the AVX-512 and AVX-VNNI loops.
#[cfg(target_arch = "x86_64")]
pub(crate) struct VnniOut {
    pub bias: *const i32,
    pub scales: *const f32,
    /// The output channels.
    pub n: usize,
    pub o: Qs8Out,
}
