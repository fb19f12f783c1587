//! The crate's error type: every failure of fusion names the operator (node) it concerns, and
//! every failure of the reference device the byte offset of the transaction op.

/// Errors of operator queries, fusion and the reference device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operator's transaction binary does not parse, or a patched op does not encode.
    #[error("{op}: transaction: {source}")]
    Txn {
        /// The node.
        op: String,
        /// What kiln-format reported.
        #[source]
        source: kiln_format::Error,
    },
    /// An operator's transaction header differs from the first operator's, so the two cannot
    /// run as one transaction.
    #[error("{op}: transaction header {field} is {found}, but the first operator's is {expected}")]
    IncompatibleTxn {
        /// The node.
        op: String,
        /// The header field.
        field: &'static str,
        /// The first operator's value.
        expected: u32,
        /// This operator's value.
        found: u32,
    },
    /// Two args of one operator share a kernel argument and overlap in it.
    #[error("{op}: args {first} and {second} overlap in xrt arg {xrt_arg_idx}")]
    OverlappingArgs {
        /// The node.
        op: String,
        /// Index of the first arg in the operator's arg map.
        first: usize,
        /// Index of the second.
        second: usize,
        /// The shared kernel argument.
        xrt_arg_idx: usize,
    },
    /// An arg starts at an offset that is not a multiple of [`crate::ARG_ALIGN`].
    #[error(
        "{op}: arg {arg} starts at offset {offset} of xrt arg {xrt_arg_idx}, not a multiple \
         of 4 (the arg before it has a size that is not whole 32-bit words)"
    )]
    MisalignedArg {
        /// The node.
        op: String,
        /// Index of the arg in the operator's arg map.
        arg: usize,
        /// Its kernel argument.
        xrt_arg_idx: usize,
        /// Its offset.
        offset: u64,
    },
    /// An input or output arg names an ONNX argument the node does not have.
    #[error("{op}: arg {arg} ({arg_type:?}) names onnx arg {onnx_arg_idx}, which is not one")]
    OnnxArgOutOfRange {
        /// The node.
        op: String,
        /// Index of the arg in the operator's arg map.
        arg: usize,
        /// Its type.
        arg_type: crate::arg_type::OpArgType,
        /// The ONNX argument index it names.
        onnx_arg_idx: usize,
    },
    /// An operator has more than one super-kernel parameter arg.
    #[error("{op}: args {first} and {second} are both super-kernel params (at most one)")]
    DuplicateSuperParams {
        /// The node.
        op: String,
        /// Index of the first.
        first: usize,
        /// Index of the second.
        second: usize,
    },
    /// An operator's super-kernel parameters exceed the size its arg map requests.
    #[error("{op}: {len} bytes of super-kernel params, but its arg map requests {requested}")]
    SuperParamsSize {
        /// The node.
        op: String,
        /// Bytes the operator returned.
        len: u64,
        /// Bytes requested (0 when it has no such arg).
        requested: u64,
    },
    /// A DDR_PATCH names a kernel argument and offset that no arg of the operator covers.
    #[error(
        "{op}: DDR_PATCH op {txn_op} names xrt arg {argidx} + {argplus}, which its arg map lacks"
    )]
    UnknownPatchArg {
        /// The node.
        op: String,
        /// Index of the DDR_PATCH in the operator's transaction.
        txn_op: usize,
        /// The kernel argument.
        argidx: u64,
        /// The offset in it.
        argplus: u64,
    },
    /// A DDR_PATCH points at or past the end of the arg it falls in.
    #[error("{op}: DDR_PATCH op {txn_op} points {argplus} bytes into xrt arg {argidx}, past arg {arg} (ends at {end})")]
    PatchOutsideArg {
        /// The node.
        op: String,
        /// Index of the DDR_PATCH in the operator's transaction.
        txn_op: usize,
        /// The kernel argument.
        argidx: u64,
        /// The offset in it.
        argplus: u64,
        /// Index of the arg it falls after, in the operator's arg map.
        arg: usize,
        /// Where that arg ends.
        end: u64,
    },
    /// `initialize_const_params` wrote outside the operator's slice of the const buffer.
    #[error("{op}: const write of {len} bytes at {offset} leaves its {size}-byte const slice")]
    ConstWrite {
        /// The node.
        op: String,
        /// Offset written, relative to the slice.
        offset: u64,
        /// Bytes written.
        len: u64,
        /// The slice's size.
        size: u64,
    },
    /// Offsets or sizes summed past 2^64.
    #[error("{op}: buffer offsets overflow")]
    SizeOverflow {
        /// The node.
        op: String,
    },
    /// An operator cannot run on these shapes (or this number of tensors or constants).
    #[error("{op}: cannot run on shapes {shapes:?}: {reason}")]
    UnsupportedShape {
        /// The operator (`add`, `conv2d`, `layer_norm`, ...).
        op: &'static str,
        /// The shapes concerned: the node's inputs then outputs, or its constants.
        shapes: Vec<Vec<usize>>,
        /// What is wrong with them.
        reason: String,
    },
    /// An operator does not run this element type.
    #[error("{op}: tensor {tensor} is {dtype}, but the operator runs only float32")]
    UnsupportedDtype {
        /// The operator.
        op: &'static str,
        /// The tensor's name.
        tensor: String,
        /// Its element type.
        dtype: String,
    },
    /// Nothing to fuse.
    #[error("no operators to fuse")]
    Empty,
    /// Lowering a run of a program's instructions failed.
    #[error("method {method:?}, instruction {instruction}: cannot lower: {reason}")]
    Lower {
        /// The method.
        method: String,
        /// The run's first instruction.
        instruction: usize,
        /// What went wrong.
        reason: String,
    },
    /// A graph output named for fusion is no node's output.
    #[error("graph output {tensor:?} is the output of no node of the chain")]
    UnknownOutput {
        /// The tensor's name.
        tensor: String,
    },
    /// A buffer given to the reference device exceeds its address window.
    #[error("device buffer {buffer} is {len} bytes, over the {max}-byte address window")]
    DeviceBuffer {
        /// The buffer's fused slot.
        buffer: usize,
        /// Its size.
        len: u64,
        /// The window's size.
        max: u64,
    },
    /// The reference device does not execute this op.
    #[error("op at byte {offset}: {name} is not supported by the reference device")]
    UnsupportedOp {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// The op's name.
        name: String,
    },
    /// A MASKPOLL waits for a value its register does not hold; on the device nothing else
    /// writes registers, so it would wait forever.
    #[error(
        "op at byte {offset}: {name} of register 0x{reg:x} waits for 0x{value:08x} under mask \
         0x{mask:08x}, but the register holds 0x{found:08x} and nothing else writes it, so the \
         poll never succeeds"
    )]
    PollNeverSucceeds {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// MASKPOLL or MASKPOLL_BUSY.
        name: String,
        /// The register.
        reg: u64,
        /// The value awaited.
        value: u32,
        /// The mask.
        mask: u32,
        /// What the register holds (0 if never written).
        found: u32,
    },
    /// A DDR_PATCH names a kernel argument that is not one of the five fused buffers, or an
    /// offset beyond the buffer's address window.
    #[error(
        "op at byte {offset}: DDR_PATCH of register 0x{regaddr:x} names arg {argidx} + \
         {argplus}, outside the device's five buffers (args 0..=4, offsets under {window})"
    )]
    PatchTarget {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// The register it patches.
        regaddr: u64,
        /// The kernel argument.
        argidx: u64,
        /// The offset in it.
        argplus: u64,
        /// The size of each buffer's address window.
        window: u64,
    },
    /// A launch argument's register holds no address inside a buffer.
    #[error("op at byte {offset}: KILN_LAUNCH argument {arg} reads register 0x{reg:x}, {what}")]
    LaunchAddress {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// Which buffer argument.
        arg: usize,
        /// The register holding its address.
        reg: u64,
        /// What is wrong with it.
        what: String,
    },
    /// The bytes a launch argument covers leave its buffer.
    #[error(
        "op at byte {offset}: KILN_LAUNCH argument {arg} needs {len} bytes at {start} of \
         buffer {buffer}, which is {buffer_len} bytes"
    )]
    LaunchBounds {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// Which buffer argument.
        arg: usize,
        /// The fused buffer its address is in.
        buffer: usize,
        /// Its offset in the buffer.
        start: u64,
        /// The bytes the kernel reads or writes there.
        len: u64,
        /// The buffer's size.
        buffer_len: u64,
    },
    /// A launch the device cannot run: an element type it lacks, words that do not hold a
    /// shape per argument, sizes that do not fit, parameters the kernel does not take, or the
    /// kernel refusing its operands.
    #[error("op at byte {offset}: KILN_LAUNCH {kernel}: {reason}")]
    Launch {
        /// Byte offset of the op in the transaction.
        offset: u64,
        /// The kernel's name.
        kernel: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
