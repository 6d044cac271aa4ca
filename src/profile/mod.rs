//! The profile model: what recording produces, what reading a folded file
//! produces, and what every output and analysis takes.
//!
//! A [`Profile`] is interned (see `intern.rs`): a name table, a frame table
//! (name, and where known module, address, source file and line, and
//! whether the frame was inlined), a thread table, and the distinct stacks
//! as sequences of frame ids, root first, each with its thread, its label
//! set (`labels.rs`), whether its walk was truncated, and its sample count. Beside them: how the
//! profile was taken ([`RunInfo`], and for a recording of this process the
//! sampler's [`Stats`]).
//!
//! Names are stored ready for the folded format ([`sanitize_frame`]), so
//! every output writes them as they are.

mod builder;
mod intern;
mod labels;
pub mod run_info;

use std::borrow::Cow;
use std::sync::Arc;

pub use builder::{Builder, Overflow};
pub use intern::{FrameId, NameId, ThreadId};
pub use labels::{label_frame, label_set, LabelId, LabelSet, NO_LABELS};
pub use run_info::RunInfo;

use crate::Stats;
use intern::{Frame, FrameTable, NameTable, StackHead, StackTable};
use labels::LabelTable;

/// The frame put under the thread root of a stack whose walk ended early,
/// so partial stacks are visible instead of posing as complete ones.
pub const TRUNCATED_FRAME: &str = "[btprof: truncated]";

/// The only frame of the samples a full stack table could not store (see
/// `btprof_sampler::Limit`): counted under the thread, never dropped.
pub const TABLE_FULL_FRAME: &str = "[btprof: stack table full]";

/// The name btprof gives a frame without one, and what readers take an
/// empty frame (`a;;b`) for.
pub const UNKNOWN_FRAME: &str = "[unknown]";

