//! CPU-burning processes for runs that must hold on a busy machine.

use std::process::{Child, Command, Stdio};

/// `sh -c 'while :; do :; done'` processes competing for the CPUs, killed
/// by pid on drop.
pub struct Hogs(Vec<Child>);

impl Hogs {
    /// Starts `n` of them.
    pub fn start(n: usize) -> Hogs {
        Hogs(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("spawn a CPU hog")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}
