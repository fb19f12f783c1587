//! Method inputs read where the caller put them.
//!
//! ExecuTorch copies every planned input into the method's memory before a run. An input
//! that no step writes needs no place of its own: its steps can read the caller's bytes, so a
//! 224x224 image is not copied before every run and an app that binds its buffer once (the C
//! library's `kiln_method_bind_input`) has the method read each frame it writes there. Such
//! an input, and every alias of it, gets [`Storage::Input`]; the run resolves it to the bytes
//! it was given, or to the execution state's aligned copy when they are not aligned for the
//! dtype.

use kiln_kernels::OutKind;

use super::alias::Aliases;
use crate::plan::{DataDef, MethodPlan, ValueDef};
use crate::step::{Role, Step};
use crate::value::{Storage, Val};

/// Gives [`Storage::Input`] to every method input of a straight-line method (`aliases`
/// known) that is a row-major tensor planned in method memory, that no step of `steps` writes
/// (through it or an alias, in place or whole), that no output is or aliases, and that no
/// other input position names.
pub(crate) fn inputs_in_place(
    plan: &MethodPlan,
    values: &mut [Val],
    aliases: &Aliases,
    steps: &[Step],
) {
    let n = values.len();
    // Roots whose bytes a step writes or an output returns.
    let mut kept = vec![false; n];
    let keep = |v: u32, kept: &mut [bool]| {
        if let Some(k) = kept.get_mut(aliases.root(v).0 as usize) {
            *k = true;
        }
    };
    for step in steps {
        let Step::Call(call) = step else { continue };
        for (&v, role) in call.args.iter().zip(call.roles.iter()) {
            // Reads, views and scalars write no tensor bytes; a return slot may.
            if matches!(role, Role::In | Role::Out(OutKind::View(_) | OutKind::Scalar)) {
                continue;
            }
            match values.get(v as usize) {
                Some(Val::TensorList(items)) => items.iter().for_each(|&i| keep(i, &mut kept)),
                Some(Val::OptionalTensorList(items)) => {
                    items.iter().flatten().for_each(|&i| keep(i, &mut kept))
                }
                _ => keep(v, &mut kept),
            }
        }
    }
    for &o in &plan.outputs {
        keep(o, &mut kept);
    }
    for (index, &v) in plan.inputs.iter().enumerate() {
        let i = v as usize;
        let planned = matches!(
            plan.values.get(i),
            Some(ValueDef::Tensor(t)) if matches!(t.data, DataDef::Planned { .. } | DataDef::Runtime)
        );
        let eligible = planned
            && !kept.get(i).copied().unwrap_or(true)
            && aliases.root(v) == (v, 0)
            && plan.inputs.iter().filter(|&&w| w == v).count() == 1
            && matches!(values.get(i), Some(Val::Tensor(t))
                if matches!(t.storage, Storage::Buf { .. }) && t.shape.is_contiguous());
        if !eligible {
            continue;
        }
        for w in 0..n {
            let (root, offset) = aliases.root(w as u32);
            if root != v {
                continue;
            }
            if let Some(Val::Tensor(t)) = values.get_mut(w) {
                t.storage = Storage::Input { index: index as u32, offset };
                t.writable = false;
            }
        }
    }
}
