//! Parsing `--clock`: the names `BTPROF_CLOCK` takes, with the library's
//! error for a name that forces no clock (which says why `posix` went).

use btprof::SampleClock;

/// The clock `name` forces (`perf` or `thread`), or why it forces none.
pub fn parse_clock(name: &str) -> Result<SampleClock, String> {
    SampleClock::ALL
        .into_iter()
        .find(|clock| clock.short_name() == name)
        .ok_or_else(|| SampleClock::unknown_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_clocks_that_remain() {
        assert_eq!(parse_clock("perf"), Ok(SampleClock::Perf));
        assert_eq!(parse_clock("thread"), Ok(SampleClock::SamplerThread));
        let posix = parse_clock("posix").unwrap_err();
        assert!(
            posix.contains("retired") && posix.contains("use perf or thread"),
            "{posix}"
        );
        // Sidecar names are not command-line names.
        assert!(parse_clock("sampler-thread").is_err());
        assert!(parse_clock("bogus")
            .unwrap_err()
            .contains("use perf or thread"));
    }
}
