//! Turns raw address stacks into frames, after every thread runs again,
//! and a raw profile into a [`Profile`].
//!
//! Each sampled address expands into its inline chain (outermost first,
//! from DWARF through [`Resolver::resolve_frames`]), and every frame goes
//! into the model with its module, address, source file and line and
//! inline flag, so outputs that know lines (pprof) have them and folded
//! output can show or hide inlined functions.

use std::sync::Arc;

use btprof_sampler::stack_table::StackKey;
use btprof_sampler::walker::{Arch, WalkEnd};
use btprof_sampler::RawProfile;
use btprof_symbols::{Frame, Resolver, Symbol};

use super::thread_names::full_name;
use super::walk_ends;
use crate::profile::{Builder, FrameInfo, LabelId, Profile, ThreadId, NO_LABELS, TABLE_FULL_FRAME};

/// How addresses become frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbolize {
    /// Expand each address into its inline chain with file and line
    /// (DWARF, loaded lazily per module). Without, each address is one
    /// frame named from the symbol table, with no file or line: cheaper
    /// at the first stop of a process, and what btprof did before.
    pub inline_frames: bool,
}

impl Default for Symbolize {
    fn default() -> Self {
        Symbolize {
            inline_frames: true,
        }
    }
}

impl Profile {
    /// Symbolises a raw profile of the current process, inline chains
    /// expanded ([`Profile::from_raw_with`]).
    pub fn from_raw(raw: &RawProfile, resolver: &mut Resolver) -> Profile {
        Profile::from_raw_with(raw, resolver, Symbolize::default())
    }

    /// Symbolises a raw profile of the current process as `how` says.
    ///
    /// Each distinct raw stack goes straight into the interned model: its
    /// frames are resolved into one reused buffer and interned, so no stack
    /// owns strings. Raw stacks that fold to the same line (different
    /// instructions of one function, say) stay distinct stacks of the
    /// model, as their addresses and lines differ, and one folded line.
    /// Each stack keeps the label set its samples were taken with; the
    /// samples a full table counted per thread have none.
    pub fn from_raw_with(raw: &RawProfile, resolver: &mut Resolver, how: Symbolize) -> Profile {
        let mut builder = Builder::new();
        // Only fails past u32 ids or u64 samples, which the sampler's own
        // bounded table and u64 counters rule out; a stack that did would
        // be left out rather than panic inside an application.
        let threads: Vec<Option<ThreadId>> = raw
            .threads
            .iter()
            // The full Rust name where the thread registered one (Linux
            // keeps 15 bytes of a name).
            .map(|t| builder.thread(&full_name(t.tid, &t.name), Some(t.tid)).ok())
            .collect();
        let mut unknown = None;
        let mut thread_of = |builder: &mut Builder, index: u32| match threads
            .get(index as usize)
            .copied()
            .flatten()
        {
            Some(id) => Some(id),
            None => *unknown.get_or_insert_with(|| builder.thread("[unknown thread]", None).ok()),
        };
        // The sampler's label ids, mapped to the profile's as met: one
        // lookup per distinct set, not per stack.
        let mut label_ids: std::collections::HashMap<u32, LabelId> = Default::default();
        let mut frames = Vec::new();
        let mut truncated_at: std::collections::HashMap<Arc<str>, u64> = Default::default();
        for (key, count) in raw.table.iter() {
            resolve_stack(raw.arch, &key, resolver, how, &mut frames);
            // Complete only if the walk reached the thread's entry.
            let outermost = outermost_symbol(&key, resolver);
            let names = frames
                .iter()
                .flat_map(|(_, chain)| chain.iter().map(|f| &*f.name));
            let truncated = walk_ends::is_truncated(key.end, names, &outermost);
            if truncated {
                // Where it stopped, for the CLI's warning.
                let module = outermost.module.unwrap_or_else(|| Arc::from("[unknown]"));
                *truncated_at.entry(module).or_default() += count;
            }
            let thread = thread_of(&mut builder, key.thread);
            // A wall-mode sample of a thread off CPU (not interrupted) is
            // marked so, as the leaf of its stack.
            let blocked =
                (key.end == WalkEnd::Blocked).then_some(FrameInfo::named(walk_ends::OFF_CPU_FRAME));
            // Leaf-first addresses, each chain outermost first: reversing
            // the addresses, not the frames, keeps each chain's order.
            let root_first = frames
                .iter()
                .rev()
                .flat_map(|(address, chain)| chain.iter().map(|f| frame_info(f, *address)))
                .chain(blocked);
            let labels = match label_ids.get(&key.labels) {
                Some(&id) => id,
                None => {
                    let id = builder
                        .label_set(&raw.labels.get(key.labels))
                        .unwrap_or(NO_LABELS);
                    label_ids.insert(key.labels, id);
                    id
                }
            };
            let _ = builder.add_labelled_frames(thread, labels, root_first, truncated, count);
        }
        for &(thread, count) in raw.table.overflow() {
            let thread = thread_of(&mut builder, thread);
            let _ = builder.add_stack(thread, [TABLE_FULL_FRAME], false, count);
        }
        let mut profile = builder.finish(raw.stats.clone());
        profile.set_truncated_by_module(truncated_at.into_iter().collect());
        profile
    }
}

/// The model's view of one resolved frame at `address`.
fn frame_info(frame: &Frame, address: u64) -> FrameInfo<'_> {
    FrameInfo {
        name: &frame.name,
        module: frame.module.as_deref(),
        address: Some(address),
        file: frame.file.as_deref(),
        line: frame.line,
        inlined: frame.inlined,
    }
}

