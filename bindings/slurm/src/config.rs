//! Which Slurm configuration libslurm would use, decided before `slurm_init` is called.
//!
//! `slurm_init` (and the first RPC without it) ends the whole process through
//! `fatal()` when it finds no configuration. libslurm 22.05 looks, in order, at
//! `SLURM_CONF`, its compiled-in default (`/etc/slurm/slurm.conf` in Debian's build),
//! the configless cache `/run/slurm/conf/slurm.conf` that slurmd keeps, and then a
//! server (`SLURM_CONF_SERVER` or a DNS SRV record). We look at the same places, minus
//! DNS, and hand libslurm the file we found, so that a build with another compiled-in
//! default cannot make us guess wrong.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::SlurmError;

/// The configuration files tried when `SLURM_CONF` is unset, in libslurm's order.
pub(crate) const DEFAULT_FILES: [&str; 2] = ["/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf"];

/// What to pass to `slurm_init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigSource {
    /// A readable `slurm.conf`.
    File(PathBuf),
    /// No file, but `SLURM_CONF_SERVER` is set: libslurm fetches the configuration.
    Server,
}

/// Finds the configuration. `variable` reads the environment, `check_readable` opens a
/// file (both are parameters so that tests need no real files or environment).
pub(crate) fn find_config(
    variable: impl Fn(&str) -> Option<OsString>,
    check_readable: impl Fn(&Path) -> io::Result<()>,
) -> Result<ConfigSource, SlurmError> {
    if let Some(path) = variable("SLURM_CONF").filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        return match check_readable(&path) {
            Ok(()) => Ok(ConfigSource::File(path)),
            Err(source) => Err(SlurmError::UnreadableConfig { path, source }),
        };
    }
    if let Some(path) = DEFAULT_FILES
        .iter()
        .map(Path::new)
        .find(|path| check_readable(path).is_ok())
    {
        return Ok(ConfigSource::File(path.to_path_buf()));
    }
    if variable("SLURM_CONF_SERVER").is_some_and(|server| !server.is_empty()) {
        return Ok(ConfigSource::Server);
    }
    Err(SlurmError::NoConfig)
}

/// [`find_config`] on the real environment and file system.
#[cfg_attr(not(saker_slurm), allow(dead_code))]
pub(crate) fn find_process_config() -> Result<ConfigSource, SlurmError> {
    find_config(
        |name| std::env::var_os(name),
        |path| std::fs::File::open(path).map(drop),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, OsString)> = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), OsString::from(value)))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        }
    }

    fn readable(files: &'static [&'static str]) -> impl Fn(&Path) -> io::Result<()> {
        move |path| {
            if files.iter().any(|file| Path::new(file) == path) {
                Ok(())
            } else {
                Err(io::Error::from(io::ErrorKind::NotFound))
            }
        }
    }

    #[test]
    fn slurm_conf_wins_and_must_be_readable() {
        let env = environment(&[("SLURM_CONF", "/site/slurm.conf")]);
        assert_eq!(
            find_config(
                &env,
                readable(&["/site/slurm.conf", "/etc/slurm/slurm.conf"])
            )
            .unwrap(),
            ConfigSource::File("/site/slurm.conf".into())
        );
        // Named but missing: an error, never a silent fall-through to another file.
        let error = find_config(&env, readable(&["/etc/slurm/slurm.conf"])).unwrap_err();
        assert!(
            matches!(&error, SlurmError::UnreadableConfig { path, .. } if path == Path::new("/site/slurm.conf")),
            "{error:?}"
        );
    }

    #[test]
    fn default_files_in_libslurms_order() {
        let env = environment(&[]);
        assert_eq!(
            find_config(
                &env,
                readable(&["/run/slurm/conf/slurm.conf", "/etc/slurm/slurm.conf"])
            )
            .unwrap(),
            ConfigSource::File("/etc/slurm/slurm.conf".into())
        );
        assert_eq!(
            find_config(&env, readable(&["/run/slurm/conf/slurm.conf"])).unwrap(),
            ConfigSource::File("/run/slurm/conf/slurm.conf".into())
        );
    }

    #[test]
    fn server_only_without_files_and_nothing_is_no_config() {
        let server = environment(&[("SLURM_CONF_SERVER", "ctl:6817")]);
        assert_eq!(
            find_config(&server, readable(&[])).unwrap(),
            ConfigSource::Server
        );
        let empty = environment(&[("SLURM_CONF", ""), ("SLURM_CONF_SERVER", "")]);
        assert!(matches!(
            find_config(&empty, readable(&[])),
            Err(SlurmError::NoConfig)
        ));
    }
}
