//! The compile stage's dataflow IR: one [`Graph`] per instruction chain, whose nodes are either
//! original instructions kept as they are or fused nodes that stand for several of them, each
//! with its origins (the original instruction indices it stands for).

use kiln_format::origins::{Origin, OriginMap};
use kiln_kernels::{DType, KernelDef};

use crate::plan::{DataDef, InstrDef, MethodPlan, ValueDef};
use crate::value::{Storage, TensorSlot, Val};

use kiln_kernels::compute::sgemm::Activation;

use super::alias::Aliases;
use super::nodes::{
    ChannelScaleNode, ConvNode, LinearNode, MapNode, MaxPoolNode, MeanNode, PointwiseDepthwiseNode,
    Qs8ConvNode, Qs8LookupNode, SafeSoftmaxNode,
};

/// What a node computes.
#[derive(Clone, Debug)]
pub(crate) enum NodeOp {
    /// Original instruction `index` of the chain, run as the interpreter runs it.
    Instr(usize),
    /// A 2-D convolution with constant weights and a fused epilogue.
    Conv(ConvNode),
    /// A matrix product with a constant right operand and a fused epilogue.
    Linear(LinearNode),
    /// A pointwise convolution and the depthwise one reading its output, as one step.
    PointwiseDepthwise(Box<PointwiseDepthwiseNode>),
    /// A chain of elementwise operators.
    Map(MapNode),
    /// Max pooling without indices.
    MaxPool(MaxPoolNode),
    /// The mean over height and width.
    Mean(MeanNode),
    /// A factor per channel multiplied into an activation.
    ChannelScale(ChannelScaleNode),
    /// A softmax that zeroes fully masked rows.
    SafeSoftmax(SafeSoftmaxNode),
    /// A QS8 convolution with constant weights.
    Qs8Conv(Qs8ConvNode),
    /// Elementwise operators on an int8 activation, as a table.
    Qs8Lookup(Qs8LookupNode),
    /// Nothing left to do: the node was absorbed into another.
    Removed,
}

/// One node of a [`Graph`], in execution order.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub op: NodeOp,
}

/// One chain of a method as a dataflow graph over the method's value table.
///
/// Nodes read and write values by index, exactly as instructions do; a fused node writes only
/// the value its last absorbed instruction wrote, and the intermediate values it skips are
/// never written. `origins` maps node index -> the original instructions it stands for
/// (source id = instruction index, name = operator), kept with the absorb / fuse / replace
/// rules of [`kiln_format::origins`]. `handles` does the same for the nodes of inlined
/// delegates: node index -> the delegate graph nodes it computes (source id = the node's debug
/// handle, name = its schema kind).
pub(crate) struct Graph<'m> {
    pub plan: &'m MethodPlan,
    /// The chain's instructions; `NodeOp::Instr` indexes them.
    pub chain: &'m [InstrDef],
    pub values: &'m [Val],
    pub nodes: Vec<Node>,
    pub origins: OriginMap<usize>,
    pub handles: OriginMap<usize>,
    /// Per value: how many times it is read over all chains, plus one if it is a method output.
    reads: Vec<u32>,
    /// Per value: how many times an instruction writes it.
    writes: Vec<u32>,
    /// The method's aliases, when known: then the graph may be rewritten, and its steps get
    /// their own memory plan (so the program's placement does not constrain fusions).
    pub aliases: Option<Aliases>,
}

impl<'m> Graph<'m> {
    /// The graph of chain `chain`: one node per instruction, each its own origin.
    pub fn of_chain(
        plan: &'m MethodPlan,
        values: &'m [Val],
        defs: &[Option<&'static KernelDef>],
        aliases: Option<Aliases>,
        chain: usize,
    ) -> Graph<'m> {
        let instructions = plan.chains.get(chain).map_or(&[][..], Vec::as_slice);
        let mut origins = OriginMap::new();
        let mut handles = OriginMap::new();
        let mut nodes = Vec::with_capacity(instructions.len());
        for (k, ins) in instructions.iter().enumerate() {
            // A kernel call of an inlined delegate stands for the delegate call.
            let src = plan.source(chain, k);
            let name = match src.delegate {
                Some(d) => delegate_name(plan, d as usize),
                None => instruction_name(plan, ins),
            };
            origins.set(k, Origin::single(src.instruction, name));
            if let Some(origin) = delegate_node_origin(plan, src.delegate, src.node) {
                handles.set(k, origin);
            }
            nodes.push(Node { op: NodeOp::Instr(k) });
        }
        Graph {
            plan,
            chain: instructions,
            values,
            nodes,
            origins,
            handles,
            reads: count_reads(plan, values, defs, aliases.as_ref()),
            writes: count_writes(plan, values, defs),
            aliases,
        }
    }

