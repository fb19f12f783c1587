//! The inputs of `kiln run` and `kiln bench`: `.npy` files given in order or by name, or
//! generated from a seed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kiln_format::npy::Npy;
use kiln_kernels::DType;
use kiln_runtime::{Input, TensorInput, TensorMeta, ValueMeta};

/// The seed of generated inputs when `--seed` is not given.
pub const DEFAULT_SEED: u64 = 0x6b69_6c6e;

/// One `--input`: `FILE.npy` (the next input in order) or `NAME=FILE.npy`, where NAME is an
/// input's name in the program or its index.
#[derive(Clone, Debug)]
pub enum InputArg {
    /// The next input in order.
    Positional(PathBuf),
    /// The input of this name or index.
    Named(String, PathBuf),
}

/// Parses `--input`: text before the first `=` that holds no `/` is a name.
pub fn parse_input_arg(s: &str) -> Result<InputArg, String> {
    match s.split_once('=') {
        Some(("", _)) => Err(format!("{s:?} has no input name before '='")),
        Some((_, "")) => Err(format!("{s:?} has no file after '='")),
        Some((name, file)) if !name.contains('/') => {
            Ok(InputArg::Named(name.to_string(), PathBuf::from(file)))
        }
        _ if s.is_empty() => Err("an empty file name".to_string()),
        _ => Ok(InputArg::Positional(PathBuf::from(s))),
    }
}

/// An array read from a `.npy` file or generated.
pub struct Array {
    /// Element type.
    pub dtype: DType,
    /// Sizes.
    pub sizes: Vec<usize>,
    /// Little-endian elements, row-major.
    pub data: Vec<u8>,
}

/// Reads a `.npy` file (`-` for standard input); `want` is the dtype the reader expects, which
/// decides how 16-bit unsigned data is read.
pub fn read_npy(path: &Path, want: Option<DType>) -> Result<Array> {
    let file = crate::input::read(path)?;
    let npy = Npy::parse(file.bytes()).with_context(|| format!("{}", path.display()))?;
    if npy.fortran_order {
        bail!("{}: Fortran-order arrays are not supported; save it C-contiguous", path.display());
    }
    let dtype = DType::from_npy_descr(&npy.descr, want)
        .with_context(|| format!("{}: dtype {} is not supported", path.display(), npy.descr))?;
    let sizes = npy
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(|| format!("{}: shape too large", path.display()))?;
    Ok(Array { dtype, sizes, data: npy.data.to_vec() })
}

/// splitmix64: a small deterministic generator for reproducible random inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A random tensor of the declared (upper-bound) shape: floats in [-1, 1), integers in
/// [0, 8), bools.
fn random_tensor(meta: &TensorMeta, rng: &mut Rng) -> Array {
    let n: usize = meta.sizes.iter().product();
    let mut data = Vec::with_capacity(n * meta.dtype.size());
    for _ in 0..n {
        let u = rng.unit();
        let small = (rng.next() % 8) as i64;
        match meta.dtype {
            DType::Float => data.extend_from_slice(&(u as f32).to_le_bytes()),
            DType::Double => data.extend_from_slice(&u.to_le_bytes()),
            DType::Half => data.extend_from_slice(&half::f16::from_f64(u).to_le_bytes()),
            DType::BFloat16 => data.extend_from_slice(&half::bf16::from_f64(u).to_le_bytes()),
            DType::Bool => data.push(u8::from(u >= 0.0)),
            d => data.extend_from_slice(&small.to_le_bytes()[..d.size()]),
        }
    }
    Array { dtype: meta.dtype, sizes: meta.sizes.clone(), data }
}

/// A float64 array for a float32 input, narrowed (with a warning naming the input).
fn narrow_double(array: Array, label: &str) -> Array {
    eprintln!("kiln: warning: {label}: float64 array cast to the method's float32");
    let data = array
        .data
        .chunks_exact(8)
        .flat_map(|c| (f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).to_le_bytes())
        .collect();
    Array { dtype: DType::Float, sizes: array.sizes, data }
}

