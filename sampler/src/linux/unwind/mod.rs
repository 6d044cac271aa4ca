//! CFI-assisted walking through code without frame pointers (the C library, distribution
//! libraries, C dependencies).
//!
//! The handler ([`stack_copy`](crate::linux::signal::stack_copy)) copies the registers and
//! stack top and walks the frame pointers. The sampler thread ([`CfiWalker`]) then unwinds
//! the copy with each module's `.eh_frame` through `framehop` ([`modules`]) and, where the
//! copy ends, joins the handler's walk at the frame pointer it reached. Unwinding stays out
//! of the handler: gimli's evaluation would use several KiB of the interrupted stack, and the
//! module list can change under `dlclose`.

pub(crate) mod blocked;
pub(crate) mod blocked_stack;
pub(crate) mod modules;
#[cfg(any(test, target_arch = "aarch64"))]
mod ra_state;
// Recorded on aarch64: the walker unwinds with this machine's rules.
#[cfg(all(test, target_arch = "aarch64"))]
mod recorded_aarch64;

use std::time::{Duration, Instant};

use framehop::{FrameAddress, MayAllocateDuringUnwind, Unwinder};

use crate::walker::{Arch, WalkEnd};
use crate::SamplerStats;

use super::signal::slots::Collected;

use crate::linux::signal::stack_copy::CopiedStack;
use modules::ModuleList;

type NativeCache = framehop::CacheNative<MayAllocateDuringUnwind>;

/// Where a walk's frames came from, for [`crate::SamplerStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FrameSources {
    /// Callers from CFI that the frame pointer would have missed.
    pub cfi: u64,
    /// Callers the frame pointer gives too.
    pub frame_pointer: u64,
}

impl FrameSources {
    /// A frame-pointer walk of `frames`, pc first.
    fn frame_pointers(frames: usize) -> Self {
        let frame_pointer = frames.saturating_sub(1) as u64;
        FrameSources {
            cfi: 0,
            frame_pointer,
        }
    }
}

/// How a walk that kept `kept` of `offered` frames ends: cut at the depth cap, or as `end`.
fn capped(kept: usize, offered: usize, end: WalkEnd) -> WalkEnd {
    if kept < offered {
        WalkEnd::DepthCap
    } else {
        end
    }
}

/// The sampler thread's CFI unwinder, reused for every sample.
pub(crate) struct CfiWalker {
    modules: ModuleList,
    cache: NativeCache,
    out: Vec<u64>,
    /// When the loader was last asked whether objects changed.
    checked_at: Option<Instant>,
    /// Whether a walk meeting unknown code may still ask the loader this tick.
    may_ask: bool,
}

/// How often the loader is asked for changes when no sample calls for it: rarely, as
/// `dl_iterate_phdr` takes the loader lock, which a `fork` meanwhile leaves held in the child.
const CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// A walk completed by [`CfiWalker::complete`]: borrowed frames, pc first.
pub(crate) struct Completed<'a> {
    pub frames: &'a [u64],
    pub end: WalkEnd,
    pub sources: FrameSources,
}

impl CfiWalker {
    /// A walker with no modules: frame pointers only until the first
    /// [`CfiWalker::refresh_modules`]. Sampler thread only.
    pub fn new() -> Self {
        CfiWalker {
            modules: ModuleList::new(),
            cache: NativeCache::new(),
            out: Vec::with_capacity(crate::linux::MAX_DEPTH),
            checked_at: None,
            may_ask: false,
        }
    }

    /// A walker over another process's list ([`modules::ModuleList::fixed`]).
    pub fn with_modules(modules: ModuleList) -> Self {
        CfiWalker {
            modules,
            ..CfiWalker::new()
        }
    }

    /// Picks up loaded or unloaded objects every [`CHECK_INTERVAL`], and lets the next walk
    /// meeting unknown code ask the loader at once. Call once per tick, between collections.
    pub fn refresh_modules(&mut self) {
        if self
            .checked_at
            .is_none_or(|at| at.elapsed() >= CHECK_INTERVAL)
        {
            self.ask_loader();
        }
        self.may_ask = true;
    }

