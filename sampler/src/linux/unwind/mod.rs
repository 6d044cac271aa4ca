//! CFI-assisted walking: stacks through code built without frame pointers
//! (the C library, distribution libraries, C dependencies).
//!
//! Two halves, split so the signal handler stays as small as it was:
//!
//! - the handler ([`stack_copy`](crate::linux::signal::stack_copy)) records the interrupted registers,
//!   copies the top 16 KiB of the stack into its slot with the fault-safe
//!   read, and walks the frame-pointer chain as before (through the copy);
//! - the sampler thread ([`CfiWalker`]), before interning the sample,
//!   unwinds the copy with each module's `.eh_frame` through `framehop`
//!   ([`modules`]), frame by frame: a frame whose code has CFI is unwound
//!   by it, one without falls back to its frame pointer. Where the copy
//!   ends, the walk joins the handler's frame-pointer walk at the frame
//!   whose frame pointer it reached, and keeps that walk's remaining
//!   return addresses.
//!
//! Why not unwind in the handler (framehop supports it allocation-free,
//! with one cache per slot)? Measured with the overhead bench
//! (`benches/overhead/`): both cost the same CPU per sample, since
//! the unwinding is the same work, but in the handler it runs on the
//! interrupted thread's stack, and gimli's allocation-free evaluation
//! keeps its register rules and expression stack there: several KiB,
//! against the 512 bytes a sample may cost a thread with a small stack
//! (`sampler/tests/host_unchanged/small_stack.rs`). Here, nothing of it runs in the handler, the
//! module list is never read by a handler (so no handler can see it
//! half-updated, and `dlclose` cannot pull unwind data from under one),
//! and the sampler thread may allocate and take the loader lock.
//!
//! What is lost: a frame without frame pointers whose return address lies
//! more than 16 KiB above the stack pointer (below frames whose stack use
//! exceeds that) ends the walk there, counted as truncated. (Samples the
//! kernel takes of threads born while sampling carry their own 8 KiB
//! copy: see `born_threads`.)

pub(crate) mod blocked;
pub(crate) mod blocked_stack;
pub(crate) mod modules;

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
    /// Callers recovered from call frame information that following the
    /// frame pointer would have got wrong or missed.
    pub cfi: u64,
    /// Callers found by (or identical to) following the frame pointer.
    pub frame_pointer: u64,
}

/// The sampler thread's CFI unwinder: the module list, framehop's rule
/// cache and an output buffer, reused for every sample.
pub(crate) struct CfiWalker {
    modules: ModuleList,
    cache: NativeCache,
    out: Vec<u64>,
    /// When the loader was last asked whether objects changed; `None`:
    /// never yet.
    checked_at: Option<Instant>,
    /// Whether a walk that met unknown code may still ask the loader
    /// before the next [`CfiWalker::refresh_modules`] (once per tick).
    may_ask: bool,
}

/// How often the loader is asked whether objects were loaded or unloaded
/// when no sample calls for it (to drop the copies of unloaded objects).
/// `dl_iterate_phdr` takes the loader's lock; asking rarely keeps the
/// sampler thread out of it (a `fork` while a thread holds it leaves it
/// held in the child).
const CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// A walk completed by [`CfiWalker::complete`]: borrowed frames, pc first.
pub(crate) struct Completed<'a> {
    pub frames: &'a [u64],
    pub end: WalkEnd,
    pub sources: FrameSources,
}

impl CfiWalker {
    /// A walker with no modules yet: the first
    /// [`CfiWalker::refresh_modules`] reads them (until then it unwinds
    /// with frame pointers only). Sampler thread only.
    pub fn new() -> Self {
        CfiWalker {
            modules: ModuleList::new(),
            cache: NativeCache::new(),
            out: Vec::with_capacity(crate::linux::MAX_DEPTH),
            checked_at: None,
            may_ask: false,
        }
    }

    /// A walker over a module list read elsewhere (another process's,
    /// [`modules::ModuleList::fixed`]): it never asks this process's
    /// loader.
    pub fn with_modules(modules: ModuleList) -> Self {
        CfiWalker {
            modules,
            ..CfiWalker::new()
        }
    }