/// Which `--input` file feeds each method input (`None`: generate it).
fn assign(
    method: &str,
    metas: &[ValueMeta],
    names: &[Option<String>],
    args: &[InputArg],
) -> Result<Vec<Option<PathBuf>>> {
    let positional: Vec<&PathBuf> = args
        .iter()
        .filter_map(|a| match a {
            InputArg::Positional(p) => Some(p),
            InputArg::Named(..) => None,
        })
        .collect();
    if !positional.is_empty() {
        if positional.len() != args.len() {
            return Err(
                crate::Usage("give every --input by name (NAME=FILE.npy) or none".into()).into()
            );
        }
        if positional.len() != metas.len() {
            bail!(
                "method {method} takes {} inputs, {} --input files given",
                metas.len(),
                positional.len()
            );
        }
        return Ok(positional.into_iter().map(|p| Some(p.clone())).collect());
    }
    let mut files: Vec<Option<PathBuf>> = vec![None; metas.len()];
    for arg in args {
        let InputArg::Named(name, path) = arg else { continue };
        let index = names
            .iter()
            .position(|n| n.as_deref() == Some(name.as_str()))
            .or_else(|| name.parse::<usize>().ok().filter(|&i| i < metas.len()))
            .with_context(|| {
                let known: Vec<String> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| n.clone().unwrap_or_else(|| i.to_string()))
                    .collect();
                format!("method {method} has no input {name:?} (inputs: {})", known.join(", "))
            })?;
        if files[index].replace(path.clone()).is_some() {
            return Err(crate::Usage(format!("input {name:?} given twice")).into());
        }
    }
    Ok(files)
}

/// A method's inputs, read from .npy files or generated, kept for repeated executes.
pub(crate) struct Inputs {
    arrays: Vec<Array>,
    metas: Vec<ValueMeta>,
    /// A label per input: its file, or `"random <dtype><sizes>"`.
    pub names: Vec<String>,
    /// Whether any input was generated.
    pub random: bool,
}

impl Inputs {
    /// Reads the `--input` files of `method` (`name` in messages; `input_names` from the
    /// program, where it has them) and generates every input not given from `seed`.
    pub(crate) fn prepare(
        method: &kiln_runtime::Method,
        name: &str,
        input_names: &[Option<String>],
        args: &[InputArg],
        seed: u64,
    ) -> Result<Inputs> {
        let metas = method.inputs();
        let files = assign(name, &metas, input_names, args)?;
        let mut rng = Rng(seed);
        let mut arrays: Vec<Array> = Vec::new();
        let mut labels = Vec::new();
        let mut random = false;
        for (i, (meta, file)) in metas.iter().zip(&files).enumerate() {
            let want = match meta {
                ValueMeta::Tensor(t) => Some(t.dtype),
                _ => None,
            };
            let shown = match input_names.get(i) {
                Some(Some(n)) => format!("input {i} ({n})"),
                _ => format!("input {i}"),
            };
            if let Some(path) = file {
                let mut array = read_npy(path, want)?;
                if array.dtype == DType::Double && want == Some(DType::Float) {
                    array = narrow_double(array, &format!("{shown}, {}", path.display()));
                }
                arrays.push(array);
                labels.push(path.display().to_string());
            } else if let ValueMeta::Tensor(t) = meta {
                arrays.push(random_tensor(t, &mut rng));
                labels.push(format!("random {}{:?}", t.dtype.name(), t.sizes));
                random = true;
            } else {
                bail!("method {name} {shown} is a {meta:?} value: give it with --input");
            }
        }
        Ok(Inputs { arrays, metas, names: labels, random })
    }

