//! Output re-layout: from the tiled buffer the Edge TPU writes to the dense YXZ (row-major y,
//! then x, then z) tensor, following libedgetpu's `OutputLayerInformation::Relayout` decision
//! tree exactly, with every map index and every source and destination range checked.
//!
//! Sizes: `padded = size_bytes * E` (E = `execution_count_per_inference`), `actual =
//! num_elements * data type size * E`, where `num_elements` is the product of `Layer.shape`'s
//! ranges when present, otherwise `y * x * z`.

use super::data_type_size;
use super::schema::{self, Layer};
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.relayout";

/// Largest number of dimensions of a `TensorShape` (batch, w, y, x, z).
pub const MAX_DIMS: usize = 5;

/// Sizes and dimensions of an output layer, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// `y_dim`.
    pub y: usize,
    /// `x_dim`.
    pub x: usize,
    /// `z_dim`.
    pub z: usize,
    /// Bytes per element.
    pub dts: usize,
    /// `execution_count_per_inference`.
    pub executions: usize,
    /// `size_bytes * E`: the buffer the device writes.
    pub padded_size: usize,
    /// `num_elements * dts * E`: the dense result.
    pub actual_size: usize,
    /// `Layer.shape` as inclusive ranges, when present.
    pub shape: Option<Vec<(i32, i32)>>,
}

fn bad(field: &str, reason: impl Into<String>) -> Error {
    Error::invalid(FORMAT, field, None, reason)
}

fn dim(v: i32, field: &str) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&d| d >= 1)
        .ok_or_else(|| bad(field, format!("{v} is not a positive size")))
}

fn shape_ranges(s: schema::TensorShape<'_>, field: &str) -> Result<Vec<(i32, i32)>> {
    let dims: Vec<(i32, i32)> =
        s.dimension().map(|v| v.iter().map(|r| (r.start(), r.end())).collect()).unwrap_or_default();
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(bad(field, format!("{} dimensions (1..={MAX_DIMS} allowed)", dims.len())));
    }
    for (d, &(start, end)) in dims.iter().enumerate() {
        if start > end {
            return Err(bad(
                &format!("{field}.dimension[{d}]"),
                format!("start {start} > end {end}"),
            ));
        }
    }
    Ok(dims)
}

fn range_len(r: (i32, i32)) -> usize {
    (i64::from(r.1) - i64::from(r.0) + 1) as usize
}

fn checked_product(it: impl IntoIterator<Item = usize>, field: &str) -> Result<usize> {
    it.into_iter()
        .try_fold(1usize, |acc, v| acc.checked_mul(v))
        .ok_or_else(|| bad(field, "size overflows"))
}

impl Geometry {
    /// Validates the sizes of `layer`.
    pub fn of(layer: &Layer<'_>) -> Result<Self> {
        let dts = data_type_size(layer.data_type()).ok_or_else(|| {
            bad("data_type", format!("unknown data type {}", layer.data_type().0))
        })?;
        let y = dim(layer.y_dim(), "y_dim")?;
        let x = dim(layer.x_dim(), "x_dim")?;
        let z = dim(layer.z_dim(), "z_dim")?;
        let executions =
            dim(layer.execution_count_per_inference(), "execution_count_per_inference")?;
        let size =
            usize::try_from(layer.size_bytes()).map_err(|_| bad("size_bytes", "negative"))?;
        let padded_size =
            size.checked_mul(executions).ok_or_else(|| bad("size_bytes", "overflows"))?;
        let shape = layer.shape().map(|s| shape_ranges(s, "shape")).transpose()?;
        let elements = match &shape {
            Some(dims) => checked_product(dims.iter().map(|&r| range_len(r)), "shape")?,
            None => checked_product([y, x, z], "dims")?,
        };
        let actual_size = checked_product([elements, dts, executions], "size")?;
        if actual_size > padded_size {
            return Err(bad(
                "size_bytes",
                format!("{actual_size} bytes of elements do not fit the padded size {padded_size}"),
            ));
        }
        Ok(Geometry { y, x, z, dts, executions, padded_size, actual_size, shape })
    }

