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
//! | 4 | `u32` | kernel ([`LaunchKernel`], codes in the table below) |
//! | 8 | `u32` | element type, ExecuTorch `ScalarType` numbering (6 = float32) |
//! | 12 | `u32` | `n`, the number of buffer arguments |
//! | 16 | `u32` | `m`, the number of shape and parameter words |
//! | 20 | `u32` | reserved |
//! | 24 | `u64 × n` | per buffer argument, the **register** that holds its address |
//! | 24 + 8n | `u64 × m` | the shape and parameter words |
//!
//! The op is `32 + 8·(n + m)` bytes. A buffer argument is not an address but a register: the
//! transaction's DDR_PATCH ops write the argument's address (a kernel argument's address plus
//! `argplus`) into that register before the launch, exactly as they patch a DMA buffer
//! descriptor's address word, so rewriting the patches (as fusion does) re-points launches too.
//!
//! The `m` words describe the launch completely, so the device needs nothing but the op: **for
//! each buffer argument in order, its rank `r` followed by its `r` sizes; then the kernel's
//! parameters**. Integers are `u64` words, floats `f64::to_bits`, booleans 0 or 1, and an absent
//! optional integer is [`ABSENT`]. [`Launch::shapes`] splits the words into the shapes and the
//! parameters. Every kernel is float32, its output is the last argument, and the shapes are
//! row-major:
//!
//! | code | kernel | buffer arguments | parameter words |
//! | --- | --- | --- | --- |
//! | 1 | ADD | `a, b, out` (`a`, `b` broadcast to `out`, PyTorch rules) | none |
//! | 2 | MUL | `a, b, out` (as ADD) | none |
//! | 3 | SIGMOID | `x, out` | none |
//! | 4 | MATMUL | `a [m, k], b [k, n], bias [n]?, out [m, n]` (`out = a·b (+ bias)`) | none |
//! | 5 | CONV2D | `x [n, c, h, w], weight [oc, c/groups, kh, kw], bias [oc]?, out` | stride h, w; padding h, w; dilation h, w; groups |
//! | 6 | BATCH_NORM | `x [n, c, ...], weight [c], bias [c], running_mean [c], running_var [c], out` (inference) | eps (f64) |
//! | 7 | CLAMP | `x, out` | min (f64), max (f64); −∞ / +∞ mean no bound |
//! | 8 | SOFTMAX | `x, out` | dim |
//! | 9 | LAYER_NORM | `x, weight?, bias?, out` (both or neither; shapes the last `d` dims of `x`) | `d` (normalized dims), eps (f64) |
//! | 10 | TRANSPOSE | `x, out` (`out = x.permute(perm)`) | perm (one word per dim of `x`) |
//! | 11 | MAX_POOL2D | `x [n, c, h, w] or [c, h, w], out` | kernel h, w; stride h, w; padding h, w; dilation h, w; ceil_mode |
//! | 12 | AVG_POOL2D | `x [n, c, h, w] or [c, h, w], out` | kernel h, w; stride h, w; padding h, w; ceil_mode; count_include_pad; divisor_override (`i64`, or [`ABSENT`]) |
//! | 13 | CONCAT | `in0, …, in(k-1), out` (one or more inputs) | dim |
//! | 14 | MEAN | `x, out` | keepdim; then the reduced dims (the rest of the words) |
//! | 15 | GELU | `x, out` | tanh approximation |
//! | 16 | COPY | `x, out` (`x`'s elements in order, `out`'s shape; equal element counts) | none |
//! | 17 | EXPAND | `x, out` (`x` broadcast to `out`'s shape) | none |
//! | 18 | BMM | `a [b, m, k], b [b, k, n], out [b, m, n]` | none |
//! | 19 | MUL_SCALAR | `x, out` (`out = x · value`) | value (f64) |
//!
//! Parsing checks the structure: the magic, a known kernel code, counts that match the payload
//! length, and a number of buffer arguments in the kernel's range ([`LaunchKernel::args`]).
//! Whether the words describe the shapes ([`Launch::shapes`]) and the parameters suit the kernel
//! is the device's to check when it runs the launch. A payload that does not start with the
//! magic is not a launch: it is read as an unknown custom op, so another runtime's op 133 stays
//! intact.

