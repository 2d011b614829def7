//! Unnamed temporary files, for what an import keeps on disk instead of in memory (the open
//! row group's pages, the sync rows written last: docs/trace-schema.md, "Import memory").

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A read-write file in `dir` with no name (O_TMPFILE: gone however the process ends). Where
/// the file system has no O_TMPFILE, a file named `fallback` is made and unlinked at once;
/// without a fallback, the error.
pub fn anonymous_file(dir: &Path, fallback: Option<&str>) -> std::io::Result<File> {
    let open = || OpenOptions::new().read(true).write(true).mode(0o600).clone();
    match open().custom_flags(libc::O_TMPFILE).open(dir) {
        Ok(f) => Ok(f),
        Err(e) => {
            let Some(name) = fallback else { return Err(e) };
            let path = dir.join(name);
            let f = open().create_new(true).open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(f)
        }
    }
}

/// The folder of the file `f` is (None where /proc does not say): spills go beside the table
/// they belong to, not to a `$TMPDIR` that may be a tmpfs holding them in memory.
pub fn folder_of(f: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let path = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()?;
    path.parent().map(Path::to_path_buf)
}
