//! The zero-copy view of a verified `.pte`: [`Program`] over the file's bytes, with typed
//! accessors for methods, values, tensors, instructions, operators, delegates and data.
//!
//! [`Program::open`] parses the header, runs the flatbuffers verifier with explicit caps and
//! then kiln's semantic checks ([`super::verify`]); nothing else touches the bytes before that.
//! Accessors still return `Result` where they decode: they never panic, whatever the bytes.

use flatbuffers::{ForwardsUOffset, Table, Vector, VerifierOptions};
use kiln_schema::program::executorch_flatbuffer as fb;
use kiln_schema::{or_zero, Unaligned};

use super::header::Layout;
use super::scalar_type::ScalarType;
use crate::error::{Error, Result};

/// The format name used in errors.
pub(crate) const FORMAT: &str = "pte";
/// ExecuTorch's rank limit (`kTensorDimensionLimit`).
pub const MAX_RANK: usize = 16;

/// Caps applied while opening a program, so that hostile files cannot make verification
/// allocate or loop without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of flatbuffer tables.
    pub max_depth: usize,
    /// Most instructions in one chain (ExecuTorch stops a run after 10,000,000).
    pub max_instructions: usize,
    /// The verifier's apparent-size cap, as a multiple of the program size (shared subtrees are
    /// counted each time they are reached).
    pub apparent_size_factor: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_depth: 64, max_instructions: 10_000_000, apparent_size_factor: 4 }
    }
}

impl Limits {
    /// The flatbuffers verifier options for a program of `program_size` bytes: every table
    /// needs at least 4 bytes, so the table count is bounded by the size.
    pub fn verifier_options(&self, program_size: usize) -> VerifierOptions {
        VerifierOptions {
            max_depth: self.max_depth,
            max_tables: program_size / 4 + 1,
            max_apparent_size: program_size.saturating_mul(self.apparent_size_factor).max(1 << 16),
            ignore_missing_null_terminator: false,
        }
    }
}

/// File offset of a flatbuffer table, for error messages.
pub(crate) fn loc(t: &Table<'_>) -> Option<u64> {
    Some(t.loc() as u64)
}

/// File offset of a vector's first element inside `file`, for error messages.
pub(crate) fn vec_loc<T>(file: &[u8], v: &Vector<'_, T>) -> Option<u64> {
    (v.bytes().as_ptr() as usize).checked_sub(file.as_ptr() as usize).map(|o| o as u64)
}

/// `i` as an index below `len`, or an error naming `field`.
pub(crate) fn index(
    i: i64,
    len: usize,
    field: impl FnOnce() -> String,
    at: Option<u64>,
) -> Result<usize> {
    match usize::try_from(i) {
        Ok(u) if u < len => Ok(u),
        _ => Err(Error::invalid(FORMAT, field(), at, format!("index {i} is outside 0..{len}"))),
    }
}

/// A verified ExecuTorch program over the bytes of a whole `.pte` file.
#[derive(Clone, Copy)]
pub struct Program<'a> {
    bytes: &'a [u8],
    layout: Layout,
    root: fb::Program<'a>,
}

impl std::fmt::Debug for Program<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("len", &self.bytes.len())
            .field("layout", &self.layout)
            .field("methods", &self.num_methods())
            .finish()
    }
}

