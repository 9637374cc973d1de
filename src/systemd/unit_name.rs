//! systemd's escaping rules, in one place: unit-name escaping (`systemd-escape`,
//! `systemd-escape --path`, and their reverse), unit-name validation, specifier (`%`)
//! escaping for unit files, `ExecStart=` argument quoting, and free-text values.
//!
//! The rules come from systemd.unit(5) ("STRING ESCAPING FOR INCLUSION IN UNIT NAMES",
//! "SPECIFIERS"), systemd-escape(1), systemd.service(5) ("COMMAND LINES") and
//! systemd.syntax(7). jobguard's own unit instances are job names, which use only
//! characters that need no escaping (see [`crate::joblist::config`]), so units use `%i`; the
//! functions here serve values that do need care: descriptions, paths, commands.

use std::fmt::Write as _;
use std::path::Path;

/// Why a string cannot be escaped or unescaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EscapeError {
    /// `--path` escaping of a path with a `..` component, or of `.`.
    #[error("path {0:?} is not normalized")]
    NotNormalized(String),
    /// A path longer than `PATH_MAX` or with a component longer than `NAME_MAX`.
    #[error("path {0:?} is too long")]
    TooLong(String),
    /// A `\` not followed by `x` and two hex digits.
    #[error("invalid escape sequence in {0:?}")]
    BadEscape(String),
}

/// Characters that stand for themselves in an escaped unit name (besides `-` and `\`,
/// which systemd escapes although they are valid).
fn is_plain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b':' || c == b'_' || c == b'.'
}

fn push_hex_escape(out: &mut String, c: u8) {
    // Writing to a String cannot fail.
    let _ = write!(out, "\\x{c:02x}");
}

/// Escapes a string for use in a unit name, as `systemd-escape STRING` does: `/` becomes
/// `-`; `-`, `\`, a leading `.`, and every byte outside `[A-Za-z0-9:_.]` (including each
/// byte of a non-ASCII character) become `\xNN` with lower-case hex.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, &c) in s.as_bytes().iter().enumerate() {
        if c == b'/' {
            out.push('-');
        } else if (i == 0 && c == b'.') || !is_plain(c) {
            push_hex_escape(&mut out, c);
        } else {
            out.push(char::from(c));
        }
    }
    out
}

/// Escapes a file system path for use in a unit name, as `systemd-escape --path` does:
/// duplicate slashes, `.` components and trailing slashes are dropped, the leading slash
/// is dropped, then the rest is escaped as by [`escape`]; the root (and the empty path)
/// becomes `-`.
///
/// # Errors
/// [`EscapeError::NotNormalized`] for a path with a `..` component or one that is only
/// `.`; [`EscapeError::TooLong`] past `PATH_MAX` (4096 bytes with its NUL) or a component
/// past `NAME_MAX` (255 bytes).
pub fn escape_path(path: &str) -> Result<String, EscapeError> {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() {
        if path.is_empty() || absolute {
            return Ok(String::from("-"));
        }
        return Err(EscapeError::NotNormalized(path.to_string()));
    }
    if parts.contains(&"..") {
        return Err(EscapeError::NotNormalized(path.to_string()));
    }
    if path.len() >= 4096 || parts.iter().any(|p| p.len() > 255) {
        return Err(EscapeError::TooLong(path.to_string()));
    }
    Ok(escape(&parts.join("/")))
}

/// Reverses [`escape`]: `\xNN` becomes the byte NN; everything else stays.
///
/// # Errors
/// [`EscapeError::BadEscape`] for a `\` not followed by `x` and two hex digits.
pub fn unescape(s: &str) -> Result<Vec<u8>, EscapeError> {
    unescape_with(s, false)
}