/// The opcode (aie-rt's `XAIE_IO_CUSTOM_OP_NEXT`).
pub const KILN_LAUNCH: u8 = 133;

/// The first four payload bytes of a launch.
pub const MAGIC: [u8; 4] = *b"KILN";

/// Payload bytes before the arguments.
pub const FIXED: u64 = 24;

/// The element type code of float32 (ExecuTorch `ScalarType::Float`).
pub const DTYPE_F32: u32 = 6;

/// The parameter word of an absent optional integer (AVG_POOL2D's `divisor_override`):
/// `i64::MIN`, which no such parameter can be.
pub const ABSENT: u64 = i64::MIN as u64;

/// The kernels a launch can name (codes and layouts in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchKernel {
    /// `out = a + b`, broadcasting.
    Add = 1,
    /// `out = a * b`, broadcasting.
    Mul = 2,
    /// `out = 1 / (1 + exp(-x))`, elementwise.
    Sigmoid = 3,
    /// `out = a · b (+ bias)`, row-major matrices.
    MatMul = 4,
    /// Two-dimensional convolution.
    Conv2d = 5,
    /// Inference batch normalization with running statistics.
    BatchNorm = 6,
    /// `out = min(max(x, min), max)`.
    Clamp = 7,
    /// Softmax along one dimension.
    Softmax = 8,
    /// Layer normalization over the trailing dimensions.
    LayerNorm = 9,
    /// A permutation of the dimensions, copied.
    Transpose = 10,
    /// Two-dimensional max pooling (values only).
    MaxPool2d = 11,
    /// Two-dimensional average pooling.
    AvgPool2d = 12,
    /// Concatenation along one dimension.
    Concat = 13,
    /// The mean over some dimensions.
    Mean = 14,
    /// GELU, exact or with the tanh approximation.
    Gelu = 15,
    /// The elements in order, in another shape (a reshape's copy).
    Copy = 16,
    /// A broadcast of the input to the output's shape, copied.
    Expand = 17,
    /// Batched matrix product.
    Bmm = 18,
    /// `out = x · value`.
    MulScalar = 19,
}

impl LaunchKernel {
    /// Every kernel, in code order.
    pub const ALL: [LaunchKernel; 19] = [
        Self::Add,
        Self::Mul,
        Self::Sigmoid,
        Self::MatMul,
        Self::Conv2d,
        Self::BatchNorm,
        Self::Clamp,
        Self::Softmax,
        Self::LayerNorm,
        Self::Transpose,
        Self::MaxPool2d,
        Self::AvgPool2d,
        Self::Concat,
        Self::Mean,
        Self::Gelu,
        Self::Copy,
        Self::Expand,
        Self::Bmm,
        Self::MulScalar,
    ];

    /// The kernel with code `code`, if any.
    pub fn from_code(code: u32) -> Option<LaunchKernel> {
        Self::ALL.into_iter().find(|k| *k as u32 == code)
    }

    /// The fewest and most buffer arguments the kernel takes, the output included.
    pub fn args(self) -> (usize, usize) {
        match self {
            Self::Add | Self::Mul | Self::Bmm => (3, 3),
            Self::MatMul | Self::Conv2d => (3, 4),
            Self::BatchNorm => (6, 6),
            Self::LayerNorm => (2, 4),
            Self::Concat => (2, usize::MAX),
            Self::Sigmoid
            | Self::Clamp
            | Self::Softmax
            | Self::Transpose
            | Self::MaxPool2d
            | Self::AvgPool2d
            | Self::Mean
            | Self::Gelu
            | Self::Copy
            | Self::Expand
            | Self::MulScalar => (2, 2),
        }
    }