    /// Picks up objects loaded or unloaded since the last check, every
    /// [`CHECK_INTERVAL`], and lets the next walk that meets code outside
    /// every known object ask the loader at once (see
    /// [`CfiWalker::complete`]). Cheap when nothing changed. Call once per
    /// tick, between collections of samples.
    pub fn refresh_modules(&mut self) {
        if self
            .checked_at
            .is_none_or(|at| at.elapsed() >= CHECK_INTERVAL)
        {
            self.ask_loader();
        }
        self.may_ask = true;
    }

    /// Whether this process's module list was read: at the first
    /// [`CfiWalker::refresh_modules`]; until then walks unwind with frame
    /// pointers only. (A walker made [`CfiWalker::with_modules`] never
    /// reads it.)
    pub fn modules_read(&self) -> bool {
        self.checked_at.is_some()
    }

    /// Asks the loader whether objects changed, and reads them if so.
    /// Returns whether the list changed.
    fn ask_loader(&mut self) -> bool {
        self.checked_at = Some(Instant::now());
        self.modules.refresh()
    }

    /// Completes one sample: unwinds `copy` with CFI and joins the
    /// handler's frame-pointer walk (`fp_frames`, pc first, which ended
    /// for `fp_end`) beyond it. At most `max_depth` frames.
    ///
    /// A walk that meets code outside every known object asks the loader
    /// first (once per tick) and, if objects were loaded, unwinds again.
    /// Such code is most often a library loaded since the last check: the
    /// sample was taken after its `dlopen` returned, so a check made now,
    /// after the sample was collected, finds it. Without it, every sample
    /// taken in a new library until the next periodic check was unwound
    /// with the frame pointer there, which in frameless code holds data:
    /// those walks ended early (misaligned, or beyond the copy), or,
    /// worse, followed a stale chain.
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

