//! A [`Profile`] as pprof: its thread names become `thread` labels, its
//! stacks' labels sample labels, its frames keep what is known of them (module, address, file, line,
//! inlining), and a walk that ended early is under a `[btprof: truncated]`
//! root frame, as in the folded file.

use super::{Frame, Header, Period, PprofBuilder};
use crate::profile::{Profile, RunInfo, TRUNCATED_FRAME};

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

/// The pprof tables of `profile`; with `thread_root`, a stack without a
/// known thread has its first frame taken as the thread's name. Of each
/// stack's labels, those `keep` accepts become labels of its sample.
pub(crate) fn from_profile(
    profile: &Profile,
    thread_root: bool,
    mut keep: impl FnMut(&str, &str) -> bool,
) -> PprofBuilder {
    let mut b = PprofBuilder::new(&header(profile.run_info(), profile.source_name()));
    let mut frames: Vec<Frame<'_>> = Vec::new();
    for stack in profile.stacks() {
        frames.clear();
        if stack.truncated() {
            frames.push(Frame::named(TRUNCATED_FRAME));
        }
        frames.extend(stack.frame_ids().iter().map(|&id| profile.frame(id)));
        let mut thread = stack.thread();
        let mut start = 0;
        if thread.is_none() && thread_root && !frames.is_empty() {
            thread = Some(frames[0].name);
            start = 1;
        }
        let labels = stack.labels().iter().filter(|&(k, v)| keep(k, v));
        b.add_labelled_sample(
            thread,
            labels,
            frames[start..].iter().copied(),
            stack.count(),
        );
    }
    b
}