    /// Whether this process's module list was read.
    pub fn modules_read(&self) -> bool {
        self.checked_at.is_some()
    }

    /// Asks the loader for changes, rereading if any; returns whether the list changed.
    fn ask_loader(&mut self) -> bool {
        self.checked_at = Some(Instant::now());
        self.modules.refresh()
    }

    /// Completes one sample: unwinds `copy` with CFI and joins the handler's walk
    /// (`fp_frames`, ended by `fp_end`) beyond it, at most `max_depth` frames. Unknown code,
    /// most often a library `dlopen`ed since the last check, makes it ask the loader (once per
    /// tick) and unwind again, since that code's frame pointer may hold data.
    pub fn complete<'a>(
        &'a mut self,
        copy: &CopiedStack<'_>,
        fp_frames: &[u64],
        fp_end: WalkEnd,
        max_depth: usize,
    ) -> Completed<'a> {
        let mut walked = self.unwind(copy, fp_frames, fp_end, max_depth);
        if walked.unknown_code && self.may_ask {
            self.may_ask = false;
            if self.ask_loader() {
                walked = self.unwind(copy, fp_frames, fp_end, max_depth);
            }
        }
        Completed {
            frames: &self.out,
            end: walked.end,
            sources: walked.sources,
        }
    }

    /// One unwind of `copy` into `self.out` with the current module list.
    fn unwind(
        &mut self,
        copy: &CopiedStack<'_>,
        fp_frames: &[u64],
        fp_end: WalkEnd,
        max_depth: usize,
    ) -> Unwound {
        let arch = Arch::host();
        let max_depth = max_depth.max(1);
        let modules = &self.modules;
        let out = &mut self.out;
        out.clear();
        let mut sources = FrameSources::default();
        let mut read = |addr: u64| copy.read(addr).ok_or(());
        let mut regs = initial_regs(&copy.regs);
        let mut address = FrameAddress::from_instruction_pointer(copy.regs.pc);
        let pc = arch.strip_code_address(copy.regs.pc);
        let mut unknown_code = !modules.covers(pc);
        out.push(pc);
        let end = loop {
            if out.len() >= max_depth {
                break WalkEnd::DepthCap;
            }
            let (sp, fp) = sp_fp(&regs);
            let unwound =
                modules
                    .unwinder()
                    .unwind_frame(address, &mut regs, &mut self.cache, &mut read);
            match unwound {
                Ok(Some(ret)) => {
                    let stripped = arch.strip_code_address(ret);
                    let Some(next) = FrameAddress::from_return_address(stripped) else {
                        break WalkEnd::Complete;
                    };
                    // Would the frame pointer have given the same caller?
                    let (_, next_fp) = sp_fp(&regs);
                    let by_fp = fp != 0
                        && copy.read(fp) == Some(next_fp)
                        && copy
                            .read(fp.wrapping_add(8))
                            .map(|r| arch.strip_code_address(r))
                            == Some(stripped);
                    if by_fp {
                        sources.frame_pointer += 1;
                    } else {
                        sources.cfi += 1;
                    }
                    // The call, not the return address, is the caller's code.
                    unknown_code |= !modules.covers(stripped - 1);
                    out.push(stripped);
                    address = next;
                }
                Ok(None) => break WalkEnd::Complete,
                Err(e) => {
                    // The copy ends (or CFI gave up) at the frame of `fp`: join the
                    // handler's walk there.
                    if let Some(i) = join_index(copy, fp_frames.len(), fp, sp) {
                        let tail = &fp_frames[i + 1..];
                        let taken = tail.len().min(max_depth - out.len());
                        out.extend_from_slice(&tail[..taken]);
                        sources.frame_pointer += taken as u64;
                        break capped(taken, tail.len(), fp_end);
                    }
                    break match e {
                        framehop::Error::FramepointerUnwindingMovedBackwards => {
                            WalkEnd::NotIncreasing
                        }
                        framehop::Error::CouldNotReadStack(addr) if addr >= copy.end() => {
                            WalkEnd::OutOfBounds
                        }
                        _ => WalkEnd::Unreadable,
                    };
                }
            }
        };
        // CFI got no further than the handler's walk: keep that walk, whose fault-safe read
        // says better why it stopped.
        if end.is_truncated() && out.len() <= fp_frames.len() {
            out.clear();
            out.extend_from_slice(&fp_frames[..fp_frames.len().min(max_depth)]);
            return Unwound {
                end: capped(out.len(), fp_frames.len(), fp_end),
                sources: FrameSources::frame_pointers(out.len()),
                unknown_code,
            };
        }
        Unwound {
            end,
            sources,
            unknown_code,
        }
    }
}

