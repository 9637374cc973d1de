//! systemd credentials (systemd.exec(5), "CREDENTIALS"): which names are valid, and
//! where a credential is read from.
//!
//! A job's `store_credential = "ID"` names a credential instead of writing its store
//! address into the job list. The generator asks systemd to pass it
//! (`LoadCredential=ID`, [`crate::systemd::render`]); systemd then copies it into the service's
//! `$CREDENTIALS_DIRECTORY` (a root-only, non-swappable directory), taking it from the
//! first of: the credentials the service manager itself received
//! (`/run/credentials/@system`), `/etc/credstore/`, `/run/credstore/`,
//! `/usr/lib/credstore/`. Outside a service (an operator's shell) [`find`] looks in the
//! same places in the same order, so `jobguard history JOB` reads the same address.
//! Encrypted credentials (`LoadCredentialEncrypted=`, `systemd-creds encrypt`) are not
//! handled here; decrypting them is systemd's job.

use std::path::{Path, PathBuf};

/// Longest credential ID, in bytes (systemd's `CREDENTIAL_NAME_MAX`, which is
/// `FDNAME_MAX`: 255).
pub const MAX_ID_LEN: usize = 255;

/// Environment variable systemd sets in a service that has credentials.
pub const DIRECTORY_ENV: &str = "CREDENTIALS_DIRECTORY";

/// Where the system service manager keeps the credentials it received itself (from a
/// container manager or the kernel command line), searched first by systemd.
pub const SYSTEM_DIR: &str = "/run/credentials/@system";

/// The directories systemd searches for an unencrypted credential that is named without
/// a path, after [`SYSTEM_DIR`], in systemd's order (systemd.exec(5), `LoadCredential=`).
pub const STORE_DIRS: &[&str] = &["/etc/credstore", "/run/credstore", "/usr/lib/credstore"];

/// Why `id` is not a credential ID, or `None` when it is one.
///
/// systemd's rule (`credential_name_valid()`: a valid file name and a valid
/// `$LISTEN_FDNAMES` entry): 1 to [`MAX_ID_LEN`] bytes of printable ASCII, no `/`, no
/// `:`, not `.` or `..`. jobguard also refuses white space and `\`, which a unit file
/// line would trim or take as an escape, so that an ID reads the same in the job list,
/// in the generated `LoadCredential=` line and as a file name. (`%` is allowed: the
/// generator doubles it, as systemd expands specifiers in the ID, systemd.unit(5).)
pub fn invalid_id(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("credential ID must not be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Some(format!(
            "credential ID is {} bytes long, at most {MAX_ID_LEN} are allowed",
            id.len()
        ));
    }
    if id == "." || id == ".." {
        return Some(format!("credential ID must not be {id:?}"));
    }
    if let Some(c) = id
        .chars()
        .find(|&c| !c.is_ascii_graphic() || matches!(c, '/' | ':' | '\\'))
    {
        return Some(format!(
            "invalid credential ID {id:?}: {c:?} is not allowed (printable ASCII without \
             white space, '/', ':' or '\\')"
        ));
    }
    None
}

/// Every place [`find`] looks for credential `id`, in order: `$CREDENTIALS_DIRECTORY/ID`
/// when `credentials_directory` is set and not empty (inside a service), then
/// [`SYSTEM_DIR`] and each of [`STORE_DIRS`].
pub fn places(id: &str, credentials_directory: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(1 + 1 + STORE_DIRS.len());
    if let Some(d) = credentials_directory.filter(|d| !d.as_os_str().is_empty()) {
        out.push(d.join(id));
    }
    out.push(Path::new(SYSTEM_DIR).join(id));
    out.extend(STORE_DIRS.iter().map(|d| Path::new(d).join(id)));
    out
}

