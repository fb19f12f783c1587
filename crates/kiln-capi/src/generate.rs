//! The LLM loop in one call: an exported LLM's greedy generation from a prompt, each new
//! token handed to the caller's callback as it is made.

use std::ffi::c_void;

use kiln_runtime::llm::{GenerateOptions, Sampler, TextModel};

use crate::program::{program_arg, KilnProgram};
use crate::status::{guard, Failure, KilnStatus};

/// Called with each new token and the caller's `user` pointer; returning 0 goes on, anything
/// else stops generation after that token.
pub type KilnTokenCallback = Option<unsafe extern "C" fn(token: i64, user: *mut c_void) -> i32>;

/// Why the token loop ended early: a runtime error, or the callback asked to stop.
enum Ended {
    Failed(kiln_runtime::Error),
    Stopped,
}

impl From<kiln_runtime::Error> for Ended {
    fn from(e: kiln_runtime::Error) -> Ended {
        Ended::Failed(e)
    }
}

/// Generates from the `prompt_len` tokens at `prompt` with the LLM `program` (an ExecuTorch
/// LLM export with a KV cache, as `kiln generate` takes): greedy, stopping after
/// `max_new_tokens` (0: until an end token the export names or the context is full), or when
/// `on_token` (may be null) returns non-zero. Each call starts from an empty cache. The number
/// of new tokens goes to `*generated` (may be null).
///
/// # Safety
/// `program` is a valid program; `prompt` points to `prompt_len` tokens; `generated` is null
/// or writable; `on_token`, when not null, may be called with `user` from this thread.
#[no_mangle]
pub unsafe extern "C" fn kiln_generate(
    program: *const KilnProgram,
    prompt: *const i64,
    prompt_len: usize,
    max_new_tokens: usize,
    on_token: KilnTokenCallback,
    user: *mut c_void,
    generated: *mut usize,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let program = unsafe { program_arg(program) }?;
        if prompt.is_null() || prompt_len == 0 {
            return Err(Failure::argument("the prompt is null or empty"));
        }
        // SAFETY: `prompt` points to `prompt_len` tokens (the contract above).
        let prompt = unsafe { std::slice::from_raw_parts(prompt, prompt_len) };
        let mut model = TextModel::new(program.program())?;
        let eos = model.metadata().eos_ids.clone();
        let max_new_tokens = (max_new_tokens > 0).then_some(max_new_tokens);
        let mut options = GenerateOptions { max_new_tokens, sampler: Sampler::greedy(), eos };
        let mut count = 0usize;
        let result = model.generate(prompt, &mut options, |token| {
            count += 1;
            // SAFETY: the caller's callback, called as the contract above allows.
            let stop = on_token.is_some_and(|f| unsafe { f(token, user) } != 0);
            if stop {
                Err(Ended::Stopped)
            } else {
                Ok(())
            }
        });
        match result {
            Ok(_) | Err(Ended::Stopped) => {}
            Err(Ended::Failed(e)) => return Err(e.into()),
        }
        // SAFETY: null or writable (the contract above).
        if let Some(out) = unsafe { generated.as_mut() } {
            *out = count;
        }
        Ok(())
    })
}
