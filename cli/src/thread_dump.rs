//! `btprof --pid-self --dump-threads`: the thread dump of btprof running
//! its built-in workload, two busy workers and one thread blocked in
//! `read` on a pipe, printed as text (or JSON).

use std::time::Duration;

use btprof::ThreadDump;

use crate::workload::{BlockedReader, Workload, BLOCKED_FUNCTION, THREAD_PREFIX};

/// Starts the workload, waits until its threads are in their functions,
/// prints one dump to stdout and stops the workload.
pub fn run(json: bool) -> Result<(), String> {
    let workload = Workload::start().map_err(|e| format!("cannot start the workload: {e}"))?;
    let reader =
        BlockedReader::start().map_err(|e| format!("cannot start the waiting thread: {e}"))?;
    // The workers start spinning at once; the reader needs a moment to
    // reach its `read`.
    let mut dump = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let d = ThreadDump::capture().map_err(|e| format!("cannot take a thread dump: {e}"))?;
        if is_settled(&d) {
            dump = Some(d);
            break;
        }
        dump = Some(d);
    }
    drop(reader);
    workload.stop();
    let dump = dump.expect("at least one capture");
    let stdout = std::io::stdout().lock();
    if json {
        dump.write_json(stdout).map_err(|e| e.to_string())?;
    } else {
        use std::io::Write;
        let mut stdout = stdout;
        write!(stdout, "{dump}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether the workers show up and the reader is blocked in its read.
fn is_settled(dump: &ThreadDump) -> bool {
    let workers = dump
        .threads()
        .iter()
        .filter(|t| t.name().starts_with(THREAD_PREFIX))
        .count();
    let reader_waits = dump.threads().iter().any(|t| {
        t.state() == btprof::ThreadState::Blocked
            && t.frames()
                .iter()
                .any(|f| f.function().is_some_and(|n| n.ends_with(BLOCKED_FUNCTION)))
    });
    workers == crate::workload::THREADS && reader_waits
}
