//! What an ETDump holds, as plain owned structs: what [`ETDump::parse`] returns and
//! [`super::write`] takes. Fields keep the schema's names and its conventions (`-1` for an
//! unset `instruction_id` or `delegate_debug_id_int`, `None` for an absent string).

/// The format name used in errors.
pub(crate) const FORMAT: &str = "etdump";
/// The file identifier, at bytes 8..12 (after the size prefix).
pub const IDENTIFIER: &[u8; 4] = b"ED00";
/// The schema version ExecuTorch 1.5.1 writes (`ETDUMP_VERSION`).
pub const VERSION: u32 = 0;
/// The `chain_index` of events outside any instruction.
pub const NO_CHAIN: i32 = -1;
/// The value of an unset `instruction_id` or `delegate_debug_id_int`.
pub const UNSET: i32 = -1;
/// Block names ExecuTorch's runtime uses: one per `Method::execute`.
pub const EXECUTE_BLOCK: &str = "Execute";
/// Block name of the pybindings' load events (`Program::load_method`, `Method::init`).
pub const DEFAULT_BLOCK: &str = "Default";
/// Event of a kernel instruction, around the kernel call.
pub const OPERATOR_CALL: &str = "OPERATOR_CALL";
/// Event of a delegate instruction, around the backend's execute.
pub const DELEGATE_CALL: &str = "DELEGATE_CALL";
/// Event around a whole execute, last in its block.
pub const METHOD_EXECUTE: &str = "Method::execute";

/// The name of the span ExecuTorch's generated kernel registration records around a kernel:
/// `native_call_` then the operator name without its namespace, then `.overload` when there
/// is one (`aten::convolution`, `out` -> `native_call_convolution.out`).
pub fn native_call_name(operator: &str, overload: &str) -> String {
    let base = operator.rsplit_once("::").map_or(operator, |(_, name)| name);
    if overload.is_empty() {
        format!("native_call_{base}")
    } else {
        format!("native_call_{base}.{overload}")
    }
}

/// A whole ETDump.
#[derive(Clone, Debug, PartialEq)]
pub struct ETDump {
    /// Schema version ([`VERSION`]).
    pub version: u32,
    /// The blocks, one per run of something (a load, an execute).
    pub run_data: Vec<RunData>,
}

impl ETDump {
    /// An ETDump of the current version holding `run_data`.
    pub fn new(run_data: Vec<RunData>) -> Self {
        ETDump { version: VERSION, run_data }
    }
}

/// One block of events (`RunData`).
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    /// Block name (`Execute` for an execute); an absent name reads as "".
    pub name: String,
    /// Index of the bundled input the run used, or -1.
    pub bundled_input_index: i32,
    /// Names of the tracked allocators (`AllocationEvent::allocator_id` refers to them).
    /// Written only when not empty, as ExecuTorch does.
    pub allocators: Vec<String>,
    /// The events, in the order their spans ended. Written only when not empty.
    pub events: Vec<Event>,
}

impl RunData {
    /// The block ExecuTorch's runtime records for one `Method::execute` (named [`EXECUTE_BLOCK`],
    /// no bundled input, no allocators), holding `events` in the order given.
    pub fn execute(events: impl IntoIterator<Item = ProfileEvent>) -> Self {
        RunData {
            name: EXECUTE_BLOCK.to_string(),
            bundled_input_index: UNSET,
            allocators: Vec::new(),
            events: events.into_iter().map(Event::Profile).collect(),
        }
    }

    /// How many events of each kind the block holds.
    pub fn event_counts(&self) -> EventCounts {
        let mut counts = EventCounts::default();
        for event in &self.events {
            match event {
                Event::Profile(_) => counts.profile += 1,
                Event::Allocation(_) => counts.allocation += 1,
                Event::Debug(_) => counts.debug += 1,
            }
        }
        counts
    }

    /// The earliest start and the latest end of the block's profile events, or `None` when it
    /// has none.
    pub fn time_span(&self) -> Option<(u64, u64)> {
        self.events.iter().filter_map(Event::as_profile).fold(None, |span, e| {
            let (start, end) = span.unwrap_or((e.start_time, e.end_time));
            Some((start.min(e.start_time), end.max(e.end_time)))
        })
    }
}

/// Event counts of a block, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Profile events.
    pub profile: usize,
    /// Allocation events.
    pub allocation: usize,
    /// Debug events.
    pub debug: usize,
}

/// One event: the schema's `Event` table, of which exactly one field is set.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A timed span.
    Profile(ProfileEvent),
    /// An allocation.
    Allocation(AllocationEvent),
    /// A logged value.
    Debug(DebugEvent),
}

impl Event {
    /// The profile event, when this is one.
    pub fn as_profile(&self) -> Option<&ProfileEvent> {
        match self {
            Event::Profile(e) => Some(e),
            _ => None,
        }
    }
}

/// The id a backend gives one of its own operators in a delegate profile event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DelegateDebugId {
    /// `delegate_debug_id_int`: an id chosen ahead of time (the ETRecord's delegate map key).
    Int(i32),
    /// `delegate_debug_id_str`: a name (XNNPACK: `"<operator> #<n>"`).
    Str(String),
}

