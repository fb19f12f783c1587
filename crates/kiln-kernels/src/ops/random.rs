//! Random kernels: `native_dropout.out`, `rand.out`, `randn.out`.
//!
//! # Contract
//! Values come from kiln's own generator, not PyTorch's (no program can reproduce PyTorch's
//! or ExecuTorch's random values: ExecuTorch seeds a fresh `std::mt19937` from
//! `std::random_device` on every call). Every call draws a new stream: a 64-bit SplitMix64
//! sequence whose seed mixes a per-process random key (from the standard library's
//! OS-seeded `RandomState`) with a global call counter, so concurrent methods never share a
//! stream and two runs differ, as in ExecuTorch. What is guaranteed is the distribution:
//! - `rand`: independent uniform values in `[0, 1)` drawn at the output dtype's precision
//!   (24 bits for float32, 53 for float64, 11 for float16, 8 for bfloat16), so rounding never
//!   produces 1.0;
//! - `randn`: independent standard normal values (Box-Muller in `f64`);
//! - `native_dropout` with `train` true or absent and `0 < p`: each element is kept with
//!   probability `1 - p` (`mask` true) and scaled by `1 / (1 - p)`; dropped elements are
//!   `x * 0` (so NaN stays NaN), and `p = 1` drops everything, exactly PyTorch's definition.
//!   ExecuTorch's portable kernel writes kept elements unscaled (its expected output is
//!   `(1 - p)` times PyTorch's); kiln follows PyTorch. With `train = false` or `p = 0` the
//!   output is the input and the mask is all true (deterministic, as in both).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::defs::{out1, out_n};
use crate::ops::dense::{logical, store_logical};
use crate::ops::pointwise::resize;
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
struct Stream(u64);

impl Stream {
    /// A fresh stream for one kernel call.
    fn new() -> Stream {
        static KEY: OnceLock<u64> = OnceLock::new();
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let key = *KEY.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new().build_hasher().finish()
        });
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        Stream(mix(key ^ mix(call.wrapping_mul(GOLDEN))))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in `[0, 1)` with `bits` bits of precision (at most 53).
    fn uniform(&mut self, bits: u32) -> f64 {
        (self.next() >> (64 - bits)) as f64 / (1u64 << bits) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let u2 = self.uniform(53);
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Bits of precision of a floating dtype's significand, for uniform values below 1.
fn precision(ctx: &KernelContext, dt: DType) -> Result<u32, KernelError> {
    Ok(match dt {
        DType::Float => 24,
        DType::Double => 53,
        DType::Half => 11,
        DType::BFloat16 => 8,
        other => return Err(ctx.dtype_err("out", "a floating dtype", other)),
    })
}

fn fill(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>], normal: bool) -> KResult {
    let a = Args::new(ctx, args);
    let size = a.sizes(0, "size")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let bits = precision(ctx, out.dtype())?;
    resize(ctx, out, "out", &size)?;
    let mut s = Stream::new();
    let vals: Vec<f64> =
        (0..out.numel()).map(|_| if normal { s.normal() } else { s.uniform(bits) }).collect();
    store_logical(ctx, out, &vals, true)
}

fn dropout(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let p = a.double(1, "p")?;
    let train = match args.get(2) {
        Some(Arg::None) => None,
        _ => Some(a.bool(2, "train")?),
    };
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("input", "a floating dtype", x.dtype()));
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(ctx.invalid("p", format!("dropout probability {p} is not in [0, 1]")));
    }
    let [out, mask] = out_tensors2(ctx, outs, ["out0", "out1"])?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out0", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    if mask.dtype() != DType::Bool {
        return Err(ctx.dtype_err("out1", "bool", mask.dtype()));
    }
    resize(ctx, out, "out0", x.sizes())?;
    resize(ctx, mask, "out1", x.sizes())?;
    let keep_p = 1.0 - p;
    let v = logical::<f64>(&x);
    let random = train != Some(false) && p != 0.0;
    let keep: Vec<bool> = if random {
        let mut s = Stream::new();
        v.iter().map(|_| s.uniform(53) < keep_p).collect()
    } else {
        vec![true; v.len()]
    };
    let scale = if !random {
        1.0
    } else if keep_p == 0.0 {
        0.0
    } else {
        1.0 / keep_p
    };
    let res: Vec<f64> = if x.dtype() == DType::Double {
        v.iter().zip(&keep).map(|(&x, &k)| x * k as u8 as f64 * scale).collect()
    } else {
        // PyTorch's opmath: `input * mask` in the input dtype, times the scale in `f32`.
        v.iter()
            .zip(&keep)
            .map(|(&x, &k)| ((x as f32 * k as u8 as f32) * scale as f32) as f64)
            .collect()
    };
    let bits: Vec<crate::element::Bool> =
        keep.iter().map(|&k| crate::element::Bool(k as u8)).collect();
    store_logical(ctx, out, &res, true)?;
    store_logical(ctx, mask, &bits, false)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out_n("aten::native_dropout.out", 3, 2, |c, a, o| dropout(c, a, o)),
        out1("aten::rand.out", 1, |c, a, o| fill(c, a, o, false)),
        out1("aten::randn.out", 1, |c, a, o| fill(c, a, o, true)),
    ]
}

