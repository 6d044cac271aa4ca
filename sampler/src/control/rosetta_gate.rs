//! Whether a process translated by Rosetta 2 may be sampled by suspending
//! its threads.
//!
//! Under Rosetta, `thread_get_state` on a translated thread asks the
//! translator, which runs inside the process. If another translated thread
//! is suspended inside the translator's critical section, that call can
//! block: the sampler waits for the suspended thread, which waits for the
//! sampler to resume it, and the process hangs. Skipping Rosetta's own
//! threads does not help, because the critical section is entered by
//! ordinary translated threads. So sampling a translated process is
//! refused unless the user opts in, and the message says what to run
//! instead. One-shot captures (thread dumps, `backtrace`, the stall
//! watchdog) suspend threads the same way, so they pass the same gate
//! ([`check_capture`]) and fail with the same [`Error::Rosetta`]. Written
//! host-independently so the decision is tested on every host; the Mach
//! backend supplies whether the process is translated.

use std::ffi::OsStr;

use crate::{Error, SamplerConfig};

/// `Ok` when sampling may start: the process is native, or the user opted
/// in through `config` or the environment variable
/// [`ALLOW_ROSETTA_ENV`](crate::ALLOW_ROSETTA_ENV) (whose value is `env`)
/// set to `1`. Otherwise [`Error::Rosetta`].
pub fn check(translated: bool, config: &SamplerConfig, env: Option<&OsStr>) -> Result<(), Error> {
    decide(translated, config.allow_rosetta, env)
}

/// `Ok` when a one-shot capture may suspend threads: the process is
/// native, or the environment variable
/// [`ALLOW_ROSETTA_ENV`](crate::ALLOW_ROSETTA_ENV) (whose value is `env`)
/// is `1`. A capture has no configuration, so the variable is the only
/// way in. Otherwise [`Error::Rosetta`], the sampler's refusal.
pub fn check_capture(translated: bool, env: Option<&OsStr>) -> Result<(), Error> {
    decide(translated, false, env)
}

/// The one rule both gates apply: a translated process is refused unless
/// the caller's configuration or the variable set to `1` opts in.
fn decide(translated: bool, configured: bool, env: Option<&OsStr>) -> Result<(), Error> {
    let env_allows = env.is_some_and(|v| v == "1");
    if translated && !configured && !env_allows {
        return Err(Error::Rosetta);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_translated_process_is_refused_unless_the_user_opts_in() {
        let default = SamplerConfig::default();
        let allowed = SamplerConfig {
            allow_rosetta: true,
            ..SamplerConfig::default()
        };
        assert!(check(false, &default, None).is_ok());
        assert!(matches!(check(true, &default, None), Err(Error::Rosetta)));
        // Only `1` opts in: an empty or other value does not.
        for v in ["", "0", "yes"] {
            assert!(
                matches!(
                    check(true, &default, Some(OsStr::new(v))),
                    Err(Error::Rosetta)
                ),
                "{v:?}"
            );
        }
        assert!(check(true, &default, Some(OsStr::new("1"))).is_ok());
        assert!(check(true, &allowed, None).is_ok());
    }

    #[test]
    fn a_capture_in_a_translated_process_is_refused_unless_the_variable_opts_in() {
        assert!(check_capture(false, None).is_ok());
        assert!(check_capture(false, Some(OsStr::new("0"))).is_ok());
        assert!(matches!(check_capture(true, None), Err(Error::Rosetta)));
        for v in ["", "0", "yes"] {
            assert!(
                matches!(
                    check_capture(true, Some(OsStr::new(v))),
                    Err(Error::Rosetta)
                ),
                "{v:?}"
            );
        }
        assert!(check_capture(true, Some(OsStr::new("1"))).is_ok());
        // The same answer as the sampler's gate without the builder's
        // opt-in, so one message covers both refusals.
        let default = SamplerConfig::default();
        for translated in [false, true] {
            for env in [None, Some(OsStr::new("1")), Some(OsStr::new("0"))] {
                assert_eq!(
                    check_capture(translated, env).is_ok(),
                    check(translated, &default, env).is_ok(),
                    "translated {translated}, {env:?}"
                );
            }
        }
    }

    #[test]
    fn the_refusal_says_to_run_the_arm64_build_and_how_to_opt_in() {
        let msg = Error::Rosetta.to_string();
        assert!(msg.contains("arm64 build"), "{msg}");
        assert!(msg.contains("BTPROF_ALLOW_ROSETTA=1"), "{msg}");
    }
}
