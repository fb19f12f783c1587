//! A group of float32 elementwise operators run as one pass: the compile stage's fused `map`.
//!
//! A [`MapProgram`] is straight-line code over registers: registers `0..inputs` are the input
//! tensors, and instruction `i` writes register `inputs + i` from one or two earlier
//! registers. Some registers are the outputs. [`MapProgram::run`] walks the elements a block
//! at a time ([`BLOCK`]), runs every instruction on the block and copies the output registers
//! out, so intermediate results stay in L1 and are never written to memory.
//!
//! # Numerics
//! Each instruction rounds to float32 exactly as the separate float32 kernels do
//! (`crate::ops::fast_pointwise`): `+ - * /` in f32, `sigmoid` and `tanh` with the vectorized
//! functions of [`super::activation`]. A fused group gives the same bits as its operators run
//! one by one.

use super::activation::{sigmoid_slice, tanh_slice};

/// Elements per block: every register of a block fits in L1 for programs of a few dozen ops.
pub const BLOCK: usize = 256;

/// At most this many inputs, and at most this many outputs, per program.
pub const MAX_OPERANDS: usize = 16;

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
}

/// A binary operator (`a op b`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// One instruction: its result is the next register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapInstr {
    /// `op(reg[a])`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The register it reads.
        a: usize,
    },
    /// `reg[a] op reg[b]`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// The left operand's register.
        a: usize,
        /// The right operand's register.
        b: usize,
    },
}

/// Why a program cannot be built or run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// An instruction reads a register not yet written.
    #[error("instruction {instr} reads register {reg}, only {defined} are defined before it")]
    Register {
        /// The instruction.
        instr: usize,
        /// The register it reads.
        reg: usize,
        /// How many registers exist before it.
        defined: usize,
    },
    /// An output names an input register or one past the last instruction.
    #[error("output {index} is register {reg}, not the result of an instruction")]
    Output {
        /// Which output.
        index: usize,
        /// Its register.
        reg: usize,
    },
    /// More than [`MAX_OPERANDS`] inputs or outputs, or none of either.
    #[error("{what}: {count}, expected 1..={MAX_OPERANDS}")]
    Count {
        /// `"inputs"` or `"outputs"`.
        what: &'static str,
        /// How many were given.
        count: usize,
    },
    /// The tensors passed to [`MapProgram::run`] do not match the program.
    #[error("{what} {index} has {len} elements, expected {expected}")]
    Operand {
        /// `"input"` or `"output"`.
        what: &'static str,
        /// Which one.
        index: usize,
        /// Its length.
        len: usize,
        /// The length of the first output.
        expected: usize,
    },
}

/// Straight-line elementwise code over registers (see the module docs).
#[derive(Clone, Debug)]
pub struct MapProgram {
    inputs: usize,
    instrs: Vec<MapInstr>,
    outputs: Vec<usize>,
}

impl MapProgram {
    /// A program over `inputs` input registers; checks that every instruction reads defined
    /// registers and that every output is an instruction's result.
    pub fn new(
        inputs: usize,
        instrs: Vec<MapInstr>,
        outputs: Vec<usize>,
    ) -> Result<Self, MapError> {
        for (what, count) in [("inputs", inputs), ("outputs", outputs.len())] {
            if count == 0 || count > MAX_OPERANDS {
                return Err(MapError::Count { what, count });
            }
        }
        for (i, ins) in instrs.iter().enumerate() {
            let defined = inputs + i;
            let (a, b) = match *ins {
                MapInstr::Unary { a, .. } => (a, a),
                MapInstr::Binary { a, b, .. } => (a, b),
            };
            if let Some(reg) = [a, b].into_iter().find(|&r| r >= defined) {
                return Err(MapError::Register { instr: i, reg, defined });
            }
        }
        let regs = inputs + instrs.len();
        if let Some((index, &reg)) =
            outputs.iter().enumerate().find(|&(_, &r)| r < inputs || r >= regs)
        {
            return Err(MapError::Output { index, reg });
        }
        Ok(MapProgram { inputs, instrs, outputs })
    }

    /// How many inputs the program reads.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// How many outputs it writes.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The scratch floats [`MapProgram::run`] needs: one block per instruction.
    pub fn scratch_len(&self) -> usize {
        self.instrs.len() * BLOCK
    }

