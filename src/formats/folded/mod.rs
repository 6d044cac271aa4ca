//! The folded-stack text format: `thread;root;...;leaf count`, read
//! ([`Profile::read_folded`](crate::Profile::read_folded)) and written
//! ([`Profile::write_folded`](crate::Profile::write_folded)).

mod escape;
mod line;
mod read;
mod read_error;
mod write;

pub use line::{LineProblem, MAX_COUNT};
pub use read::{ReadNotes, ReadOptions, MAX_LINE_BYTES};
pub use read_error::ReadError;
pub use write::FoldOptions;

pub use crate::profile::{sanitize_frame, TABLE_FULL_FRAME, TRUNCATED_FRAME, UNKNOWN_FRAME};