/// One code address of a stack, as looked up, and its inline chain
/// (outermost first).
pub(crate) type ResolvedAddress = (u64, Arc<[Frame]>);

/// Resolves the addresses of one raw stack, leaf first.
///
/// Frame 0 (the interrupted pc) is looked up as is; every return address is
/// looked up minus one, so a call that is the last instruction of a
/// function is attributed to that function and not the next one. On
/// aarch64 the link register becomes frame 1 only when the leaf had not yet
/// pushed its frame record (`docs/architecture.md`, rule 3); "the same function" is
/// decided by function starts, which unnamed functions have too
/// (`.eh_frame`, `LC_FUNCTION_STARTS`).
pub(crate) fn resolve_stack(
    arch: Arch,
    key: &StackKey<'_>,
    resolver: &mut Resolver,
    how: Symbolize,
    out: &mut Vec<ResolvedAddress>,
) {
    out.clear();
    let Some((&pc, returns)) = key.frames.split_first() else {
        return;
    };
    let lookup = |resolver: &mut Resolver, address: u64| -> ResolvedAddress {
        let chain = if how.inline_frames {
            resolver.resolve_frames(address)
        } else {
            Arc::from([Frame::from_symbol(resolver.resolve(address))])
        };
        (address, chain)
    };
    let leaf = lookup(resolver, pc);
    let lr_caller = match arch {
        Arch::Aarch64 { .. } if key.lr != 0 => {
            let lr = key.lr;
            let caller = lookup(resolver, lr.wrapping_sub(1));
            link_register_is_caller(lr, returns.first().copied(), &leaf.1[0], &caller.1[0])
                .then_some(caller)
        }
        _ => None,
    };
    out.push(leaf);
    out.extend(lr_caller);
    for &ret in returns {
        out.push(lookup(resolver, ret.wrapping_sub(1)));
    }
}

/// The symbol of a raw stack's outermost frame (its last return address,
/// or the pc of a one-frame stack), from the resolver's cache.
pub(crate) fn outermost_symbol(key: &StackKey<'_>, resolver: &mut Resolver) -> Symbol {
    match key.frames {
        [] => Symbol {
            name: "[empty]".into(),
            function_start: None,
            module: None,
        },
        [pc] => resolver.resolve(*pc),
        [.., ret] => resolver.resolve(ret.wrapping_sub(1)),
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
    leaf: &Frame,
    caller: &Frame,
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

    fn sym(name: &str, start: Option<u64>) -> Frame {
        Frame::from_symbol(btprof_symbols::Symbol {
            name: name.into(),
            function_start: start,
            module: None,
        })
    }

    #[inline(never)]
    fn leaf_fn() -> u64 {
        std::hint::black_box(1)
    }
    #[inline(never)]
    fn caller_fn() -> u64 {
        std::hint::black_box(leaf_fn() + 1)
    }
    #[inline(never)]
    fn outer_fn() -> u64 {
        std::hint::black_box(caller_fn() + 1)
    }

    fn names(arch: Arch, frames: &[u64], lr: u64) -> Vec<String> {
        let mut resolver = Resolver::for_current_process().unwrap();
        let key = StackKey {
            thread: 0,
            frames,
            lr,
            end: btprof_sampler::walker::WalkEnd::Complete,
            labels: btprof_sampler::labels::NO_LABELS,
        };
        let mut out = Vec::new();
        resolve_stack(arch, &key, &mut resolver, Symbolize::default(), &mut out);
        out.iter()
            .map(|(_, chain)| chain[0].name.rsplit("::").next().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn pc_is_exact_and_return_addresses_are_looked_up_minus_one() {
        let leaf = leaf_fn as *const () as u64;
        let caller = caller_fn as *const () as u64;
        let outer = outer_fn as *const () as u64;
        // A return address equal to the start of the *next* function must
        // still be attributed to the function that made the call: pretend
        // `caller_fn` ends right before `outer_fn` by using outer's start.
        let resolved = names(Arch::X86_64, &[leaf, caller + 1, outer], 0);
        assert_eq!(resolved[..2], ["leaf_fn", "caller_fn"]);
        assert_ne!(resolved[2], "outer_fn");
        assert_eq!(resolved[2], names(Arch::X86_64, &[outer - 1], 0)[0]);
        // The pc itself is never adjusted: a pc at a function's first byte
        // belongs to that function.
        assert_eq!(names(Arch::X86_64, &[caller], 0), vec!["caller_fn"]);
    }

    #[test]
    fn aarch64_link_register_rule_on_real_symbols() {
        let arm = Arch::Aarch64 {
            code_mask: u64::MAX,
        };
        let leaf = leaf_fn as *const () as u64;
        let caller = caller_fn as *const () as u64 + 8;
        let outer = outer_fn as *const () as u64 + 8;
        // Frameless leaf: lr points into the caller, the chain starts above.
        assert_eq!(
            names(arm, &[leaf + 4, outer], caller),
            vec!["leaf_fn", "caller_fn", "outer_fn"]
        );
        // Leaf pushed its record: lr equals the first saved return address.
        assert_eq!(
            names(arm, &[leaf + 4, caller, outer], caller),
            vec!["leaf_fn", "caller_fn", "outer_fn"]
        );
        // lr points back into the leaf itself: dropped.
        assert_eq!(
            names(arm, &[leaf + 4, caller, outer], leaf + 8),
            vec!["leaf_fn", "caller_fn", "outer_fn"]
        );
        // x86_64 has no link register, whatever the key says.
        assert_eq!(
            names(Arch::X86_64, &[leaf, outer], caller),
            vec!["leaf_fn", "outer_fn"]
        );
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
