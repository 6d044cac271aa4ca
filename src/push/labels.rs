//! The labels of a pushed series, checked against the rules the server
//! applies, so that a bad label is an error at configuration time rather
//! than every window refused later.
//!
//! The push API's rules are those of Pyroscope's distributor
//! (`pkg/validation/validate.go`): a label name matches
//! `[a-zA-Z_][a-zA-Z0-9_]*` (Prometheus's classic rule, which every
//! server version accepts), at most 1024 bytes; a value is at most 2048
//! bytes; no name twice; at most 30 labels in all (the server's default
//! limit), `__name__` and `service_name` included. Names starting with
//! `__` are the server's own. The legacy `/ingest` endpoint packs the
//! labels into its `name` parameter as `app{k=v,...}` (`labelset.go`): a
//! value there may not hold `,`, `{`, `}` or `=`, nor a space.

use std::fmt;

/// The longest label name the server accepts by default.
pub const MAX_NAME_BYTES: usize = 1024;
/// The longest label value the server accepts by default.
pub const MAX_VALUE_BYTES: usize = 2048;
/// The most labels per series the server accepts by default.
pub const MAX_LABELS: usize = 30;

/// A label the server would refuse, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelError {
    /// The label's name (as given).
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "push label {:?}: {}", self.name, self.reason)
    }
}

impl std::error::Error for LabelError {}

/// Whether `name` is a label name every Pyroscope server accepts.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Checks one label given by the user (not one of btprof's own): its
/// name, its value's length and, for the legacy endpoint, its value's
/// characters.
pub fn check_user_label(name: &str, value: &str, legacy: bool) -> Result<(), LabelError> {
    let err = |reason: String| {
        Err(LabelError {
            name: name.to_owned(),
            reason,
        })
    };
    if !is_valid_name(name) {
        return err(
            "a label name is letters, digits and `_`, not starting with a digit \
             ([a-zA-Z_][a-zA-Z0-9_]*)"
                .into(),
        );
    }
    if name.starts_with("__") {
        return err("names starting with `__` are the server's own".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return err(format!("the name is longer than {MAX_NAME_BYTES} bytes"));
    }
    if value.is_empty() {
        // The server drops a label with an empty value, which then
        // matches nothing a query for it asks.
        return err("the value is empty".into());
    }
    if value.len() > MAX_VALUE_BYTES {
        return err(format!("the value is longer than {MAX_VALUE_BYTES} bytes"));
    }
    if legacy {
        if let Some(c) = value.chars().find(|c| ",{}= ".contains(*c)) {
            return err(format!(
                "the legacy /ingest endpoint cannot carry {c:?} in a value \
                 (it packs labels as app{{k=v,...}})"
            ));
        }
    }
    Ok(())
}

/// Checks the whole set: no name twice, at most [`MAX_LABELS`].
pub fn check_set(names: &[&str]) -> Result<(), LabelError> {
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(LabelError {
                name: (*name).to_owned(),
                reason: "given twice (or one of btprof's own labels: `service_name`, `host`, \
                         `pid`, `version`, `clock`, `mode`)"
                    .into(),
            });
        }
    }
    if names.len() > MAX_LABELS {
        return Err(LabelError {
            name: names[MAX_LABELS].to_owned(),
            reason: format!(
                "{} labels in all, btprof's own included; the server accepts {MAX_LABELS}",
                names.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_classic_rule() {
        for ok in ["env", "_x", "Region_2", "a"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "2x", "env-name", "a.b", "é", "a b"] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn user_labels_are_refused_with_a_reason() {
        assert!(check_user_label("env", "prod", false).is_ok());
        assert!(
            check_user_label("env", "a,b", false).is_ok(),
            "fine on push"
        );
        let e = check_user_label("env", "a,b", true).unwrap_err();
        assert!(e.reason.contains("legacy"), "{e}");
        assert!(check_user_label("env", "a}b", true).is_err());
        assert!(check_user_label("__name__", "x", false).is_err());
        assert!(check_user_label("env", "", false).is_err());
        assert!(check_user_label("env", &"v".repeat(MAX_VALUE_BYTES + 1), false).is_err());
        let e = check_user_label("my-env", "x", false).unwrap_err();
        assert_eq!(e.name, "my-env");
        assert!(e.to_string().contains("my-env"), "{e}");
    }

    #[test]
    fn a_set_has_no_name_twice_and_a_bounded_size() {
        assert!(check_set(&["a", "b"]).is_ok());
        assert_eq!(check_set(&["a", "b", "a"]).unwrap_err().name, "a");
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(check_set(&many).is_err());
        assert!(check_set(&many[..MAX_LABELS]).is_ok());
    }
}