    /// Bytes of one z column.
    pub fn z_bytes(&self) -> usize {
        self.z * self.dts
    }

    /// Length of `Layer.shape` dimension 0, 1 when the shape is absent.
    pub fn batch_dim(&self) -> usize {
        self.shape.as_ref().and_then(|s| s.first()).map_or(1, |&r| range_len(r))
    }
}

/// The six `OutputLayout` maps, copied out and checked against the dimensions.
#[derive(Clone, Debug)]
pub struct TileMaps {
    y_tile: Vec<i32>,
    x_tile: Vec<i32>,
    tile_offset: Vec<i32>,
    x_local_byte: Vec<i32>,
    y_local_y: Vec<i32>,
    x_row_size: Vec<i32>,
}

impl TileMaps {
    /// Reads `layout` for an output of `y` rows and `x` columns.
    pub fn new(layout: schema::OutputLayout<'_>, y: usize, x: usize) -> Result<Self> {
        let get = |v: Option<flatbuffers::Vector<'_, i32>>,
                   name: &str,
                   want: Option<usize>|
         -> Result<Vec<i32>> {
            let v: Vec<i32> = v.map(|v| v.iter().collect()).unwrap_or_default();
            if let Some(n) = want {
                if v.len() < n {
                    return Err(bad(
                        &format!("layout.{name}"),
                        format!("{} entries for {n} coordinates", v.len()),
                    ));
                }
            }
            Ok(v)
        };
        Ok(TileMaps {
            y_tile: get(
                layout.y_coordinate_to_linear_tile_id_map(),
                "y_coordinate_to_linear_tile_id_map",
                Some(y),
            )?,
            x_tile: get(
                layout.x_coordinate_to_linear_tile_id_map(),
                "x_coordinate_to_linear_tile_id_map",
                Some(x),
            )?,
            tile_offset: get(
                layout.linearized_tile_byte_offset(),
                "linearized_tile_byte_offset",
                None,
            )?,
            x_local_byte: get(
                layout.x_coordinate_to_local_byte_offset(),
                "x_coordinate_to_local_byte_offset",
                Some(x),
            )?,
            y_local_y: get(
                layout.y_coordinate_to_local_y_offset(),
                "y_coordinate_to_local_y_offset",
                Some(y),
            )?,
            x_row_size: get(
                layout.x_coordinate_to_local_y_row_size(),
                "x_coordinate_to_local_y_row_size",
                Some(x),
            )?,
        })
    }

    /// libedgetpu `GetBufferIndex(y, x, z)`: the element index of (y, x, z) in the tiled
    /// buffer (the driver multiplies it by the data type size).
    pub fn buffer_index(&self, y: usize, x: usize, z: usize) -> Result<usize> {
        let at = |v: &[i32], i: usize, name: &str| {
            v.get(i)
                .map(|&e| i64::from(e))
                .ok_or_else(|| bad(&format!("layout.{name}[{i}]"), "index out of range"))
        };
        let tile = at(&self.y_tile, y, "y_coordinate_to_linear_tile_id_map")?
            + at(&self.x_tile, x, "x_coordinate_to_linear_tile_id_map")?;
        let tile =
            usize::try_from(tile).map_err(|_| bad("layout", format!("negative tile id {tile}")))?;
        let index = at(&self.tile_offset, tile, "linearized_tile_byte_offset")?
            + at(&self.y_local_y, y, "y_coordinate_to_local_y_offset")?
                * at(&self.x_row_size, x, "x_coordinate_to_local_y_row_size")?
            + at(&self.x_local_byte, x, "x_coordinate_to_local_byte_offset")?
            + z as i64;
        usize::try_from(index)
            .map_err(|_| bad("layout", format!("negative buffer index {index} at y={y} x={x}")))
    }

