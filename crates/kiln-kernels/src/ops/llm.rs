//! ExecuTorch's LLM custom operators (`extension/llm/custom_ops`, registered by
//! `libcustom_ops_aot_lib`), as the llama exporter emits them with `--use_sdpa_with_kv_cache`:
//!
//! - `llama::update_cache.out(value [B, T, H, D], cache [B, S, H, D], start_pos)` copies the
//!   new keys or values into rows `start_pos .. start_pos + T` of the cache **in place**; its
//!   `out` is a dummy returned untouched (`op_update_cache.cpp`).
//! - `llama::custom_sdpa.out(q [B, T, H, D], k, v [B, S, Hkv, D], start_pos, attn_mask?,
//!   dropout_p, is_causal, scale?)`: attention of each query row over the first
//!   `start_pos + T` cache rows, causal (query `i` sits at position `start_pos + i` and sees keys
//!   `0 ..= start_pos + i`), grouped-query heads (query head `h` reads KV head
//!   `h / (H / Hkv)`), scores scaled once by `scale` or `1 / sqrt(D)` (`op_sdpa.cpp`,
//!   `op_sdpa_impl.h`). ExecuTorch tiles it flash-attention style with an online softmax;
//!   this kernel takes the softmax of each row whole (kiln's vectorized `exp`), which agrees
//!   to float rounding.

use crate::compute::activation::exp_in_place;
use crate::compute::threads::{split, with_pieces};
use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef, OutKind, OutSlot};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::resize;
use crate::tensor::{TensorMut, TensorRef};

type KResult = Result<(), KernelError>;

/// `update_cache` writes schema position 1 (`cache`); `out` (position 3) is returned untouched.
static UPDATE_CACHE_OUTS: [OutSlot; 1] = [OutSlot { position: 1, kind: OutKind::Tensor }];

/// The four sizes of a `[B, S, H, D]` tensor.
fn bshd(ctx: &KernelContext, t: &[usize], name: &'static str) -> Result<[usize; 4], KernelError> {
    <[usize; 4]>::try_from(t).map_err(|_| ctx.shape_err(name, "[B, S, H, D]", t))
}

fn dense(ctx: &KernelContext, t: &TensorRef<'_>, name: &'static str) -> KResult {
    if t.shape().is_dense_row_major() {
        Ok(())
    } else {
        Err(ctx.invalid(name, "not contiguous in row-major order"))
    }
}

/// `start_pos` as a row index such that rows `start_pos .. start_pos + t` fit in `s` rows.
fn window(ctx: &KernelContext, start_pos: i64, t: usize, s: usize) -> Result<usize, KernelError> {
    usize::try_from(start_pos).ok().filter(|&p| p < s && p + t <= s).ok_or_else(|| {
        ctx.invalid(
            "start_pos",
            format!("{start_pos} with {t} new rows passes the cache's {s} rows"),
        )
    })
}

fn update_cache(
    ctx: &KernelContext,
    value: &TensorRef<'_>,
    cache: &mut TensorMut<'_>,
    start_pos: i64,
) -> KResult {
    let [b, t, h, d] = bshd(ctx, value.sizes(), "value")?;
    let cs = bshd(ctx, cache.sizes(), "cache")?;
    if value.dtype() != cache.dtype() {
        return Err(ctx.dtype_err("cache", value.dtype().to_string(), cache.dtype()));
    }
    if cs[0] != b || cs[2] != h || cs[3] != d {
        return Err(ctx.shape_err("cache", format!("[{b}, S, {h}, {d}]"), &cs));
    }
    dense(ctx, value, "value")?;
    dense(ctx, &cache.as_ref(), "cache")?;
    let s = cs[1];
    let start = window(ctx, start_pos, t, s)?;
    let row = h * d * value.dtype().size();
    let src = value.bytes();
    let dst = cache.bytes_mut();
    for bi in 0..b {
        let from = &src[bi * t * row..(bi + 1) * t * row];
        dst[(bi * s + start) * row..(bi * s + start + t) * row].copy_from_slice(from);
    }
    Ok(())
}

/// What `custom_sdpa` attends with besides q, k and v.
struct SdpaOptions<'a> {
    start_pos: i64,
    /// A float `[T, >= start_pos + T]` mask added to the scores.
    mask: Option<TensorRef<'a>>,
    causal: bool,
    scale: Option<f64>,
}