    /// The inputs as the runtime takes them.
    pub(crate) fn as_inputs(&self) -> Result<Vec<Input<'_>>> {
        self.arrays
            .iter()
            .zip(&self.metas)
            .map(|(a, meta)| {
                Ok(match meta {
                    ValueMeta::Tensor(_) => Input::Tensor(TensorInput {
                        dtype: a.dtype,
                        sizes: &a.sizes,
                        data: &a.data,
                    }),
                    ValueMeta::Int => Input::Int(i64::from_le_bytes(
                        a.data.get(..8).context("Int input")?.try_into()?,
                    )),
                    ValueMeta::Double => Input::Double(f64::from_le_bytes(
                        a.data.get(..8).context("Double input")?.try_into()?,
                    )),
                    ValueMeta::Bool => Input::Bool(a.data.first().is_some_and(|&b| b != 0)),
                    _ => Input::None,
                })
            })
            .collect::<Result<_>>()
    }
}

/// The names of a method's inputs from the program's pytree spec (`container_meta_type`):
/// keyword arguments and dictionary entries are named by their keys (nested keys joined by
/// `.`); others are `None`. Empty when the spec is absent, unreadable, or does not have one
/// leaf per input.
pub fn input_names(pte: &[u8], method: &str, inputs: usize) -> Vec<Option<String>> {
    let spec = kiln_format::pte::Program::open(pte)
        .ok()
        .and_then(|p| p.method_by_name(method).ok())
        .and_then(|m| m.container_meta().map(|(inp, _)| inp.to_string()));
    let Some(spec) = spec.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok()) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    if let Some(root) = spec.get(1) {
        leaves(root, &mut Vec::new(), &mut names);
    }
    if names.len() == inputs {
        names
    } else {
        Vec::new()
    }
}

/// Appends the name of every leaf under `node` (a pytree spec node) to `out`.
fn leaves(node: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Option<String>>) {
    let children = node.get("children_spec").and_then(|c| c.as_array());
    let Some(children) = children.filter(|c| !c.is_empty()) else {
        if node.get("type").is_some_and(|t| t.is_null()) {
            out.push((!path.is_empty()).then(|| path.join(".")));
        }
        return;
    };
    let keys: Option<Vec<String>> = (node.get("type").and_then(|t| t.as_str())
        == Some("builtins.dict"))
    .then(|| node.get("context").and_then(|c| c.as_str()))
    .flatten()
    .and_then(|c| serde_json::from_str(c).ok());
    for (i, child) in children.iter().enumerate() {
        let key = keys.as_ref().and_then(|k| k.get(i)).cloned();
        let pushed = key.is_some();
        if let Some(key) = key {
            path.push(key);
        }
        leaves(child, path, out);
        if pushed {
            path.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_arguments_by_position_and_by_name() {
        assert!(matches!(parse_input_arg("a.npy"), Ok(InputArg::Positional(_))));
        assert!(matches!(parse_input_arg("dir/a=b.npy"), Ok(InputArg::Positional(_))));
        match parse_input_arg("input_pos=p.npy") {
            Ok(InputArg::Named(n, p)) => {
                assert_eq!((n.as_str(), p.to_str()), ("input_pos", Some("p.npy")))
            }
            _ => panic!("not named"),
        }
        assert!(parse_input_arg("=a.npy").is_err());
        assert!(parse_input_arg("x=").is_err());
    }

    #[test]
    fn pytree_keyword_arguments_are_named() {
        let root: serde_json::Value = serde_json::from_str(
            r#"{"type": "builtins.tuple", "context": "null", "children_spec": [
                {"type": "builtins.tuple", "context": "null", "children_spec": [
                    {"type": null, "context": null, "children_spec": []},
                    {"type": "builtins.dict", "context": "[\"input_pos\"]", "children_spec": [
                        {"type": null, "context": null, "children_spec": []}]}]},
                {"type": "builtins.dict", "context": "[]", "children_spec": []}]}"#,
        )
        .unwrap();
        let mut names = Vec::new();
        leaves(&root, &mut Vec::new(), &mut names);
        assert_eq!(names, [None, Some("input_pos".to_string())]);
    }
}