    /// Run lengths of equal x tile ids (libedgetpu `active_tile_x_sizes`).
    pub fn x_runs(&self, x: usize) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, t) in self.x_tile.iter().take(x).enumerate() {
            match runs.last_mut() {
                Some((start, len)) if self.x_tile.get(*start) == Some(t) => *len += 1,
                _ => runs.push((i, 1)),
            }
        }
        runs
    }

    /// Number of distinct tile rows and columns used, for display.
    pub fn grid(&self, y: usize, x: usize) -> (usize, usize) {
        let runs = |v: &[i32], n: usize| {
            let mut v: Vec<i32> = v.iter().take(n).copied().collect();
            v.dedup();
            v.len()
        };
        (runs(&self.y_tile, y), runs(&self.x_tile, x))
    }
}

/// Copies `len` bytes from `src[from..]` to `dest[to..]`, both checked.
fn copy(dest: &mut [u8], to: usize, src: &[u8], from: usize, len: usize, what: &str) -> Result<()> {
    let s = from.checked_add(len).and_then(|end| src.get(from..end)).ok_or_else(|| {
        bad(
            what,
            format!(
                "source bytes {from}..{} outside the {}-byte buffer",
                from.saturating_add(len),
                src.len()
            ),
        )
    })?;
    let dest_len = dest.len();
    let d = to.checked_add(len).and_then(|end| dest.get_mut(to..end)).ok_or_else(|| {
        bad(
            what,
            format!("destination bytes {to}..{} outside {dest_len} bytes", to.saturating_add(len)),
        )
    })?;
    d.copy_from_slice(s);
    Ok(())
}

/// True when the layer has a single unpadded `shape_info` slice (libedgetpu `!NeedsRelayout`).
fn needs_relayout(out: Option<schema::OutputLayer<'_>>) -> Result<bool> {
    let Some(info) = out.and_then(|o| o.shape_info()) else { return Ok(true) };
    let slices: Vec<_> = info.slice_layout().map(|v| v.iter().collect()).unwrap_or_default();
    match slices.as_slice() {
        [one] => Ok(!is_no_padding_layout(&layout_of(*one, "shape_info.slice_layout[0]")?)),
        _ => Ok(true),
    }
}

/// A validated `TensorLayout`.
#[derive(Clone, Debug)]
struct SliceLayout {
    dims: Vec<(i32, i32)>,
    stride: Vec<i64>,
}

fn layout_of(l: schema::TensorLayout<'_>, field: &str) -> Result<SliceLayout> {
    let dims =
        shape_ranges(l.shape().ok_or_else(|| bad(field, "no shape"))?, &format!("{field}.shape"))?;
    let stride: Vec<i64> =
        l.stride().map(|v| v.iter().map(i64::from).collect()).unwrap_or_default();
    if stride.len() != dims.len() {
        return Err(bad(field, format!("{} strides for {} dimensions", stride.len(), dims.len())));
    }
    // libedgetpu's layout validity: stride[d] >= stride[d + 1] * len[d + 1].
    for d in 0..dims.len().saturating_sub(1) {
        if stride[d] < stride[d + 1].saturating_mul(range_len(dims[d + 1]) as i64)
            || stride[d + 1] < 0
        {
            return Err(bad(&format!("{field}.stride[{d}]"), "strides overlap"));
        }
    }
    if stride.last().is_some_and(|&s| s < 0) {
        return Err(bad(field, "negative stride"));
    }
    Ok(SliceLayout { dims, stride })
}

fn is_no_padding_layout(l: &SliceLayout) -> bool {
    let mut expect = 1i64;
    for d in (0..l.dims.len()).rev() {
        if l.stride[d] != expect {
            return false;
        }
        expect = expect.saturating_mul(range_len(l.dims[d]) as i64);
    }
    true
}

fn packed_strides(dims: &[(i32, i32)]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(range_len(dims[d + 1]) as i64);
    }
    s
}

