//! The files a side of `btprof diff` names: paths as given, directories
//! as the `*.folded` files in them, and patterns as the files they match,
//! so a CI job can pass `base/` or `'base/*.folded'` whatever its shell
//! does with globs.

use std::path::{Path, PathBuf};

/// `paths` with each directory replaced by its `*.folded` files and each
/// pattern (a `*` or `?` in the file name) by the files it matches, both
/// sorted by name. A directory or pattern that yields nothing is an error
/// that names it; files are left for the reader to open (and name, if
/// that fails).
pub(crate) fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let found = matching(path, |name| name.ends_with(".folded"))
                .map_err(|e| format!("cannot read the directory {}: {e}", path.display()))?;
            if found.is_empty() {
                return Err(format!("{} holds no .folded files", path.display()));
            }
            out.extend(found);
        } else if let Some(pattern) = pattern_of(path) {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let found = matching(dir, |name| glob_match(pattern.as_bytes(), name.as_bytes()))
                .map_err(|e| format!("cannot read the directory {}: {e}", dir.display()))?;
            if found.is_empty() {
                return Err(format!("no file matches {}", path.display()));
            }
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

/// The file-name pattern of `path`, if its file name has `*` or `?` and
/// no such file exists.
fn pattern_of(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    (name.contains(['*', '?']) && !path.exists()).then_some(name)
}

/// The files in `dir` whose names pass `keep`, sorted.
fn matching(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if keep(name) && entry.path().is_file() {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

/// Whether `name` matches `pattern`: `*` any run of bytes, `?` any one
/// byte, everything else itself.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.split_first(), name.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => {
            glob_match(rest, name) || (!name.is_empty() && glob_match(pattern, &name[1..]))
        }
        (Some((b'?', rest)), Some((_, tail))) => glob_match(rest, tail),
        (Some((p, rest)), Some((n, tail))) if p == n => glob_match(rest, tail),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_stars_and_question_marks() {
        for (pattern, name, want) in [
            ("*.folded", "run-1.folded", true),
            ("*.folded", "run-1.json", false),
            ("run-?.folded", "run-2.folded", true),
            ("run-?.folded", "run-12.folded", false),
            ("*-*", "a-b", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(
                glob_match(pattern.as_bytes(), name.as_bytes()),
                want,
                "{pattern} {name}"
            );
        }
    }
}
