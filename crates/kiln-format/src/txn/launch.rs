//! KILN_LAUNCH: kiln's custom transaction op that launches a CPU kernel on kiln's reference
//! device.
//!
//! It uses opcode 133, aie-rt's `XAIE_IO_CUSTOM_OP_NEXT`, the first custom opcode after the
//! five aie-rt defines (TCT 128 … MERGE_SYNC 132), in the range aie-rt leaves to custom ops
//! registered at run time. Like every custom op it is an 8-byte header (opcode, 3 header bytes,
//! `u32` size of the whole op) followed by the payload; the payload is the same in the v0.1 and
//! v1.0 layouts. All fields little-endian:
//!
//! | payload offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `b"KILN"` |
//! | 4 | `u32` | kernel ([`LaunchKernel`]: 1 ADD, 2 MUL, 3 SIGMOID, 4 MATMUL) |
//! | 8 | `u32` | element type, ExecuTorch `ScalarType` numbering (6 = float32) |
//! | 12 | `u32` | `n`, the number of buffer arguments |
//! | 16 | `u32` | `m`, the number of dimensions |
//! | 20 | `u32` | reserved |
//! | 24 | `u64 × n` | per buffer argument, the **register** that holds its address |
//! | 24 + 8n | `u64 × m` | the dimensions |
//!
//! The op is `32 + 8·(n + m)` bytes. A buffer argument is not an address but a register: the
//! transaction's DDR_PATCH ops write the argument's address (a kernel argument's address plus
//! `argplus`) into that register before the launch, exactly as they patch a DMA buffer
//! descriptor's address word, so rewriting the patches (as fusion does) re-points launches too.
//!
//! Arguments and dimensions per kernel: ADD and MUL `[a, b, out]` over `[len]` elements;
//! SIGMOID `[x, out]` over `[len]`; MATMUL `[a, b, out]` with dimensions `[m, k, n]`
//! (`out[m×n] = a[m×k] · b[k×n]`, row-major). A payload that does not start with the magic is
//! not a launch: it is read as an unknown custom op, so another runtime's op 133 stays intact.

/// The opcode (aie-rt's `XAIE_IO_CUSTOM_OP_NEXT`).
pub const KILN_LAUNCH: u8 = 133;

/// The first four payload bytes of a launch.
pub const MAGIC: [u8; 4] = *b"KILN";

/// Payload bytes before the arguments.
pub const FIXED: u64 = 24;

/// The element type code of float32 (ExecuTorch `ScalarType::Float`).
pub const DTYPE_F32: u32 = 6;

/// The kernels a launch can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchKernel {
    /// `out = a + b`, elementwise.
    Add = 1,
    /// `out = a * b`, elementwise.
    Mul = 2,
    /// `out = 1 / (1 + exp(-x))`, elementwise.
    Sigmoid = 3,
    /// `out = a · b`, row-major matrices.
    MatMul = 4,
}

impl LaunchKernel {
    /// The kernel with code `code`, if any.
    pub fn from_code(code: u32) -> Option<LaunchKernel> {
        [Self::Add, Self::Mul, Self::Sigmoid, Self::MatMul].into_iter().find(|k| *k as u32 == code)
    }

    /// How many buffer arguments and dimensions the kernel takes.
    pub fn arity(self) -> (usize, usize) {
        match self {
            Self::Add | Self::Mul => (3, 1),
            Self::Sigmoid => (2, 1),
            Self::MatMul => (3, 3),
        }
    }

    /// The kernel's name (`ADD`, `MUL`, `SIGMOID`, `MATMUL`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Mul => "MUL",
            Self::Sigmoid => "SIGMOID",
            Self::MatMul => "MATMUL",
        }
    }
}

/// A launch payload (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The kernel.
    pub kernel: LaunchKernel,
    /// The element type code.
    pub dtype: u32,
    /// Payload bytes 20..24.
    pub reserved: u32,
    /// Per buffer argument, the register holding its address.
    pub arg_regs: Vec<u64>,
    /// The dimensions.
    pub dims: Vec<u64>,
}

impl Launch {
    /// Checks that the argument and dimension counts are the kernel's.
    pub fn check(&self) -> Result<(), String> {
        let (args, dims) = self.kernel.arity();
        if self.arg_regs.len() != args || self.dims.len() != dims {
            return Err(format!(
                "{} takes {args} buffer arguments and {dims} dimensions, not {} and {}",
                self.kernel.name(),
                self.arg_regs.len(),
                self.dims.len()
            ));
        }
        Ok(())
    }

    /// Decodes a payload that starts with [`MAGIC`]; errors are reasons.
    pub(super) fn decode(payload: &[u8]) -> Result<Launch, String> {
        let u32_at = |at: usize| -> u32 {
            let b = &payload[at..at + 4];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        };
        if (payload.len() as u64) < FIXED {
            return Err(format!("KILN_LAUNCH payload is {} bytes, under {FIXED}", payload.len()));
        }
        let code = u32_at(4);
        let kernel = LaunchKernel::from_code(code)
            .ok_or_else(|| format!("KILN_LAUNCH names kernel {code}, which is not one (1..=4)"))?;
        let (n, m) = (u64::from(u32_at(12)), u64::from(u32_at(16)));
        // Both counts are at most 2^32, so this cannot overflow.
        let want = FIXED + 8 * (n + m);
        if want != payload.len() as u64 {
            return Err(format!(
                "KILN_LAUNCH payload is {} bytes, but {n} arguments and {m} dimensions need {want}",
                payload.len()
            ));
        }
        // The counts match the payload's length, so they bound these allocations.
        let words: Vec<u64> = payload[FIXED as usize..]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect();
        let (arg_regs, dims) = words.split_at(n as usize);
        let launch = Launch {
            kernel,
            dtype: u32_at(8),
            reserved: u32_at(20),
            arg_regs: arg_regs.to_vec(),
            dims: dims.to_vec(),
        };
        launch.check()?;
        Ok(launch)
    }

    /// Appends the payload.
    pub(super) fn encode(&self, out: &mut Vec<u8>) -> Result<(), String> {
        self.check()?;
        out.extend_from_slice(&MAGIC);
        let count = |len: usize| u32::try_from(len).map_err(|_| "too many launch fields");
        let n = count(self.arg_regs.len())?;
        let m = count(self.dims.len())?;
        for w in [self.kernel as u32, self.dtype, n, m, self.reserved] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for w in self.arg_regs.iter().chain(&self.dims) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        Ok(())
    }
}
