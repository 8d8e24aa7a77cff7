//! Golden files: a test renders something as text (generated source, IR text, a report) and
//! compares it with a committed file.
//!
//! ```no_run
//! ovl_testkit::golden::assert_golden("tests/golden/text/add_2d.txt", "add_2d ...\n");
//! ```
//!
//! - Without `OVL_BLESS`, the text must equal the file. On a difference the test fails with the
//!   first differing lines of both (with their line numbers) and says to run with `OVL_BLESS=1`
//!   to accept the new text. A missing file is a failure too.
//! - With `OVL_BLESS=1` the file is (re)written with the text (its folders created) and the test
//!   passes; review the change with `git diff` before committing it.
//!
//! Nothing is normalised except the end: a file ends with exactly one newline, so text that
//! ends with none or several compares equal to the file that ends with one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The environment variable that turns comparing into (re)writing.
pub const BLESS_VAR: &str = "OVL_BLESS";

/// How many differing lines of each side a mismatch message shows.
const SHOWN_LINES: usize = 12;

/// What [`check`] did when it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The file holds the text.
    Same,
    /// Blessing: the file was written (it was missing or different).
    Written,
    /// Blessing: the file already held the text and was left alone.
    Unchanged,
}

/// Why a golden comparison failed.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The file does not exist and blessing is off.
    #[error(
        "golden file {} does not exist; run with {BLESS_VAR}=1 to create it from the actual text",
        path.display()
    )]
    Missing {
        /// The golden file.
        path: PathBuf,
    },
    /// The text differs from the file.
    #[error("golden file {} differs from the actual text:\n{diff}run with {BLESS_VAR}=1 to accept the actual text", path.display())]
    Mismatch {
        /// The golden file.
        path: PathBuf,
        /// The first differing lines, as [`line_diff`] writes them.
        diff: String,
    },
    /// The file could not be read or written.
    #[error("golden file {}: cannot {action} it: {source}", path.display())]
    Io {
        /// The golden file.
        path: PathBuf,
        /// `read` or `write`.
        action: &'static str,
        /// The error of the file system.
        source: std::io::Error,
    },
    /// A relative path was given outside `cargo test` (no `CARGO_MANIFEST_DIR`).
    #[error("golden file {}: a relative path needs CARGO_MANIFEST_DIR (set by cargo when it runs tests); pass an absolute path", path.display())]
    NoManifestDir {
        /// The relative path.
        path: PathBuf,
    },
}

/// Whether `OVL_BLESS=1` is set.
pub fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some_and(|v| v == "1")
}

/// `text` ending with exactly one newline.
pub fn normalise(text: &str) -> String {
    let mut s = text.trim_end_matches('\n').to_string();
    s.push('\n');
    s
}

/// Resolves `path`: an absolute path as is, a relative one against the directory of the crate
/// whose test is running (`CARGO_MANIFEST_DIR`, which cargo sets for test processes).
pub fn resolve(path: impl AsRef<Path>) -> Result<PathBuf, GoldenError> {
    let path = path.as_ref();
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) => Ok(Path::new(&dir).join(path)),
        None => Err(GoldenError::NoManifestDir {
            path: path.to_path_buf(),
        }),
    }
}

