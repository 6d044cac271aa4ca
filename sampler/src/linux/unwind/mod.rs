//! CFI-assisted walking: stacks through code built without frame pointers
//! (the C library, distribution libraries, C dependencies).
//!
//! Two halves, split so the signal handler stays as small as it was:
//!
//! - the handler ([`stack_copy`]) records the interrupted registers,
//!   copies the top 8 KiB of the stack into its slot with the fault-safe
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
//! with one cache per slot)? Measured (benches/overhead.rs and the
//! closing note of issue 11): both cost the same CPU per sample, since
//! the unwinding is the same work, but in the handler it runs on the
//! interrupted thread's stack, and gimli's allocation-free evaluation
//! keeps its register rules and expression stack there: several KiB,
//! against the 512 bytes a sample may cost a thread with a small stack
//! (issue 10, item 11). Here, nothing of it runs in the handler, the
//! module list is never read by a handler (so no handler can see it
//! half-updated, and `dlclose` cannot pull unwind data from under one),
//! and the sampler thread may allocate and take the loader lock.
//!
//! What is lost: a frame without frame pointers lying more than 8 KiB
//! above the stack pointer (below frames whose stack use exceeds that)
//! ends the walk there, counted as truncated.

pub(crate) mod blocked;
pub(crate) mod modules;
pub(crate) mod stack_copy;

use std::time::{Duration, Instant};

use framehop::{FrameAddress, MayAllocateDuringUnwind, Unwinder};

use crate::walker::{Arch, WalkEnd};
use crate::SamplerStats;

use super::slots::Collected;

use modules::ModuleList;
use stack_copy::CopiedStack;

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
    /// A sample's pc lay outside every known object (a library loaded
    /// since the last check, perhaps): check again soon.
    unknown_pc: bool,
}

/// How often the loader is asked whether objects were loaded or unloaded.
/// `dl_iterate_phdr` takes the loader's lock; asking rarely keeps the
/// sampler thread out of it (a `fork` while a thread holds it leaves it
/// held in the child).
const CHECK_INTERVAL: Duration = Duration::from_millis(200);
/// How soon after a sample in unknown code the loader is asked again.
const UNKNOWN_PC_CHECK_INTERVAL: Duration = Duration::from_millis(10);

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
            unknown_pc: false,
        }
    }

    /// Picks up objects loaded or unloaded since the last check: every
    /// [`CHECK_INTERVAL`], or [`UNKNOWN_PC_CHECK_INTERVAL`] after a sample
    /// ran in code outside every known object. Cheap when nothing changed.
    /// Call before completing freshly collected samples.
    pub fn refresh_modules(&mut self) {
        let due = if self.unknown_pc {
            UNKNOWN_PC_CHECK_INTERVAL
        } else {
            CHECK_INTERVAL
        };
        if self.checked_at.is_none_or(|at| at.elapsed() >= due) {
            self.modules.refresh();
            self.checked_at = Some(Instant::now());
            self.unknown_pc = false;
        }
    }

    /// Completes one sample: unwinds `copy` with CFI and joins the
    /// handler's frame-pointer walk (`fp_frames`, pc first, which ended
    /// for `fp_end`) beyond it. At most `max_depth` frames.
    pub fn complete<'a>(
        &'a mut self,
        copy: &CopiedStack<'_>,
        fp_frames: &[u64],
        fp_end: WalkEnd,
        max_depth: usize,
    ) -> Completed<'a> {
        let arch = Arch::host();
        let max_depth = max_depth.max(1);
        if !self.modules.covers(arch.strip_code_address(copy.regs.pc)) {
            self.unknown_pc = true;
        }
        let out = &mut self.out;
        out.clear();
        let mut sources = FrameSources::default();
        let mut read = |addr: u64| copy.read(addr).ok_or(());
        let mut regs = initial_regs(&copy.regs);
        let mut address = FrameAddress::from_instruction_pointer(copy.regs.pc);
        out.push(arch.strip_code_address(copy.regs.pc));
        let end = loop {
            if out.len() >= max_depth {
                break WalkEnd::DepthCap;
            }
            let (sp, fp) = sp_fp(&regs);
            let unwound = self.modules.unwinder().unwind_frame(
                address,
                &mut regs,
                &mut self.cache,
                &mut read,
            );
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
            return Completed {
                frames: out,
                end: if n < fp_frames.len() {
                    WalkEnd::DepthCap
                } else {
                    fp_end
                },
                sources,
            };
        }
        Completed {
            frames: out,
            end,
            sources,
        }
    }
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
    stats.cfi_frames += sources.cfi;
    stats.frame_pointer_frames += sources.frame_pointer;
    (frames, end)
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