impl<'a> Program<'a> {
    /// Header, identifier and flatbuffer verification only (no semantic checks).
    pub(super) fn parse(bytes: &'a [u8], limits: &Limits) -> Result<Self> {
        let ident = bytes.get(4..8).ok_or_else(|| Error::Truncated {
            format: FORMAT,
            field: "file_identifier".into(),
            offset: 4,
            end: 8,
            len: bytes.len() as u64,
        })?;
        if ident != b"ET12" {
            if ident.starts_with(b"ET") {
                return Err(Error::unsupported(
                    FORMAT,
                    "file_identifier",
                    Some(4),
                    format!(
                        "program version {:?} is not the supported \"ET12\"",
                        String::from_utf8_lossy(ident)
                    ),
                ));
            }
            let found = format!("{:?}", String::from_utf8_lossy(ident));
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 4,
                expected: "\"ET12\"".into(),
                // Say what the file is when it is something else kiln can name.
                found: match crate::detect::describe(bytes) {
                    Some(what) => format!("{found}: the file is {what}"),
                    None => found,
                },
            });
        }
        let layout = Layout::of(bytes)?;
        // `Layout::of` checked program_size <= bytes.len().
        let program_len = usize::try_from(layout.program_size).unwrap_or(usize::MAX);
        let fb_bytes = bytes.get(..program_len).ok_or_else(|| {
            Error::invalid(FORMAT, "extended_header.program_size", Some(16), "past end of file")
        })?;
        let opts = limits.verifier_options(fb_bytes.len());
        let root = fb::root_as_program_with_opts(&opts, fb_bytes)
            .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
        Ok(Program { bytes, layout, root })
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Where the flatbuffer ends and the segments begin.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The generated flatbuffer view (verified), for code that walks every field (dump, model).
    pub fn raw(&self) -> fb::Program<'a> {
        self.root
    }

    /// `Program.version` (ExecuTorch writes 0).
    pub fn version(&self) -> u32 {
        self.root.version()
    }

    /// Number of methods (execution plans).
    pub fn num_methods(&self) -> usize {
        self.root.execution_plan().map_or(0, |v| v.len())
    }

    /// Method `index`.
    pub fn method(&self, index: usize) -> Result<Method<'a>> {
        let plans = self.root.execution_plan();
        match plans.filter(|v| index < v.len()) {
            Some(v) => Ok(Method { program: *self, plan: v.get(index), index }),
            None => Err(Error::invalid(
                FORMAT,
                format!("execution_plan[{index}]"),
                None,
                format!("there are {} methods", self.num_methods()),
            )),
        }
    }

    /// Every method, in file order (ExecuTorch sorts them by name).
    pub fn methods(&self) -> impl Iterator<Item = Method<'a>> + '_ {
        let program = *self;
        self.root
            .execution_plan()
            .into_iter()
            .flat_map(|v| v.iter())
            .enumerate()
            .map(move |(index, plan)| Method { program, plan, index })
    }

    /// The method called `name`.
    pub fn method_by_name(&self, name: &str) -> Result<Method<'a>> {
        self.methods().find(|m| m.name() == name).ok_or_else(|| Error::NotFound {
            format: FORMAT,
            what: "method",
            name: name.to_string(),
        })
    }

    /// Number of entries in `Program.segments`.
    pub fn num_segments(&self) -> usize {
        self.root.segments().map_or(0, |v| v.len())
    }

    /// Segment `index` as written (offset relative to the segment base).
    pub fn segment(&self, index: usize) -> Result<Segment> {
        match self.root.segments().filter(|v| index < v.len()) {
            Some(v) => {
                let s = v.get(index);
                Ok(Segment { offset: or_zero(s.offset()), size: or_zero(s.size()) })
            }
            None => Err(Error::invalid(
                FORMAT,
                format!("segments[{index}]"),
                None,
                format!("there are {} segments", self.num_segments()),
            )),
        }
    }

    /// Every segment as written.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        self.root
            .segments()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|s| Segment { offset: or_zero(s.offset()), size: or_zero(s.size()) })
    }

    /// Absolute file range of segment `index`, checked to lie in the segment data region.
    pub fn segment_range(&self, index: usize) -> Result<std::ops::Range<u64>> {
        let seg = self.segment(index)?;
        let field = || format!("segments[{index}]");
        if seg.size == 0 {
            let start = self.layout.segment_base_offset.saturating_add(seg.offset);
            return Ok(start..start);
        }
        if self.layout.header.is_none() || self.layout.segment_base_offset == 0 {
            return Err(Error::invalid(
                FORMAT,
                field(),
                None,
                format!("holds {} bytes but the file has no segment data", seg.size),
            ));
        }
        let start = self.layout.segment_base_offset.checked_add(seg.offset);
        let end = start.and_then(|s| s.checked_add(seg.size));
        match (start, end) {
            (Some(start), Some(end)) if end <= self.layout.segment_end => Ok(start..end),
            _ => Err(Error::invalid(
                FORMAT,
                field(),
                None,
                format!(
                    "offset {} + size {} from base {} is outside the segment data (ends at {})",
                    seg.offset, seg.size, self.layout.segment_base_offset, self.layout.segment_end
                ),
            )),
        }
    }

    /// The bytes of segment `index` (empty for a zero-size segment, wherever it points).
    pub fn segment_bytes(&self, index: usize) -> Result<&'a [u8]> {
        let r = self.segment_range(index)?;
        if r.is_empty() {
            return Ok(&[]);
        }
        slice(self.bytes, r.start, r.end - r.start, || format!("segments[{index}]"))
    }

    /// Where constant tensor data lives.
    pub fn constants(&self) -> Constants<'a> {
        if let Some(cs) = self.root.constant_segment() {
            if let Some(offsets) = cs.offsets().filter(|o| !o.is_empty()) {
                return Constants::Segment { segment_index: cs.segment_index(), offsets };
            }
        }
        match self.root.constant_buffer() {
            Some(b) if !b.is_empty() => Constants::Inline(b),
            _ => Constants::None,
        }
    }

    /// Number of constant buffers (index 0 is the reserved "not a constant" entry).
    pub fn num_constant_buffers(&self) -> usize {
        match self.constants() {
            Constants::Segment { offsets, .. } => offsets.len(),
            Constants::Inline(b) => b.len(),
            Constants::None => 0,
        }
    }

    /// `nbytes` of constant data for `buffer_idx` (a tensor's `data_buffer_idx`), from the
    /// constant segment or the deprecated inline `constant_buffer`.
    pub fn constant_data(&self, buffer_idx: usize, nbytes: u64) -> Result<&'a [u8]> {
        let field = || format!("constant data for data_buffer_idx {buffer_idx}");
        match self.constants() {
            Constants::Segment { segment_index, offsets } => {
                let n = offsets.len();
                let i = index(buffer_idx as i64, n, || "constant_segment.offsets".into(), None)?;
                let seg = self.segment_bytes(segment_index as usize)?;
                slice(seg, offsets.get(i).get(), nbytes, field)
            }
            Constants::Inline(buffers) => {
                let n = buffers.len();
                let i = index(buffer_idx as i64, n, || "constant_buffer".into(), None)?;
                let storage = buffers.get(i).storage().map_or(&[][..], |v| v.bytes());
                slice(storage, 0, nbytes, field)
            }
            Constants::None => {
                Err(Error::invalid(FORMAT, field(), None, "the program has no constant data"))
            }
        }
    }

    /// `nbytes` of initial data for a mutable (planned) tensor with `buffer_idx`, from
    /// `mutable_data_segments[0]` as ExecuTorch's runtime reads it.
    pub fn mutable_data(&self, buffer_idx: usize, nbytes: u64) -> Result<&'a [u8]> {
        let field = || format!("mutable data for data_buffer_idx {buffer_idx}");
        let Some(sub) = self.root.mutable_data_segments().filter(|v| !v.is_empty()) else {
            return Err(Error::invalid(FORMAT, field(), None, "the program has no mutable data"));
        };
        let sub = sub.get(0);
        let offsets = sub.offsets().ok_or_else(|| {
            Error::invalid(FORMAT, "mutable_data_segments[0].offsets", loc(&sub._tab), "missing")
        })?;
        let i = index(
            buffer_idx as i64,
            offsets.len(),
            || "mutable_data_segments[0].offsets".into(),
            None,
        )?;
        let seg = self.segment_bytes(sub.segment_index() as usize)?;
        slice(seg, offsets.get(i).get(), nbytes, field)
    }

    /// `Program.named_data` entries: key and segment index (keys are verified present).
    pub fn named_data(&self) -> impl Iterator<Item = (&'a str, u32)> + '_ {
        self.root
            .named_data()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|n| (n.key().unwrap_or(""), n.segment_index()))
    }

    /// The bytes of named data `key` (first entry with that key).
    pub fn named_data_bytes(&self, key: &str) -> Result<&'a [u8]> {
        let (_, seg) = self.named_data().find(|(k, _)| *k == key).ok_or_else(|| {
            Error::NotFound { format: FORMAT, what: "named data", name: key.to_string() }
        })?;
        self.segment_bytes(seg as usize)
    }

    /// The processed blob of a delegate: inline in `backend_delegate_data` or a segment.
    pub fn delegate_data(&self, delegate: &Delegate<'a>) -> Result<&'a [u8]> {
        match delegate.data {
            DelegateData::Inline(i) => {
                let v = self.root.backend_delegate_data();
                let n = v.map_or(0, |v| v.len());
                let i = index(i.into(), n, || "backend_delegate_data".into(), None)?;
                Ok(v.map(|v| v.get(i)).and_then(|d| d.data()).map_or(&[][..], |d| d.bytes()))
            }
            DelegateData::Segment(i) => self.segment_bytes(i as usize),
        }
    }
}

