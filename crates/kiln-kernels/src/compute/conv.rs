//! Convolution lowering: im2col (gather input patches into a `[C*KH*KW, OH*OW]` matrix) and
//! col2im (scatter-add patches back, for transposed convolution). Both take element strides, so
//! contiguous and channels-last inputs work without a layout copy.

/// Geometry of one 2-D convolution (1-D convolutions use `h = kh = oh = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Input channels (per group).
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Padding (h, w).
    pub pad: [usize; 2],
    /// Dilation (h, w).
    pub dil: [usize; 2],
}

/// Gathers patches of `input` (channel, row, column strides `cs`, `hs`, `ws`) into `col`
/// (`[c*kh*kw, oh*ow]`, row-major); padding taps are zero.
pub fn im2col<T: Copy + Default>(
    g: &Geometry,
    input: &[T],
    [cs, hs, ws]: [usize; 3],
    col: &mut [T],
) {
    let plane = g.oh * g.ow;
    let mut row = 0;
    for ci in 0..g.c {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let dst = &mut col[row * plane..(row + 1) * plane];
                row += 1;
                for oy in 0..g.oh {
                    let iy = (oy * g.stride[0] + ky * g.dil[0]) as isize - g.pad[0] as isize;
                    let line = &mut dst[oy * g.ow..(oy + 1) * g.ow];
                    if iy < 0 || iy as usize >= g.h {
                        line.fill(T::default());
                        continue;
                    }
                    let base = ci * cs + iy as usize * hs;
                    for (ox, d) in line.iter_mut().enumerate() {
                        let ix = (ox * g.stride[1] + kx * g.dil[1]) as isize - g.pad[1] as isize;
                        *d = if ix < 0 || ix as usize >= g.w {
                            T::default()
                        } else {
                            input[base + ix as usize * ws]
                        };
                    }
                }
            }
        }
    }
}

/// Scatter-adds `col` (`[c*kh*kw, oh*ow]` over the *input* grid `h x w` of a transposed
/// convolution) into `out` (channel, row, column strides), the adjoint of [`im2col`]: here
/// `g.h, g.w` is the transposed conv's input size and `g.oh, g.ow` its output size.
pub fn col2im<T: Copy + std::ops::AddAssign>(
    g: &Geometry,
    col: &[T],
    out: &mut [T],
    [cs, hs, ws]: [usize; 3],
) {
    let plane = g.h * g.w;
    let mut row = 0;
    for ci in 0..g.c {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let src = &col[row * plane..(row + 1) * plane];
                row += 1;
                for iy in 0..g.h {
                    let oy = (iy * g.stride[0] + ky * g.dil[0]) as isize - g.pad[0] as isize;
                    if oy < 0 || oy as usize >= g.oh {
                        continue;
                    }
                    for ix in 0..g.w {
                        let ox = (ix * g.stride[1] + kx * g.dil[1]) as isize - g.pad[1] as isize;
                        if ox < 0 || ox as usize >= g.ow {
                            continue;
                        }
                        out[ci * cs + oy as usize * hs + ox as usize * ws] += src[iy * g.w + ix];
                    }
                }
            }
        }
    }
}

/// Direct reference convolution (one group) for tests: `out[o, y, x] = sum w[o, c, ky, kx] *
/// in[c, y*s + ky*d - p, ...]`, contiguous operands.
pub fn conv_ref(g: &Geometry, oc: usize, input: &[f64], weight: &[f64], out: &mut [f64]) {
    for o in 0..oc {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let mut acc = 0.0;
                for c in 0..g.c {
                    for ky in 0..g.kh {
                        for kx in 0..g.kw {
                            let iy =
                                (oy * g.stride[0] + ky * g.dil[0]) as isize - g.pad[0] as isize;
                            let ix =
                                (ox * g.stride[1] + kx * g.dil[1]) as isize - g.pad[1] as isize;
                            if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w {
                                acc += weight[((o * g.c + c) * g.kh + ky) * g.kw + kx]
                                    * input[(c * g.h + iy as usize) * g.w + ix as usize];
                            }
                        }
                    }
                }
                out[(o * g.oh + oy) * g.ow + ox] = acc;
            }
        }
    }
}
