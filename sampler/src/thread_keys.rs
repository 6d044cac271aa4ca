//! Which thread a stack is counted under.
//!
//! Every stack in the table carries a thread key: an index into the run's
//! [`ThreadInfo`] list. By default each (thread, name) pair gets a key of
//! its own, so per-thread counts stay apart. A pool that replaces its
//! threads (a new thread id per task) then stores the same stacks once per
//! thread id and fills the table with copies of them. With sharing by name
//! ([`crate::SamplerConfig::share_stacks_by_name`]), threads of one name
//! share a key: the first such thread's id stands for all of them, as
//! folded output, which roots each stack at its thread's name, merges them
//! anyway.
//!
//! A name the OS may have cut short (Linux keeps 15 bytes of it) is never
//! shared: two different full names can begin with the same 15 bytes, and
//! sharing would count one's stacks under the other's name.

use std::collections::HashMap;

use crate::profile::ThreadInfo;

/// The id a shared name is keyed under: no thread has it.
const SHARED: u64 = u64::MAX;

/// The run's thread keys and what each stands for.
#[derive(Debug)]
pub(crate) struct ThreadKeys {
    share_by_name: bool,
    /// A name this long or longer may have been cut by the OS.
    cut_len: usize,
    keys: HashMap<(u64, String), u32>,
    infos: Vec<ThreadInfo>,
    seen: u64,
}

impl ThreadKeys {
    /// Keys threads by (id, name), or by name alone where `share_by_name`
    /// and the name is shorter than `cut_len` bytes (the length at which
    /// the OS may have cut it).
    pub(crate) fn new(share_by_name: bool, cut_len: usize) -> ThreadKeys {
        ThreadKeys {
            share_by_name,
            cut_len,
            keys: HashMap::new(),
            infos: Vec::new(),
            seen: 0,
        }
    }

    /// The key for thread `tid` now named `name`. `previous` is the key it
    /// had at its last look (`None` for a thread not seen before), so that
    /// a name read again costs no lookup and counts no new thread.
    pub(crate) fn key(&mut self, tid: u64, name: String, previous: Option<u32>) -> u32 {
        if let Some(key) = previous {
            if self.infos.get(key as usize).is_some_and(|i| i.name == name) {
                return key;
            }
        }
        self.seen += 1;
        let shared = self.share_by_name && name.len() < self.cut_len;
        let next = self.infos.len() as u32;
        let infos = &mut self.infos;
        *self
            .keys
            .entry((if shared { SHARED } else { tid }, name))
            .or_insert_with_key(|(_, name)| {
                infos.push(ThreadInfo {
                    tid,
                    name: name.clone(),
                });
                next
            })
    }

    /// [`Self::key`] for a borrowed name, copied only when it is not the
    /// name `previous` stands for (the Linux perf clock's names, one per
    /// sample).
    #[cfg(target_os = "linux")]
    pub(crate) fn key_named(&mut self, tid: u64, name: &str, previous: Option<u32>) -> u32 {
        match previous {
            Some(key) if self.infos.get(key as usize).is_some_and(|i| i.name == name) => key,
            _ => self.key(tid, name.to_owned(), previous),
        }
    }

    /// What each key stands for, in key order.
    pub(crate) fn infos(&self) -> &[ThreadInfo] {
        &self.infos
    }

    /// Distinct (thread, name) pairs seen, shared or not.
    pub(crate) fn threads_seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sharing_each_thread_has_its_own_key() {
        let mut keys = ThreadKeys::new(false, 15);
        let a = keys.key(1, "pool".into(), None);
        let b = keys.key(2, "pool".into(), None);
        assert_ne!(a, b);
        assert_eq!(keys.infos().len(), 2);
        assert_eq!(keys.threads_seen(), 2);
    }

    #[test]
    fn shared_names_give_every_thread_of_a_pool_one_key() {
        let mut keys = ThreadKeys::new(true, 15);
        let first = keys.key(10, "pool".into(), None);
        for tid in 11..1000 {
            assert_eq!(keys.key(tid, "pool".into(), None), first);
        }
        assert_eq!(keys.infos().len(), 1);
        assert_eq!(
            keys.infos()[0].tid,
            10,
            "the first thread stands for the pool"
        );
        assert_eq!(keys.threads_seen(), 990);
        // Reading a name again is no new thread.
        assert_eq!(keys.key(10, "pool".into(), Some(first)), first);
        assert_eq!(keys.threads_seen(), 990);
    }

    #[test]
    fn a_name_the_os_may_have_cut_is_never_shared() {
        let mut keys = ThreadKeys::new(true, 15);
        let cut = "compressor-thre"; // 15 bytes: "compressor-thread-a" or "-b"?
        let a = keys.key(1, cut.into(), None);
        let b = keys.key(2, cut.into(), None);
        assert_ne!(a, b);
        let short = "compressor-thr";
        assert_eq!(
            keys.key(3, short.into(), None),
            keys.key(4, short.into(), None)
        );
    }

    #[test]
    fn a_renamed_thread_counts_once_per_name() {
        let mut keys = ThreadKeys::new(true, 15);
        let a = keys.key(1, "starting".into(), None);
        let b = keys.key(1, "serving".into(), Some(a));
        assert_ne!(a, b);
        assert_eq!(keys.key(1, "serving".into(), Some(b)), b);
        assert_eq!(keys.threads_seen(), 2);
    }
}
