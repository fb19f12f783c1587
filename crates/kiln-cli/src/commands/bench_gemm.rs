//! `kiln bench-gemm`: throughput of kiln's packed f32 GEMM with B packed once (as weights are)
//! and with both operands packed at each call (as in a product of two activations, `matmul`,
//! `bmm`), on the same shape, bracketed by FMA peak probes so the numbers can be read as a
//! share of what the core delivered at the time.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use kiln_kernels::compute::peak::fma_gflops;
use kiln_kernels::compute::sgemm::{self, Epilogue, GemmScratch, MatRef, PackedB};
use serde::Serialize;

/// Arguments of `kiln bench-gemm`.
#[derive(clap::Args)]
pub struct Args {
    /// Rows of A and C.
    #[arg(long, default_value_t = 512,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub m: usize,
    /// Columns of B and C.
    #[arg(long, default_value_t = 512,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub n: usize,
    /// Depth.
    #[arg(long, default_value_t = 512,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub k: usize,
    /// Timed calls of each GEMM, alternating between the two (the medians are reported).
    #[arg(long, default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub iters: usize,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Summary {
    m: usize,
    n: usize,
    k: usize,
    iters: usize,
    kernel: &'static str,
    peak_isa: &'static str,
    peak_before_gflops: f64,
    peak_after_gflops: f64,
    packed_ms: f64,
    packed_gflops: f64,
    per_call_ms: f64,
    per_call_gflops: f64,
    /// Packed GEMM over the mean of the two probes, in percent.
    packed_of_peak: f64,
}

/// Medians of `iters` timed calls of `f` and of `g`, alternating call by call so that both
/// see the same machine load; two untimed calls of each first.
fn interleaved_medians(
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
    mut g: impl FnMut() -> Result<()>,
) -> Result<(Duration, Duration)> {
    for _ in 0..2 {
        f()?;
        g()?;
    }
    let (mut tf, mut tg) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
    let bar = crate::output::progress(iters, "timing");
    for _ in 0..iters {
        let start = Instant::now();
        f()?;
        tf.push(start.elapsed());
        let start = Instant::now();
        g()?;
        tg.push(start.elapsed());
        bar.inc(1);
    }
    bar.finish_and_clear();
    tf.sort_unstable();
    tg.sort_unstable();
    Ok((tf[iters / 2], tg[iters / 2]))
}

/// Runs `kiln bench-gemm`.
pub fn run(args: Args) -> Result<ExitCode> {
    let (m, n, k) = (args.m, args.n, args.k);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut random = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    let a = random(m * k);
    let b = random(k * n);
    let mut c = vec![0f32; m * n];
    let probe = Duration::from_millis(500);

    let before = fma_gflops(probe);
    let am = MatRef::new(&a, m, k, k, 1)?;
    let pb = PackedB::new(MatRef::new(&b, k, n, n, 1)?)?;
    let mut scratch = GemmScratch::default();
    let bm = MatRef::new(&b, k, n, n, 1)?;
    let mut c2 = c.clone();
    let mut scratch2 = GemmScratch::default();
    let (packed, per_call) = interleaved_medians(
        args.iters,
        || {
            sgemm::gemm_packed_b(am, &pb, &mut c, n, &Epilogue::NONE, &mut scratch)?;
            Ok(())
        },
        || {
            sgemm::gemm(am, bm, &mut c2, n, &Epilogue::NONE, &mut scratch2)?;
            Ok(())
        },
    )?;
    let after = fma_gflops(probe);

    let flops = 2.0 * (m * n * k) as f64;
    let gflops = |d: Duration| flops / d.as_secs_f64() / 1e9;
    let packed_gflops = gflops(packed);
    let s = Summary {
        m,
        n,
        k,
        iters: args.iters,
        kernel: sgemm::selected().name,
        peak_isa: before.isa,
        peak_before_gflops: before.gflops,
        peak_after_gflops: after.gflops,
        packed_ms: packed.as_secs_f64() * 1e3,
        packed_gflops,
        per_call_ms: per_call.as_secs_f64() * 1e3,
        per_call_gflops: gflops(per_call),
        packed_of_peak: packed_gflops / ((before.gflops + after.gflops) / 2.0) * 100.0,
    };
    if args.json {
        crate::output::print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("sgemm {m}x{n}x{k}, kernel {}, median of {} interleaved calls", s.kernel, s.iters);
    outln!("  FMA peak ({}) before: {:7.1} GFLOP/s", s.peak_isa, s.peak_before_gflops);
    outln!(
        "  packed GEMM (B packed once): {:7.1} GFLOP/s ({:.3} ms)",
        s.packed_gflops,
        s.packed_ms
    );
    outln!(
        "  both packed per call:        {:7.1} GFLOP/s ({:.3} ms)",
        s.per_call_gflops,
        s.per_call_ms
    );
    outln!("  FMA peak ({}) after:  {:7.1} GFLOP/s", s.peak_isa, s.peak_after_gflops);
    outln!("  packed GEMM / mean peak: {:.1}%", s.packed_of_peak);
    Ok(ExitCode::SUCCESS)
}
