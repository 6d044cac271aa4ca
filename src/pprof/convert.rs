//! The profiles btprof holds, as pprof: a recorded [`Profile`] (thread
//! names become `thread` labels) and a [`FoldedProfile`] read from a file
//! (names only; the first frame optionally taken as the thread).

use super::{Frame, Header, Period, PprofBuilder};
use crate::folded::TRUNCATED_FRAME;
use crate::folded_profile::FoldedProfile;
use crate::run_info::RunInfo;
use crate::Profile;

/// The header for a run described by `info` (`None`: unknown).
pub(crate) fn header(info: Option<&RunInfo>, source: Option<&str>) -> Header {
    let mut header = Header::default();
    if let Some(source) = source {
        header.comments.push(format!("source: {source}"));
    }
    let Some(info) = info else {
        return header;
    };
    let period_nanos = 1_000_000_000 / u64::from(info.requested_hz.max(1));
    header.period = match info.mode.as_str() {
        "cpu" => Period::CpuNanos(period_nanos),
        "wall" => Period::WallNanos(period_nanos),
        _ => Period::Unknown,
    };
    header.start_unix_nanos = secs_to_nanos(info.start_unix_secs);
    header.duration_nanos = secs_to_nanos(info.duration_secs);
    header
}

fn secs_to_nanos(secs: f64) -> i64 {
    if secs.is_finite() && secs > 0.0 {
        // Saturates at i64::MAX (year 2262) rather than wrapping.
        (secs * 1e9).round() as i64
    } else {
        0
    }
}

/// A recorded profile: one sample per stack, its thread as a label, a
/// walk that ended early under a `[btprof: truncated]` root frame as in
/// the folded file.
pub(crate) fn from_profile(profile: &Profile) -> PprofBuilder {
    let info = profile.run_info();
    let mut b = PprofBuilder::new(&header(Some(&info), None));
    for stack in profile.stacks() {
        let truncated = stack.truncated.then_some(Frame::named(TRUNCATED_FRAME));
        let frames = truncated
            .into_iter()
            .chain(stack.frames.iter().map(|f| Frame::named(f)));
        b.add_sample(
            Some(&stack.thread),
            frames.collect::<Vec<_>>().into_iter(),
            stack.count,
        );
    }
    b
}

/// A folded profile; with `thread_root`, each stack's first frame is the
/// thread's name (btprof's own files), put on the sample as a label.
pub(crate) fn from_folded(profile: &FoldedProfile, thread_root: bool) -> PprofBuilder {
    let mut b = PprofBuilder::new(&header(profile.run_info(), Some(profile.source())));
    for stack in profile.stacks() {
        let mut frames = stack.frames();
        let thread = if thread_root { frames.next() } else { None };
        b.add_sample(thread, frames.map(Frame::named), stack.count());
    }
    b
}