/// A timed span (`ProfileEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEvent {
    /// Span name (`OPERATOR_CALL`, `native_call_add.out`, ...); `None` for a delegate's own
    /// operators.
    pub name: Option<String>,
    /// Chain of the instruction, or [`NO_CHAIN`].
    pub chain_index: i32,
    /// Index of the instruction in its chain (the ETRecord's debug handle map key).
    pub instruction_id: i32,
    /// Integer delegate debug id, or -1.
    pub delegate_debug_id_int: i32,
    /// String delegate debug id.
    pub delegate_debug_id_str: Option<String>,
    /// Bytes a backend attached (always present, maybe empty, on delegate events).
    pub delegate_debug_metadata: Option<Vec<u8>>,
    /// Start, in ticks (nanoseconds on Linux).
    pub start_time: u64,
    /// End, in ticks.
    pub end_time: u64,
}

impl ProfileEvent {
    /// A span named `name` at instruction `instruction_id` of chain `chain_index`, as the
    /// runtime records `OPERATOR_CALL`, `DELEGATE_CALL` and kernel (`native_call_*`) spans.
    pub fn instruction(
        name: impl Into<String>,
        chain_index: i32,
        instruction_id: i32,
        start_time: u64,
        end_time: u64,
    ) -> Self {
        ProfileEvent {
            name: Some(name.into()),
            chain_index,
            instruction_id,
            delegate_debug_id_int: UNSET,
            delegate_debug_id_str: None,
            delegate_debug_metadata: None,
            start_time,
            end_time,
        }
    }

    /// The [`OPERATOR_CALL`] span of a kernel instruction.
    pub fn operator_call(chain_index: i32, instruction_id: i32, start: u64, end: u64) -> Self {
        Self::instruction(OPERATOR_CALL, chain_index, instruction_id, start, end)
    }

    /// The [`DELEGATE_CALL`] span of a delegate instruction.
    pub fn delegate_call(chain_index: i32, instruction_id: i32, start: u64, end: u64) -> Self {
        Self::instruction(DELEGATE_CALL, chain_index, instruction_id, start, end)
    }

    /// A span outside any instruction (`Method::execute`): chain [`NO_CHAIN`], instruction 0.
    pub fn method(name: impl Into<String>, start_time: u64, end_time: u64) -> Self {
        Self::instruction(name, NO_CHAIN, 0, start_time, end_time)
    }

    /// One of a delegate's own operators inside the delegate instruction `instruction_id`, as
    /// `log_profiling_delegate` records it: no name, the id, empty metadata.
    pub fn delegate_operator(
        id: DelegateDebugId,
        chain_index: i32,
        instruction_id: i32,
        start_time: u64,
        end_time: u64,
    ) -> Self {
        let (delegate_debug_id_int, delegate_debug_id_str) = match id {
            DelegateDebugId::Int(i) => (i, None),
            DelegateDebugId::Str(s) => (UNSET, Some(s)),
        };
        ProfileEvent {
            name: None,
            chain_index,
            instruction_id,
            delegate_debug_id_int,
            delegate_debug_id_str,
            delegate_debug_metadata: Some(Vec::new()),
            start_time,
            end_time,
        }
    }
}

/// An allocation (`AllocationEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationEvent {
    /// The allocator, as `ETDumpGen::track_allocator` numbered it.
    pub allocator_id: i32,
    /// Bytes allocated.
    pub allocation_size: u64,
}

/// A logged value (`DebugEvent`): an intermediate or program output.
#[derive(Clone, Debug, PartialEq)]
pub struct DebugEvent {
    /// Name, when the runtime gave one.
    pub name: Option<String>,
    /// Chain of the instruction: the runtime's current chain stored as an unsigned number, so
    /// a program output logged outside any chain has 2^64 - 1 (-1).
    pub chain_index: u64,
    /// Index of the instruction in its chain, or -1.
    pub instruction_id: i32,
    /// The value.
    pub debug_entry: Option<Value>,
    /// Integer delegate debug id, or -1.
    pub delegate_debug_id_int: i32,
    /// String delegate debug id.
    pub delegate_debug_id_str: Option<String>,
}

/// The kind of a [`Value`] (`ValueType`), in the schema's numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ValueType {
    Null,
    Int,
    Bool,
    Float,
    Double,
    Tensor,
    TensorList,
    String,
}

impl ValueType {
    /// From the schema's code.
    pub fn from_code(code: i8) -> Option<Self> {
        use ValueType::*;
        [Null, Int, Bool, Float, Double, Tensor, TensorList, String]
            .get(usize::try_from(code).ok()?)
            .copied()
    }

    /// The schema's code.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// The schema's name (`Tensor`, `TensorList`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            Null => "Null",
            Int => "Int",
            Bool => "Bool",
            Float => "Float",
            Double => "Double",
            Tensor => "Tensor",
            TensorList => "TensorList",
            String => "String",
        }
    }
}

/// A logged value (`Value`): `val` says which field holds it (the schema has no field for a
/// string value).
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Which field holds the value.
    pub val: ValueType,
    /// A tensor.
    pub tensor: Option<Tensor>,
    /// A list of tensors.
    pub tensor_list: Option<Vec<Tensor>>,
    /// An integer.
    pub int_value: Option<i64>,
    /// A float.
    pub float_value: Option<f32>,
    /// A double.
    pub double_value: Option<f64>,
    /// A bool.
    pub bool_value: Option<bool>,
    /// `Some(true)` on a program output.
    pub output: Option<bool>,
}

/// A logged tensor's metadata (`Tensor`); its bytes are in the debug buffer, not the ETDump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// ExecuTorch's `ScalarType` code (6 = float).
    pub scalar_type: i8,
    /// Dimensions.
    pub sizes: Vec<i64>,
    /// Strides, in elements.
    pub strides: Vec<i64>,
    /// Offset of the data in the debug buffer (-1 for an empty tensor).
    pub offset: i64,
}
