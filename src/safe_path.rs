//! Whether a file jobguard uses as root could have been put there, or changed, by
//! someone else: the SQLite store and every directory above it, the job list, a
//! `store_file`, a credential, a TLS file named in a store address.
//!
//! The rule is OpenSSH's `safe_path()` (misc.c, for `authorized_keys` and friends), for
//! a reader that trusts only root: every component of the path, from `/` down to the file,
//! must be owned by root and not writable by group or others. One exception, which
//! OpenSSH does not make: a directory owned by root with the sticky bit (`/tmp`), where
//! only the owner of an entry may rename or remove it (inode(7), "S_ISVTX"), so the
//! root-owned entry below it cannot be swapped; that entry is checked as usual.
//!
//! Two ways to walk:
//! - [`check_store`] (the SQLite store, which root creates and writes): no component may
//!   be a symbolic link, and components that do not exist yet are fine (root creates
//!   them). SQLite keeps `-wal` and `-shm` files beside the file it opened, and root
//!   writes through a link, so a link is refused even when root made it.
//! - [`check_file`] (files root only reads): symbolic links are resolved first, as OpenSSH
//!   does with `realpath()`, and the resolved path is checked; the caller then reads the
//!   resolved path, whose components no one but root can change. A link is fine when
//!   root could have made it and its target passes (e.g. `jobs.d/app.toml` →
//!   `/srv/app/jobs.toml` owned by root).
//!
//! The checks apply only when jobguard runs as root ([`enforced`]): a user running
//! jobguard by hand uses that user's own files. Opening the checked file without a race is
//! left to the callers ([`crate::store::sqlite`] opens with `O_NOFOLLOW` and compares).

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// A path that someone other than root could change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {why}; only root may be able to change it (see SECURITY.md)")]
pub struct UnsafePath {
    /// The component at fault (the file or one of its directories).
    pub path: PathBuf,
    /// What is wrong, e.g. `is owned by uid 65534, not root`.
    pub why: String,
}

/// Whether the checks apply: jobguard runs as root (effective uid 0).
pub fn enforced() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Checks the path of an SQLite store file that root will create or open: no component a
/// symbolic link, each existing one owned by root and not writable by group or others
/// (but see the sticky-bit exception in the module documentation). Missing components
/// pass. A relative path is taken from the current directory. Always `Ok` when not
/// [`enforced`].
///
/// # Errors
/// [`UnsafePath`] naming the first component at fault, or one that cannot be examined.
pub fn check_store(path: &Path) -> Result<(), UnsafePath> {
    if !enforced() {
        return Ok(());
    }
    walk(path, true)
}

/// Checks a file root only reads (job list, `store_file`, credential, TLS file) and
/// returns the path to read: symbolic links resolved, every component of the result
/// owned by root and not writable by group or others. A path that cannot be resolved
/// (missing) comes back as it is, for the reader to report. When not [`enforced`],
/// returns `path` unchanged.
///
/// # Errors
/// [`UnsafePath`] naming the first component of the resolved path at fault.
pub fn check_file(path: &Path) -> Result<PathBuf, UnsafePath> {
    if !enforced() {
        return Ok(path.to_path_buf());
    }
    let Ok(real) = std::fs::canonicalize(path) else {
        return Ok(path.to_path_buf());
    };
    walk(&real, false).map_err(|mut e| {
        if real != path {
            e.why = format!(
                "{} (the file {} resolves to {})",
                e.why,
                path.display(),
                real.display()
            );
        }
        e
    })?;
    Ok(real)
}

/// Why the file or directory of `meta` (from `lstat`) is not one only root can change,
/// or `None`.
fn fault(meta: &std::fs::Metadata) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("is a symbolic link".to_string());
    }
    if meta.uid() != 0 {
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(meta.uid()))
            .ok()
            .flatten()
            .map(|u| format!(" ({})", u.name))
            .unwrap_or_default();
        return Some(format!("is owned by uid {}{name}, not root", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky_dir {
        return Some(format!("is writable by group or others (mode {mode:04o})"));
    }
    None
}

/// Walks `path` from `/` down, examining each component with `lstat`. `missing_ok`: a
/// component that does not exist ends the walk successfully (the store's directories
/// and file are created later by root). `..` goes back up the walked path, which is
/// exact because no walked component is a link.
fn walk(path: &Path, missing_ok: bool) -> Result<(), UnsafePath> {
    let absolute = std::path::absolute(path).map_err(|e| UnsafePath {
        path: path.to_path_buf(),
        why: format!("cannot be made absolute: {e}"),
    })?;
    let mut current = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::RootDir => {}
            Component::CurDir | Component::Prefix(_) => continue,
            Component::ParentDir => {
                current.pop();
                continue;
            }
            Component::Normal(name) => current.push(name),
        }
        let meta = match std::fs::symlink_metadata(&current) {
            Ok(m) => m,
            // A file where a directory should be: creating below it fails later, with
            // its own message (root's file: nothing to refuse).
            Err(e)
                if missing_ok
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
            {
                return Ok(());
            }
            Err(e) => {
                return Err(UnsafePath {
                    path: current,
                    why: format!("cannot be examined: {e}"),
                });
            }
        };
        if let Some(why) = fault(&meta) {
            return Err(UnsafePath { path: current, why });
        }
    }
    Ok(())
}

/// Whether others than the owner (and root) may read `path`: its mode has a group or
/// other read bit. For warnings about files that hold a password. `None` when it cannot
/// be examined.
pub fn readable_by_others(path: &Path) -> Option<u32> {
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.mode() & 0o7777;
    (mode & 0o044 != 0).then_some(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn root_only_paths_pass_and_others_name_the_component_and_why() {
        if !enforced() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::create_dir(&a).unwrap();
        chmod(&a, 0o755);
        assert_eq!(check_store(&a.join("b/c.db")), Ok(()));
        let f = a.join("f");
        std::fs::write(&f, "x").unwrap();
        chmod(&f, 0o644);
        assert_eq!(check_file(&f), Ok(f.clone()));
        // Through `..` and `.` too.
        assert_eq!(check_store(&a.join("./x/../f")), Ok(()));

        chmod(&a, 0o775);
        let e = check_store(&a.join("b/c.db")).unwrap_err();
        assert_eq!(e.path, a);
        assert_eq!(e.why, "is writable by group or others (mode 0775)");
        let e = check_file(&f).unwrap_err();
        assert_eq!(e.path, a);
        chmod(&a, 0o755);

        std::os::unix::fs::symlink(&f, a.join("link")).unwrap();
        let e = check_store(&a.join("link")).unwrap_err();
        assert_eq!(e.why, "is a symbolic link");
        // A reader follows a link root made to a root-only file, and reads the target.
        assert_eq!(check_file(&a.join("link")), Ok(f.clone()));

        std::os::unix::fs::lchown(&f, Some(65534), None).unwrap();
        let e = check_file(&a.join("link")).unwrap_err();
        assert_eq!(e.path, f);
        assert!(e.why.starts_with("is owned by uid 65534"), "{}", e.why);
        assert!(e.to_string().contains("resolves to"), "{e}");
    }

    #[test]
    fn a_root_owned_sticky_directory_is_passed_but_not_what_others_own_in_it() {
        if !enforced() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let tmp = d.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        chmod(&tmp, 0o1777);
        assert_eq!(check_store(&tmp.join("jg.db")), Ok(()));
        let theirs = tmp.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::lchown(&theirs, Some(65534), None).unwrap();
        let e = check_store(&theirs.join("jg.db")).unwrap_err();
        assert_eq!(e.path, theirs);
    }
}