    /// One unwind of `copy` into `self.out` with the current module list
    /// (see [`CfiWalker::complete`]).
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
                    // The call instruction, not what follows it, is the
                    // caller's code (a call may end its function).
                    unknown_code |= !modules.covers(stripped - 1);
                    out.push(stripped);
                    address = next;
                }
                Ok(None) => break WalkEnd::Complete,
                Err(e) => {
                    // The copy ends (or CFI gave up) at a frame whose frame
                    // pointer is `fp`: continue with the handler's walk if
                    // it passed through that frame record.
                    if let Some(i) = join_index(copy, fp_frames.len(), fp, sp) {
                        let tail = &fp_frames[i + 1..];
                        let room = max_depth - out.len();
                        let taken = tail.len().min(room);
                        out.extend_from_slice(&tail[..taken]);
                        sources.frame_pointer += taken as u64;
                        break if taken < tail.len() {
                            WalkEnd::DepthCap
                        } else {
                            fp_end
                        };
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
        // CFI stopped short and got no further than the handler's
        // frame-pointer walk (no unwind information where it stopped, and
        // a copy too short to follow): keep the handler's walk, which is no
        // worse and says why it stopped (its fault-safe read, for one, can
        // tell memory that is gone from memory beyond the copy).
        if end.is_truncated() && out.len() <= fp_frames.len() {
            out.clear();
            let n = fp_frames.len().min(max_depth);
            out.extend_from_slice(&fp_frames[..n]);
            sources = FrameSources {
                cfi: 0,
                frame_pointer: n.saturating_sub(1) as u64,
            };
            return Unwound {
                end: if n < fp_frames.len() {
                    WalkEnd::DepthCap
                } else {
                    fp_end
                },
                sources,
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
    /// Whether a frame's code (the pc, or a return address) lay outside
    /// every known object.
    unknown_code: bool,
}

/// The hook the sampler calls on each collected walk: completes it with
/// CFI when there is a walker and a stack copy, and counts where its
/// frames came from. Returns the frames to intern and how the walk ended.
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
            FrameSources {
                cfi: 0,
                frame_pointer: walk.frames.len().saturating_sub(1) as u64,
            },
        ),
    };
    // No code lives at address 0: a 0 among the callers is the end of a
    // chain read from outside the handler (the kernel's call chain of a
    // ring sample stores whatever return address the last frame record it
    // reaches holds, 0 in zeroed memory), not a frame. Keeping it would
    // put a nameless frame in the profile and make consumers look up the
    // address before it.
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

/// The index `i` in the handler's walk whose frame record is at `fp`: the
/// walk's `fp_frames[i + 1]` is then the caller of the frame whose frame
/// pointer is `fp`. The handler's chain is re-traced from the captured
/// frame pointer through the copy; the first record beyond the copy is
/// still recognised (its address was read from inside the copy).
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
    use crate::walker::{walk, Registers, StackBounds, StackMemory};

    /// This function's return address: a real one, into its caller, which
    /// (as all Rust code here) keeps a frame pointer.
    #[inline(never)]
    fn return_address() -> u64 {
        let ret: u64;
        // SAFETY: reads this function's own frame record, at `rbp` (frame
        // pointers are forced for the whole workspace); no side effects.
        unsafe { core::arch::asm!("mov {}, [rbp + 8]", out(reg) ret, options(nostack, readonly)) };
        ret
    }

    /// A stack copy as a frame-pointer walk reads it.
    struct Words<'a>(&'a CopiedStack<'a>);

    impl StackMemory for Words<'_> {
        fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
            Some([self.0.read(addr)?, self.0.read(addr + 8)?])
        }
    }

    /// The handler's frame-pointer walk of `copy`.
    fn fp_walk(copy: &CopiedStack<'_>, end_of_stack: u64) -> (Vec<u64>, WalkEnd) {
        let mut out = [0u64; 16];
        let bounds = StackBounds {
            low: copy.regs.sp,
            high: end_of_stack,
        };
        let w = walk(
            Arch::host(),
            &copy.regs,
            Some(bounds),
            &mut Words(copy),
            &mut out,
        );
        (out[..w.depth].to_vec(), w.end)
    }

    /// A 0 among a walk's callers ends it, on either path (no CFI walker,
    /// and a CFI walk that keeps the frames it was given).
    #[test]
    fn a_zero_caller_ends_the_walk() {
        // Code outside every object, whose frame pointer lies beyond the
        // copy: CFI gets no further than the given frames, and keeps them.
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
                copy,
            };
            let mut stats = SamplerStats::new(&crate::SamplerConfig::default());
            let (frames, end) = finish(cfi, &walk, 16, &mut stats);
            assert_eq!(frames, &chain[..2], "with a copy: {with_copy}");
            assert_eq!(end, WalkEnd::Complete);
            assert_eq!(stats.frame_pointer_frames, 1);
        }
    }

    /// A sample taken at the first instruction of a frameless library's
    /// function, in a library loaded after the walker last read the
    /// module list (as when a thread `dlopen`s a library and runs it
    /// before the sampler's next periodic check). The return address is
    /// at `sp`; `rbp` is either still the caller's frame pointer, whose
    /// record ends the chain, or data (a frameless caller). With the
    /// library's CFI the caller is found in both cases; walked by frame
    /// pointer, as code outside every known object is, the caller is
    /// skipped in the first case and the walk ends misaligned at the leaf
    /// in the second.
    #[test]
    fn code_loaded_since_the_last_check_is_unwound_with_its_cfi() {
        let _turn = modules::tests::LOADER
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
            panic!("the C test library was not built (see the build script's warning)");
        };
        // Both walkers read the module list before the library is loaded,
        // and a tick passed since.
        let mut walkers = [CfiWalker::new(), CfiWalker::new()];
        for w in &mut walkers {
            w.refresh_modules();
        }
        let c_path = std::ffi::CString::new(path).unwrap();
        // SAFETY: loading our own test library, which has no initialisers.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {path}");
        // SAFETY: a valid handle and a NUL-terminated name.
        let spin = unsafe { libc::dlsym(handle, c"noframes_spin".as_ptr()) } as u64;
        assert_ne!(spin, 0);
        assert!(
            walkers.iter().all(|w| !w.modules.covers(spin)),
            "the walkers' lists predate the library"
        );

        let ret = return_address();
        let base = 0x7ff0_0000_0000u64;
        // [sp] = the leaf's return address; at sp + 16 a frame record
        // ending the chain (saved frame pointer 0, return address 0).
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
            let (fp_frames, fp_end) = fp_walk(&copy, end_of_stack);
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