/// Makes a frame name safe for the folded format, so that every file
/// btprof writes reads back (in btprof, inferno and FlameGraph) to the
/// same frames.
///
/// - `;` separates frames and a line ends at a newline, so both are
///   replaced (`[u8; 8]` becomes `[u8, 8]`, a newline a space);
/// - whitespace at either end is dropped (readers trim a line's ends);
/// - a name ending in whitespace and a number (`ends with number 42`)
///   gets `_` for that whitespace (`ends with number_42`): as the leaf,
///   it would otherwise read as a second count: a two-count
///   (differential) line to inferno and to btprof;
/// - an empty name becomes `[unknown]`, as readers take an empty frame.
///
/// Sanitising a sanitised name changes nothing.
pub fn sanitize_frame(name: &str) -> Cow<'_, str> {
    let trimmed = name.trim_matches(is_space);
    if trimmed.is_empty() {
        return Cow::Borrowed(UNKNOWN_FRAME);
    }
    let mut out = if trimmed.contains([';', '\n', '\r']) {
        let replaced: String = trimmed
            .chars()
            .map(|c| match c {
                ';' => ',',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        Cow::Owned(replaced.trim_matches(is_space).to_owned())
    } else {
        Cow::Borrowed(trimmed)
    };
    if let Some((head, last)) = out.rsplit_once(is_space) {
        if is_number(last) {
            let head = head.trim_end_matches(is_space);
            out = Cow::Owned(format!("{head}_{last}"));
        }
    }
    if out.is_empty() {
        return Cow::Borrowed(UNKNOWN_FRAME);
    }
    out
}

/// Whitespace as folded readers split on (and trim).
fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// What a folded reader could take for a sample count: `42`, `1.5`, `10.`.
fn is_number(field: &str) -> bool {
    let (int, frac) = field.split_once('.').unwrap_or((field, ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// Distinct stacks with sample counts, interned, and how they were taken.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The file it was read from, if any.
    source: Option<String>,
    names: NameTable,
    frames: FrameTable,
    /// Each thread's name.
    threads: Vec<ThreadEntry>,
    stacks: StackTable,
    /// The stacks' label sets.
    labels: LabelTable,
    /// The name id of [`TRUNCATED_FRAME`], once a stack is truncated.
    truncated_name: Option<NameId>,
    total: u64,
    run_info: Option<RunInfo>,
    stats: Option<Stats>,
    /// Truncated samples by the module of the frame where their walk
    /// stopped, most first (recordings only).
    truncated_at: Vec<(Arc<str>, u64)>,
}

/// One thread of the thread table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ThreadEntry {
    name: NameId,
    tid: Option<u64>,
}

/// One distinct stack of a [`Profile`].
#[derive(Clone, Copy, Debug)]
pub struct Stack<'a> {
    profile: &'a Profile,
    head: StackHead,
    ids: &'a [FrameId],
    count: u64,
}

impl<'a> Stack<'a> {
    /// The name of the thread it was sampled on, if known (a folded file
    /// read back has its thread name, if any, as the first frame).
    pub fn thread(&self) -> Option<&'a str> {
        let profile = self.profile;
        self.head.thread.map(|t| profile.thread_name(t))
    }

    /// The id of its thread in [`Profile::threads`], if known.
    pub fn thread_id(&self) -> Option<ThreadId> {
        self.head.thread
    }

    /// Whether the walk ended before the root of the thread's stack.
    pub fn truncated(&self) -> bool {
        self.head.truncated
    }

    /// Frame names, root first, leaf (the interrupted function) last.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &'a str> + ExactSizeIterator + 'a {
        let profile = self.profile;
        self.ids.iter().map(move |&id| profile.frame_name(id))
    }

    /// Frame ids, root first; [`Profile::frame`] describes them.
    pub fn frame_ids(&self) -> &'a [FrameId] {
        self.ids
    }

    /// Samples of this stack.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The names of this stack's folded line, as ids: the thread name
    /// (unless `merge_threads`), [`TRUNCATED_FRAME`] for a truncated walk,
    /// then the frames' names.
    pub fn folded_name_ids(
        &self,
        merge_threads: bool,
    ) -> impl Iterator<Item = NameId> + Clone + 'a {
        self.folded_name_ids_with(merge_threads, false)
    }

    /// [`Stack::folded_name_ids`], leaving out inlined frames when
    /// `hide_inlined` (each machine function then stands for the code
    /// inlined into it, as in profilers that do not expand inlining).
    pub fn folded_name_ids_with(
        &self,
        merge_threads: bool,
        hide_inlined: bool,
    ) -> impl Iterator<Item = NameId> + Clone + 'a {
        self.folded_name_ids_labelled(merge_threads, hide_inlined, false)
    }

    /// [`Stack::folded_name_ids_with`], with the stack's label frame
    /// ([`label_frame`]) under the thread root when `label_frames` and the
    /// stack has labels.
    pub fn folded_name_ids_labelled(
        &self,
        merge_threads: bool,
        hide_inlined: bool,
        label_frames: bool,
    ) -> impl Iterator<Item = NameId> + Clone + 'a {
        let profile = self.profile;
        let thread = self
            .head
            .thread
            .filter(|_| !merge_threads)
            .map(|t| profile.threads[t as usize].name);
        let label = label_frames
            .then(|| profile.labels.frame(self.head.labels))
            .flatten();
        let truncated = if self.head.truncated {
            profile.truncated_name
        } else {
            None
        };
        thread.into_iter().chain(label).chain(truncated).chain(
            self.ids
                .iter()
                .map(move |&id| profile.frames.get(id))
                .filter(move |f| !(hide_inlined && f.inlined))
                .map(|f| f.name),
        )
    }

    /// The names of this stack's folded line (see
    /// [`Stack::folded_name_ids`]).
    pub fn folded_names(&self, merge_threads: bool) -> impl Iterator<Item = &'a str> + Clone + 'a {
        self.folded_names_with(merge_threads, false)
    }

    /// The names of this stack's folded line (see
    /// [`Stack::folded_name_ids_with`]).
    pub fn folded_names_with(
        &self,
        merge_threads: bool,
        hide_inlined: bool,
    ) -> impl Iterator<Item = &'a str> + Clone + 'a {
        self.folded_names_labelled(merge_threads, hide_inlined, false)
    }

    /// The names of this stack's folded line (see
    /// [`Stack::folded_name_ids_labelled`]).
    pub fn folded_names_labelled(
        &self,
        merge_threads: bool,
        hide_inlined: bool,
        label_frames: bool,
    ) -> impl Iterator<Item = &'a str> + Clone + 'a {
        let profile = self.profile;
        self.folded_name_ids_labelled(merge_threads, hide_inlined, label_frames)
            .map(move |id| profile.names.get(id))
    }
}

/// What is known about one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo<'a> {
    /// The function's name.
    pub name: &'a str,
    /// The module (executable or library) holding its code, if known: its
    /// file name (`libc.so.6`).
    pub module: Option<&'a str>,
    /// The code address that was symbolised, if known (a recording): the
    /// interrupted pc for the leaf, a return address minus 1 for a caller
    /// (so it lies inside the call instruction). The frames of one inline
    /// chain share it.
    pub address: Option<u64>,
    /// The source file, as the compiler recorded it (usually an absolute
    /// path), when debug information covers the address.
    pub file: Option<&'a str>,
    /// The source line in `file`: for the innermost frame of an inline
    /// chain the line of the address itself, for an outer one the line of
    /// the call that was inlined. `None` when unknown.
    pub line: Option<u32>,
    /// Whether it was inlined into the frame before it in the stack (its
    /// caller, toward the root): such a frame shares its caller's machine
    /// code and address. Folded output can leave these out
    /// ([`crate::FoldOptions::hide_inlined`]).
    pub inlined: bool,
}

