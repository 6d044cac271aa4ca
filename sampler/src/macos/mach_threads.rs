//! [`ThreadControl`] over Mach: the threads of this task, one system call
//! per method.
//!
//! Handles are thread port names returned by `task_threads`; each listing
//! holds one send right per thread and the kernel-allocated array, and the
//! shared loop releases both every tick. Threads are identified by their
//! 64-bit id (`THREAD_IDENTIFIER_INFO`), never by port name: a name can be
//! reused for another thread once its right is released.

use std::ffi::CStr;
use std::mem;

use mach2::kern_return::kern_return_t;
use mach2::mach_port::mach_port_deallocate;
use mach2::mach_types::{thread_act_array_t, thread_act_t};
use mach2::message::mach_msg_type_number_t;
use mach2::port::mach_port_t;
use mach2::task::task_threads;
use mach2::thread_act::{thread_resume, thread_suspend};
use mach2::traps::mach_task_self;
use mach2::vm::{mach_vm_deallocate, mach_vm_read_overwrite};

use super::thread_state;
use crate::control::kern_return::{self, Resumed};
use crate::control::{StackRange, ThreadControl, ThreadError, ThreadUsage};
use crate::walker::Registers;

/// The threads of the current task, controlled from the sampler thread.
pub(crate) struct MachThreads {
    task: mach_port_t,
    /// The sampler thread's own port name, as `task_threads` reports it.
    own: thread_act_t,
    /// Shown for threads that never named themselves (the main thread),
    /// as Linux shows the process name for them.
    process_name: String,
}

impl MachThreads {
    /// Control of this task's threads, from the calling thread, which is
    /// the one that will never be stopped.
    pub(crate) fn for_calling_thread() -> MachThreads {
        // SAFETY: `mach_task_self` reads the task port the runtime set up
        // at start; `pthread_self` has no preconditions and
        // `pthread_mach_thread_np` of the calling thread returns its port
        // name without taking a reference (unlike `mach_thread_self`, whose
        // reference would have to be released).
        let (task, own) = unsafe {
            (
                mach_task_self(),
                libc::pthread_mach_thread_np(libc::pthread_self()),
            )
        };
        MachThreads {
            task,
            own,
            process_name: process_name(),
        }
    }

    /// `thread_info` of `flavor` into a `T` (a plain C struct of integers).
    fn info<T: Copy>(&self, thread: thread_act_t, flavor: i32) -> Result<T, ThreadError> {
        // SAFETY: every `thread_*_info` struct is plain integers (and
        // `c_char` arrays), for which all zero bytes is a valid value.
        let mut info: T = unsafe { mem::zeroed() };
        let mut count =
            (mem::size_of::<T>() / mem::size_of::<libc::integer_t>()) as mach_msg_type_number_t;
        // SAFETY: `info` is writable for `count` integers, which is what
        // the kernel may write for `flavor` (the `*_COUNT` of its struct).
        let kr = unsafe {
            libc::thread_info(
                thread,
                flavor as libc::thread_flavor_t,
                (&mut info as *mut T).cast(),
                &mut count,
            )
        };
        kern_return::info_call(kr).map(|()| info)
    }
}

/// The code `thread_info(THREAD_BASIC_INFO)` returns for `thread`: how an
/// ambiguous code from another call is confirmed as an exit or not (see
/// [`kern_return::thread_call`]). A system call on the port, with a buffer
/// on the stack: no allocation, no user-space lock, so it may run while a
/// thread is stopped.
fn info_code(thread: thread_act_t) -> kern_return_t {
    // SAFETY: plain integers, for which all zero bytes is a valid value.
    let mut info: libc::thread_basic_info = unsafe { mem::zeroed() };
    let mut count = (mem::size_of::<libc::thread_basic_info>() / mem::size_of::<libc::integer_t>())
        as mach_msg_type_number_t;
    // SAFETY: `info` is writable for `count` integers, `THREAD_BASIC_INFO`'s
    // size.
    unsafe {
        libc::thread_info(
            thread,
            libc::THREAD_BASIC_INFO as libc::thread_flavor_t,
            (&mut info as *mut libc::thread_basic_info).cast(),
            &mut count,
        )
    }
}

/// One `task_threads` result: port names in a kernel-allocated array.
pub(crate) struct ThreadArray {
    ports: thread_act_array_t,
    count: mach_msg_type_number_t,
}

impl AsRef<[thread_act_t]> for ThreadArray {
    fn as_ref(&self) -> &[thread_act_t] {
        if self.ports.is_null() || self.count == 0 {
            return &[];
        }
        // SAFETY: `task_threads` returned `count` port names at `ports`,
        // mapped in this task until `release_list` deallocates them, which
        // consumes `self`.
        unsafe { std::slice::from_raw_parts(self.ports, self.count as usize) }
    }
}

impl ThreadControl for MachThreads {
    type Thread = thread_act_t;
    type List = ThreadArray;

    fn current_thread(&self) -> thread_act_t {
        self.own
    }

    fn list_threads(&mut self) -> Result<ThreadArray, ThreadError> {
        let mut list = ThreadArray {
            ports: std::ptr::null_mut(),
            count: 0,
        };
        // SAFETY: both out-pointers are valid; on success the kernel hands
        // us the array and one send right per thread, which `release_*`
        // give back.
        let kr = unsafe { task_threads(self.task, &mut list.ports, &mut list.count) };
        if kr == kern_return::KERN_SUCCESS {
            Ok(list)
        } else {
            Err(ThreadError::Failed(kr))
        }
    }

    fn thread_id(&mut self, thread: thread_act_t) -> Result<u64, ThreadError> {
        self.info::<libc::thread_identifier_info>(thread, libc::THREAD_IDENTIFIER_INFO)
            .map(|info| info.thread_id)
    }