    /// Whether the passes may rewrite this graph.
    pub fn rewritable(&self) -> bool {
        self.aliases.is_some()
    }

    /// Whether value `v` is written by at most one instruction.
    pub fn written_once(&self, v: u32) -> bool {
        self.writes.get(v as usize).is_some_and(|&w| w <= 1)
    }

    /// Whether `v` is a tensor the program places in a planned arena with no initial contents
    /// (so the compiled memory plan may place it anywhere).
    pub fn planned(&self, v: u32) -> bool {
        matches!(
            self.plan.values.get(v as usize),
            Some(ValueDef::Tensor(t)) if matches!(t.data, DataDef::Planned { .. })
        ) && matches!(self.tensor(v).map(|t| t.storage), Some(Storage::Buf { .. }))
    }

    /// Makes `v` share the bytes of `of` from byte `delta` on: no step writes `v` any more, and
    /// its reads become reads of `of`.
    pub fn alias(&mut self, v: u32, of: u32, delta: usize) {
        let Some(aliases) = &mut self.aliases else { return };
        aliases.add(v, of, delta);
        let extra = self.reads.get(v as usize).copied().unwrap_or(0);
        let root = aliases.root(of).0;
        for x in [of, root] {
            if let Some(r) = self.reads.get_mut(x as usize) {
                *r = r.saturating_add(extra);
            }
            if root == of {
                break;
            }
        }
    }

    /// One read of `v` (and of the value it aliases) is gone: the node that made it was
    /// removed and nothing reads in its place.
    pub fn drop_read(&mut self, v: u32) {
        let root = self.root(v).0;
        for x in [v, root] {
            if let Some(r) = self.reads.get_mut(x as usize) {
                *r = r.saturating_sub(1);
            }
            if root == v {
                break;
            }
        }
    }

    /// The value whose bytes `v` shares and its byte offset inside it (`(v, 0)` for a value of
    /// its own, or when the aliases are unknown).
    pub fn root(&self, v: u32) -> (u32, usize) {
        self.aliases.as_ref().map_or((v, 0), |a| a.root(v))
    }

