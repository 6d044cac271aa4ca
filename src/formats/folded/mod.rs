//! The folded-stack text format: `thread;root;...;leaf count`, read
//! ([`Profile::read_folded`](crate::Profile::read_folded)) and written
//! ([`Profile::write_folded`](crate::Profile::write_folded)); and its
//! two-count (differential) form, `...;leaf before after`, read into the
//! two runs it compares ([`FoldedFile`]).

mod escape;
mod line;
mod read;
mod read_error;
mod write;

pub use line::{LineProblem, MAX_COUNT};
pub use read::{FoldedFile, ReadNotes, ReadOptions, MAX_LINE_BYTES};
pub use read_error::ReadError;
pub use write::{write_two_count, FoldOptions};

pub use crate::profile::{sanitize_frame, TABLE_FULL_FRAME, TRUNCATED_FRAME, UNKNOWN_FRAME};
