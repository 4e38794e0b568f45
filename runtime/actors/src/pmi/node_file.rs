//! A file an agent makes once for the ranks it serves (the node's topology, the PMI
//! library Open MPI loads), beside its spilled outputs: written whole under a name of
//! its own, then renamed into place, since agents of one machine may share the
//! directory; one already there is taken as it is (its name says what it holds).

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One such file of this process: made at most once, remembered (`None` inside: it
/// could not be made).
#[derive(Debug)]
pub struct NodeFile {
    made: OnceLock<Option<PathBuf>>,
    /// What it is, for the warning when it cannot be made.
    what: &'static str,
}

impl NodeFile {
    pub const fn new(what: &'static str) -> NodeFile {
        NodeFile {
            made: OnceLock::new(),
            what,
        }
    }

    /// The file `name` in `dir`, made from `bytes` first if it is not there (once per
    /// process; the first call's `dir` and `name` hold).
    pub fn get_or_make(
        &'static self,
        dir: &Path,
        name: impl FnOnce() -> io::Result<String>,
        bytes: impl FnOnce() -> io::Result<Cow<'static, [u8]>>,
    ) -> Option<&'static Path> {
        self.made
            .get_or_init(|| {
                make(dir, name, bytes)
                    .inspect_err(|error| tracing::info!(%error, "no {} for ranks", self.what))
                    .ok()
            })
            .as_deref()
    }

    /// The file, if made already; never makes it (for launches, built after their
    /// part's service made it).
    pub fn made(&'static self) -> Option<&'static Path> {
        self.made.get().and_then(|made| made.as_deref())
    }
}

fn make(
    dir: &Path,
    name: impl FnOnce() -> io::Result<String>,
    bytes: impl FnOnce() -> io::Result<Cow<'static, [u8]>>,
) -> io::Result<PathBuf> {
    let name = name()?;
    // Absolute: a rank's working directory is its job's.
    let dir = std::path::absolute(dir)?;
    let file = dir.join(&name);
    if file.is_file() {
        return Ok(file);
    }
    let bytes = bytes()?;
    std::fs::create_dir_all(&dir)?;
    let partial = dir.join(format!("{name}.{}.partial", std::process::id()));
    std::fs::write(&partial, &bytes)?;
    std::fs::rename(&partial, &file)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::NodeFile;

    #[test]
    fn a_file_is_made_once_and_one_already_there_is_taken() {
        static FILE: NodeFile = NodeFile::new("test file");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(FILE.made(), None, "nothing made yet");
        let made = FILE
            .get_or_make(
                dir.path(),
                || Ok("f.txt".into()),
                || Ok(Cow::Borrowed(b"one")),
            )
            .unwrap();
        assert_eq!(std::fs::read(made).unwrap(), b"one");
        assert!(made.is_absolute());
        // Once made, neither name nor bytes are asked again.
        let again = FILE.get_or_make(
            dir.path(),
            || panic!("named again"),
            || panic!("made again"),
        );
        assert_eq!(again, Some(made));
        assert_eq!(FILE.made(), Some(made));
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no partial file left");

        // Another process's file of the same name is taken as it is.
        static TAKEN: NodeFile = NodeFile::new("test file");
        std::fs::write(dir.path().join("g.txt"), b"theirs").unwrap();
        let taken = TAKEN
            .get_or_make(dir.path(), || Ok("g.txt".into()), || panic!("made again"))
            .unwrap();
        assert_eq!(std::fs::read(taken).unwrap(), b"theirs");
    }
}
