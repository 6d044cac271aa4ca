//! Building a [`Profile`]: from a recording (the symbolised stacks of a
//! sampler), from a folded file, or by hand (tests, other sources).

use std::collections::HashMap;
use std::fmt;

use super::intern::{Frame, FrameId, FrameTable, NameTable, StackHead, StackTable, ThreadId};
use super::labels::{label_set, LabelId, LabelSet, LabelTable, NO_LABELS};
use super::{sanitize_frame, FrameInfo, Profile, RunInfo, ThreadEntry, TRUNCATED_FRAME};
use crate::Stats;

/// Collects threads, frames and stacks, merging identical stacks as they
/// arrive, into a [`Profile`].
///
/// ```
/// use btprof::profile::Builder;
/// use btprof::Stats;
///
/// let mut b = Builder::new();
/// let main = b.thread("main", None)?;
/// b.add_stack(Some(main), ["main", "parse"], false, 30)?;
/// b.add_stack(Some(main), ["main", "render"], false, 70)?;
/// let profile = b.finish(Stats::new(&Default::default()));
/// assert_eq!(profile.total_samples(), 100);
/// # Ok::<(), btprof::profile::Overflow>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Builder {
    names: NameTable,
    frames: FrameTable,
    threads: Vec<ThreadEntry>,
    thread_ids: HashMap<ThreadEntry, ThreadId>,
    stacks: StackTable,
    labels: LabelTable,
    truncated_name: Option<u32>,
    total: u64,
    /// Scratch for one stack's frame ids.
    ids: Vec<FrameId>,
}

/// More samples than a `u64` counts, or more distinct names, frames,
/// threads or stacks than `u32` ids number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the profile is too large: a sample count or a table size overflowed")
    }
}

impl std::error::Error for Overflow {}

impl Builder {
    /// An empty builder.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// The id of the thread named `name` with OS id `tid`, added if new.
    /// The name is made safe for the folded format ([`sanitize_frame`]).
    pub fn thread(&mut self, name: &str, tid: Option<u64>) -> Result<ThreadId, Overflow> {
        let name = self.names.intern(&sanitize_frame(name)).ok_or(Overflow)?;
        let entry = ThreadEntry { name, tid };
        if let Some(&id) = self.thread_ids.get(&entry) {
            return Ok(id);
        }
        let id = ThreadId::try_from(self.threads.len()).map_err(|_| Overflow)?;
        self.threads.push(entry);
        self.thread_ids.insert(entry, id);
        Ok(id)
    }

    /// The id of the label set `set`, added if new.
    pub fn label_set(&mut self, set: &LabelSet) -> Result<LabelId, Overflow> {
        self.labels.intern(set, &mut self.names).ok_or(Overflow)
    }

    /// The id of the label set of `pairs` (`(name, value)`), added if new.
    ///
    /// ```
    /// use btprof::profile::Builder;
    /// use btprof::Stats;
    ///
    /// let mut b = Builder::new();
    /// let main = b.thread("main", None)?;
    /// let checkout = b.labels(&[("endpoint", "checkout")])?;
    /// b.add_labelled_stack(Some(main), checkout, ["main", "pay"], false, 3)?;
    /// b.add_stack(Some(main), ["main", "pay"], false, 1)?;
    /// let profile = b.finish(Stats::new(&Default::default()));
    /// // Equal frames, different labels: two stacks (and one folded line).
    /// let labelled: Vec<_> = profile.stacks().map(|s| (s.labels().get("endpoint"), s.count())).collect();
    /// assert_eq!(labelled, [(Some("checkout"), 3), (None, 1)]);
    /// # Ok::<(), btprof::profile::Overflow>(())
    /// ```
    pub fn labels(&mut self, pairs: &[(&str, &str)]) -> Result<LabelId, Overflow> {
        self.label_set(&label_set(pairs))
    }

