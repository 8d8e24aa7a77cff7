//! Facts about the machine this process runs on that kernels and copies size themselves by.

/// The size of the last-level cache in bytes: CPU 0's L3 as Linux's sysfs reports it
/// (`/sys/devices/system/cpu/cpu0/cache/index3/size`), 32 MiB where that is not known. Read
/// once per process.
pub fn last_level_cache() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let size = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size");
        size.ok()
            .and_then(|s| parse_size(s.trim()))
            .filter(|&bytes| bytes > 0)
            .unwrap_or(32 << 20)
    })
}

/// A size as sysfs writes it: digits, optionally followed by `K` or `M`.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.strip_suffix('K') {
        Some(digits) => (digits, 1 << 10),
        None => match s.strip_suffix('M') {
            Some(digits) => (digits, 1 << 20),
            None => (s, 1),
        },
    };
    digits.parse::<usize>().ok().map(|v| v * unit)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(super::parse_size("32768K"), Some(32 << 20));
        assert_eq!(super::parse_size("2M"), Some(2 << 20));
        assert_eq!(super::parse_size("512"), Some(512));
        assert_eq!(super::parse_size("lots"), None);
        assert!(super::last_level_cache() > 0);
    }
}