/// Why [`find`] found no credential.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// No place holds the credential.
    #[error("credential {id} not found in {}", list(.places))]
    NotFound {
        /// The credential ID.
        id: String,
        /// Every place looked, in order.
        places: Vec<PathBuf>,
    },
    /// A place holds it, but someone other than root could change it (or a directory
    /// above it) while jobguard runs as root ([`crate::safe_path`]); it was not read.
    #[error("credential {id} refused: {source}")]
    Unsafe {
        /// The credential ID.
        id: String,
        /// Which path, and why.
        source: crate::safe_path::UnsafePath,
    },
    /// A place holds it but it cannot be read (e.g. not root: the stores are root-only).
    #[error("credential {id}: cannot read {path}: {source} (looked in {})", list(.places))]
    Read {
        /// The credential ID.
        id: String,
        /// The file that could not be read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
        /// Every place looked up to and including `path`.
        places: Vec<PathBuf>,
    },
}

fn list(places: &[PathBuf]) -> String {
    let v: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// Reads credential `id` from the first of [`places`] that has it, with
/// `$CREDENTIALS_DIRECTORY` from the environment. Returns the file and its text.
///
/// # Errors
/// [`FindError::NotFound`] when no place has a file of that name;
/// [`FindError::Read`] when the first file found cannot be read as UTF-8 text.
pub fn find(id: &str) -> Result<(PathBuf, String), FindError> {
    let dir = std::env::var_os(DIRECTORY_ENV).map(PathBuf::from);
    find_in(id, &places(id, dir.as_deref()))
}

/// [`find`] over the given places.
///
/// # Errors
/// As [`find`].
pub fn find_in(id: &str, places: &[PathBuf]) -> Result<(PathBuf, String), FindError> {
    for (i, p) in places.iter().enumerate() {
        if !std::fs::exists(p).unwrap_or(true) {
            continue;
        }
        let real = crate::safe_path::check_file(p).map_err(|e| FindError::Unsafe {
            id: id.to_string(),
            source: e,
        })?;
        match std::fs::read_to_string(real) {
            Ok(text) => return Ok((p.clone(), text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(FindError::Read {
                    id: id.to_string(),
                    path: p.clone(),
                    source,
                    places: places[..=i].to_vec(),
                });
            }
        }
    }
    Err(FindError::NotFound {
        id: id.to_string(),
        places: places.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_systemds_rule_and_read_the_same_in_a_unit_file() {
        for good in [
            "db",
            "jobguard.store",
            "a-b_c.d",
            "x",
            &"x".repeat(255),
            "A=B",
            "p%ct",
        ] {
            assert_eq!(invalid_id(good), None, "{good:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            " a",
            "a\tb",
            "a\\b",
            "ä",
            "a\nb",
            &"x".repeat(256),
        ] {
            assert!(invalid_id(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn the_service_directory_comes_first_then_systemds_order() {
        let p = places("db", Some(Path::new("/run/credentials/jobguard@a.service")));
        let p: Vec<String> = p.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            p,
            [
                "/run/credentials/jobguard@a.service/db",
                "/run/credentials/@system/db",
                "/etc/credstore/db",
                "/run/credstore/db",
                "/usr/lib/credstore/db",
            ]
        );
        assert_eq!(places("db", Some(Path::new(""))).len(), 4);
        assert_eq!(places("db", None).len(), 4);
    }

    #[test]
    fn the_first_place_that_has_it_wins_and_a_miss_names_every_place() {
        let d = tempfile::tempdir().expect("tempdir");
        let places: Vec<PathBuf> = ["one", "two", "three"]
            .iter()
            .map(|n| d.path().join(n).join("db"))
            .collect();
        let e = find_in("db", &places).expect_err("nothing there");
        let msg = e.to_string();
        assert!(msg.starts_with("credential db not found in "), "{msg}");
        for p in &places {
            assert!(msg.contains(&p.display().to_string()), "{msg}");
        }
        for n in ["two", "three"] {
            std::fs::create_dir_all(d.path().join(n)).expect("mkdir");
            std::fs::write(d.path().join(n).join("db"), format!("{n}\n")).expect("write");
        }
        let (path, text) = find_in("db", &places).expect("found");
        assert_eq!((path, text.as_str()), (places[1].clone(), "two\n"));
        // A directory in the way is an error, not a miss: it names that place.
        std::fs::create_dir_all(&places[0]).expect("mkdir");
        let e = find_in("db", &places).expect_err("a directory");
        assert!(
            matches!(&e, FindError::Read { path, .. } if *path == places[0]),
            "{e}"
        );
    }
}