    /// The kernel's name, as the module docs spell it (`ADD`, `CONV2D`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Mul => "MUL",
            Self::Sigmoid => "SIGMOID",
            Self::MatMul => "MATMUL",
            Self::Conv2d => "CONV2D",
            Self::BatchNorm => "BATCH_NORM",
            Self::Clamp => "CLAMP",
            Self::Softmax => "SOFTMAX",
            Self::LayerNorm => "LAYER_NORM",
            Self::Transpose => "TRANSPOSE",
            Self::MaxPool2d => "MAX_POOL2D",
            Self::AvgPool2d => "AVG_POOL2D",
            Self::Concat => "CONCAT",
            Self::Mean => "MEAN",
            Self::Gelu => "GELU",
            Self::Copy => "COPY",
            Self::Expand => "EXPAND",
            Self::Bmm => "BMM",
            Self::MulScalar => "MUL_SCALAR",
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
    /// Each buffer argument's rank and sizes, then the kernel's parameters.
    pub dims: Vec<u64>,
}

impl Launch {
    /// The `dims` words for buffer arguments of shapes `shapes` and parameters `params`.
    pub fn dims_of(shapes: &[&[u64]], params: &[u64]) -> Vec<u64> {
        let mut words = Vec::new();
        for shape in shapes {
            words.push(shape.len() as u64);
            words.extend_from_slice(shape);
        }
        words.extend_from_slice(params);
        words
    }

    /// Checks that the number of buffer arguments is in the kernel's range
    /// ([`LaunchKernel::args`]).
    pub fn check(&self) -> Result<(), String> {
        let (min, max) = self.kernel.args();
        let n = self.arg_regs.len();
        if n < min || n > max {
            let range = match (min, max) {
                (min, max) if min == max => min.to_string(),
                (min, usize::MAX) => format!("{min} or more"),
                (min, max) => format!("{min} to {max}"),
            };
            return Err(format!("{} takes {range} buffer arguments, not {n}", self.kernel.name()));
        }
        Ok(())
    }

    /// Splits [`Launch::dims`] into each buffer argument's shape, in argument order, and the
    /// parameter words after them; the reason when the words do not hold one rank and that many
    /// sizes per argument.
    pub fn shapes(&self) -> Result<(Vec<Vec<u64>>, &[u64]), String> {
        let mut rest = self.dims.as_slice();
        // At most one shape per word, so the words bound the allocation.
        let mut shapes = Vec::with_capacity(self.arg_regs.len().min(rest.len()));
        for arg in 0..self.arg_regs.len() {
            let (&rank, tail) = rest.split_first().ok_or_else(|| {
                format!(
                    "{}: the words end before argument {arg}'s rank ({} words for {} arguments)",
                    self.kernel.name(),
                    self.dims.len(),
                    self.arg_regs.len()
                )
            })?;
            let (sizes, after) = usize::try_from(rank)
                .ok()
                .and_then(|r| tail.split_at_checked(r))
                .ok_or_else(|| {
                    format!(
                        "{}: argument {arg} has rank {rank}, but only {} words follow",
                        self.kernel.name(),
                        tail.len()
                    )
                })?;
            shapes.push(sizes.to_vec());
            rest = after;
        }
        Ok((shapes, rest))
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
        let kernel = LaunchKernel::from_code(code).ok_or_else(|| {
            format!(
                "KILN_LAUNCH names kernel {code}, which is not one (1..={})",
                LaunchKernel::ALL.len()
            )
        })?;
        let (n, m) = (u64::from(u32_at(12)), u64::from(u32_at(16)));
        // Both counts are at most 2^32, so this cannot overflow.
        let want = FIXED + 8 * (n + m);
        if want != payload.len() as u64 {
            return Err(format!(
                "KILN_LAUNCH payload is {} bytes, but {n} arguments and {m} words need {want}",
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