/// `len` bytes at `offset` of `data`, or an invalid-data error naming `field`.
pub(crate) fn slice(
    data: &[u8],
    offset: u64,
    len: u64,
    field: impl FnOnce() -> String,
) -> Result<&[u8]> {
    let end = offset.checked_add(len);
    match end {
        Some(end) if end <= data.len() as u64 => Ok(&data[offset as usize..end as usize]),
        _ => Err(Error::invalid(
            FORMAT,
            field(),
            None,
            format!("bytes {offset}+{len} are outside the {} available", data.len()),
        )),
    }
}

/// One `Program.segments` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Segment {
    /// Offset relative to the segment base offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Where constant tensor data is stored.
#[derive(Clone, Copy)]
pub enum Constants<'a> {
    /// In segment `segment_index`, buffer i at `offsets[i]` (current files).
    Segment {
        /// Index into `Program.segments`.
        segment_index: u32,
        /// Offset of each buffer inside the segment; entry 0 is reserved.
        offsets: Vector<'a, fb::UnalignedULong>,
    },
    /// Inline in the flatbuffer (`Program.constant_buffer`, deprecated since ExecuTorch 0.7).
    Inline(Vector<'a, ForwardsUOffset<fb::Buffer<'a>>>),
    /// No constants.
    None,
}

/// One method (ExecuTorch `ExecutionPlan`).
#[derive(Clone, Copy)]
pub struct Method<'a> {
    program: Program<'a>,
    plan: fb::ExecutionPlan<'a>,
    index: usize,
}

