//! The flags that name a method and its inputs (`run`, `bench`, `report`), and a method
//! loaded with its inputs ready for repeated executes: what `kiln bench` times and
//! `kiln bench --profile` and `kiln report` profile.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use kiln_runtime::{InstructionTime, Method, Program, ThreadCount};

use super::engine::{load_options, thread_count, EngineArgs};
use super::inputs::{parse_input_arg, InputArg, Inputs, DEFAULT_SEED};
use super::loaded::Loaded;
use crate::output::progress;

/// The program, method, inputs and engine flags of the commands that execute a method.
#[derive(clap::Args)]
pub struct MethodArgs {
    /// The program (.pte; `-` for standard input).
    pub model: PathBuf,
    /// Method to run [default: `forward`, or the program's only method].
    #[arg(long)]
    pub method: Option<String>,
    /// An input array, `FILE.npy` (one per method input, in order) or `NAME=FILE.npy` (NAME is
    /// an input's name in the program, such as a keyword argument, or its index; inputs not
    /// named are generated). Without any, kiln generates every input: deterministic random
    /// values of the declared shapes. A float64 array given for a float32 input is cast, with a
    /// warning.
    #[arg(long = "input", value_name = "[NAME=]FILE.npy", value_parser = parse_input_arg)]
    pub inputs: Vec<InputArg>,
    /// Seed of the generated inputs [default: a fixed seed, so runs repeat].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// A loaded method and its prepared inputs.
pub(crate) struct Session {
    /// The program and the chosen method's name.
    pub loaded: Loaded,
    /// The method.
    pub method: Method,
    /// Its inputs, read or generated once.
    pub inputs: Inputs,
    /// Threads kernels split their work over, the calling thread included, and why.
    pub threads: ThreadCount,
    /// Time to load the program and the method.
    pub load: Duration,
    /// The process's resident set before the program was loaded and beside the method.
    pub process: super::Process,
    /// The time of the method's first execute, once it has run.
    pub first: Option<Duration>,
    /// More execution states of the method, for [`Session::execute_callers`].
    others: Vec<Method>,
}

impl Session {
    /// Loads the program and method `args` name and prepares the inputs.
    pub(crate) fn open(args: &MethodArgs) -> Result<Session> {
        let process = super::Process::before_load();
        let started = Instant::now();
        let options = load_options(&args.engine)?;
        let threads = thread_count(&args.engine);
        let loaded =
            Loaded::load(Program::builder().options(options), &args.model, args.method.as_deref())?;
        let method = loaded.program.method(&loaded.method)?;
        let load = started.elapsed();
        let process = process.loaded(&method.footprint());
        let names = loaded.input_names(method.inputs().len());
        let seed = args.seed.unwrap_or(DEFAULT_SEED);
        let inputs = Inputs::prepare(&method, &loaded.method, &names, &args.inputs, seed)?;
        Ok(Session {
            loaded,
            method,
            inputs,
            threads,
            load,
            process,
            first: None,
            others: Vec::new(),
        })
    }

    /// The method's predicted peak memory for the execution states made so far, with the
    /// process's measured peak beside it.
    pub(crate) fn memory(&self) -> super::MemoryReport {
        let states = std::iter::once(&self.method).chain(&self.others);
        let scratch = states.map(Method::scratch_bytes).sum();
        super::MemoryReport::predict(self.process, self.method.footprint(), 1 + self.others.len())
            .measured(scratch)
    }

    /// Executes the method `n` times under a progress bar labelled `what`; the wall time of
    /// each execute.
    pub(crate) fn execute(&mut self, n: usize, what: &str) -> Result<Vec<Duration>> {
        let inputs = self.inputs.as_inputs()?;
        let bar = progress(n, what);
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let start = Instant::now();
            self.method.run(&inputs)?;
            samples.push(start.elapsed());
            bar.inc(1);
        }
        bar.finish_and_clear();
        self.first = self.first.or(samples.first().copied());
        Ok(samples)
    }

    /// Executes the method `n` times on each of `callers` threads at once, each running its
    /// own execution state (the session's method and states sharing its compiled steps and
    /// weights, [`Method::another`]); the wall time of every execute, and of the whole.
    pub(crate) fn execute_callers(
        &mut self,
        callers: usize,
        n: usize,
        what: &str,
    ) -> Result<(Vec<Duration>, Duration)> {
        if callers <= 1 {
            let start = Instant::now();
            let samples = self.execute(n, what)?;
            return Ok((samples, start.elapsed()));
        }
        while self.others.len() + 1 < callers {
            self.others.push(self.method.another()?);
        }
        let inputs = self.inputs.as_inputs()?;
        let bar = progress(n * callers, what);
        let states = std::iter::once(&mut self.method).chain(self.others.iter_mut());
        let start = Instant::now();
        let runs: Vec<Result<Vec<Duration>>> = std::thread::scope(|scope| {
            let callers: Vec<_> = states
                .take(callers)
                .map(|method| {
                    let (inputs, bar) = (&inputs, &bar);
                    scope.spawn(move || -> Result<Vec<Duration>> {
                        let mut samples = Vec::with_capacity(n);
                        for _ in 0..n {
                            let start = Instant::now();
                            method.run(inputs)?;
                            samples.push(start.elapsed());
                            bar.inc(1);
                        }
                        Ok(samples)
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|c| {
                    c.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a caller thread panicked")))
                })
                .collect()
        });
        let wall = start.elapsed();
        bar.finish_and_clear();
        let mut all = Vec::with_capacity(n * callers);
        for run in runs {
            all.extend(run?);
        }
        // The session's own state runs first in `all`.
        self.first = self.first.or(all.first().copied());
        Ok((all, wall))
    }

    /// Executes the method `n` times with per-instruction timing on; the time of every
    /// compiled step over those executes.
    pub(crate) fn profile(&mut self, n: usize) -> Result<Vec<InstructionTime>> {
        self.method.set_profiling(true);
        self.execute(n, "profiling")?;
        Ok(self.method.profile())
    }
}