    /// Adds `count` samples of the stack `frames` (names, root first) on
    /// `thread`; `truncated` when its walk ended before the thread's root.
    /// Names are made safe for the folded format ([`sanitize_frame`]).
    pub fn add_stack<'s>(
        &mut self,
        thread: Option<ThreadId>,
        frames: impl IntoIterator<Item = &'s str>,
        truncated: bool,
        count: u64,
    ) -> Result<(), Overflow> {
        self.add_labelled_stack(thread, NO_LABELS, frames, truncated, count)
    }

    /// [`Builder::add_stack`] for samples with the label set `labels`
    /// (from [`Builder::labels`]).
    ///
    /// # Panics
    ///
    /// If `labels` is not from this builder.
    pub fn add_labelled_stack<'s>(
        &mut self,
        thread: Option<ThreadId>,
        labels: LabelId,
        frames: impl IntoIterator<Item = &'s str>,
        truncated: bool,
        count: u64,
    ) -> Result<(), Overflow> {
        self.ids.clear();
        for name in frames {
            let id = self.intern_named(&sanitize_frame(name))?;
            self.ids.push(id);
        }
        self.push(thread, labels, truncated, count)
    }

    /// Adds `count` samples of the stack `frames` (root first) on `thread`,
    /// each frame with everything known about it: module, address, source
    /// file and line, and whether it was inlined into the frame before it
    /// (an inline chain goes outermost first, like the rest of the stack).
    /// `truncated` when the walk ended before the thread's root. Names are
    /// made safe for the folded format ([`sanitize_frame`]); module and
    /// file are stored as given.
    ///
    /// Frames are interned by all their fields, so the same function at
    /// two lines is two frames (and one name): outputs that know lines
    /// (pprof) keep them apart, folded output merges them.
    ///
    /// ```
    /// use btprof::profile::{Builder, FrameInfo};
    /// use btprof::Stats;
    ///
    /// let mut b = Builder::new();
    /// let main = b.thread("main", None)?;
    /// let caller = FrameInfo { address: Some(0x1000), line: Some(3), ..FrameInfo::named("run") };
    /// let inlined = FrameInfo { inlined: true, line: Some(9), ..FrameInfo::named("helper") };
    /// b.add_frames(Some(main), [caller, inlined], false, 5)?;
    /// let profile = b.finish(Stats::new(&Default::default()));
    /// let stack = profile.stacks().next().unwrap();
    /// let leaf = profile.frame(*stack.frame_ids().last().unwrap());
    /// assert_eq!((leaf.name, leaf.line, leaf.inlined), ("helper", Some(9), true));
    /// # Ok::<(), btprof::profile::Overflow>(())
    /// ```
    pub fn add_frames<'s>(
        &mut self,
        thread: Option<ThreadId>,
        frames: impl IntoIterator<Item = FrameInfo<'s>>,
        truncated: bool,
        count: u64,
    ) -> Result<(), Overflow> {
        self.add_labelled_frames(thread, NO_LABELS, frames, truncated, count)
    }

    /// [`Builder::add_frames`] for samples with the label set `labels`
    /// (from [`Builder::labels`] or [`Builder::label_set`]).
    ///
    /// # Panics
    ///
    /// If `labels` is not from this builder.
    pub fn add_labelled_frames<'s>(
        &mut self,
        thread: Option<ThreadId>,
        labels: LabelId,
        frames: impl IntoIterator<Item = FrameInfo<'s>>,
        truncated: bool,
        count: u64,
    ) -> Result<(), Overflow> {
        let head = (thread, labels, truncated);
        self.add_interned(frames, Self::intern_frame, head, count)
    }

    /// Adds `count` samples of a folded line's frames (root first), names
    /// as read: no thread, not truncated.
    pub(crate) fn add_folded<'s>(
        &mut self,
        frames: impl IntoIterator<Item = &'s str>,
        count: u64,
    ) -> Result<(), Overflow> {
        self.add_interned(frames, Self::intern_named, (None, NO_LABELS, false), count)
    }

    /// Interns each of `frames` (root first) with `intern` and adds the
    /// stack: adding frames by their details and by name differ only in
    /// how a frame is interned.
    fn add_interned<F>(
        &mut self,
        frames: impl IntoIterator<Item = F>,
        intern: impl Fn(&mut Self, F) -> Result<FrameId, Overflow>,
        (thread, labels, truncated): (Option<ThreadId>, LabelId, bool),
        count: u64,
    ) -> Result<(), Overflow> {
        self.ids.clear();
        for frame in frames {
            let id = intern(self, frame)?;
            self.ids.push(id);
        }
        self.push(thread, labels, truncated, count)
    }

    fn intern_frame(&mut self, info: FrameInfo<'_>) -> Result<FrameId, Overflow> {
        let mut intern = |s: &str| self.names.intern(s).ok_or(Overflow);
        let frame = Frame {
            name: intern(&sanitize_frame(info.name))?,
            module: info.module.map(&mut intern).transpose()?,
            address: info.address,
            file: info.file.map(&mut intern).transpose()?,
            line: info.line,
            inlined: info.inlined,
        };
        self.frames.intern(frame).ok_or(Overflow)
    }

    fn intern_named(&mut self, name: &str) -> Result<FrameId, Overflow> {
        let name = self.names.intern(name).ok_or(Overflow)?;
        self.frames.intern(Frame::named(name)).ok_or(Overflow)
    }

    fn push(
        &mut self,
        thread: Option<ThreadId>,
        labels: LabelId,
        truncated: bool,
        count: u64,
    ) -> Result<(), Overflow> {
        assert!(
            (labels as usize) < self.labels.len(),
            "label set {labels} is not from this builder"
        );
        self.total = self.total.checked_add(count).ok_or(Overflow)?;
        if truncated && self.truncated_name.is_none() {
            self.truncated_name = Some(self.names.intern(TRUNCATED_FRAME).ok_or(Overflow)?);
        }
        // The stack's count is at most the total, which did not overflow.
        self.stacks
            .add(
                StackHead {
                    thread,
                    truncated,
                    labels,
                },
                &self.ids,
                count,
            )
            .map_err(|_| Overflow)
    }

    /// Samples added so far.
    pub fn total_samples(&self) -> u64 {
        self.total
    }

    fn into_profile(self, source: Option<String>, stats: Option<Stats>) -> Profile {
        Profile {
            source,
            names: self.names,
            frames: self.frames,
            threads: self.threads,
            stacks: self.stacks,
            labels: self.labels,
            truncated_name: self.truncated_name,
            total: self.total,
            run_info: None,
            stats,
            truncated_at: Vec::new(),
        }
    }

    /// The profile of a recording of this process, taken as `stats` say.
    ///
    /// Its stacks are put in the order of their folded lines, and stacks
    /// whose folded lines are equal (threads of the same name) merged, so
    /// its folded file is sorted and deterministic. Its [`RunInfo`] is that
    /// of this process.
    pub fn finish(self, stats: Stats) -> Profile {
        let mut profile = self.into_profile(None, Some(stats));
        profile.stacks = sorted_by_folded_line(&profile);
        let run_info = profile.stats.as_ref().map(|stats| {
            let mut info = RunInfo::of_this_process(stats, profile.overflow_samples());
            // Decided per stack with symbols: expected ends left out.
            info.truncated_walks = profile.truncated_samples();
            info
        });
        profile.run_info = run_info;
        profile
    }

    /// A profile put together from other profiles (the processes of one
    /// `btprof record` run), named `source`: stacks sorted by their folded
    /// lines as a recording's are, so the file is deterministic, and no
    /// sampler stats, since each part had its own (give the combined run
    /// metadata with [`Profile::with_run_info`]).
    pub fn finish_combined(self, source: impl Into<String>) -> Profile {
        let mut profile = self.into_profile(Some(source.into()), None);
        profile.stacks = sorted_by_folded_line(&profile);
        profile
    }

    /// The profile of a folded file named `source`: stacks in the order
    /// first read.
    pub(crate) fn finish_read(self, source: String) -> Profile {
        self.into_profile(Some(source), None)
    }
}