impl<'a> Method<'a> {
    /// Position in `Program.execution_plan`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The generated flatbuffer view.
    pub fn raw(&self) -> fb::ExecutionPlan<'a> {
        self.plan
    }

    /// The program this method belongs to.
    pub fn program(&self) -> &Program<'a> {
        &self.program
    }

    /// The method name (verified present).
    pub fn name(&self) -> &'a str {
        self.plan.name().unwrap_or("")
    }

    fn path(&self) -> String {
        format!("execution_plan[{}]", self.index)
    }

    /// Number of values.
    pub fn num_values(&self) -> usize {
        self.plan.values().map_or(0, |v| v.len())
    }

    /// Value `index`, decoded (tags, tensor shape rules and list indices checked).
    pub fn value(&self, index: usize) -> Result<Value<'a>> {
        let values = self.plan.values();
        let n = values.map_or(0, |v| v.len());
        let path = || format!("{}.values[{index}]", self.path());
        let Some(values) = values.filter(|_| index < n) else {
            return Err(Error::invalid(FORMAT, path(), None, format!("there are {n} values")));
        };
        Value::decode(values.get(index), n, &path)
    }

    /// Indices of the method's inputs in the value table.
    pub fn inputs(&self) -> Result<Vec<usize>> {
        self.indices(self.plan.inputs(), "inputs")
    }

    /// Indices of the method's outputs in the value table.
    pub fn outputs(&self) -> Result<Vec<usize>> {
        self.indices(self.plan.outputs(), "outputs")
    }

    fn indices(&self, v: Option<Vector<'a, i32>>, what: &str) -> Result<Vec<usize>> {
        let n = self.num_values();
        let file = self.program.bytes;
        v.into_iter()
            .flat_map(|v| v.iter().enumerate().map(move |(i, x)| (i, x, vec_loc(file, &v))))
            .map(|(i, x, at)| index(x.into(), n, || format!("{}.{what}[{i}]", self.path()), at))
            .collect()
    }

    /// Number of chains (real programs have one).
    pub fn num_chains(&self) -> usize {
        self.plan.chains().map_or(0, |v| v.len())
    }

    /// Chain `index`.
    pub fn chain(&self, index: usize) -> Result<Chain<'a>> {
        match self.plan.chains().filter(|v| index < v.len()) {
            Some(v) => Ok(Chain { method: *self, chain: v.get(index), index }),
            None => Err(Error::invalid(
                FORMAT,
                format!("{}.chains[{index}]", self.path()),
                None,
                format!("there are {} chains", self.num_chains()),
            )),
        }
    }

    /// Every chain.
    pub fn chains(&self) -> impl Iterator<Item = Chain<'a>> + '_ {
        let method = *self;
        self.plan
            .chains()
            .into_iter()
            .flat_map(|v| v.iter())
            .enumerate()
            .map(move |(index, chain)| Chain { method, chain, index })
    }

    /// Number of instructions over all chains.
    pub fn num_instructions(&self) -> usize {
        self.chains().map(|c| c.num_instructions()).sum()
    }

    /// Number of operators.
    pub fn num_operators(&self) -> usize {
        self.plan.operators().map_or(0, |v| v.len())
    }

    /// Operator `index`.
    pub fn operator(&self, index: usize) -> Result<Operator<'a>> {
        let path = || format!("{}.operators[{index}]", self.path());
        match self.plan.operators().filter(|v| index < v.len()) {
            Some(v) => {
                let op = v.get(index);
                let name = op.name().ok_or_else(|| {
                    Error::invalid(FORMAT, format!("{}.name", path()), loc(&op._tab), "missing")
                })?;
                Ok(Operator { name, overload: op.overload().unwrap_or("") })
            }
            None => Err(Error::invalid(
                FORMAT,
                path(),
                None,
                format!("there are {} operators", self.num_operators()),
            )),
        }
    }

    /// Every operator, in table order.
    pub fn operators(&self) -> impl Iterator<Item = Result<Operator<'a>>> + '_ {
        (0..self.num_operators()).map(|i| self.operator(i))
    }

    /// Number of delegates.
    pub fn num_delegates(&self) -> usize {
        self.plan.delegates().map_or(0, |v| v.len())
    }

    /// Delegate `index`.
    pub fn delegate(&self, index: usize) -> Result<Delegate<'a>> {
        let path = || format!("{}.delegates[{index}]", self.path());
        let Some(v) = self.plan.delegates().filter(|v| index < v.len()) else {
            return Err(Error::invalid(
                FORMAT,
                path(),
                None,
                format!("there are {} delegates", self.num_delegates()),
            ));
        };
        let d = v.get(index);
        let at = loc(&d._tab);
        let id = d
            .id()
            .ok_or_else(|| Error::invalid(FORMAT, format!("{}.id", path()), at, "missing"))?;
        let processed = d.processed().ok_or_else(|| {
            Error::invalid(FORMAT, format!("{}.processed", path()), at, "missing")
        })?;
        let data = match processed.location() {
            fb::DataLocation::INLINE => DelegateData::Inline(processed.index()),
            fb::DataLocation::SEGMENT => DelegateData::Segment(processed.index()),
            other => {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{}.processed.location", path()),
                    loc(&processed._tab),
                    format!("unknown data location {}", other.0),
                ))
            }
        };
        let mut compile_specs = Vec::new();
        for (i, spec) in d.compile_specs().into_iter().flat_map(|v| v.iter()).enumerate() {
            let key = spec.key().ok_or_else(|| {
                Error::invalid(
                    FORMAT,
                    format!("{}.compile_specs[{i}].key", path()),
                    loc(&spec._tab),
                    "missing",
                )
            })?;
            compile_specs
                .push(CompileSpec { key, value: spec.value().map_or(&[][..], |v| v.bytes()) });
        }
        Ok(Delegate { id, data, compile_specs })
    }

    /// Every delegate, in table order.
    pub fn delegates(&self) -> impl Iterator<Item = Result<Delegate<'a>>> + '_ {
        (0..self.num_delegates()).map(|i| self.delegate(i))
    }

    /// `non_const_buffer_sizes` as written; entry 0 is reserved, planned arena `i` (memory_id
    /// `i`) has size `[i]`. Entries are verified non-negative.
    pub fn non_const_buffer_sizes(&self) -> Vec<u64> {
        self.plan
            .non_const_buffer_sizes()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|s| u64::try_from(s.get()).unwrap_or(0))
            .collect()
    }

    /// Sizes of the planned arenas the runtime must provide (memory_id 1, 2, ...).
    pub fn planned_buffer_sizes(&self) -> Vec<u64> {
        self.non_const_buffer_sizes().into_iter().skip(1).collect()
    }

    /// The pytree specs of inputs and outputs (`container_meta_type`), when present.
    pub fn container_meta(&self) -> Option<(&'a str, &'a str)> {
        self.plan
            .container_meta_type()
            .map(|c| (c.encoded_inp_str().unwrap_or(""), c.encoded_out_str().unwrap_or("")))
    }
}

/// A chain of instructions.
#[derive(Clone, Copy)]
pub struct Chain<'a> {
    method: Method<'a>,
    chain: fb::Chain<'a>,
    index: usize,
}

