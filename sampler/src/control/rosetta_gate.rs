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
//! instead. Written host-independently so the decision is tested on every
//! host; the Mach sampler supplies whether the process is translated.

use std::ffi::OsStr;

use crate::{Error, SamplerConfig};

/// `Ok` when sampling may start: the process is native, or the user opted
/// in through `config` or the environment variable
/// [`ALLOW_ROSETTA_ENV`](crate::ALLOW_ROSETTA_ENV) (whose value is `env`)
/// set to `1`. Otherwise [`Error::Rosetta`].
pub fn check(translated: bool, config: &SamplerConfig, env: Option<&OsStr>) -> Result<(), Error> {
    let env_allows = env.is_some_and(|v| v == "1");
    if translated && !config.allow_rosetta && !env_allows {
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
    fn the_refusal_says_to_run_the_arm64_build_and_how_to_opt_in() {
        let msg = Error::Rosetta.to_string();
        assert!(msg.contains("arm64 build"), "{msg}");
        assert!(msg.contains("BTPROF_ALLOW_ROSETTA=1"), "{msg}");
    }
}
