//! Turns raw address stacks into named frames, after every thread runs
//! again.

use std::sync::Arc;

use btprof_sampler::stack_table::StackKey;
use btprof_sampler::walker::Arch;
use btprof_symbols::{Resolver, Symbol};

/// Resolves the frames of one raw stack, leaf first.
///
/// Frame 0 (the interrupted pc) is looked up as is; every return address is
/// looked up minus one, so a call that is the last instruction of a
/// function is attributed to that function and not the next one. On
/// aarch64 the link register becomes frame 1 only when the leaf had not yet
/// pushed its frame record (DESIGN.md rule 3).
pub(crate) fn resolve_stack(
    arch: Arch,
    key: &StackKey<'_>,
    resolver: &mut Resolver,
    out: &mut Vec<Arc<str>>,
) {
    out.clear();
    let Some((&pc, returns)) = key.frames.split_first() else {
        return;
    };
    let leaf = resolver.resolve(pc);
    let lr_caller = match arch {
        Arch::Aarch64 { .. } if key.lr != 0 => {
            let lr = key.lr;
            let caller = resolver.resolve(lr.wrapping_sub(1));
            link_register_is_caller(lr, returns.first().copied(), &leaf, &caller).then_some(caller)
        }
        _ => None,
    };
    out.push(leaf.name);
    if let Some(caller) = lr_caller {
        out.push(caller.name);
    }
    for &ret in returns {
        out.push(resolver.resolve(ret.wrapping_sub(1)).name);
    }
}

/// Whether the link register names a caller the frame chain does not have.
///
/// It does not when it equals the first saved return address (the leaf
/// pushed its frame record, which holds the same lr), or when it points
/// into the leaf's own function (a non-leaf that already called something
/// and got control back).
pub(crate) fn link_register_is_caller(
    lr: u64,
    first_return: Option<u64>,
    leaf: &Symbol,
    caller: &Symbol,
) -> bool {
    if first_return == Some(lr) {
        return false;
    }
    let same_function = match (leaf.function_start, caller.function_start) {
        (Some(a), Some(b)) => a == b,
        _ => leaf.name == caller.name,
    };
    !same_function
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, start: Option<u64>) -> Symbol {
        Symbol {
            name: name.into(),
            function_start: start,
            module: None,
        }
    }

    #[test]
    fn lr_equal_to_first_return_is_dropped() {
        let leaf = sym("leaf", Some(0x100));
        let caller = sym("caller", Some(0x200));
        assert!(!link_register_is_caller(0x210, Some(0x210), &leaf, &caller));
    }

    #[test]
    fn lr_into_the_leaf_itself_is_dropped() {
        let leaf = sym("leaf", Some(0x100));
        let same = sym("leaf", Some(0x100));
        assert!(!link_register_is_caller(0x120, Some(0x310), &leaf, &same));
        // Without function starts, names decide.
        assert!(!link_register_is_caller(
            0x120,
            Some(0x310),
            &sym("leaf", None),
            &sym("leaf", None)
        ));
    }

    #[test]
    fn lr_of_a_frameless_leaf_is_the_caller() {
        let leaf = sym("leaf", Some(0x100));
        let caller = sym("caller", Some(0x200));
        assert!(link_register_is_caller(0x210, Some(0x310), &leaf, &caller));
        assert!(link_register_is_caller(0x210, None, &leaf, &caller));
    }
}
