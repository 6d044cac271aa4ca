//! A zlib-compressed section inflated from its start only as far as the lookups reach.
//!
//! A distribution's separate debug file keeps its DWARF compressed (Debian's libc6-dbg:
//! `.debug_info` is 2.3 MB of zlib holding 5.8 MB), and a deflate stream can only be read
//! from its start. Inflating the whole `.debug_info` costs about 10 ms on the reference
//! machine while the units a profile touches usually sit in its first half or two thirds:
//! the stream is inflated in steps, each call going only as far as the furthest byte asked
//! for so far, and the decoder's state is kept for the next step.

use super::SectionBytes;

/// How much compressed input one step feeds the decoder: about 80 KB of DWARF, so a step
/// overshoots what was asked for by a fraction of a millisecond at most.
const STEP: usize = 32 * 1024;

/// A zlib stream and the prefix of its contents inflated so far.
pub(crate) struct Inflating {
    /// The compressed stream (zlib header included), read in place from the file.
    input: SectionBytes,
    decoder: flate2::Decompress,
    /// The contents inflated so far; its capacity is the section's full size, so it never
    /// reallocates.
    out: Vec<u8>,
    /// The section's size once inflated, as its compression header records it.
    size: usize,
    /// The stream turned out corrupt (or shorter or longer than `size`): nothing more is
    /// inflated, and the prefix read so far is all there is.
    failed: bool,
}

impl std::fmt::Debug for Inflating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inflating({} of {} bytes)", self.out.len(), self.size)
    }
}

impl Inflating {
    /// A stream of `input` (zlib, header included) that inflates to `size` bytes.
    pub(crate) fn new(input: SectionBytes, size: usize) -> Inflating {
        Inflating {
            input,
            decoder: flate2::Decompress::new(true),
            out: Vec::with_capacity(size),
            size,
            failed: false,
        }
    }

    /// The section's size once inflated.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The contents from the start to at least `end` (or to the section's end, if sooner),
    /// inflating as far as needed; shorter when the stream is corrupt.
    pub(crate) fn up_to(&mut self, end: usize) -> &[u8] {
        let end = end.min(self.size);
        while self.out.len() < end && !self.failed {
            let at = usize::try_from(self.decoder.total_in()).unwrap_or(usize::MAX);
            let input = self.input.get(at..).unwrap_or_default();
            let chunk = &input[..input.len().min(STEP)];
            let before = self.out.len();
            match self
                .decoder
                .decompress_vec(chunk, &mut self.out, flate2::FlushDecompress::None)
            {
                Ok(flate2::Status::StreamEnd) => self.failed = self.out.len() != self.size,
                // No progress: the input ended before the stream did.
                Ok(_) => {
                    let consumed = self.decoder.total_in() != at as u64;
                    self.failed = !consumed && self.out.len() == before;
                }
                Err(_) => self.failed = true,
            }
        }
        &self.out
    }

    /// The whole section, when it inflates to the size its header records.
    pub(crate) fn into_whole(mut self) -> Option<Vec<u8>> {
        self.up_to(self.size);
        (self.out.len() == self.size).then_some(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    fn compressed(data: &[u8]) -> SectionBytes {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        SectionBytes::Owned(Arc::new(encoder.finish().unwrap()))
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i * 7 % 251) as u8 ^ (i / 4096) as u8)
            .collect()
    }

    #[test]
    fn inflates_in_steps_to_the_same_bytes() {
        let data = sample(1_000_000);
        let mut stream = Inflating::new(compressed(&data), data.len());
        let first = stream.up_to(1000).len();
        assert!(first >= 1000 && first < data.len(), "{first}");
        assert_eq!(stream.up_to(1000), &data[..first]);
        let more = stream.up_to(600_000).len();
        assert!(more >= 600_000);
        assert_eq!(stream.up_to(0), &data[..more]);
        assert_eq!(stream.into_whole().as_deref(), Some(&data[..]));
    }

    #[test]
    fn a_stream_shorter_than_its_header_says_is_refused() {
        let data = sample(10_000);
        let stream = Inflating::new(compressed(&data), data.len() + 1);
        assert_eq!(stream.into_whole(), None);
        let mut cut = Inflating::new(compressed(&data), data.len());
        if let SectionBytes::Owned(bytes) = &cut.input {
            cut.input = SectionBytes::Owned(Arc::new(bytes[..bytes.len() / 2].to_vec()));
        }
        assert!(cut.up_to(data.len()).len() < data.len());
        assert_eq!(cut.into_whole(), None);
    }
}