/// Reverses [`escape_path`]: `-` becomes `/`, `\xNN` the byte NN, and the result starts
/// with `/` (`-` alone is the root).
///
/// # Errors
/// As [`unescape`].
pub fn unescape_path(s: &str) -> Result<Vec<u8>, EscapeError> {
    if s == "-" {
        return Ok(b"/".to_vec());
    }
    let mut out = b"/".to_vec();
    out.extend(unescape_with(s, true)?);
    Ok(out)
}

fn unescape_with(s: &str, dash_is_slash: bool) -> Result<Vec<u8>, EscapeError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let hex = (b.get(i + 1) == Some(&b'x'))
                    .then(|| b.get(i + 2..i + 4))
                    .flatten()
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => out.push(v),
                    None => return Err(EscapeError::BadEscape(s.to_string())),
                }
                i += 4;
            }
            b'-' if dash_is_slash => {
                out.push(b'/');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Unit types systemd knows, as unit-name suffixes (systemd.unit(5)).
pub const UNIT_TYPES: &[&str] = &[
    "service",
    "socket",
    "device",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "scope",
];

/// The specifier letters systemd expands in unit files (systemd.unit(5), "SPECIFIERS",
/// systemd 252), without `%` itself.
const SPECIFIERS: &str = "aAbBCdEfgGhHiIjJlLmMnNopPqsStTuUvVwWyY";

/// Whether `name` is a valid unit name (systemd.unit(5)): `PREFIX[@INSTANCE].TYPE` with
/// a known type, at most 255 bytes, characters from `[A-Za-z0-9:_.\-]` (and `\` in
/// escapes), a non-empty prefix, and, with `@`, an instance (a template with an empty
/// instance is not a unit that can be started, so it is refused here).
pub fn is_valid_unit_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let Some((stem, suffix)) = name.rsplit_once('.') else {
        return false;
    };
    if !UNIT_TYPES.contains(&suffix) {
        return false;
    }
    let valid_chars = |s: &str, at: bool| {
        s.bytes()
            .all(|c| is_plain(c) || c == b'-' || c == b'\\' || (at && c == b'@'))
    };
    // The prefix ends at the first '@'; the instance may hold more of them.
    match stem.split_once('@') {
        Some((prefix, instance)) => {
            !prefix.is_empty()
                && !instance.is_empty()
                && valid_chars(prefix, false)
                && valid_chars(instance, true)
        }
        None => !stem.is_empty() && valid_chars(stem, false),
    }
}

/// Whether `name` is a valid unit name once its specifiers are expanded, e.g.
/// `status-email@%n.service`: each `%` must start a specifier systemd knows (or `%%`), and
/// the name with every specifier replaced by a plain letter must pass
/// [`is_valid_unit_name`].
pub fn is_valid_unit_name_with_specifiers(name: &str) -> bool {
    let mut plain = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            plain.push(c);
            continue;
        }
        match chars.next() {
            Some(s) if SPECIFIERS.contains(s) => plain.push('x'),
            _ => return false,
        }
    }
    is_valid_unit_name(&plain)
}

/// Doubles every `%`, so that systemd reads the text literally where it expands
/// specifiers (systemd.unit(5), "SPECIFIERS").
pub fn escape_specifiers(s: &str) -> String {
    s.replace('%', "%%")
}

/// A free-text value for a unit-file setting that expands specifiers and does not
/// unescape (e.g. `Description=`): control characters (newlines, tabs, …) become spaces,
/// runs of spaces stay, leading and trailing white space is dropped (systemd drops it
/// anyway), `%` is doubled, and a trailing odd run of `\` (which systemd would read as a
/// line continuation, systemd.syntax(7)) gets one more `\`. Non-ASCII text is kept as
/// UTF-8.
pub fn escape_free_text(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out = escape_specifiers(cleaned.trim());
    let trailing = out.bytes().rev().take_while(|&c| c == b'\\').count();
    if trailing % 2 == 1 {
        out.push('\\');
    }
    out
}

