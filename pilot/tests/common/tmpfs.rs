//! A real, size-limited file system for disk-full tests: a tmpfs mounted for the test
//! (root only; CI runs as root) and unmounted when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    path: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Tmpfs {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("tmpfs");
        std::fs::create_dir(&path).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .expect("mount runs");
        assert!(mounted.success(), "mounting a tmpfs needs root");
        Tmpfs {
            path,
            _parent: parent,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one file until the file system says it is full; returns it.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0x5a; 64 * 1024];
        while let Ok(()) = file.write_all(&block) {}
        // The last pages: what a whole block did not fit in.
        while let Ok(()) = file.write_all(&block[..512]) {}
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