    /// Runs the program over equal-length `inputs` and `outputs` (in the program's order),
    /// with `scratch` of at least [`MapProgram::scratch_len`] floats (grown when shorter).
    pub fn run(
        &self,
        inputs: &[&[f32]],
        outputs: &mut [&mut [f32]],
        scratch: &mut Vec<f32>,
    ) -> Result<(), MapError> {
        if inputs.len() != self.inputs {
            return Err(MapError::Count { what: "inputs", count: inputs.len() });
        }
        if outputs.len() != self.outputs.len() {
            return Err(MapError::Count { what: "outputs", count: outputs.len() });
        }
        let len = outputs.first().map_or(0, |o| o.len());
        let mismatch = |what, (index, l): (usize, usize)| MapError::Operand {
            what,
            index,
            len: l,
            expected: len,
        };
        if let Some(bad) = inputs.iter().map(|x| x.len()).enumerate().find(|&(_, l)| l != len) {
            return Err(mismatch("input", bad));
        }
        if let Some(bad) = outputs.iter().map(|x| x.len()).enumerate().find(|&(_, l)| l != len) {
            return Err(mismatch("output", bad));
        }
        if scratch.len() < self.scratch_len() {
            scratch.resize(self.scratch_len(), 0.0);
        }
        let mut start = 0;
        while start < len {
            let w = BLOCK.min(len - start);
            for (i, ins) in self.instrs.iter().enumerate() {
                let (done, rest) = scratch.split_at_mut(i * BLOCK);
                let dst = &mut rest[..w];
                let reg = |r: usize| -> &[f32] {
                    match r.checked_sub(self.inputs) {
                        None => &inputs[r][start..start + w],
                        Some(k) => &done[k * BLOCK..k * BLOCK + w],
                    }
                };
                match *ins {
                    MapInstr::Unary { op: UnaryOp::Sigmoid, a } => sigmoid_slice(reg(a), dst),
                    MapInstr::Unary { op: UnaryOp::Tanh, a } => tanh_slice(reg(a), dst),
                    MapInstr::Binary { op, a, b } => {
                        let it = dst.iter_mut().zip(reg(a).iter().zip(reg(b)));
                        match op {
                            BinaryOp::Add => it.for_each(|(d, (&x, &y))| *d = x + y),
                            BinaryOp::Sub => it.for_each(|(d, (&x, &y))| *d = x - y),
                            BinaryOp::Mul => it.for_each(|(d, (&x, &y))| *d = x * y),
                            BinaryOp::Div => it.for_each(|(d, (&x, &y))| *d = x / y),
                        }
                    }
                }
            }
            for (out, &r) in outputs.iter_mut().zip(&self.outputs) {
                let k = (r - self.inputs) * BLOCK;
                out[start..start + w].copy_from_slice(&scratch[k..k + w]);
            }
            start += w;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::threads::Threads;
    use crate::testing;
    use crate::{find_kernel, Arg, Capacity, DType, Shape, TensorRef};

    /// Runs registry kernel `name` (its float32 fast path, as an unfused program runs it) on
    /// 1-D tensors; `extra` are the scalar arguments after the tensors.
    fn registry(name: &str, tensors: &[&[f32]], extra: &[Arg<'_>]) -> Vec<f32> {
        let def = find_kernel(name).unwrap();
        let n = tensors[0].len();
        let shape = Shape::contiguous(&[n]).unwrap();
        let mut args: Vec<Arg<'_>> = tensors
            .iter()
            .map(|x| {
                Arg::Tensor(TensorRef::new(DType::Float, shape, bytemuck::cast_slice(x)).unwrap())
            })
            .collect();
        args.extend_from_slice(extra);
        args.push(Arg::Output);
        let mut out = vec![f32::NAN; n];
        let mut outs = [testing::out(&mut out, &[n], &[], Capacity::Static)];
        testing::run_kernel(def.name, false, &Threads::default(), &args, &mut outs).unwrap();
        out
    }

    /// Property test: random programs (1-4 inputs, up to 12 instructions, 1-3 outputs) over
    /// random lengths (across block edges), with NaN and infinities among the inputs, give
    /// the same bits as running each operator through the registry's own kernel.
    #[test]
    fn programs_equal_their_operators_run_one_by_one() {
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..300 {
            let len = match case % 4 {
                0 => rng.usize(1..8),
                1 => rng.usize(BLOCK - 2..BLOCK + 3),
                _ => rng.usize(1..3 * BLOCK),
            };
            let n_in = rng.usize(1..5);
            let inputs: Vec<Vec<f32>> = (0..n_in)
                .map(|_| {
                    let mut x: Vec<f32> = (0..len).map(|_| (rng.f32() - 0.5) * 20.0).collect();
                    if case % 5 == 0 {
                        x[rng.usize(0..len)] = [f32::NAN, f32::INFINITY, -0.0][rng.usize(0..3)];
                    }
                    x
                })
                .collect();
            let mut regs: Vec<Vec<f32>> = inputs.clone();
            let mut instrs = Vec::new();
            for _ in 0..rng.usize(1..13) {
                let (a, b) = (rng.usize(0..regs.len()), rng.usize(0..regs.len()));
                let alpha = [Arg::Int(1)];
                let (ins, name, operands, extra): (_, _, Vec<&[f32]>, &[Arg<'_>]) =
                    match rng.usize(0..6) {
                        0 => (
                            MapInstr::Unary { op: UnaryOp::Sigmoid, a },
                            "aten::sigmoid.out",
                            vec![&regs[a]],
                            &[],
                        ),
                        1 => (
                            MapInstr::Unary { op: UnaryOp::Tanh, a },
                            "aten::tanh.out",
                            vec![&regs[a]],
                            &[],
                        ),
                        k => {
                            let (op, name, extra): (_, _, &[Arg<'_>]) = match k {
                                2 => (BinaryOp::Add, "aten::add.out", &alpha),
                                3 => (BinaryOp::Sub, "aten::sub.out", &alpha),
                                4 => (BinaryOp::Mul, "aten::mul.out", &[]),
                                _ => (BinaryOp::Div, "aten::div.out", &[]),
                            };
                            (MapInstr::Binary { op, a, b }, name, vec![&regs[a], &regs[b]], extra)
                        }
                    };
                let r = registry(name, &operands, extra);
                regs.push(r);
                instrs.push(ins);
            }
            let outs: Vec<usize> =
                (0..rng.usize(1..4)).map(|_| rng.usize(n_in..regs.len())).collect();
            let p = MapProgram::new(n_in, instrs.clone(), outs.clone()).unwrap();
            let mut got: Vec<Vec<f32>> = vec![vec![f32::NAN; len]; outs.len()];
            let ins: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
            let mut out_refs: Vec<&mut [f32]> = got.iter_mut().map(Vec::as_mut_slice).collect();
            p.run(&ins, &mut out_refs, &mut Vec::new()).unwrap();
            for (o, &r) in got.iter().zip(&outs) {
                for (i, (x, y)) in o.iter().zip(&regs[r]).enumerate() {
                    assert!(
                        x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan(),
                        "case {case} len {len} {instrs:?} register {r} [{i}]: fused {x:e}, \
                         one by one {y:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn programs_with_undefined_registers_are_refused() {
        let sig = |a| MapInstr::Unary { op: UnaryOp::Sigmoid, a };
        assert_eq!(
            MapProgram::new(1, vec![sig(1)], vec![1]).unwrap_err(),
            MapError::Register { instr: 0, reg: 1, defined: 1 }
        );
        assert_eq!(
            MapProgram::new(1, vec![sig(0)], vec![0]).unwrap_err(),
            MapError::Output { index: 0, reg: 0 }
        );
        assert_eq!(
            MapProgram::new(1, vec![sig(0)], vec![2]).unwrap_err(),
            MapError::Output { index: 0, reg: 2 }
        );
        assert!(matches!(
            MapProgram::new(0, vec![], vec![]),
            Err(MapError::Count { what: "inputs", .. })
        ));
        let p = MapProgram::new(2, vec![sig(0)], vec![2]).unwrap();
        let mut out = vec![0.0f32; 3];
        let err = p.run(&[&[0.0; 3], &[0.0; 2]], &mut [&mut out], &mut Vec::new()).unwrap_err();
        assert_eq!(err, MapError::Operand { what: "input", index: 1, len: 2, expected: 3 });
    }
}
