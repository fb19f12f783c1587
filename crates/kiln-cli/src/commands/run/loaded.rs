//! A program loaded for `run` and `bench`, and the method they run.

use std::path::Path;

use anyhow::{bail, Result};
use kiln_runtime::{Program, ProgramBuilder};

use super::inputs;

/// A program loaded for `run` and `bench`, and the method chosen.
pub(crate) struct Loaded {
    /// The program.
    pub program: Program,
    /// The method chosen.
    pub method: String,
}

impl Loaded {
    /// Loads `model` (`-` for standard input) with `builder` and chooses `method`: the one
    /// named, else `forward`, else the program's only method. An absent method is an error
    /// that lists the program's methods.
    pub(crate) fn load(
        builder: ProgramBuilder,
        model: &Path,
        method: Option<&str>,
    ) -> Result<Self> {
        let path = crate::input::resolve(model);
        // A regular file is mapped by the runtime; a stream can only be read once, and its
        // bytes are handed over as they were read.
        let program = if std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            builder.load(path)?
        } else {
            let file = crate::input::read(model)?;
            builder.load_bytes(&model.display().to_string(), file.into_bytes())?
        };
        let names = program.method_names();
        let method = match method {
            Some(m) => m.to_string(),
            None if names.contains(&"forward") => "forward".to_string(),
            None if names.len() == 1 => {
                eprintln!(
                    "kiln: note: no method \"forward\"; running {:?}, the only one",
                    names[0]
                );
                names[0].to_string()
            }
            None => bail!(
                "{}: no method \"forward\"; choose one with --method: {}",
                model.display(),
                names.join(", ")
            ),
        };
        Ok(Loaded { program, method })
    }

    /// The program's bytes (for what the runtime does not keep, such as input names).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.program.file_bytes()
    }

    /// The names of the chosen method's inputs, where the program records them.
    pub(crate) fn input_names(&self, inputs: usize) -> Vec<Option<String>> {
        inputs::input_names(self.bytes(), &self.method, inputs)
    }
}