fn custom_sdpa(
    ctx: &KernelContext,
    (q, k, v): (&TensorRef<'_>, &TensorRef<'_>, &TensorRef<'_>),
    opts: SdpaOptions<'_>,
    out: &mut TensorMut<'_>,
) -> KResult {
    let [b, t, h, d] = bshd(ctx, q.sizes(), "query")?;
    let [kb, s, hkv, kd] = bshd(ctx, k.sizes(), "key")?;
    if kb != b || kd != d {
        return Err(ctx.shape_err("key", format!("[{b}, S, Hkv, {d}]"), k.sizes()));
    }
    if v.sizes() != k.sizes() {
        return Err(ctx.shape_err("value", format!("{:?} like the key", k.sizes()), v.sizes()));
    }
    if hkv == 0 || h % hkv != 0 {
        return Err(ctx.shape_err("key", format!("a head count dividing {h}"), k.sizes()));
    }
    for (tensor, name) in [(q, "query"), (k, "key"), (v, "value")] {
        if tensor.dtype() != DType::Float {
            return Err(ctx.dtype_err(name, "float32", tensor.dtype()));
        }
        dense(ctx, tensor, name)?;
    }
    if opts.causal && opts.mask.is_some() {
        return Err(ctx.invalid("attn_mask", "given together with is_causal"));
    }
    let start = window(ctx, opts.start_pos, t, s)?;
    let keys = start + t;
    let mask = match &opts.mask {
        Some(m) => {
            if m.dtype() != DType::Float {
                return Err(ctx.dtype_err("attn_mask", "float32", m.dtype()));
            }
            dense(ctx, m, "attn_mask")?;
            match *m.sizes() {
                [mt, mk] if mt == t && mk >= keys => {
                    Some((m.as_slice::<f32>().map_err(|e| ctx.tensor_err("attn_mask", e))?, mk))
                }
                _ => {
                    return Err(ctx.shape_err("attn_mask", format!("[{t}, >= {keys}]"), m.sizes()))
                }
            }
        }
        None => None,
    };
    let scale = opts.scale.unwrap_or(1.0 / (d as f64).sqrt()) as f32;
    resize(ctx, out, "out", &[b, t, h, d])?;
    let (qs, ks, vs) = (
        q.as_slice::<f32>().map_err(|e| ctx.tensor_err("query", e))?,
        k.as_slice::<f32>().map_err(|e| ctx.tensor_err("key", e))?,
        v.as_slice::<f32>().map_err(|e| ctx.tensor_err("value", e))?,
    );
    let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
    let group = h / hkv;
    // One output row a (batch, query, head), the rows split over the threads: a decode step's
    // heads, a prefill's queries and heads.
    let rows = b * t * h;
    // A key of a row is a dot product and a multiply-add of `d` values: worth a split from
    // a decode step's dozen heads over some dozen keys on.
    let parts = ctx.threads.tasks_for_elements(rows * keys * d / 4, rows);
    // Rows `run` of one query (`b`, `i`): key by key, every head of the run, so that a key's
    // row of the cache ([S, Hkv, D]: all heads side by side) is read once, in order, rather
    // than a head's slice of every row at a time. Each row's operations and their order are
    // those of one head alone.
    let heads = |scores: &mut Vec<f32>, run: std::ops::Range<usize>, out: &mut [f32]| {
        let (bi, i) = (run.start / (t * h), (run.start / h) % t);
        let seen = if opts.causal { start + i + 1 } else { keys };
        let kv_at = |j: usize, r: usize| ((bi * s + j) * hkv + (r % h) / group) * d;
        scores.resize(run.len() * keys, 0.0);
        for j in 0..seen {
            let m = mask.map_or(0.0, |(m, mk)| m[i * mk + j]);
            for (x, r) in run.clone().enumerate() {
                let (qrow, krow) = (&qs[r * d..][..d], &ks[kv_at(j, r)..][..d]);
                scores[x * keys + j] = dot(qrow, krow) * scale + m;
            }
        }
        let mut sums = Vec::with_capacity(run.len());
        for (x, orow) in out.chunks_exact_mut(d).enumerate() {
            orow.fill(0.0);
            let row = &mut scores[x * keys..][..seen];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if max == f32::NEG_INFINITY {
                // Every key masked: ExecuTorch's online softmax leaves the row zero.
                sums.push(None);
                continue;
            }
            row.iter_mut().for_each(|sc| *sc -= max);
            exp_in_place(row);
            sums.push(Some(row.iter().sum::<f32>()));
        }
        for j in 0..seen {
            for (x, (r, orow)) in run.clone().zip(out.chunks_exact_mut(d)).enumerate() {
                let Some(sum) = sums[x] else { continue };
                let w = scores[x * keys + j] / sum;
                for (acc, &v) in orow.iter_mut().zip(&vs[kv_at(j, r)..][..d]) {
                    *acc += w * v;
                }
            }
        }
    };
    let tasks = with_pieces(split(rows, 1, parts), o, d);
    ctx.threads.for_each_with(tasks, &mut Vec::new(), |scores, (run, out)| {
        // The run cut where its query changes.
        let mut first = run.start;
        let mut out = out;
        while first < run.end {
            let last = ((first / h + 1) * h).min(run.end);
            let (here, rest) = out.split_at_mut((last - first) * d);
            heads(scores, first..last, here);
            out = rest;
            first = last;
        }
    });
    Ok(())
}

/// `Σ a[i] * b[i]` in eight interleaved partial sums (vectorizable), then added together.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        KernelDef {
            name: "llama::update_cache.out",
            arity: 5,
            outs: &UPDATE_CACHE_OUTS,
            in_place: true,
            run: |c, a, o| {
                let r = Args::new(c, a);
                let value = r.tensor(0, "value")?;
                let start_pos = r.int(2, "start_pos")?;
                update_cache(c, &value, out_tensor(c, o, 0, "cache")?, start_pos)
            },
        },
        out1("llama::custom_sdpa.out", 8, |c, a, o| {
            let r = Args::new(c, a);
            let (q, k, v) = (r.tensor(0, "query")?, r.tensor(1, "key")?, r.tensor(2, "value")?);
            let dropout = r.double(5, "dropout_p")?;
            if dropout != 0.0 {
                return Err(c.invalid("dropout_p", format!("{dropout}: only 0 is supported")));
            }
            let opts = SdpaOptions {
                start_pos: r.int(3, "start_pos")?,
                mask: r.opt_tensor(4, "attn_mask")?,
                causal: r.bool(6, "is_causal")?,
                scale: r.opt_double(7, "scale")?,
            };
            custom_sdpa(c, (&q, &k, &v), opts, out_tensor(c, o, 0, "out")?)
        }),
    ]
}