impl<'a> Chain<'a> {
    /// The generated flatbuffer view.
    pub fn raw(&self) -> fb::Chain<'a> {
        self.chain
    }

    fn path(&self) -> String {
        format!("{}.chains[{}]", self.method.path(), self.index)
    }

    /// Number of instructions.
    pub fn num_instructions(&self) -> usize {
        self.chain.instructions().map_or(0, |v| v.len())
    }

    /// Instruction `index`, decoded with every value, operator and delegate index checked.
    pub fn instruction(&self, index: usize) -> Result<Instruction<'a>> {
        let path = || format!("{}.instructions[{index}]", self.path());
        let Some(v) = self.chain.instructions().filter(|v| index < v.len()) else {
            return Err(Error::invalid(
                FORMAT,
                path(),
                None,
                format!("there are {} instructions", self.num_instructions()),
            ));
        };
        Instruction::decode(v.get(index), &self.method, &path)
    }

    /// Every instruction, in order.
    pub fn instructions(&self) -> impl Iterator<Item = Result<Instruction<'a>>> + '_ {
        (0..self.num_instructions()).map(|i| self.instruction(i))
    }

    /// Chain input value indices.
    pub fn inputs(&self) -> Result<Vec<usize>> {
        self.method.indices(self.chain.inputs(), &format!("chains[{}].inputs", self.index))
    }

    /// Chain output value indices.
    pub fn outputs(&self) -> Result<Vec<usize>> {
        self.method.indices(self.chain.outputs(), &format!("chains[{}].outputs", self.index))
    }
}

/// An operator table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operator<'a> {
    /// `namespace::name`, e.g. `aten::add`.
    pub name: &'a str,
    /// Overload, e.g. `out`; empty for PyTorch's default overload.
    pub overload: &'a str,
}

impl Operator<'_> {
    /// The kernel lookup name: `name.overload`, or `name` when the overload is empty.
    pub fn full_name(&self) -> String {
        if self.overload.is_empty() {
            self.name.to_string()
        } else {
            format!("{}.{}", self.name, self.overload)
        }
    }
}

/// Where a delegate's processed blob is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelegateData {
    /// Index into `Program.backend_delegate_data`.
    Inline(u32),
    /// Index into `Program.segments`.
    Segment(u32),
}

/// A backend delegate entry.
#[derive(Clone, Debug)]
pub struct Delegate<'a> {
    /// Backend id, e.g. `XnnpackBackend`.
    pub id: &'a str,
    /// Where the processed blob is (see [`Program::delegate_data`]).
    pub data: DelegateData,
    /// Compile specs (key, raw value).
    pub compile_specs: Vec<CompileSpec<'a>>,
}

/// One delegate compile spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileSpec<'a> {
    /// The key.
    pub key: &'a str,
    /// The raw value bytes.
    pub value: &'a [u8],
}

/// The kind of a value (ExecuTorch's `KernelTypes` union member).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// None.
    Null,
    /// `i64`.
    Int,
    /// `bool`.
    Bool,
    /// `f64`.
    Double,
    /// A tensor.
    Tensor,
    /// A string.
    String,
    /// A list of Int value indices.
    IntList,
    /// A list of literal doubles.
    DoubleList,
    /// A list of literal bools.
    BoolList,
    /// A list of Tensor value indices.
    TensorList,
    /// A list of Tensor-or-None value indices (-1 = None).
    OptionalTensorList,
}

impl ValueKind {
    /// Snake-case name (`none`, `int`, `tensor`, `int_list`, `optional_tensor_list`, ...).
    pub fn snake_name(self) -> &'static str {
        match self {
            ValueKind::Null => "none",
            ValueKind::Int => "int",
            ValueKind::Bool => "bool",
            ValueKind::Double => "double",
            ValueKind::Tensor => "tensor",
            ValueKind::String => "string",
            ValueKind::IntList => "int_list",
            ValueKind::DoubleList => "double_list",
            ValueKind::BoolList => "bool_list",
            ValueKind::TensorList => "tensor_list",
            ValueKind::OptionalTensorList => "optional_tensor_list",
        }
    }

    /// The union member's name as in the schema.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Null => "Null",
            ValueKind::Int => "Int",
            ValueKind::Bool => "Bool",
            ValueKind::Double => "Double",
            ValueKind::Tensor => "Tensor",
            ValueKind::String => "String",
            ValueKind::IntList => "IntList",
            ValueKind::DoubleList => "DoubleList",
            ValueKind::BoolList => "BoolList",
            ValueKind::TensorList => "TensorList",
            ValueKind::OptionalTensorList => "OptionalTensorList",
        }
    }
}

