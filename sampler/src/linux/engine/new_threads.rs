//! Threads of this process created since the last look, found without
//! listing `/proc/self/task`, which is costly with thousands of threads.
//!
//! The kernel hands out ids in order, and `/proc/sys/kernel/ns_last_pid`
//! gives the last one; each id given since is probed with
//! `tgkill(pid, tid, 0)`, which sends nothing. Past [`MAX_PROBES`] ids, or
//! on a wrap, the look gives up and leaves them to the next listing.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::super::kernel::threads::thread_exists;

/// The most ids one look probes; more are left to the listing.
const MAX_PROBES: u32 = 256;

const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

#[derive(Debug)]
pub(crate) struct NewThreads {
    file: File,
    /// The last id the kernel had given at the last look or mark.
    last: Option<u32>,
}

impl NewThreads {
    /// `None` where the kernel does not show the last id: listings alone
    /// find new threads there.
    pub(crate) fn open() -> Option<NewThreads> {
        let file = File::open(LAST_PID).ok()?;
        let mut watch = NewThreads { file, last: None };
        watch.mark();
        watch.last.is_some().then_some(watch)
    }

    /// Just before a listing reads the threads: ids given from now on are
    /// the next look's, those given before are the listing's.
    pub(crate) fn mark(&mut self) {
        self.last = self.read();
    }

    /// The ids given since the last look or mark that are this process's
    /// threads, in order, into `found` (cleared first); `false` when it
    /// could not tell, leaving them to a listing.
    pub(crate) fn look(&mut self, found: &mut Vec<i32>) -> bool {
        found.clear();
        let (Some(last), Some(now)) = (self.last, self.read()) else {
            return false;
        };
        self.last = Some(now);
        if now < last || now - last > MAX_PROBES {
            return false;
        }
        found.extend(
            (last + 1..=now)
                .filter_map(|id| i32::try_from(id).ok())
                .filter(|&tid| thread_exists(tid)),
        );
        true
    }

    fn read(&self) -> Option<u32> {
        let mut buf = [0u8; 16];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread started after the mark is found by the next look, and a
    /// look with nothing new finds nothing.
    #[test]
    fn a_thread_started_since_the_mark_is_found() {
        let Some(mut watch) = NewThreads::open() else {
            eprintln!("NOT CHECKED: {LAST_PID} cannot be read here");
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        watch.mark();
        let thread = std::thread::spawn(move || {
            tx.send(crate::current_thread_id() as i32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let mut found = Vec::new();
        assert!(watch.look(&mut found), "could not tell");
        assert!(found.contains(&tid), "{tid} not in {found:?}");
        done_tx.send(()).unwrap();
        thread.join().unwrap();
        // Gone, and no id given since: nothing more.
        let mut again = Vec::new();
        if watch.look(&mut again) {
            assert!(!again.contains(&tid), "{again:?}");
        }
    }
}
