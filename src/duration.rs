//! Parsing the durations users write, on the command line (`--duration`)
//! and in the environment: `5`, `5s`, `500ms`, `1.5s`, `2m`.

use std::time::Duration;

/// Parses a duration; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a duration: expected a number with an optional unit, like 5, 5s, 500ms or 2m")
    })?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "`{text}` has an unknown unit `{other}`: expected a number with an optional unit \
                 (us, ms, s, m or h), like 5, 5s, 500ms or 2m"
            ))
        }
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(format!("`{text}` must be a positive duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn rejects_nonsense_with_a_hint() {
        for bad in ["", "s", "five", "5 parsecs", "0", "-1", "1e400"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }
}