/// A decoded value (ExecuTorch `EValue`). Lists are zero-copy views.
#[derive(Clone, Copy)]
pub enum Value<'a> {
    /// None.
    Null,
    /// An integer (also SymInts, rewritten at run time by sym ops).
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double.
    Double(f64),
    /// A string (UTF-8 checked by the verifier).
    String(&'a str),
    /// A tensor.
    Tensor(Tensor<'a>),
    /// Indices of Int values (checked in range), re-read at every use.
    IntList(Vector<'a, fb::UnalignedLong>),
    /// Literal doubles.
    DoubleList(Vector<'a, fb::UnalignedDouble>),
    /// Literal booleans.
    BoolList(Vector<'a, bool>),
    /// Indices of Tensor values (checked in range).
    TensorList(Vector<'a, i32>),
    /// Indices of Tensor values, or -1 for None (checked).
    OptionalTensorList(Vector<'a, i32>),
}

impl<'a> Value<'a> {
    /// The kind of this value.
    pub fn kind(&self) -> ValueKind {
        match self {
            Value::Null => ValueKind::Null,
            Value::Int(_) => ValueKind::Int,
            Value::Bool(_) => ValueKind::Bool,
            Value::Double(_) => ValueKind::Double,
            Value::String(_) => ValueKind::String,
            Value::Tensor(_) => ValueKind::Tensor,
            Value::IntList(_) => ValueKind::IntList,
            Value::DoubleList(_) => ValueKind::DoubleList,
            Value::BoolList(_) => ValueKind::BoolList,
            Value::TensorList(_) => ValueKind::TensorList,
            Value::OptionalTensorList(_) => ValueKind::OptionalTensorList,
        }
    }

    /// Decodes one EValue of a table of `n_values`; `path` names it in errors.
    fn decode(ev: fb::EValue<'a>, n_values: usize, path: &dyn Fn() -> String) -> Result<Self> {
        let at = loc(&ev._tab);
        let missing =
            |what: &str| Error::invalid(FORMAT, format!("{}.{what}", path()), at, "missing");
        let tag = ev.val_type();
        let kind_missing =
            || Error::invalid(FORMAT, path(), at, format!("union tag {} has no table", tag.0));
        let check_items = |items: Vector<'a, i32>, what: &str, allow_none: bool| -> Result<()> {
            for (i, x) in items.iter().enumerate() {
                if allow_none && x == -1 {
                    continue;
                }
                index(x.into(), n_values, || format!("{}.{what}.items[{i}]", path()), at)?;
            }
            Ok(())
        };
        Ok(match tag {
            fb::KernelTypes::Null => Value::Null,
            fb::KernelTypes::Int => {
                Value::Int(or_zero(ev.val_as_int().ok_or_else(kind_missing)?.int_val()))
            }
            fb::KernelTypes::Bool => {
                Value::Bool(ev.val_as_bool().ok_or_else(kind_missing)?.bool_val())
            }
            fb::KernelTypes::Double => {
                Value::Double(or_zero(ev.val_as_double().ok_or_else(kind_missing)?.double_val()))
            }
            fb::KernelTypes::String => Value::String(
                ev.val_as_string()
                    .ok_or_else(kind_missing)?
                    .string_val()
                    .ok_or_else(|| missing("string.string_val"))?,
            ),
            fb::KernelTypes::Tensor => {
                let t = ev.val_as_tensor().ok_or_else(kind_missing)?;
                Value::Tensor(Tensor::decode(t, &|| format!("{}.tensor", path()))?)
            }
            fb::KernelTypes::IntList => {
                let items = ev
                    .val_as_int_list()
                    .ok_or_else(kind_missing)?
                    .items()
                    .ok_or_else(|| missing("int_list.items"))?;
                for (i, x) in items.iter().enumerate() {
                    index(x.get(), n_values, || format!("{}.int_list.items[{i}]", path()), at)?;
                }
                Value::IntList(items)
            }
            fb::KernelTypes::DoubleList => Value::DoubleList(
                ev.val_as_double_list()
                    .ok_or_else(kind_missing)?
                    .items()
                    .ok_or_else(|| missing("double_list.items"))?,
            ),
            fb::KernelTypes::BoolList => Value::BoolList(
                ev.val_as_bool_list()
                    .ok_or_else(kind_missing)?
                    .items()
                    .ok_or_else(|| missing("bool_list.items"))?,
            ),
            fb::KernelTypes::TensorList => {
                let items = ev
                    .val_as_tensor_list()
                    .ok_or_else(kind_missing)?
                    .items()
                    .ok_or_else(|| missing("tensor_list.items"))?;
                check_items(items, "tensor_list", false)?;
                Value::TensorList(items)
            }
            fb::KernelTypes::OptionalTensorList => {
                let items = ev
                    .val_as_optional_tensor_list()
                    .ok_or_else(kind_missing)?
                    .items()
                    .ok_or_else(|| missing("optional_tensor_list.items"))?;
                check_items(items, "optional_tensor_list", true)?;
                Value::OptionalTensorList(items)
            }
            other => {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{}.val_type", path()),
                    at,
                    format!("unknown value kind {}", other.0),
                ))
            }
        })
    }
}

/// How a tensor's shape may change at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeDynamism {
    /// Fixed shape.
    Static,
    /// Dynamic, bounded by the serialized sizes.
    DynamicBound,
    /// Dynamic without bound (the runtime does not support it).
    DynamicUnbound,
}

impl ShapeDynamism {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ShapeDynamism::Static => "static",
            ShapeDynamism::DynamicBound => "dynamic_bound",
            ShapeDynamism::DynamicUnbound => "dynamic_unbound",
        }
    }
}

/// Placement of a tensor in a planned memory arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// 1-based arena id (index into `non_const_buffer_sizes`).
    pub memory_id: u32,
    /// Byte offset in the arena (`memory_offset_low | memory_offset_high << 32`).
    pub offset: u64,
}

