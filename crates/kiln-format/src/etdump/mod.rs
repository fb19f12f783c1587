//! ExecuTorch's ETDump (`.etdp`): the profiling and debug data ExecuTorch's runtime records,
//! which ExecuTorch's devtools `Inspector(etdump_path=...)` reads.
//!
//! [`ETDump::parse`] verifies and decodes a file into the plain structs of [`model`];
//! [`write`] serializes them back; [`to_json`] gives the same JSON as ExecuTorch's Python
//! deserializer; [`summary`] is what `kiln inspect` shows of one. Schema:
//! `kiln-schema/schema/etdump.fbs`, from executorch 1.5.1's
//! `devtools/etdump/etdump_schema_flatcc.fbs`.
//!
//! # The file
//! - A flatbuffer with a 4-byte size prefix (ExecuTorch's `ETDumpGen` builds it with flatcc's
//!   `etdump_ETDump_start_as_root_with_size`; `executorch.devtools.etdump.serialize` reads it
//!   with `flatc --size-prefixed`, and `Inspector` does not take it without the prefix): bytes
//!   0..4 hold the length of the rest, 8..12 the identifier `ED00`. [`write`] writes the
//!   same form with 8-byte values at 8-byte aligned offsets; its bytes are not those of flatcc
//!   (the two builders lay tables out differently) but hold the same fields.
//! - `version` is 0 (`ETDUMP_VERSION`). Each `run_data` entry is a block, opened by
//!   `create_event_block(name)`: every `Method::execute` opens one named `Execute`; in the
//!   files the pybindings write, `Program::load_method` and `Method::init` are in a first block
//!   named `Default`. `bundled_input_index` is -1 unless a bundled input was used.
//! - A block's events are in the order their spans *ended*: a kernel's event before its
//!   instruction's, a delegate's own operators before the `DELEGATE_CALL`, `Method::execute`
//!   last. Times are `et_pal_current_ticks()`, nanoseconds on Linux (the Inspector's default
//!   source time scale).
//! - A string is stored only where the runtime had one: an event without a name has no
//!   `name` field (not an empty string), and vectors nothing was pushed to are absent
//!   (`allocators` unless allocators are tracked, `events` of a block without events).
//!
//! # The events ExecuTorch 1.5.1's runtime writes
//! `Method::execute` sets, around each instruction, the tracer's current chain and debug handle
//! to the chain index and the **index of the instruction in its chain**
//! (`EventTracerProfileInstructionScope`); a profile event started without its own chain takes
//! those, so `chain_index` and `instruction_id` of every event inside an instruction are that
//! instruction's. Events outside instructions (`Method::execute`, `Program::load_method`,
//! `Method::init`) have `chain_index` -1 and `instruction_id` 0.
//! - Kernel instruction: `OPERATOR_CALL` (the whole instruction, `runtime/executor/method.cpp`)
//!   and, nested in it and written before it, the kernel's own `native_call_<name>.<overload>`
//!   span from the generated kernel registration, e.g. `native_call_convolution.out` for
//!   `aten::convolution.out` (the operator name without its namespace; see
//!   [`native_call_name`]). Both have `delegate_debug_id_int` -1, no `delegate_debug_id_str`
//!   and no `delegate_debug_metadata`.
//! - Delegate instruction: `DELEGATE_CALL` (same fields as `OPERATOR_CALL`); other instructions
//!   are `JF_CALL`, `MOVE_CALL` and `FREE_CALL`.
//! - Inside a delegate, a backend logs its own operators with `log_profiling_delegate`
//!   (`devtools/etdump/etdump_flatcc.cpp`): no `name`, the delegate instruction's
//!   `chain_index` and `instruction_id`, either `delegate_debug_id_int` (an integer id the
//!   backend chose ahead of time) or `delegate_debug_id_str`, and a `delegate_debug_metadata`
//!   vector that is always present (empty when the backend gave none). XNNPACK
//!   (`backends/xnnpack/runtime/profiling/XNNProfiler.cpp`) logs one event per XNNPACK
//!   operator, in execution order, with `delegate_debug_id_str` `"<XNNPACK operator name>
//!   #<n>"` (the n-th operator of that name, e.g. `"Convolution (NHWC, F32) IGEMM #1"`) and
//!   `delegate_debug_id_int` -1; the spans are back to back from the start of the delegate
//!   call, each as long as XNNPACK's microsecond timing.
//!
//! # What the Inspector needs
//! `Inspector` (`devtools/inspector/_inspector.py`) groups a block's events by
//! (`instruction_id`, `chain_index`, `delegate_debug_id_int`, `delegate_debug_id_str`), then
//! makes one table row per distinct profile event `name` in each group; blocks with the same
//! name and the same row signatures merge, each run adding a sample to every row's
//! `perf_data` (`end_time - start_time`, scaled from nanoseconds). A delegated event's row is
//! named by its delegate debug id instead of its `name`. With an ETRecord, a row's debug
//! handles are `ETRecord._debug_handle_map["forward"][str(instruction_id)]`: the
//! `instruction_id` must be the index of the original instruction in the program's chain,
//! as the emitter numbered them. A delegated row's handles come from the ETRecord's delegate
//! map for that instruction, keyed by the delegate debug id; a `DELEGATE_CALL` row gets the
//! delegate's backend name. `-1` (`instruction_id`, `delegate_debug_id_int`) means unset.
//! `print_data_tabular` leaves `OPERATOR_CALL` rows out (the kernel's `native_call_*` row
//! stands for the instruction); XNNPACK's string ids match no delegate map key, so their rows
//! get the backend name but no debug handles, with ExecuTorch's files as with kiln's.

mod json;
mod model;
mod read;
pub mod summary;
mod write;

pub use json::to_json;
pub(crate) use model::FORMAT;
pub use model::{
    native_call_name, DEFAULT_BLOCK, DELEGATE_CALL, EXECUTE_BLOCK, IDENTIFIER, METHOD_EXECUTE,
    NO_CHAIN, OPERATOR_CALL, UNSET, VERSION,
};
pub use model::{
    AllocationEvent, DebugEvent, DelegateDebugId, ETDump, Event, EventCounts, ProfileEvent,
    RunData, Tensor, Value, ValueType,
};
pub use read::Limits;
pub use write::write;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_call_names_drop_the_namespace() {
        assert_eq!(native_call_name("aten::convolution", "out"), "native_call_convolution.out");
        assert_eq!(
            native_call_name("aten::_native_batch_norm_legit_no_training", "out"),
            "native_call__native_batch_norm_legit_no_training.out"
        );
        assert_eq!(native_call_name("relu", ""), "native_call_relu");
    }
}
