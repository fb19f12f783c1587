//! Every channel of an activation multiplied by its own factor: `y[n, c, p] = x[n, c, p] *
//! s[n, c]`, the broadcast `mul` by which a squeeze-excite block scales its input, over NCHW
//! or channels-last (NHWC) activations.
//!
//! Each element is the one product `aten::mul.out` computes, so the results are the same bits
//! in either layout. Large activations split their rows (an image's pixels channels-last, its
//! channel planes NCHW) over the threads.

use super::conv2d::Layout;
use super::sgemm::GemmError;
use super::threads::{split, with_pieces, Threads, PARALLEL_ELEMENTS};

/// Row runs per available thread (short rows: the split costs little).
const TASKS_PER_THREAD: usize = 2;

/// `y = x * s` per channel: `x` and `y` hold `n` images of `channels` channels of `pixels`
/// pixels laid out `layout`, `s` holds `n x channels` factors (the layout of `[N, C, 1, 1]`
/// either way). An error when a slice does not hold those sizes.
pub fn scale_channels(
    x: &[f32],
    s: &[f32],
    [n, channels, pixels]: [usize; 3],
    layout: Layout,
    y: &mut [f32],
    threads: &Threads,
) -> Result<(), GemmError> {
    let planes = n.checked_mul(channels).ok_or(GemmError::Overflow("channel scale"))?;
    let len = planes.checked_mul(pixels).ok_or(GemmError::Overflow("channel scale"))?;
    if x.len() != len || y.len() != len || s.len() != planes {
        return Err(GemmError::Invalid("channel scale: tensor sizes differ from [N, C, pixels]"));
    }
    if len == 0 {
        return Ok(());
    }
    // Rows of contiguous elements: an image's pixels (each `channels` long, scaled by the
    // image's factors) channels-last, or its channel planes (each `pixels` long, one factor).
    let (rows, row) = match layout {
        Layout::Nhwc => (n * pixels, channels),
        Layout::Nchw => (planes, pixels),
    };
    let parts = match len >= PARALLEL_ELEMENTS {
        true => threads.tasks_for(TASKS_PER_THREAD, rows),
        false => 1,
    };
    threads.for_each(with_pieces(split(rows, 1, parts), y, row), |(run, y)| {
        let first = run.start;
        let x = &x[first * row..][..run.len() * row];
        for (i, (y, x)) in y.chunks_exact_mut(row).zip(x.chunks_exact(row)).enumerate() {
            let r = first + i;
            match layout {
                Layout::Nhwc => {
                    let s = &s[r / pixels * channels..][..channels];
                    y.iter_mut().zip(x.iter().zip(s)).for_each(|(y, (&x, &s))| *y = x * s);
                }
                Layout::Nchw => {
                    let s = s[r];
                    y.iter_mut().zip(x).for_each(|(y, &x)| *y = x * s);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x` `[n, c, p]` NCHW as NHWC.
    fn to_nhwc(x: &[f32], [n, c, p]: [usize; 3]) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for i in 0..n {
            for ch in 0..c {
                for px in 0..p {
                    out[(i * p + px) * c + ch] = x[(i * c + ch) * p + px];
                }
            }
        }
        out
    }

    #[test]
    fn both_layouts_give_each_element_times_its_channel_factor_on_any_thread_count() {
        let sizes @ [n, c, p] = [2, 19, 1000];
        let x: Vec<f32> = (0..n * c * p).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let s: Vec<f32> = (0..n * c).map(|i| 0.5 + i as f32 * 0.125).collect();
        let want: Vec<f32> = x.iter().enumerate().map(|(i, &v)| v * s[i / p]).collect();
        for count in 1..=4 {
            let threads = Threads::new(count).unwrap();
            let mut y = vec![f32::NAN; x.len()];
            scale_channels(&x, &s, sizes, Layout::Nchw, &mut y, &threads).unwrap();
            assert_eq!(y, want, "NCHW, {count} threads");
            let mut y = vec![f32::NAN; x.len()];
            scale_channels(&to_nhwc(&x, sizes), &s, sizes, Layout::Nhwc, &mut y, &threads).unwrap();
            assert_eq!(y, to_nhwc(&want, sizes), "NHWC, {count} threads");
        }
    }

    #[test]
    fn slices_of_other_sizes_are_refused() {
        let threads = Threads::new(1).unwrap();
        let mut y = vec![0.0; 12];
        let err = scale_channels(&[0.0; 12], &[1.0; 4], [1, 3, 4], Layout::Nhwc, &mut y, &threads);
        assert!(matches!(err, Err(GemmError::Invalid(_))));
        let err = scale_channels(&[0.0; 11], &[1.0; 3], [1, 3, 4], Layout::Nchw, &mut y, &threads);
        assert!(matches!(err, Err(GemmError::Invalid(_))));
    }
}
