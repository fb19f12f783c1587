//! A program loaded for `run` and `bench`, with the file it came from.

use std::path::Path;

use anyhow::{bail, Result};
use kiln_runtime::{MappedFile, Program, ProgramBuilder};

use super::inputs;

/// A program loaded for `run` and `bench`, with its file (for what the runtime does not keep,
/// such as input names).
pub(crate) struct Loaded {
    /// The program.
    pub program: Program,
    /// Its bytes.
    file: MappedFile,
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
        let file = crate::input::read(model)?;
        // A regular file is mapped by the runtime; a stream can only be read once.
        let program = if std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            builder.load(path)?
        } else {
            builder.load_bytes(&model.display().to_string(), file.bytes().to_vec())?
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
        Ok(Loaded { program, file, method })
    }

    /// The program's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    /// The names of the chosen method's inputs, where the program records them.
    pub(crate) fn input_names(&self, inputs: usize) -> Vec<Option<String>> {
        inputs::input_names(self.file.bytes(), &self.method, inputs)
    }
}