impl<'a> FrameInfo<'a> {
    /// A frame known by name only (as a folded file gives it).
    pub fn named(name: &'a str) -> FrameInfo<'a> {
        FrameInfo {
            name,
            module: None,
            address: None,
            file: None,
            line: None,
            inlined: false,
        }
    }
}

/// One thread of a profile's thread table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thread<'a> {
    /// Its name when sampled.
    pub name: &'a str,
    /// The OS thread id, if known.
    pub tid: Option<u64>,
}

impl Profile {
    /// The name this profile goes by: the file it was read from, or
    /// `profile` for one recorded in this process.
    pub fn source(&self) -> &str {
        self.source.as_deref().unwrap_or("profile")
    }

    /// The file it was read from (or the name given with
    /// [`Profile::with_source`]); `None` for a recording.
    pub fn source_name(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The same profile under another name (used in reports and errors).
    #[must_use]
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same profile with what is known about how it was taken.
    #[must_use]
    pub fn with_run_info(mut self, run_info: Option<RunInfo>) -> Self {
        self.run_info = run_info;
        self
    }

    /// How, where and when the profile was taken: always known for a
    /// recording, and for a file when its JSON sidecar was read.
    pub fn run_info(&self) -> Option<&RunInfo> {
        self.run_info.as_ref()
    }

    /// How a recording was taken: rates, samples, missed ticks, truncated
    /// and failed walks. `None` for a profile read from a file.
    pub fn stats(&self) -> Option<&Stats> {
        self.stats.as_ref()
    }

    /// Samples over all stacks.
    pub fn total_samples(&self) -> u64 {
        self.total
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Distinct stacks.
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Distinct frames.
    pub fn distinct_frames(&self) -> usize {
        self.frames.len()
    }

    /// Distinct names (of frames and threads), the range of [`NameId`]s.
    pub fn distinct_names(&self) -> usize {
        self.names.len()
    }

    /// The distinct stacks: a recording's sorted by their folded line, a
    /// file's in the order first read.
    pub fn stacks(&self) -> impl ExactSizeIterator<Item = Stack<'_>> + '_ {
        self.stacks.iter().map(|(head, ids, count)| Stack {
            profile: self,
            head,
            ids,
            count,
        })
    }

    /// The thread table.
    pub fn threads(&self) -> impl ExactSizeIterator<Item = Thread<'_>> + '_ {
        self.threads.iter().map(|t| Thread {
            name: self.names.get(t.name),
            tid: t.tid,
        })
    }

    /// The name of thread `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn thread_name(&self, id: ThreadId) -> &str {
        self.names.get(self.threads[id as usize].name)
    }

    /// The name of a frame id from [`Stack::frame_ids`].
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn frame_name(&self, id: FrameId) -> &str {
        self.names.get(self.frames.get(id).name)
    }

    /// Everything known about frame `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn frame(&self, id: FrameId) -> FrameInfo<'_> {
        let f: &Frame = self.frames.get(id);
        FrameInfo {
            name: self.names.get(f.name),
            module: f.module.map(|m| self.names.get(m)),
            address: f.address,
            file: f.file.map(|m| self.names.get(m)),
            line: f.line,
            inlined: f.inlined,
        }
    }

    /// The name `id` from [`Stack::folded_name_ids`].
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn name(&self, id: NameId) -> &str {
        self.names.get(id)
    }

    /// Samples whose walk stopped short of the thread's entry (`main`, a
    /// thread start or the frame chain's end in the C library). Unlike
    /// [`Stats::truncated`], which counts how the raw walks ended, this
    /// leaves out the expected ends (the main thread's chain always breaks
    /// in the C start code after `main`).
    pub fn truncated_samples(&self) -> u64 {
        self.stacks()
            .filter(|s| s.truncated())
            .map(|s| s.count())
            .sum()
    }

    /// Truncated samples by the module (file name) of the frame where
    /// their walk stopped, most first: the module that lacks frame
    /// pointers and unwind information, or the depth cap's last module.
    /// Empty for profiles read from files.
    pub fn truncated_by_module(&self) -> &[(Arc<str>, u64)] {
        &self.truncated_at
    }

    /// Records where truncated walks stopped (see
    /// [`Profile::truncated_by_module`]), most first.
    pub(crate) fn set_truncated_by_module(&mut self, mut by_module: Vec<(Arc<str>, u64)>) {
        by_module.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.truncated_at = by_module;
    }

    /// Whether any frame was inlined into its caller (only a recording
    /// with debug information has such frames).
    pub fn has_inlined_frames(&self) -> bool {
        (0..self.frames.len()).any(|id| self.frames.get(id as FrameId).inlined)
    }

    /// Samples a full stack table counted under [`TABLE_FULL_FRAME`].
    pub fn overflow_samples(&self) -> u64 {
        self.stacks()
            .filter(|s| s.frame_ids().len() == 1 && s.frames().next() == Some(TABLE_FULL_FRAME))
            .map(|s| s.count())
            .sum()
    }
}
