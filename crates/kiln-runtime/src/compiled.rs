//! [`Compiled`]: what loading a method decided, once for every execution state of it: the
//! steps, what each stands for, the prepared kernels and constants they read, and what a new
//! state starts from.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::arena::ConstBuf;
use crate::compile::bound::{Binding, Constants};
use crate::compile::{CompiledNode, PreparedKernel};
use crate::decoded::Decoded;
use crate::error::{Error, MemoryReason, Result};
use crate::footprint::Footprint;
use crate::plan::MethodPlan;
use crate::step::Step;
use crate::value::Val;

/// What loading decided: the compiled steps, what they stand for, the prepared kernels and
/// constants they read, and how every execution state starts.
pub(crate) struct Compiled {
    /// The program it was loaded from (its file mapped while a state lives).
    pub decoded: Arc<Decoded>,
    pub plan: Arc<MethodPlan>,
    /// One list of steps per chain.
    pub chains: Vec<Vec<Step>>,
    /// What each step of `chains` stands for, in the same order.
    pub compiled: Vec<CompiledNode>,
    /// The compile stage's prepared kernels (their packed weights).
    pub prepared: Vec<Box<dyn PreparedKernel>>,
    /// Per prepared kernel, where the tensors of its call live, when loading could resolve
    /// them ([`bound`](crate::compile::bound)).
    pub bindings: Vec<Option<Binding>>,
    /// Constants made at load or shared with the plan
    /// ([`Storage::Const`](crate::value::Storage::Const)): aligned copies, delegates'
    /// converted weights.
    pub constants: Vec<ConstBuf>,
    /// Cache lines of each buffer of a state (0 for a released one), in buffer order.
    pub buffer_lines: Vec<usize>,
    /// What a new state's buffers start with (planned tensors' initial contents).
    pub inits: Vec<Init>,
    /// The value table every run starts from.
    pub initial: Vec<Val>,
    /// The values a run may change (inputs and everything a step writes), reset from
    /// `initial` before each run; the others never change.
    pub resets: Box<[u32]>,
    pub instruction_limit: u64,
    pub memory_limit: u64,
    /// How long the method's load took: the compile stage, and packing its weights.
    pub compile_time: Duration,
    pub pack_time: Duration,
    /// What it holds, by kind: the prediction every state is checked against the memory
    /// limit with.
    pub footprint: Footprint,
}

impl Compiled {
    /// Where its steps' constants are: the program file, `constants` and the external data.
    pub fn constants(&self) -> Constants<'_> {
        self.decoded.constants(&self.constants)
    }

    /// An error when the peak it is predicted to hold ([`Footprint::total`]: one state's
    /// activations, the packed weights, the constants made and the file pages read in place)
    /// passes its memory limit: the figure `kiln inspect --memory` shows, checked once the
    /// weights are packed and before a state's buffers are mapped.
    pub fn check_predicted(&self) -> Result<()> {
        let f = self.footprint;
        if f.total() <= self.memory_limit {
            return Ok(());
        }
        Err(Error::Memory {
            method: self.plan.name.clone(),
            what: format!(
                "its predicted peak ({} of activations, {} of packed weights, {} of constants \
                 made at load, {} of file pages read in place)",
                f.activations, f.packed_weights, f.constants_made, f.mapped_in_place
            ),
            bytes: f.total(),
            counted: 0,
            limit: self.memory_limit,
            reason: MemoryReason::OverLimit,
        })
    }
}

/// Bytes a new execution state's buffer starts with.
pub(crate) struct Init {
    pub buf: u32,
    pub offset: usize,
    pub from: InitFrom,
}

/// Where an [`Init`]'s bytes come from.
pub(crate) enum InitFrom {
    /// The program file.
    File(Range<usize>),
    /// External data source `source`.
    Ext { source: usize, range: Range<usize> },
}

impl Init {
    /// The bytes it copies (none when its source no longer holds them).
    pub fn bytes<'p>(&self, decoded: &'p Decoded) -> &'p [u8] {
        match &self.from {
            InitFrom::File(r) => decoded.file.bytes().get(r.clone()),
            InitFrom::Ext { source, range } => {
                decoded.sources.get(*source).and_then(|s| s.bytes().get(range.clone()))
            }
        }
        .unwrap_or(&[])
    }
}