/// A `file:` URI for a path, for `Documentation=` (systemd.unit(5) lists `file:` among
/// the URI types): bytes outside `[A-Za-z0-9-._~/]` are percent-encoded (RFC 3986). The
/// result still needs [`escape_specifiers`] before it goes into a unit file.
pub fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file:");
    for &c in path.as_os_str().as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(c));
        } else {
            let _ = write!(out, "%{c:02X}");
        }
    }
    out
}

/// Bytes that may stand unquoted in an `ExecStart=` argument.
fn is_bare_exec_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | ',' | '+' | '=' | ':' | '@' | '-')
}

/// Quotes one argument for an `ExecStart=` command line (systemd.service(5), "COMMAND
/// LINES"): an argument of only `[A-Za-z0-9/._,+=:@-]` stays as it is; any other is put
/// in double quotes with `\` and `"` escaped, control characters written as C escapes,
/// `%` doubled (specifiers) and `$` doubled (environment variable expansion). Non-ASCII
/// text is kept as UTF-8. For the first word use [`exec_command_line`], which also quotes
/// the prefix characters `@-:+!`.
pub fn quote_exec_arg(arg: &str) -> String {
    quote_exec_word(arg, false)
}

fn quote_exec_word(arg: &str, first: bool) -> String {
    let needs_quotes = arg.is_empty()
        || (first && arg.starts_with(['@', '-', ':', '+', '!']))
        || !arg.chars().all(is_bare_exec_char);
    if !needs_quotes {
        return arg.to_string();
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    push_hex_escape(&mut out, b);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A whole `ExecStart=` value: every argument quoted by [`quote_exec_arg`], separated by
/// single spaces. `argv[0]` should be an absolute path or a plain command name.
pub fn exec_command_line<S: AsRef<str>>(argv: &[S]) -> String {
    let quoted: Vec<String> = argv
        .iter()
        .enumerate()
        .map(|(i, a)| quote_exec_word(a.as_ref(), i == 0))
        .collect();
    quoted.join(" ")
}

/// Text for a `#` comment line: control characters become `?` so the comment stays one
/// line.
pub fn comment_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_systemd_escape() {
        assert_eq!(escape("store-sync"), "store\\x2dsync");
        assert_eq!(escape("/a//b/"), "-a--b-");
        assert_eq!(escape(".hidden"), "\\x2ehidden");
        assert_eq!(escape("a.b"), "a.b");
        assert_eq!(escape("x\\y"), "x\\x5cy");
        assert_eq!(escape("%i"), "\\x25i");
        assert_eq!(escape("ä ö"), "\\xc3\\xa4\\x20\\xc3\\xb6");
        assert_eq!(escape("tab\tx"), "tab\\x09x");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn escapes_paths_like_systemd_escape_path() {
        assert_eq!(escape_path("/").as_deref(), Ok("-"));
        assert_eq!(escape_path("").as_deref(), Ok("-"));
        assert_eq!(escape_path("/./").as_deref(), Ok("-"));
        assert_eq!(escape_path("/a//b/").as_deref(), Ok("a-b"));
        assert_eq!(escape_path("//x/./y/.").as_deref(), Ok("x-y"));
        assert_eq!(escape_path("/-a").as_deref(), Ok("\\x2da"));
        assert_eq!(escape_path("a/..b").as_deref(), Ok("a-..b"));
        assert_eq!(
            escape_path("/srv/Données").as_deref(),
            Ok("srv-Donn\\xc3\\xa9es")
        );
        for bad in [".", "./", "..", "a/..", "../x", "/a/../b"] {
            assert!(
                matches!(escape_path(bad), Err(EscapeError::NotNormalized(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            escape_path(&format!("/{}", "a".repeat(256))),
            Err(EscapeError::TooLong(_))
        ));
    }

    #[test]
    fn unescape_reverses_escape() {
        for s in ["store-sync", "ä ö x", ".hidden", "a\\b", "%n", "日本語", ""] {
            assert_eq!(unescape(&escape(s)).as_deref(), Ok(s.as_bytes()), "{s:?}");
        }
        for p in ["/srv/a-b/c", "/x y/ü", "/"] {
            let esc = escape_path(p).unwrap_or_default();
            assert_eq!(unescape_path(&esc).as_deref(), Ok(p.as_bytes()), "{p:?}");
        }
        assert!(unescape("a\\x2").is_err());
        assert!(unescape("a\\y20").is_err());
        assert!(unescape("a\\xzz").is_err());
    }

    #[test]
    fn validates_unit_names() {
        for good in [
            "a.service",
            "jobguard@store-sync.timer",
            "x@a@b.service",
            "a\\x2db.mount",
            "mail:x.target",
        ] {
            assert!(is_valid_unit_name(good), "{good}");
        }
        for bad in [
            "",
            "a",
            "a.bogus",
            ".service",
            "@x.service",
            "a@.service",
            "a b.service",
            "ä.service",
        ] {
            assert!(!is_valid_unit_name(bad), "{bad}");
        }
        assert!(!is_valid_unit_name(&format!("{}.service", "a".repeat(250))));
        assert!(is_valid_unit_name_with_specifiers(
            "status-email@%n.service"
        ));
        assert!(is_valid_unit_name_with_specifiers("alert-%i.service"));
        assert!(!is_valid_unit_name_with_specifiers("alert@%.service"));
        assert!(!is_valid_unit_name_with_specifiers("alert@%Z.service"));
    }

    #[test]
    fn doubles_percent_and_cleans_free_text() {
        assert_eq!(escape_specifiers("100% %i"), "100%% %%i");
        assert_eq!(
            escape_free_text("  Sync 100%\nof the\tstore  "),
            "Sync 100%% of the store"
        );
        assert_eq!(
            escape_free_text("Überweisung → Kasse"),
            "Überweisung → Kasse"
        );
        assert_eq!(escape_free_text("ends with \\"), "ends with \\\\");
        assert_eq!(escape_free_text("ends with \\\\"), "ends with \\\\");
        assert_eq!(comment_text("a\nb"), "a?b");
    }

    #[test]
    fn file_uris_percent_encode() {
        assert_eq!(
            file_uri(Path::new("/etc/jobguard/jobs.toml")),
            "file:/etc/jobguard/jobs.toml"
        );
        assert_eq!(
            file_uri(Path::new("/srv/my jobs/100%.toml")),
            "file:/srv/my%20jobs/100%25.toml"
        );
        assert_eq!(file_uri(Path::new("/ä")), "file:/%C3%A4");
    }

    #[test]
    fn quotes_exec_arguments() {
        assert_eq!(quote_exec_arg("/usr/bin/php"), "/usr/bin/php");
        assert_eq!(quote_exec_arg("--flag=1"), "--flag=1");
        assert_eq!(quote_exec_arg(""), "\"\"");
        assert_eq!(quote_exec_arg("a b"), "\"a b\"");
        assert_eq!(quote_exec_arg("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(quote_exec_arg("C:\\x"), "\"C:\\\\x\"");
        assert_eq!(quote_exec_arg("50%"), "\"50%%\"");
        assert_eq!(quote_exec_arg("$HOME"), "\"$$HOME\"");
        assert_eq!(quote_exec_arg("l1\nl2"), "\"l1\\nl2\"");
        assert_eq!(quote_exec_arg("bell\u{7}"), "\"bell\\x07\"");
        assert_eq!(quote_exec_arg("Grüße"), "\"Grüße\"");
        assert_eq!(quote_exec_arg(";"), "\";\"");
        assert_eq!(
            exec_command_line(&["/usr/bin/php", "/srv/sync/sync.php", "--since", "1 day"]),
            "/usr/bin/php /srv/sync/sync.php --since \"1 day\""
        );
        assert_eq!(exec_command_line(&["-x", "-x"]), "\"-x\" -x");
    }
}