/// Where a tensor's data comes from (ExecuTorch `getTensorDataPtr`, reference section 3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorData<'a> {
    /// Supplied at run time: an input, an output buffer, or set by a kernel such as `et_view`.
    Runtime,
    /// Planned memory, uninitialised.
    Planned(Allocation),
    /// Constant data, `data_buffer_idx` into the constant table ([`Program::constant_data`]).
    Constant(u32),
    /// Planned memory initialised from `mutable_data_segments[0]` buffer `.1`
    /// ([`Program::mutable_data`]).
    PlannedInitialized(Allocation, u32),
    /// Constant external data, looked up by fully qualified name in a `.ptd`.
    External(&'a str),
    /// Planned memory loaded from external data by fully qualified name.
    ExternalPlanned(&'a str, Allocation),
}

/// A decoded tensor description. Its shape invariants are checked: dtype valid, rank <= 16,
/// sizes >= 0, `dim_order` a permutation of `0..rank`, numel and nbytes without overflow.
#[derive(Clone, Copy)]
pub struct Tensor<'a> {
    raw: fb::Tensor<'a>,
    dtype: ScalarType,
    sizes: Vector<'a, i32>,
    dim_order: Vector<'a, u8>,
    dynamism: ShapeDynamism,
    data: TensorData<'a>,
    numel: u64,
    nbytes: u64,
}

impl<'a> Tensor<'a> {
    /// Decodes and checks a tensor table; `path` names it in errors.
    pub(crate) fn decode(t: fb::Tensor<'a>, path: &dyn Fn() -> String) -> Result<Self> {
        let at = loc(&t._tab);
        let bad = |field: &str, reason: String| {
            Error::invalid(FORMAT, format!("{}.{field}", path()), at, reason)
        };
        if t.storage_offset() != 0 {
            return Err(Error::unsupported(
                FORMAT,
                format!("{}.storage_offset", path()),
                at,
                format!("{} (ExecuTorch requires 0)", t.storage_offset()),
            ));
        }
        let dtype = ScalarType::from_code(i64::from(t.scalar_type().0)).ok_or_else(|| {
            bad("scalar_type", format!("unknown scalar type {}", t.scalar_type().0))
        })?;
        let dynamism = match t.shape_dynamism() {
            fb::TensorShapeDynamism::STATIC => ShapeDynamism::Static,
            fb::TensorShapeDynamism::DYNAMIC_BOUND => ShapeDynamism::DynamicBound,
            fb::TensorShapeDynamism::DYNAMIC_UNBOUND => ShapeDynamism::DynamicUnbound,
            other => return Err(bad("shape_dynamism", format!("unknown value {}", other.0))),
        };
        let sizes = t.sizes().ok_or_else(|| bad("sizes", "missing".into()))?;
        let rank = sizes.len();
        if rank > MAX_RANK {
            return Err(bad("sizes", format!("rank {rank} is over the limit of {MAX_RANK}")));
        }
        let dim_order = t.dim_order().ok_or_else(|| bad("dim_order", "missing".into()))?;
        if dim_order.len() != rank {
            return Err(bad(
                "dim_order",
                format!("has {} entries for rank {rank}", dim_order.len()),
            ));
        }
        let mut seen = [false; MAX_RANK];
        for (i, d) in dim_order.iter().enumerate() {
            let d = usize::from(d);
            if d >= rank || seen[d] {
                return Err(bad(
                    &format!("dim_order[{i}]"),
                    format!("{d} makes dim_order not a permutation of 0..{rank}"),
                ));
            }
            seen[d] = true;
        }
        let mut numel: u64 = 1;
        for (i, s) in sizes.iter().enumerate() {
            let s = u64::try_from(s)
                .map_err(|_| bad(&format!("sizes[{i}]"), format!("{s} is negative")))?;
            numel = numel
                .checked_mul(s)
                .filter(|n| *n <= i64::MAX as u64)
                .ok_or_else(|| bad("sizes", "element count overflows".into()))?;
        }
        let nbytes = numel
            .checked_mul(dtype.size() as u64)
            .filter(|n| *n <= i64::MAX as u64)
            .ok_or_else(|| bad("sizes", "byte size overflows".into()))?;
        let allocation = t.allocation_info().map(|a| Allocation {
            memory_id: a.memory_id(),
            offset: u64::from(a.memory_offset_low()) | (u64::from(a.memory_offset_high()) << 32),
        });
        let extra = t.extra_tensor_info();
        let external = match extra.map(|e| e.location()) {
            None | Some(fb::TensorDataLocation::SEGMENT) => false,
            Some(fb::TensorDataLocation::EXTERNAL) => true,
            Some(other) => {
                return Err(bad(
                    "extra_tensor_info.location",
                    format!("unknown location {}", other.0),
                ))
            }
        };
        let idx = t.data_buffer_idx();
        let data = if external {
            let fqn = extra
                .and_then(|e| e.fully_qualified_name())
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    bad(
                        "extra_tensor_info.fully_qualified_name",
                        "an EXTERNAL tensor needs a name".into(),
                    )
                })?;
            match allocation {
                Some(a) => TensorData::ExternalPlanned(fqn, a),
                None => TensorData::External(fqn),
            }
        } else {
            match (idx, allocation) {
                (0, None) => TensorData::Runtime,
                (0, Some(a)) => TensorData::Planned(a),
                (i, None) => TensorData::Constant(i),
                (i, Some(a)) => TensorData::PlannedInitialized(a, i),
            }
        };
        Ok(Tensor { raw: t, dtype, sizes, dim_order, dynamism, data, numel, nbytes })
    }

    /// The generated flatbuffer view.
    pub fn raw(&self) -> fb::Tensor<'a> {
        self.raw
    }

    /// Element type.
    pub fn dtype(&self) -> ScalarType {
        self.dtype
    }

    /// Sizes (the upper bound for dynamic tensors), each >= 0.
    pub fn sizes(&self) -> Vector<'a, i32> {
        self.sizes
    }

    /// Sizes as `usize`.
    pub fn shape(&self) -> Vec<usize> {
        self.sizes.iter().map(|s| usize::try_from(s).unwrap_or(0)).collect()
    }

    /// Dimension order, outermost first: a permutation of `0..rank`.
    pub fn dim_order(&self) -> Vector<'a, u8> {
        self.dim_order
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.sizes.len()
    }

    /// Shape dynamism.
    pub fn dynamism(&self) -> ShapeDynamism {
        self.dynamism
    }

    /// Where the data is.
    pub fn data(&self) -> TensorData<'a> {
        self.data
    }

    /// Element count of the (upper-bound) shape.
    pub fn numel(&self) -> u64 {
        self.numel
    }

    /// Byte size of the (upper-bound) shape.
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// The fully qualified name, when the tensor has one.
    pub fn fully_qualified_name(&self) -> Option<&'a str> {
        self.raw.extra_tensor_info().and_then(|e| e.fully_qualified_name())
    }

    /// `requires_grad` as written.
    pub fn requires_grad(&self) -> bool {
        self.raw.requires_grad()
    }
}