    /// The original instruction of node `n`, if the node is one.
    pub fn instruction(&self, n: usize) -> Option<&'m InstrDef> {
        match self.nodes.get(n)?.op {
            NodeOp::Instr(k) => self.chain.get(k),
            _ => None,
        }
    }

    /// The operator name of an original kernel instruction (`name.overload`).
    pub fn operator(&self, ins: &InstrDef) -> Option<&'m str> {
        match ins {
            InstrDef::Kernel { op, .. } => self.plan.operators.get(*op).map(String::as_str),
            _ => None,
        }
    }

    /// The next node after `n` that is not removed.
    pub fn next_live(&self, n: usize) -> Option<usize> {
        (n + 1..self.nodes.len()).find(|&m| !matches!(self.nodes[m].op, NodeOp::Removed))
    }

    /// Whether value `v` is read exactly once in the whole method and is not a method output.
    pub fn read_once(&self, v: u32) -> bool {
        self.reads.get(v as usize) == Some(&1)
    }

    /// How many times value `v` is read (at least; plus one if it is a method output).
    pub fn reads(&self, v: u32) -> u32 {
        self.reads.get(v as usize).copied().unwrap_or(u32::MAX)
    }

    /// Whether value `v` is never read and is not a method output.
    pub fn unread(&self, v: u32) -> bool {
        self.reads.get(v as usize) == Some(&0)
    }

    /// The tensor slot of value `v`.
    pub fn tensor(&self, v: u32) -> Option<&'m TensorSlot> {
        match self.values.get(v as usize)? {
            Val::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The sizes of tensor `v` (its declared, or upper-bound, sizes), if it is a tensor.
    pub fn sizes(&self, v: u32) -> Option<Vec<usize>> {
        self.tensor(v).map(|t| t.shape.sizes().to_vec())
    }

    /// A float32 tensor of static shape laid out contiguously, in method memory (an
    /// activation the compiled kernels may read or write).
    pub fn dense_f32(&self, v: u32) -> Option<&'m TensorSlot> {
        self.dense(v, DType::Float)
    }

    /// A tensor of `dtype` and static shape laid out contiguously, in method memory.
    pub fn dense(&self, v: u32, dtype: DType) -> Option<&'m TensorSlot> {
        let t = self.tensor(v)?;
        let ok = t.dtype == dtype
            && t.shape.is_dense_row_major()
            && matches!(t.storage, Storage::Buf { .. } | Storage::Const { .. });
        ok.then_some(t)
    }

    /// A float32 constant (file or external data, or bytes made at load), in any dim order
    /// (the prepared kernels read it in row-major order of its sizes).
    pub fn const_f32(&self, v: u32) -> Option<&'m TensorSlot> {
        self.constant(v, DType::Float)
    }

    /// A constant of `dtype`, as [`Graph::const_f32`].
    pub fn constant(&self, v: u32, dtype: DType) -> Option<&'m TensorSlot> {
        let t = self.tensor(v)?;
        let ok = t.dtype == dtype
            && !t.writable
            && matches!(
                t.storage,
                Storage::File { .. }
                    | Storage::Ext { .. }
                    | Storage::Buf { .. }
                    | Storage::Const { .. }
            );
        ok.then_some(t)
    }

    /// The value of an Int argument.
    pub fn int(&self, v: u32) -> Option<i64> {
        match self.values.get(v as usize)? {
            Val::Int(x) => Some(*x),
            _ => None,
        }
    }

    /// The value of an Int or Double argument as f64.
    pub fn number(&self, v: u32) -> Option<f64> {
        match self.values.get(v as usize)? {
            Val::Int(x) => Some(*x as f64),
            Val::Double(x) => Some(*x),
            _ => None,
        }
    }

    /// The value of a Bool argument.
    pub fn boolean(&self, v: u32) -> Option<bool> {
        match self.values.get(v as usize)? {
            Val::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether value `v` is None.
    pub fn is_none(&self, v: u32) -> bool {
        matches!(self.values.get(v as usize), Some(Val::None))
    }

    /// The items of an IntList argument (constant Int values only).
    pub fn ints(&self, v: u32) -> Option<Vec<i64>> {
        match self.values.get(v as usize)? {
            Val::IntList(items) => items.iter().map(|&i| self.int(i)).collect(),
            _ => None,
        }
    }

    /// Whether the memory regions of `a` and `b` may overlap when the compiled steps run: never
    /// under the compile stage's own memory plan (values alive in the same step get disjoint
    /// regions); under the program's plan when both are in the same buffer with intersecting
    /// byte ranges at their capacities.
    pub fn may_overlap(&self, a: u32, b: u32) -> bool {
        if self.rewritable() {
            return false;
        }
        let (Some(x), Some(y)) = (self.tensor(a), self.tensor(b)) else { return true };
        match (x.storage, y.storage) {
            (Storage::Buf { buf: bx, offset: ox }, Storage::Buf { buf: by, offset: oy }) => {
                bx == by && ox < oy + y.cap_bytes && oy < ox + x.cap_bytes
            }
            _ => false,
        }
    }

    /// Node `absorbing` takes over node `absorbed` (origin rule 1); `absorbed` is removed.
    pub fn absorb(&mut self, absorbing: usize, absorbed: usize) {
        self.origins.absorb(&absorbing, &absorbed);
        self.origins.remove(&absorbed);
        self.handles.absorb(&absorbing, &absorbed);
        self.handles.remove(&absorbed);
        self.nodes[absorbed].op = NodeOp::Removed;
    }

    /// Node `n` is replaced by a new op standing for the same instructions (origin rule 3: the
    /// key stays, so the origin is kept).
    pub fn replace(&mut self, n: usize, op: NodeOp) {
        self.nodes[n].op = op;
    }

    /// The original instruction indices node `n` stands for, ascending.
    pub fn origin_ids(&self, n: usize) -> Vec<u32> {
        self.origins.get(&n).map(|o| o.ids().into_iter().collect()).unwrap_or_default()
    }

    /// The activation a node of operator `op` applies, if it is a unary activation kiln fuses.
    pub fn activation_of(&self, op: &str, args: &[u32]) -> Option<Activation> {
        match op {
            "aten::relu.out" => Some(Activation::Clamp { min: 0.0, max: f32::INFINITY }),
            "aten::hardtanh.out" => {
                let (lo, hi) = (self.number(*args.get(1)?)?, self.number(*args.get(2)?)?);
                Some(Activation::Clamp { min: lo as f32, max: hi as f32 })
            }
            "aten::clamp.out" => {
                let bound = |v: u32, none: f32| -> Option<f32> {
                    if self.is_none(v) {
                        Some(none)
                    } else {
                        self.number(v).map(|x| x as f32)
                    }
                };
                let lo = bound(*args.get(1)?, f32::NEG_INFINITY)?;
                let hi = bound(*args.get(2)?, f32::INFINITY)?;
                Some(Activation::Clamp { min: lo, max: hi })
            }
            "aten::hardswish.out" => Some(Activation::Hardswish),
            "aten::sigmoid.out" => Some(Activation::Sigmoid),
            "aten::silu.out" => Some(Activation::Silu),
            "aten::gelu.out" => match self.values.get(*args.get(1)? as usize)? {
                Val::String(s) if &**s == "none" => Some(Activation::Gelu),
                Val::String(s) if &**s == "tanh" => Some(Activation::GeluTanh),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The name an original instruction is known by in origins and profiles.
pub(crate) fn instruction_name(plan: &MethodPlan, ins: &InstrDef) -> String {
    match ins {
        InstrDef::Kernel { op, .. } => plan.operators.get(*op).cloned().unwrap_or_default(),
        InstrDef::Delegate { delegate, .. } => delegate_name(plan, *delegate),
        InstrDef::Move { .. } => "MoveCall".into(),
        InstrDef::JumpFalse { .. } => "JumpFalseCall".into(),
        InstrDef::Free { .. } => "FreeCall".into(),
    }
}

/// What node `node` of inlined delegate `delegate` stands for, by debug handle: itself and the
/// nodes it absorbed at lowering; `None` unless both are given and known.
fn delegate_node_origin(
    plan: &MethodPlan,
    delegate: Option<u32>,
    node: Option<u32>,
) -> Option<Origin> {
    let xnodes = &plan.delegates.get(delegate? as usize)?.xnodes;
    let x = xnodes.get(node? as usize)?;
    let absorbed = x.absorbed.iter().filter_map(|&a| xnodes.get(a as usize));
    let parts: Vec<Origin> = std::iter::once(x)
        .chain(absorbed)
        .map(|n| Origin::single(n.debug_handle, n.kind))
        .collect();
    Origin::composite(parts.iter().map(Some)).ok()
}

/// The name a delegate call is known by: `delegate:<backend id>`.
fn delegate_name(plan: &MethodPlan, delegate: usize) -> String {
    format!("delegate:{}", plan.delegates.get(delegate).map_or("?", |d| d.id.as_str()))
}

/// Per value, the number of times a kernel call writes it (out positions, list items
/// included); other instructions count as writes of every argument.
fn count_writes(
    plan: &MethodPlan,
    values: &[Val],
    defs: &[Option<&'static KernelDef>],
) -> Vec<u32> {
    let mut writes = vec![0u32; values.len()];
    let mut bump = |v: u32| {
        if let Some(w) = writes.get_mut(v as usize) {
            *w = w.saturating_add(1);
        }
    };
    for ins in plan.chains.iter().flatten() {
        let (def, args): (Option<&KernelDef>, &[u32]) = match ins {
            InstrDef::Kernel { op, args } => (defs.get(*op).copied().flatten(), args),
            InstrDef::Delegate { args, .. } => (None, args),
            InstrDef::Move { to, .. } => (None, std::slice::from_ref(to)),
            InstrDef::Free { value } => (None, std::slice::from_ref(value)),
            InstrDef::JumpFalse { .. } => continue,
        };
        for (p, &a) in args.iter().enumerate() {
            if def.is_some_and(|d| !d.is_out(p)) {
                continue;
            }
            if let Some(Val::TensorList(items)) = values.get(a as usize) {
                items.iter().for_each(|&i| bump(i));
            }
            bump(a);
        }
    }
    writes
}

/// Per value, the number of reads over every chain (each input position of a kernel call that
/// names it, as itself or as a list item; every argument of other instructions) plus one for
/// each time it is a method output. Only the positions a kernel writes are left out, so the
/// count never falls below the true number of reads: an over-count only prevents a fusion.
fn count_reads(
    plan: &MethodPlan,
    values: &[Val],
    defs: &[Option<&'static KernelDef>],
    aliases: Option<&Aliases>,
) -> Vec<u32> {
    let mut reads = vec![0u32; values.len()];
    // A read of an alias is a read of the value it aliases too.
    let mut bump = |v: u32| {
        let root = aliases.map_or(v, |a| a.root(v).0);
        for x in [v, root] {
            if let Some(r) = reads.get_mut(x as usize) {
                *r = r.saturating_add(1);
            }
            if root == v {
                break;
            }
        }
    };
    for &o in &plan.outputs {
        bump(o);
    }
    for ins in plan.chains.iter().flatten() {
        let def = match ins {
            InstrDef::Kernel { op, .. } => defs.get(*op).copied().flatten(),
            _ => None,
        };
        let args: &[u32] = match ins {
            InstrDef::Kernel { args, .. } | InstrDef::Delegate { args, .. } => args,
            InstrDef::Move { from, .. } => std::slice::from_ref(from),
            InstrDef::JumpFalse { cond, .. } => std::slice::from_ref(cond),
            InstrDef::Free { value } => std::slice::from_ref(value),
        };
        for (p, &a) in args.iter().enumerate() {
            if def.is_some_and(|d| !d.is_input(p)) {
                continue;
            }
            match values.get(a as usize) {
                Some(Val::TensorList(items)) => items.iter().for_each(|&i| bump(i)),
                Some(Val::OptionalTensorList(items)) => {
                    items.iter().flatten().for_each(|&i| bump(i))
                }
                _ => {}
            }
            bump(a);
        }
    }
    reads
}