/// Re-lays out one batch's output buffer `src` (exactly `padded_size` bytes) into the dense
/// result (`actual_size` bytes), as libedgetpu does.
pub fn relayout(layer: &Layer<'_>, src: &[u8]) -> Result<Vec<u8>> {
    let g = Geometry::of(layer)?;
    if src.len() != g.padded_size {
        return Err(bad(
            "source",
            format!(
                "{} bytes, but layer {:?} writes {} (size_bytes x executions)",
                src.len(),
                layer.name().unwrap_or_default(),
                g.padded_size
            ),
        ));
    }
    let mut dest = vec![0u8; g.actual_size];
    let out = layer.any_layer_as_output_layer();
    let needs = needs_relayout(out)?;
    let z_bytes = g.z_bytes();
    let e = g.executions;
    if e == 1 {
        if !needs {
            let n = checked_product([g.batch_dim(), g.y, g.x, z_bytes], "size")?;
            copy(&mut dest, 0, src, 0, n, "memcpy")?;
            return Ok(dest);
        }
        if let Some(info) = out.and_then(|o| o.shape_info()) {
            relayout_with_shape_info(info, &g, src, &mut dest)?;
            return Ok(dest);
        }
    } else if g.padded_size == g.actual_size && !needs {
        copy(&mut dest, 0, src, 0, g.actual_size, "memcpy")?;
        return Ok(dest);
    }
    if g.y == 1 && g.x == 1 {
        if e == 1 || g.padded_size == g.actual_size {
            copy(&mut dest, 0, src, 0, z_bytes * e, "1-D memcpy")?;
        } else {
            let skip = (g.padded_size - g.actual_size) / e;
            let mut from = 0usize;
            for i in 0..e {
                copy(&mut dest, i * z_bytes, src, from, z_bytes, "1-D iteration")?;
                from = from
                    .checked_add(z_bytes + skip)
                    .ok_or_else(|| bad("1-D", "offset overflows"))?;
            }
        }
        return Ok(dest);
    }
    let layout = out.and_then(|o| o.layout()).ok_or_else(|| {
        bad("any_layer.layout", "a 3-D output (x_dim or y_dim > 1) needs an OutputLayout")
    })?;
    let maps = TileMaps::new(layout, g.y, g.x)?;
    relayout_tiles(&maps, &g, src, &mut dest)?;
    Ok(dest)
}

/// Step 4 of the driver's decision tree: 3-D output through the `OutputLayout` maps.
fn relayout_tiles(maps: &TileMaps, g: &Geometry, src: &[u8], dest: &mut [u8]) -> Result<()> {
    let dts = g.dts;
    let z_bytes = g.z_bytes();
    let byte_at = |y, x| -> Result<usize> {
        maps.buffer_index(y, x, 0)?
            .checked_mul(dts)
            .ok_or_else(|| bad("layout", "offset overflows"))
    };
    let first = maps.buffer_index(0, 0, 0)?;
    let next = if g.x > 1 { maps.buffer_index(0, 1, 0)? } else { maps.buffer_index(1, 0, 0)? };
    let z_bytes_padded = next
        .checked_sub(first)
        .and_then(|d| d.checked_mul(dts))
        .ok_or_else(|| bad("layout", "the second element comes before the first"))?;
    let runs = maps.x_runs(g.x);
    let mut to = 0usize;
    if z_bytes != z_bytes_padded {
        if g.executions != 1 {
            return Err(Error::unsupported(
                FORMAT,
                "execution_count_per_inference",
                None,
                "z-padded 3-D output executed more than once per inference",
            ));
        }
        // The driver's specialisations for 1- and 3-byte columns hard-code a step of 4.
        let step = if z_bytes == 1 || z_bytes == 3 { 4 } else { z_bytes_padded };
        for y in 0..g.y {
            for &(x0, len) in &runs {
                let mut from = byte_at(y, x0)?;
                for _ in 0..len {
                    copy(dest, to, src, from, z_bytes, "z-padded column")?;
                    to += z_bytes;
                    from =
                        from.checked_add(step).ok_or_else(|| bad("layout", "offset overflows"))?;
                }
            }
        }
        return Ok(());
    }
    let y_split = maps.y_tile.first() != maps.y_tile.get(g.y - 1);
    if runs.len() > 1 || y_split {
        if g.executions != 1 {
            return Err(Error::unsupported(
                FORMAT,
                "execution_count_per_inference",
                None,
                "tiled 3-D output executed more than once per inference",
            ));
        }
        for y in 0..g.y {
            for &(x0, len) in &runs {
                let n = z_bytes * len;
                copy(dest, to, src, byte_at(y, x0)?, n, "tile row")?;
                to += n;
            }
        }
        return Ok(());
    }
    let n = checked_product([g.x, g.y, z_bytes, g.executions], "size")?;
    copy(dest, 0, src, 0, n, "single-tile memcpy")
}

