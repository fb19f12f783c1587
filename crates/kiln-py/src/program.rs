//! `kiln._kiln.Program`: a loaded ExecuTorch program whose methods stay loaded (planned,
//! compiled, weights packed) from one `run` to the next, as `kiln bench` keeps them; runs
//! from several threads each take an execution state of the method and go on at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use kiln_kernels::DType;
use kiln_runtime::llm::{GenerateOptions, Sampler, TextModel};
use kiln_runtime::{Input, Method, Output, TensorInput, ValueMeta};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::{self, InputError};

/// A loaded program (the Python class `kiln.Program` wraps it).
#[pyclass(frozen, module = "kiln._kiln")]
pub struct Program {
    program: kiln_runtime::Program,
    /// Execution states not running, by method name. A run takes one (or makes one: the
    /// method's compiled steps and packed weights are shared, see
    /// `kiln_runtime::Program::method`) and gives it back, so the lock is held only for that,
    /// never across a run.
    idle: Mutex<HashMap<String, Vec<Method>>>,
    /// The language model `generate` drives, once it has been used.
    text_model: Mutex<Option<TextModel>>,
}

impl Program {
    /// The loaded program.
    pub(crate) fn inner(&self) -> &kiln_runtime::Program {
        &self.program
    }

    /// `f` of an idle execution state of `method` (one loaded if none is), which then goes
    /// back to the idle ones: the lock is held to take and give it back, never across `f`.
    fn with_state<T>(
        &self,
        method: &str,
        f: impl FnOnce(&mut Method) -> T,
    ) -> kiln_runtime::Result<T> {
        let idle = lock(&self.idle).get_mut(method).and_then(Vec::pop);
        let mut state = match idle {
            Some(state) => state,
            None => self.program.method(method)?,
        };
        let out = f(&mut state);
        lock(&self.idle).entry(method.to_string()).or_default().push(state);
        Ok(out)
    }
}

/// One input as the Python layer hands it over.
enum Given<'py> {
    /// A tensor: dtype name, sizes and its bytes (C order, little-endian) as a uint8 array.
    Tensor(DType, Vec<usize>, PyReadonlyArray1<'py, u8>),
    /// A scalar or None.
    Scalar(Input<'static>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a method ran would leave it poisoned; kiln does not panic, and the
    // method's state is reset at the start of every run anyway.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The dtype called `name` (kiln's names, `float32`, `int64`, ...).
fn dtype(name: &str) -> PyResult<DType> {
    DType::ALL
        .into_iter()
        .filter(|d| d.is_supported())
        .find(|d| d.name() == name)
        .ok_or_else(|| InputError::new_err(format!("unknown dtype {name:?}")))
}

/// Declared inputs or outputs, each a tuple `(kind, dtype, shape, dynamic)`.
type Specs<'py> = Vec<Bound<'py, PyTuple>>;

/// A declared input or output as a tuple `(kind, dtype, shape, dynamic)`.
fn meta_tuple<'py>(py: Python<'py>, meta: &ValueMeta) -> PyResult<Bound<'py, PyTuple>> {
    let (kind, dtype, shape, dynamic): (&str, Option<&str>, Option<Vec<usize>>, bool) = match meta {
        ValueMeta::Tensor(t) => ("tensor", Some(t.dtype.name()), Some(t.sizes.clone()), t.dynamic),
        ValueMeta::Int => ("int", None, None, false),
        ValueMeta::Double => ("double", None, None, false),
        ValueMeta::Bool => ("bool", None, None, false),
        ValueMeta::String => ("string", None, None, false),
        ValueMeta::None => ("none", None, None, false),
        ValueMeta::List(kind) => (kind, None, None, false),
    };
    (kind, dtype, shape, dynamic).into_pyobject(py)
}

/// An output as the Python layer takes it: `(dtype, shape, uint8 array)` for a tensor (the
/// bytes moved into the array, no copy), the value itself for a scalar, string or None.
fn output<'py>(py: Python<'py>, out: Output) -> PyResult<Bound<'py, PyAny>> {
    Ok(match out {
        Output::Tensor(t) => {
            let data = PyArray1::from_vec(py, t.data);
            (t.dtype.name(), t.sizes, data).into_pyobject(py)?.into_any()
        }
        Output::Int(x) => x.into_pyobject(py)?.into_any(),
        Output::Double(x) => x.into_pyobject(py)?.into_any(),
        Output::Bool(x) => x.into_pyobject(py)?.to_owned().into_any(),
        Output::String(s) => s.into_pyobject(py)?.into_any(),
        Output::None => py.None().into_bound(py),
    })
}

