//! The size of the filesystem a directory is on, and how much of it this
//! process may still use (`statvfs`): what DescribeLogDirs reports as a
//! log directory's total and usable bytes.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    pub total: u64,
    /// Free for an unprivileged process (`f_bavail`: the root-reserved
    /// blocks are not counted, as a broker not running as root cannot use them).
    pub usable: u64,
}

/// The space of the filesystem holding `path`.
pub fn disk_space(path: &Path) -> std::io::Result<DiskSpace> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The field types are platform aliases (32 bits on some targets).
    let block = st.f_frsize as u64;
    Ok(DiskSpace {
        total: (st.f_blocks as u64).saturating_mul(block),
        usable: (st.f_bavail as u64).saturating_mul(block),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_has_a_size_and_no_more_usable_space_than_that() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = disk_space(dir.path()).expect("statvfs");
        assert!(s.total > 0);
        assert!(s.usable <= s.total, "{s:?}");
        // a path that does not exist is an error, not zeros
        assert!(disk_space(&dir.path().join("missing")).is_err());
    }
}