/// A decoded instruction. Every index is checked against its table.
#[derive(Clone, Copy)]
pub enum Instruction<'a> {
    /// Call operator `op_index` with value indices `args`.
    Kernel {
        /// Index into the method's operators.
        op_index: usize,
        /// Value indices (checked in range).
        args: Vector<'a, i32>,
    },
    /// Call delegate `delegate_index` with value indices `args` (inputs, then outputs).
    Delegate {
        /// Index into the method's delegates.
        delegate_index: usize,
        /// Value indices (checked in range).
        args: Vector<'a, i32>,
    },
    /// `values[to] = values[from]`.
    Move {
        /// Source value index.
        from: usize,
        /// Destination value index.
        to: usize,
    },
    /// Jump to `destination` when value `cond` is false (a destination past the end ends the
    /// chain).
    JumpFalse {
        /// Bool or Bool-tensor value index.
        cond: usize,
        /// Instruction index to jump to.
        destination: usize,
    },
    /// Release the data of tensor value `value`.
    Free {
        /// Tensor value index.
        value: usize,
    },
}

impl<'a> Instruction<'a> {
    fn decode(
        ins: fb::Instruction<'a>,
        method: &Method<'a>,
        path: &dyn Fn() -> String,
    ) -> Result<Self> {
        let at = loc(&ins._tab);
        let n = method.num_values();
        let tag = ins.instr_args_type();
        let no_table =
            || Error::invalid(FORMAT, path(), at, format!("union tag {} has no table", tag.0));
        let value = |x: i32, field: &str| index(x.into(), n, || format!("{}.{field}", path()), at);
        let args_ok = |args: Option<Vector<'a, i32>>, what: &str| -> Result<Vector<'a, i32>> {
            let args = args.ok_or_else(|| {
                Error::invalid(FORMAT, format!("{}.{what}.args", path()), at, "missing")
            })?;
            for (i, a) in args.iter().enumerate() {
                index(a.into(), n, || format!("{}.{what}.args[{i}]", path()), at)?;
            }
            Ok(args)
        };
        Ok(match tag {
            fb::InstructionArguments::KernelCall => {
                let k = ins.instr_args_as_kernel_call().ok_or_else(no_table)?;
                let op_index = index(
                    k.op_index().into(),
                    method.num_operators(),
                    || format!("{}.kernel_call.op_index", path()),
                    at,
                )?;
                Instruction::Kernel { op_index, args: args_ok(k.args(), "kernel_call")? }
            }
            fb::InstructionArguments::DelegateCall => {
                let d = ins.instr_args_as_delegate_call().ok_or_else(no_table)?;
                let delegate_index = index(
                    d.delegate_index().into(),
                    method.num_delegates(),
                    || format!("{}.delegate_call.delegate_index", path()),
                    at,
                )?;
                Instruction::Delegate { delegate_index, args: args_ok(d.args(), "delegate_call")? }
            }
            fb::InstructionArguments::MoveCall => {
                let m = ins.instr_args_as_move_call().ok_or_else(no_table)?;
                Instruction::Move {
                    from: value(m.move_from(), "move_call.move_from")?,
                    to: value(m.move_to(), "move_call.move_to")?,
                }
            }
            fb::InstructionArguments::JumpFalseCall => {
                let j = ins.instr_args_as_jump_false_call().ok_or_else(no_table)?;
                let destination = usize::try_from(j.destination_instruction()).map_err(|_| {
                    Error::invalid(
                        FORMAT,
                        format!("{}.jump_false_call.destination_instruction", path()),
                        at,
                        format!("{} is negative", j.destination_instruction()),
                    )
                })?;
                Instruction::JumpFalse {
                    cond: value(j.cond_value_index(), "jump_false_call.cond_value_index")?,
                    destination,
                }
            }
            fb::InstructionArguments::FreeCall => {
                let f = ins.instr_args_as_free_call().ok_or_else(no_table)?;
                Instruction::Free { value: value(f.value_index(), "free_call.value_index")? }
            }
            other => {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{}.instr_args_type", path()),
                    at,
                    format!("unknown instruction kind {}", other.0),
                ))
            }
        })
    }

    /// The instruction kind's schema name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Instruction::Kernel { .. } => "KernelCall",
            Instruction::Delegate { .. } => "DelegateCall",
            Instruction::Move { .. } => "MoveCall",
            Instruction::JumpFalse { .. } => "JumpFalseCall",
            Instruction::Free { .. } => "FreeCall",
        }
    }
}