/// libedgetpu `RelayoutWithShapeInformation`: copy every element of every slice from its
/// strided source position to its packed position in `Layer.shape`.
fn relayout_with_shape_info(
    info: schema::OutputShapeInfo<'_>,
    g: &Geometry,
    src: &[u8],
    dest: &mut [u8],
) -> Result<()> {
    let dst_dims = g.shape.clone().ok_or_else(|| bad("shape", "shape_info needs Layer.shape"))?;
    let dst_stride = packed_strides(&dst_dims);
    let layouts: Vec<_> = info.slice_layout().map(|v| v.iter().collect()).unwrap_or_default();
    let offsets: Vec<i32> = info.slice_offset().map(|v| v.iter().collect()).unwrap_or_default();
    if layouts.len() != offsets.len() {
        return Err(bad(
            "shape_info",
            format!("{} slice layouts but {} offsets", layouts.len(), offsets.len()),
        ));
    }
    let dts = g.dts as i64;
    let dest_elems = (g.actual_size / g.dts) as u64;
    // Each slice maps injectively into the destination; cap the total work anyway.
    let mut budget = dest_elems.saturating_mul(16).saturating_add(1024);
    for (i, (l, &off)) in layouts.iter().zip(&offsets).enumerate() {
        let field = format!("shape_info.slice_layout[{i}]");
        let s = layout_of(*l, &field)?;
        if off < 0 || i64::from(off) % dts != 0 {
            return Err(bad(
                &format!("shape_info.slice_offset[{i}]"),
                format!("{off} is not a non-negative multiple of {dts}"),
            ));
        }
        if s.dims.len() != dst_dims.len() {
            return Err(bad(
                &field,
                format!("{} dimensions, Layer.shape has {}", s.dims.len(), dst_dims.len()),
            ));
        }
        for (d, (&(a, b), &(c, e))) in s.dims.iter().zip(&dst_dims).enumerate() {
            if a < c || b > e {
                return Err(bad(
                    &format!("{field}.shape.dimension[{d}]"),
                    format!("[{a}, {b}] is outside Layer.shape [{c}, {e}]"),
                ));
            }
        }
        let count = checked_product(s.dims.iter().map(|&r| range_len(r)), &field)? as u64;
        budget = budget.checked_sub(count).ok_or_else(|| Error::Limit {
            format: FORMAT,
            what: "elements copied by shape_info slices".into(),
            value: count,
            limit: dest_elems.saturating_mul(16),
        })?;
        // Odometer over the slice's positions, last dimension fastest.
        let mut pos: Vec<i32> = s.dims.iter().map(|r| r.0).collect();
        'positions: loop {
            let mut si = 0i128;
            let mut di = 0i128;
            for d in 0..pos.len() {
                si += i128::from(s.stride[d]) * (i128::from(pos[d]) - i128::from(s.dims[d].0));
                di += i128::from(dst_stride[d]) * (i128::from(pos[d]) - i128::from(dst_dims[d].0));
            }
            let from =
                usize::try_from(i128::from(off) + si * i128::from(dts)).unwrap_or(usize::MAX);
            let to = usize::try_from(di * i128::from(dts)).unwrap_or(usize::MAX);
            copy(dest, to, src, from, g.dts, &field)?;
            let mut d = pos.len();
            while d > 0 {
                d -= 1;
                if pos[d] < s.dims[d].1 {
                    pos[d] += 1;
                    continue 'positions;
                }
                pos[d] = s.dims[d].0;
            }
            break;
        }
    }
    Ok(())
}
