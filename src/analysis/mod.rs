//! What a [`Profile`](crate::Profile) says: each function's self and total
//! samples ([`functions`]), the comparison of two profiles with its
//! significance test ([`diff`]), and their [`report`]s as text, Markdown
//! or JSON.

pub mod diff;
mod diff_options;
mod function_diff;
pub mod functions;
mod gate;
pub mod per_thread;
pub mod report;
mod run_checks;
mod significance;