/// What [`CfiWalker::unwind`] left beside its frames.
struct Unwound {
    end: WalkEnd,
    sources: FrameSources,
    /// Whether a frame's code lay outside every known object.
    unknown_code: bool,
}

/// The sampler's hook on each collected walk: completes it with CFI when it can and counts
/// frame sources; returns the frames and the end.
pub(crate) fn finish<'a>(
    cfi: Option<&'a mut CfiWalker>,
    walk: &'a Collected<'a>,
    max_depth: usize,
    stats: &mut SamplerStats,
) -> (&'a [u64], WalkEnd) {
    let (frames, end, sources) = match (cfi, walk.copy.as_ref()) {
        (Some(cfi), Some(copy)) => {
            let done = cfi.complete(copy, walk.frames, walk.end, max_depth);
            (done.frames, done.end, done.sources)
        }
        _ => (
            walk.frames,
            walk.end,
            FrameSources::frame_pointers(walk.frames.len()),
        ),
    };
    // No code lives at 0: a 0 caller ends a chain read outside the handler (a ring sample's
    // kernel call chain), not a frame.
    let kept = frames
        .iter()
        .skip(1)
        .position(|&f| f == 0)
        .map_or(frames.len(), |i| i + 1);
    let cut = (frames.len() - kept) as u64;
    stats.cfi_frames += sources.cfi;
    stats.frame_pointer_frames += sources.frame_pointer.saturating_sub(cut);
    (&frames[..kept], end)
}

/// The index `i` in the handler's walk whose record is at `fp`, so `fp_frames[i + 1]` is that
/// frame's caller; re-traced through the copy.
fn join_index(copy: &CopiedStack<'_>, fp_len: usize, fp: u64, sp: u64) -> Option<usize> {
    if fp == 0 || fp < sp {
        return None;
    }
    let mut record = copy.regs.fp;
    for i in 0..fp_len.saturating_sub(1) {
        if record == fp {
            return Some(i);
        }
        if record > fp {
            return None;
        }
        record = copy.read(record)?;
    }
    None
}

#[cfg(target_arch = "x86_64")]
fn initial_regs(regs: &crate::walker::Registers) -> framehop::UnwindRegsNative {
    framehop::x86_64::UnwindRegsX86_64::new(regs.pc, regs.sp, regs.fp)
}

#[cfg(target_arch = "x86_64")]
fn sp_fp(regs: &framehop::UnwindRegsNative) -> (u64, u64) {
    (regs.sp(), regs.bp())
}

#[cfg(target_arch = "aarch64")]
fn initial_regs(regs: &crate::walker::Registers) -> framehop::UnwindRegsNative {
    framehop::aarch64::UnwindRegsAarch64::new(regs.lr, regs.sp, regs.fp)
}