/// Reads one input: a `(dtype, shape, uint8 array)` tuple for a tensor, else a Python bool,
/// int, float or None.
fn given<'py>(index: usize, item: &Bound<'py, PyAny>) -> PyResult<Given<'py>> {
    if item.is_none() {
        return Ok(Given::Scalar(Input::None));
    }
    if let Ok((name, sizes, data)) =
        item.extract::<(String, Vec<usize>, PyReadonlyArray1<'py, u8>)>()
    {
        return Ok(Given::Tensor(dtype(&name)?, sizes, data));
    }
    // bool before int: Python's True is also an int.
    if let Ok(b) = item.cast::<pyo3::types::PyBool>() {
        return Ok(Given::Scalar(Input::Bool(b.is_true())));
    }
    if let Ok(i) = item.extract::<i64>() {
        return Ok(Given::Scalar(Input::Int(i)));
    }
    if let Ok(x) = item.extract::<f64>() {
        return Ok(Given::Scalar(Input::Double(x)));
    }
    Err(InputError::new_err(format!(
        "input {index}: a {} is not an array, a number, a bool or None",
        item.get_type().name()?
    )))
}

#[pymethods]
impl Program {
    /// Loads (maps and verifies) the program at `path`; see `kiln.load`.
    #[new]
    #[pyo3(signature = (path, data=None, threads=None, max_memory=None, compile=true))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        data: Option<PathBuf>,
        threads: Option<u16>,
        max_memory: Option<u64>,
        compile: bool,
    ) -> PyResult<Self> {
        let program = py
            .detach(|| -> kiln_runtime::Result<kiln_runtime::Program> {
                let options = kiln_npu::load_options()
                    .with_compile(compile)
                    .with_threads(threads.map(usize::from))?
                    .with_memory_limit(max_memory);
                let mut builder = kiln_runtime::Program::builder().options(options);
                if let Some(data) = &data {
                    builder = builder.data_file(data, &path)?;
                }
                builder.load(&path)
            })
            .map_err(errors::runtime)?;
        Ok(Program { program, idle: Mutex::new(HashMap::new()), text_model: Mutex::new(None) })
    }

    /// The program's method names, in file order.
    #[getter]
    fn methods(&self) -> Vec<String> {
        self.program.method_names().into_iter().map(str::to_string).collect()
    }

    /// The declared inputs and outputs of `method`: two lists of
    /// `(kind, dtype, shape, dynamic)`.
    fn signature<'py>(&self, py: Python<'py>, method: &str) -> PyResult<(Specs<'py>, Specs<'py>)> {
        let inputs = errors::check(self.program.method_inputs(method))?;
        let outputs = errors::check(self.program.method_outputs(method))?;
        let inputs = inputs.iter().map(|m| meta_tuple(py, m)).collect::<PyResult<_>>()?;
        let outputs = outputs.iter().map(|m| meta_tuple(py, m)).collect::<PyResult<_>>()?;
        Ok((inputs, outputs))
    }

    /// How long loading `method` took, by stage, loading it if no run has: a dict of
    /// milliseconds (`map`, `verify`, `decode`: the program's; `compile`, `pack`: the
    /// method's; their `total`).
    fn load_times<'py>(&self, py: Python<'py>, method: &str) -> PyResult<Bound<'py, PyDict>> {
        let times = errors::check(py.detach(|| self.with_state(method, |m| m.load_times())))?;
        let d = PyDict::new(py);
        let ms = |t: std::time::Duration| t.as_secs_f64() * 1e3;
        d.set_item("map", ms(times.map))?;
        d.set_item("verify", ms(times.verify))?;
        d.set_item("decode", ms(times.decode))?;
        d.set_item("compile", ms(times.compile))?;
        d.set_item("pack", ms(times.pack))?;
        d.set_item("total", ms(times.total()))?;
        Ok(d)
    }

    /// What `method` holds in memory, loading it if no run has: a dict of bytes by kind
    /// (`packed_weights`, `activations` of one execution state, `constants_made`,
    /// `mapped_in_place`, their `total`; `gathered_tables`, embedding tables read in place,
    /// resident only where runs read them and not in the total), with this process's
    /// resident set and its peak so far (`resident`, `peak`; None where the OS does not say).
    fn memory<'py>(&self, py: Python<'py>, method: &str) -> PyResult<Bound<'py, PyDict>> {
        let f = errors::check(py.detach(|| self.with_state(method, |m| m.footprint())))?;
        let d = PyDict::new(py);
        d.set_item("packed_weights", f.packed_weights)?;
        d.set_item("activations", f.activations)?;
        d.set_item("constants_made", f.constants_made)?;
        d.set_item("mapped_in_place", f.mapped_in_place)?;
        d.set_item("gathered_tables", f.gathered_tables)?;
        d.set_item("total", f.total())?;
        let resident = kiln_runtime::footprint::resident();
        d.set_item("resident", resident.map(|r| r.0))?;
        d.set_item("peak", resident.map(|r| r.1))?;
        Ok(d)
    }

    /// Runs `method` on `inputs` (each `(dtype, shape, uint8 array)` or a scalar) and returns
    /// its outputs. The method is loaded on its first run and kept; runs from several threads
    /// each take their own execution state and go on at once. The interpreter's lock is
    /// released while it loads and runs.
    fn run<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        inputs: &Bound<'py, PyList>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let given: Vec<Given<'py>> =
            inputs.iter().enumerate().map(|(i, item)| given(i, &item)).collect::<PyResult<_>>()?;
        let mut slices = Vec::with_capacity(given.len());
        for (i, g) in given.iter().enumerate() {
            slices.push(match g {
                Given::Tensor(dtype, sizes, data) => {
                    let data = data.as_slice().map_err(|e| {
                        InputError::new_err(format!("input {i}: the array's bytes: {e}"))
                    })?;
                    Input::Tensor(TensorInput { dtype: *dtype, sizes, data })
                }
                Given::Scalar(s) => *s,
            });
        }
        let outputs = py.detach(|| self.with_state(method, |s| s.execute(&slices))?);
        errors::check(outputs)?.into_iter().map(|o| output(py, o)).collect()
    }

    /// Generates tokens after `prompt` with the program's language model (see
    /// `kiln.Program.generate`); returns `(tokens, stop, prefill_ms, decode_tokens_per_s)`.
    #[pyo3(signature = (prompt, max_new_tokens=None, temperature=None, top_p=0.9, seed=0, eos=None, on_token=None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: Vec<i64>,
        max_new_tokens: Option<usize>,
        temperature: Option<f32>,
        top_p: f32,
        seed: u64,
        eos: Option<Vec<i64>>,
        on_token: Option<Py<PyAny>>,
    ) -> PyResult<(Vec<i64>, &'static str, f64, f64)> {
        if let Some(t) = temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(InputError::new_err(format!("temperature {t} must be 0 or more")));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(InputError::new_err(format!("top_p {top_p} must be in (0, 1]")));
        }
        let generation = py.detach(|| -> Result<_, GenerateError> {
            let mut slot = lock(&self.text_model);
            let model = match &mut *slot {
                Some(model) => model,
                empty => empty.insert(TextModel::new(&self.program)?),
            };
            let sampler = match temperature {
                Some(t) if t > 0.0 => Sampler::new(t, top_p, seed),
                _ => Sampler::greedy(),
            };
            let eos = eos.unwrap_or_else(|| model.metadata().eos_ids.clone());
            let mut options = GenerateOptions { max_new_tokens, sampler, eos };
            model.generate(&prompt, &mut options, |token| match &on_token {
                Some(callback) => Python::attach(|py| callback.call1(py, (token,)).map(|_| ()))
                    .map_err(GenerateError::Python),
                None => Ok(()),
            })
        });
        match generation {
            Ok(g) => Ok((
                g.tokens.clone(),
                g.stop.name(),
                g.prefill.as_secs_f64() * 1e3,
                g.decode_tokens_per_s(),
            )),
            Err(GenerateError::Kiln(e)) => Err(errors::runtime(e)),
            Err(GenerateError::Python(e)) => Err(e),
        }
    }
}

/// What ends generation early: kiln's error, or the exception of the `on_token` callback.
enum GenerateError {
    Kiln(kiln_runtime::Error),
    Python(PyErr),
}

impl From<kiln_runtime::Error> for GenerateError {
    fn from(e: kiln_runtime::Error) -> Self {
        GenerateError::Kiln(e)
    }
}