    fn usage(&mut self, thread: thread_act_t) -> Result<ThreadUsage, ThreadError> {
        // One call gives both: the CPU time, and whether the scheduler has
        // the thread running (its time may lag while it spins in user mode).
        let info = self.info::<libc::thread_basic_info>(thread, libc::THREAD_BASIC_INFO)?;
        Ok(ThreadUsage {
            cpu_ns: time_value_ns(info.user_time) + time_value_ns(info.system_time),
            running: info.run_state == libc::TH_STATE_RUNNING,
        })
    }

    fn name(&mut self, thread: thread_act_t) -> Result<String, ThreadError> {
        // The kernel's copy of the name (`pthread_setname_np` stores it
        // there): a system call on the port, so no pthread structure of a
        // thread that may be exiting is dereferenced.
        let info = self.info::<libc::thread_extended_info>(thread, libc::THREAD_EXTENDED_INFO)?;
        let bytes: Vec<u8> = info
            .pth_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        if bytes.is_empty() {
            return Ok(self.process_name.clone());
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn stack_range(&mut self, thread: thread_act_t) -> Option<StackRange> {
        // `pthread_from_mach_thread_np` searches the pthread list under its
        // lock; the two getters re-validate the pthread under that lock (or
        // use the main thread's, which is never freed), so a thread that
        // exits in between yields a bogus small value, not a dangling read.
        // These take a lock, so they are only ever called while no thread
        // is stopped.
        //
        // SAFETY: a port name of this task; returns null if no pthread
        // has it (a raw Mach thread).
        let pthread = unsafe { libc::pthread_from_mach_thread_np(thread) };
        if pthread == 0 {
            return None;
        }
        // SAFETY: a pthread_t from the list; see above for exit races.
        let (top, size) = unsafe {
            (
                libc::pthread_get_stackaddr_np(pthread) as u64,
                libc::pthread_get_stacksize_np(pthread) as u64,
            )
        };
        // `top` is the stack's *highest* address on macOS. libpthread
        // returns `ESRCH` (3) as the address of a thread that exited in
        // between, which `below_top` rejects. The main thread's size may be
        // the `RLIMIT_STACK` limit rather than what is mapped so far; that
        // is safe, see `StackRange::below_top`.
        StackRange::below_top(top, size)
    }

    fn stop(&mut self, thread: thread_act_t) -> Result<(), ThreadError> {
        // SAFETY: a port name from the current listing, not our own thread
        // (the loop never stops it). `thread_suspend` returns once the
        // thread is off CPU. An ambiguous failure is confirmed with
        // `thread_info` before it counts as an exit.
        let kr = unsafe { thread_suspend(thread) };
        kern_return::thread_call(kr, || info_code(thread))
    }

    fn registers(&mut self, thread: thread_act_t) -> Result<Registers, ThreadError> {
        // An ambiguous failure is confirmed with `thread_info`, a system
        // call that neither allocates nor locks.
        thread_state::read(thread).map_err(|kr| {
            match kern_return::thread_call(kr, || info_code(thread)) {
                Err(e) => e,
                Ok(()) => ThreadError::Failed(kr),
            }
        })
    }

    fn copy_memory(&mut self, addr: u64, out: &mut [u64]) -> bool {
        let size = mem::size_of_val(out) as u64;
        let mut copied = 0u64;
        // SAFETY: `out` is writable for `size` bytes; the kernel copies
        // from this task's `[addr, addr + size)` into it or fails
        // (`KERN_INVALID_ADDRESS` for an unmapped stack) without touching
        // the source with a plain load, so an unmapped page is an error
        // code here, not a fault. No allocation and no user-space lock:
        // allowed while a thread is stopped.
        let kr = unsafe {
            mach_vm_read_overwrite(self.task, addr, size, out.as_mut_ptr() as u64, &mut copied)
        };
        kern_return::memory_read(kr) && copied == size
    }

    fn resume(&mut self, thread: thread_act_t) -> Resumed {
        // SAFETY: a thread this sampler suspended once and not resumed yet.
        // A thread that exited while suspended makes this fail with
        // `KERN_INVALID_ARGUMENT` (confirmed with `thread_info`) or
        // `KERN_TERMINATED`; the shared loop counts it as exited (see
        // `kern_return::resume`).
        let kr = unsafe { thread_resume(thread) };
        kern_return::resume(kr, || info_code(thread))
    }

    fn release_thread(&mut self, thread: thread_act_t) {
        // SAFETY: one send right from `task_threads`, released once. A
        // failure (a bug) leaks one port right and cannot be acted on.
        unsafe {
            mach_port_deallocate(self.task, thread);
        }
    }

    fn release_list(&mut self, list: ThreadArray) {
        if list.ports.is_null() {
            return;
        }
        let bytes = u64::from(list.count) * mem::size_of::<thread_act_t>() as u64;
        // SAFETY: the array `task_threads` allocated in this task, of
        // `count` port names; `list` is consumed so it is not used again.
        unsafe {
            mach_vm_deallocate(self.task, list.ports as u64, bytes);
        }
    }
}

fn time_value_ns(t: libc::time_value_t) -> u64 {
    let secs = u64::try_from(t.seconds).unwrap_or(0);
    let micros = u64::try_from(t.microseconds).unwrap_or(0);
    secs * 1_000_000_000 + micros * 1_000
}

/// The process's short name, for unnamed threads.
fn process_name() -> String {
    // SAFETY: `getprogname` returns the name libc set at start (or null);
    // it is NUL-terminated and lives for the whole process.
    let name = unsafe { libc::getprogname() };
    if name.is_null() {
        return "process".to_owned();
    }
    // SAFETY: see above.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}