/// `profile`'s stacks sorted by their folded lines; stacks whose lines,
/// labels and frames are all equal (threads of the same name) merged.
///
/// Stacks with the same line but different frames (the same functions at
/// other addresses or lines) stay apart, next to each other, so outputs
/// that know lines (pprof) keep them; folded output merges their lines.
fn sorted_by_folded_line(profile: &Profile) -> StackTable {
    let mut lines: Vec<(String, usize)> = profile
        .stacks()
        .enumerate()
        .map(|(i, stack)| (folded_line(stack.folded_names(false)), i))
        .collect();
    lines.sort_unstable();
    let entries: Vec<_> = profile.stacks.iter().collect();
    let mut sorted = StackTable::default();
    let mut i = 0;
    while i < lines.len() {
        let (head, _, _) = entries[lines[i].1];
        let mut j = i + 1;
        while j < lines.len() && lines[j].0 == lines[i].0 {
            j += 1;
        }
        // Within one run of equal lines, merge the stacks with equal
        // labels and frames; `add` merges by head and frames, so give them
        // one thread (the first's: the thread names are equal), keeping
        // each one's labels.
        for &(_, index) in &lines[i..j] {
            let (own, ids, count) = entries[index];
            let head = StackHead {
                labels: own.labels,
                ..head
            };
            // Fewer stacks than before, counts within the total: cannot fail.
            let _ = sorted.add(head, ids, count);
        }
        i = j;
    }
    sorted
}

/// Names joined with `;`.
fn folded_line<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut line = String::new();
    for (i, name) in names.enumerate() {
        if i > 0 {
            line.push(';');
        }
        line.push_str(name);
    }
    line
}