#[cfg(test)]
mod tests {
    //! Distribution checks (values are random, so bands are 7 or more standard deviations
    //! wide: a correct generator fails them with probability below 1e-11).
    use crate::{find_kernel, Arg, KernelContext, KernelError, Out, TensorMut, TensorRef};

    const N: usize = 20_000;

    fn run<'x>(name: &str, args: &[Arg<'x>], outs: &mut [Out<'_, 'x>]) -> Result<(), KernelError> {
        let def = find_kernel(name).expect("registered");
        let mut ctx = KernelContext::new(def.name);
        (def.run)(&mut ctx, args, outs)
    }

    fn draw(name: &str) -> Vec<f32> {
        let mut data = vec![0f32; N];
        let size = [100i64, (N / 100) as i64];
        let out = TensorMut::from_slice(&[100, N / 100], &mut data).expect("out");
        run(name, &[Arg::IntList(&size), Arg::Output], &mut [Out::Tensor(out)]).expect("run");
        data
    }

    fn mean_var(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        (m, v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n)
    }

    fn fraction(v: &[f32], f: impl Fn(f32) -> bool) -> f64 {
        v.iter().filter(|&&x| f(x)).count() as f64 / v.len() as f64
    }

    #[test]
    fn rand_is_uniform_on_the_unit_interval() {
        let v = draw("aten::rand.out");
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)));
        let (m, var) = mean_var(&v);
        assert!((m - 0.5).abs() < 0.015, "mean {m}");
        assert!((var - 1.0 / 12.0).abs() < 0.006, "variance {var}");
        assert!((fraction(&v, |x| x < 0.25) - 0.25).abs() < 0.025);
        assert_ne!(v, draw("aten::rand.out"), "two calls gave the same values");
    }

    #[test]
    fn rand_half_never_rounds_to_one() {
        let mut data = vec![half::f16::ZERO; N];
        let size = [N as i64];
        let out = TensorMut::from_slice(&[N], &mut data).expect("out");
        run("aten::rand.out", &[Arg::IntList(&size), Arg::Output], &mut [Out::Tensor(out)])
            .expect("run");
        assert!(data.iter().all(|x| (0.0..1.0).contains(&x.to_f32())));
        assert!(data.iter().any(|x| x.to_f32() > 0.99));
    }

    #[test]
    fn randn_is_standard_normal() {
        let v = draw("aten::randn.out");
        let (m, var) = mean_var(&v);
        assert!(m.abs() < 0.05, "mean {m}");
        assert!((var - 1.0).abs() < 0.07, "variance {var}");
        assert!((fraction(&v, |x| x.abs() < 1.0) - 0.6827).abs() < 0.025);
        assert!((fraction(&v, |x| x > 1.96) - 0.025).abs() < 0.008);
    }

    #[test]
    fn dropout_keeps_one_minus_p_and_rescales() {
        let x = vec![2.0f32; N];
        let mut out = vec![0f32; N];
        let mut mask = vec![crate::element::Bool(0); N];
        let input = TensorRef::from_slice(&[N], &x).expect("input");
        let o = TensorMut::from_slice(&[N], &mut out).expect("out");
        let mk = TensorMut::from_slice(&[N], &mut mask).expect("mask");
        let args =
            [Arg::Tensor(input), Arg::Double(0.3), Arg::Bool(true), Arg::Output, Arg::Output];
        run("aten::native_dropout.out", &args, &mut [Out::Tensor(o), Out::Tensor(mk)])
            .expect("run");
        let kept = 2.0f32 * (1.0 / 0.7f64) as f32;
        for (v, m) in out.iter().zip(&mask) {
            assert_eq!(*v, if m.0 != 0 { kept } else { 0.0 });
        }
        let frac = mask.iter().filter(|m| m.0 != 0).count() as f64 / N as f64;
        assert!((frac - 0.7).abs() < 0.025, "kept fraction {frac}");
    }
}