#[cfg(target_arch = "aarch64")]
fn sp_fp(regs: &framehop::UnwindRegsNative) -> (u64, u64) {
    (regs.sp(), regs.fp())
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::walker::{walk, Registers, StackBounds};

    /// This function's return address, into a caller with a frame pointer.
    #[inline(never)]
    fn return_address() -> u64 {
        let ret: u64;
        // SAFETY: reads this function's own frame record at `rbp` (frame pointers are forced).
        unsafe { core::arch::asm!("mov {}, [rbp + 8]", out(reg) ret, options(nostack, readonly)) };
        ret
    }

    /// The handler's frame-pointer walk of `copy`.
    fn fp_walk(mut copy: CopiedStack<'_>, high: u64) -> (Vec<u64>, WalkEnd) {
        let (mut out, regs) = ([0u64; 16], copy.regs);
        let bounds = Some(StackBounds { low: regs.sp, high });
        let w = walk(Arch::host(), &regs, bounds, &mut copy, &mut out);
        (out[..w.depth].to_vec(), w.end)
    }

    /// A 0 among a walk's callers ends it, with or without a CFI walker.
    #[test]
    fn a_zero_caller_ends_the_walk() {
        // Unknown code, fp beyond the copy: the given frames are kept.
        let chain = [0x10_0000u64, 0x10_2000, 0, 0x10_3000];
        let regs = Registers {
            pc: chain[0],
            sp: 0x7ff0_0000_0000,
            fp: 0x7ff0_0000_1000,
            lr: 0,
        };
        let words = [0u64; 4];
        let copy = CopiedStack::from_parts(regs, regs.sp, &words);
        let mut walker = CfiWalker::with_modules(modules::ModuleList::fixed(Vec::new()));
        for (cfi, copy) in [(None, None), (Some(&mut walker), Some(copy))] {
            let with_copy = copy.is_some();
            let walk = Collected {
                frames: &chain,
                lr: 0,
                end: WalkEnd::Complete,
                time: 0,
                copy,
            };
            let mut stats = SamplerStats::new(&crate::SamplerConfig::default());
            let (frames, end) = finish(cfi, &walk, 16, &mut stats);
            assert_eq!(frames, &chain[..2], "with a copy: {with_copy}");
            assert_eq!(end, WalkEnd::Complete);
            assert_eq!(stats.frame_pointer_frames, 1);
        }
    }

    /// A frameless function in a library loaded after the last check: with its CFI the caller
    /// is found, whether `rbp` is the caller's frame pointer or data.
    #[test]
    fn code_loaded_since_the_last_check_is_unwound_with_its_cfi() {
        let _turn = modules::tests::LOADER
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Both walkers read the module list before the library is loaded.
        let mut walkers = [CfiWalker::new(), CfiWalker::new()];
        for w in &mut walkers {
            w.refresh_modules();
        }
        let handle = modules::tests::dlopen_noframes();
        // SAFETY: a valid handle and a NUL-terminated name.
        let spin = unsafe { libc::dlsym(handle, c"noframes_spin".as_ptr()) } as u64;
        assert_ne!(spin, 0);
        assert!(
            walkers.iter().all(|w| !w.modules.covers(spin)),
            "the walkers' lists predate the library"
        );

        let ret = return_address();
        let base = 0x7ff0_0000_0000u64;
        // [sp] = the leaf's return address; at sp + 16 a last record.
        let words = [ret, 0, 0, 0];
        let end_of_stack = base + 8 * words.len() as u64;

        let cases = [
            (base + 16, "the caller's frame pointer"),
            (0x9e37_79b9_7f4a_7c15, "data in rbp"),
        ];
        for (walker, (fp, fp_leaves)) in walkers.iter_mut().zip(cases) {
            let regs = Registers {
                pc: spin,
                sp: base,
                fp,
                lr: 0,
            };
            let copy = CopiedStack::from_parts(regs, base, &words);
            let (fp_frames, fp_end) = fp_walk(copy, end_of_stack);
            // The frame-pointer walk alone misses the caller.
            assert_eq!(fp_frames, [spin], "{fp_leaves}");
            let done = walker.complete(&copy, &fp_frames, fp_end, 16);
            assert_eq!(
                done.frames.get(..2),
                Some(&[spin, ret][..]),
                "{fp_leaves}: the leaf's caller, from the library's CFI ({:?}, {:x?})",
                done.end,
                done.frames
            );
            if fp_leaves == "the caller's frame pointer" {
                assert_eq!(done.frames.len(), 2);
                assert_eq!(done.end, WalkEnd::Complete);
            }
            assert!(done.sources.cfi >= 1, "{:?}", done.sources);
            assert!(walker.modules.covers(spin), "the walk read the new library");
        }
        // SAFETY: nothing from the library is in use.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    }
}
