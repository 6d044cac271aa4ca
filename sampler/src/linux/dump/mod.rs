//! One-shot captures: this process's threads ([`one_shot`]) and another
//! process's, through `ptrace` ([`remote`]).

pub(crate) mod one_shot;
pub(crate) mod remote;