/// Compares `actual` with the file at `path` (absolute), or writes it there when `bless`.
pub fn check(path: &Path, actual: &str, bless: bool) -> Result<Outcome, GoldenError> {
    let actual = normalise(actual);
    let expected = match std::fs::read_to_string(path) {
        Ok(s) => Some(normalise(&s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(GoldenError::Io {
                path: path.to_path_buf(),
                action: "read",
                source,
            })
        }
    };
    match (expected, bless) {
        (Some(e), _) if e == actual => {
            if bless {
                // The file may lack its final newline or have several: make it canonical.
                let raw = std::fs::read_to_string(path).unwrap_or_default();
                if raw != actual {
                    write(path, &actual)?;
                }
                Ok(Outcome::Unchanged)
            } else {
                Ok(Outcome::Same)
            }
        }
        (_, true) => {
            write(path, &actual)?;
            Ok(Outcome::Written)
        }
        (None, false) => Err(GoldenError::Missing {
            path: path.to_path_buf(),
        }),
        (Some(e), false) => Err(GoldenError::Mismatch {
            path: path.to_path_buf(),
            diff: line_diff(&e, &actual),
        }),
    }
}

fn write(path: &Path, text: &str) -> Result<(), GoldenError> {
    let io = |source| GoldenError::Io {
        path: path.to_path_buf(),
        action: "write",
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, text).map_err(io)
}

/// The differing part of two texts, line by line: the lines after their common beginning and
/// before their common end, at most `SHOWN_LINES` of each, expected ones marked `-` and
/// actual ones `+`, each with its 1-based line number in its own text.
pub fn line_diff(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let prefix = e.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let suffix = e[prefix..]
        .iter()
        .rev()
        .zip(a[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (e_diff, a_diff) = (&e[prefix..e.len() - suffix], &a[prefix..a.len() - suffix]);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "first difference at line {} ({} expected line(s) vs {} actual line(s) differ):",
        prefix + 1,
        e_diff.len(),
        a_diff.len()
    );
    for (side, mark, lines) in [("expected", '-', e_diff), ("actual", '+', a_diff)] {
        for (k, line) in lines.iter().take(SHOWN_LINES).enumerate() {
            let _ = writeln!(s, "{mark}{:>5} | {line}", prefix + k + 1);
        }
        if lines.len() > SHOWN_LINES {
            let _ = writeln!(
                s,
                "{mark}  ... {} more {side} line(s)",
                lines.len() - SHOWN_LINES
            );
        }
    }
    s
}

/// Asserts that `actual` equals the golden file at `path` (relative to the crate whose test is
/// running, or absolute); with `OVL_BLESS=1`, (re)writes the file instead. Panics with a
/// readable line diff on a mismatch, and when the file is missing and blessing is off.
#[track_caller]
pub fn assert_golden(path: impl AsRef<Path>, actual: &str) {
    let result = resolve(path).and_then(|p| check(&p, actual, blessing()));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Checks that the folder `dir` (relative to the crate whose test is running, or absolute)
/// holds no file but `expected` (file names): a golden file left behind by a renamed or removed
/// case fails the test, and is removed with `OVL_BLESS=1`. A missing folder holds nothing.
#[track_caller]
pub fn assert_only_files(dir: impl AsRef<Path>, expected: &[String]) {
    let result = resolve(dir).and_then(|d| stray_files(&d, expected, blessing()));
    match result {
        Ok(stray) if stray.is_empty() || blessing() => {}
        Ok(stray) => panic!(
            "golden files without a case: {}; remove them, or run with {BLESS_VAR}=1 to remove \
             them",
            stray
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => panic!("{e}"),
    }
}

/// The files of `dir` whose names are not in `expected`, sorted; removed when `remove`.
pub fn stray_files(
    dir: &Path,
    expected: &[String],
    remove: bool,
) -> Result<Vec<PathBuf>, GoldenError> {
    let io = |action, source| GoldenError::Io {
        path: dir.to_path_buf(),
        action,
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", e)),
    };
    let mut stray = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io("read", e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if path.is_file() && !name.is_some_and(|n| expected.contains(&n)) {
            stray.push(path);
        }
    }
    stray.sort();
    if remove {
        for p in &stray {
            std::fs::remove_file(p).map_err(|e| io("write", e))?;
        }
    }
    Ok(stray)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_text_passes_and_only_the_final_newlines_are_normalised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        assert_eq!(check(&path, "one\ntwo\n", false).unwrap(), Outcome::Same);
        assert_eq!(check(&path, "one\ntwo", false).unwrap(), Outcome::Same);
        assert_eq!(
            check(&path, "one\ntwo\n\n\n", false).unwrap(),
            Outcome::Same
        );
        // Trailing spaces and inner blank lines are not normalised.
        assert!(check(&path, "one \ntwo\n", false).is_err());
        assert!(check(&path, "one\n\ntwo\n", false).is_err());
    }

    #[test]
    fn mismatch_shows_the_first_differing_lines_with_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.txt");
        std::fs::write(&path, "a\nb\nc\nd\ne\n").unwrap();
        let err = check(&path, "a\nb\nX\nY\nd\ne\n", false).unwrap_err();
        assert!(matches!(err, GoldenError::Mismatch { .. }), "{err:?}");
        let msg = err.to_string();
        assert_eq!(
            msg,
            format!(
                "golden file {} differs from the actual text:\n\
                 first difference at line 3 (1 expected line(s) vs 2 actual line(s) differ):\n\
                 -    3 | c\n\
                 +    3 | X\n\
                 +    4 | Y\n\
                 run with OVL_BLESS=1 to accept the actual text",
                path.display()
            )
        );
        // The file is untouched.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\nc\nd\ne\n");
    }

    #[test]
    fn long_differences_are_cut() {
        let e: String = (0..40).map(|k| format!("line {k}\n")).collect();
        let a: String = (0..40).map(|k| format!("LINE {k}\n")).collect();
        let d = line_diff(&e, &a);
        assert!(
            d.starts_with("first difference at line 1 (40 expected"),
            "{d}"
        );
        assert!(
            d.contains("-   12 | line 11\n") && !d.contains("line 12\n"),
            "{d}"
        );
        assert!(d.contains("-  ... 28 more expected line(s)"), "{d}");
        assert!(d.contains("+  ... 28 more actual line(s)"), "{d}");
        // A deletion at the end.
        let d = line_diff("x\ny\n", "x\n");
        assert!(d.contains("line 2 (1 expected line(s) vs 0 actual"), "{d}");
        assert!(d.contains("-    2 | y"), "{d}");
    }

    #[test]
    fn missing_file_fails_without_bless_and_says_how_to_create_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.txt");
        let err = check(&path, "text", false).unwrap_err();
        assert!(matches!(err, GoldenError::Missing { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("does not exist"), "{msg}");
        assert!(msg.contains("OVL_BLESS=1"), "{msg}");
        assert!(!path.exists());
    }

    #[test]
    fn bless_writes_missing_and_different_files_and_leaves_equal_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/c.txt");
        assert_eq!(check(&path, "first", true).unwrap(), Outcome::Written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first\n");
        assert_eq!(check(&path, "first\n", false).unwrap(), Outcome::Same);
        assert_eq!(check(&path, "second\n\n", true).unwrap(), Outcome::Written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
        assert_eq!(check(&path, "second", true).unwrap(), Outcome::Unchanged);
        // A file without its final newline is made canonical when blessed.
        std::fs::write(&path, "second").unwrap();
        assert_eq!(check(&path, "second", true).unwrap(), Outcome::Unchanged);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
    }

    #[test]
    fn relative_paths_resolve_against_the_crate_directory() {
        // cargo sets CARGO_MANIFEST_DIR for test processes.
        let p = resolve("tests/golden/x.txt").unwrap();
        assert_eq!(
            p,
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/x.txt")
        );
        let abs = std::env::temp_dir().join("y.txt");
        assert_eq!(resolve(&abs).unwrap(), abs);
    }

    #[test]
    fn assert_golden_panics_with_the_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.txt");
        std::fs::write(&path, "old\n").unwrap();
        if blessing() {
            // Under OVL_BLESS=1 the assertion rewrites the file instead of failing.
            assert_golden(&path, "new");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
            return;
        }
        let caught = std::panic::catch_unwind(|| assert_golden(&path, "new"));
        let payload = caught.expect_err("a mismatch panics");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            msg.contains("-    1 | old") && msg.contains("+    1 | new"),
            "{msg}"
        );
        assert!(msg.contains("run with OVL_BLESS=1 to accept"), "{msg}");
        assert_golden(&path, "old");
    }
    #[test]
    fn stray_files_are_found_and_removed_when_blessing() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a.txt", "b.txt", "old.txt"] {
            std::fs::write(dir.path().join(f), "x\n").unwrap();
        }
        let expected = vec!["a.txt".to_string(), "b.txt".to_string()];
        let stray = stray_files(dir.path(), &expected, false).unwrap();
        assert_eq!(stray, vec![dir.path().join("old.txt")]);
        assert!(dir.path().join("old.txt").exists());
        stray_files(dir.path(), &expected, true).unwrap();
        assert!(!dir.path().join("old.txt").exists());
        assert!(stray_files(dir.path(), &expected, false)
            .unwrap()
            .is_empty());
        assert!(stray_files(&dir.path().join("none"), &expected, false)
            .unwrap()
            .is_empty());
    }
}
