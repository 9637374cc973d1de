//! The calendar-event grammar of systemd.time(7) "CALENDAR EVENTS" (systemd 252):
//! parsing into per-field chains, normalization, validation and the normalized form.
//!
//! The rules follow systemd's `calendar_spec_from_string()`: an optional trailing
//! ` UTC`, local zone abbreviation or tzdb zone name; the shorthands; weekday lists and
//! ranges; `Y-M-D` / `M-D` dates with `~` for days from the month's end; `h:m[:s]`
//! times with fractional seconds; `@EPOCH`. Each field is a chain of
//! `start[..stop][/repeat]` items. Evaluation lives in [`super::elapse`].

use std::fmt;

use jiff::tz::TimeZone;

use super::CalendarErrorKind as Errno;
use super::tm;

/// Weekday bits meaning "every day" (Monday = bit 0).
pub(crate) const BITS_WEEKDAYS: i32 = 127;
/// Earliest year an expression may name.
pub(crate) const MIN_YEAR: i32 = 1970;
/// Latest year an expression may name, and the end of every search.
pub(crate) const MAX_YEAR: i32 = 2199;
/// Most items in one field's list.
const COMPONENTS_MAX: usize = 240;
/// Microseconds per second.
pub(crate) const USEC_PER_SEC: i32 = 1_000_000;

/// One `start[..stop][/repeat]` item of a field; `stop` is -1 without a range and
/// `repeat` 0 without repetition. Seconds are in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Component {
    pub start: i32,
    pub stop: i32,
    pub repeat: i32,
}

impl Component {
    fn value(v: i32) -> Self {
        Component {
            start: v,
            stop: -1,
            repeat: 0,
        }
    }
}

/// A field: its items; empty means `*` (every value).
pub(crate) type Chain = Vec<Component>;

/// A parsed, normalized and validated calendar event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Spec {
    /// Weekday bits, Monday = bit 0; -1 for every day.
    pub weekdays: i32,
    pub year: Chain,
    pub month: Chain,
    pub day: Chain,
    pub hour: Chain,
    pub minute: Chain,
    /// Seconds, in microseconds.
    pub usec: Chain,
    /// `~`: days count back from the month's end.
    pub end_of_month: bool,
    /// Evaluated in UTC.
    pub utc: bool,
    /// -1, or 0/1 when the expression ended with the local zone's standard/DST name.
    pub dst: i32,
    /// The tzdb zone named at the end of the expression.
    pub timezone: Option<String>,
    /// The local zone's abbreviation `dst` refers to, for printing.
    pub dst_name: Option<String>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            weekdays: 0,
            year: Vec::new(),
            month: Vec::new(),
            day: Vec::new(),
            hour: Vec::new(),
            minute: Vec::new(),
            usec: Vec::new(),
            end_of_month: false,
            utc: false,
            dst: -1,
            timezone: None,
            dst_name: None,
        }
    }
}

/// Result of parsing: the spec and the zone named in it, if any.
pub(crate) struct Parsed {
    pub spec: Spec,
    pub zone: Option<TimeZone>,
}

/// Whether `s` ends with `suffix`, ignoring ASCII case; returns where the suffix starts.
fn endswith_no_case(s: &str, suffix: &str) -> Option<usize> {
    let (sb, xb) = (s.as_bytes(), suffix.as_bytes());
    if xb.len() > sb.len() {
        return None;
    }
    let at = sb.len() - xb.len();
    sb[at..].eq_ignore_ascii_case(xb).then_some(at)
}

/// systemd's `timezone_is_valid()`: a tzdb name made of `[A-Za-z0-9-_+/]`, no leading,
/// trailing or double `/`, naming a regular file under /usr/share/zoneinfo that starts
/// with the TZif magic. Returns the zone loaded from that file.
pub(crate) fn load_timezone(name: &str) -> Option<TimeZone> {
    if name.is_empty() || name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return None;
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/'))
    {
        return None;
    }
    if name == "UTC" {
        return Some(TimeZone::UTC);
    }
    let path = format!("/usr/share/zoneinfo/{name}");
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let data = std::fs::read(&path).ok()?;
    if !data.starts_with(b"TZif") {
        return None;
    }
    TimeZone::tzif(name, &data).ok()
}

/// strtoul(3) in base 10 at the start of `s`: leading white space, an optional sign,
/// digits. Returns the value (negated modulo 2^64 after a `-`) and the bytes consumed.
fn strtoul(s: &[u8]) -> Result<(u64, usize), Errno> {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while i < s.len() && s[i].is_ascii_digit() {
        match v
            .checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(s[i] - b'0')))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == digits_start {
        return Err(Errno::Invalid);
    }
    if overflow {
        return Err(Errno::Range);
    }
    Ok((if neg { v.wrapping_neg() } else { v }, i))
}

/// systemd's `parse_fractional_part_u()` with 6 digits: microseconds, rounding on the
/// 7th digit; returns the value and the bytes consumed (all further digits).
pub(crate) fn parse_fraction(s: &[u8]) -> Result<(u32, usize), Errno> {
    let mut val: u32 = 0;
    let mut i = 0;
    let mut n = 0;
    while n < 6 {
        match s.get(i) {
            Some(c) if c.is_ascii_digit() => {
                val = val * 10 + u32::from(c - b'0');
                i += 1;
            }
            _ => {
                if n == 0 {
                    return Err(Errno::Invalid);
                }
                val *= 10u32.pow(6 - n);
                break;
            }
        }
        n += 1;
    }
    if matches!(s.get(i), Some(b'5'..=b'9')) {
        val += 1;
    }
    while matches!(s.get(i), Some(c) if c.is_ascii_digit()) {
        i += 1;
    }
    Ok((val, i))
}

/// A cursor over the expression's bytes; the end reads as NUL, as in C.
struct Cur<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cur<'_> {
    fn at(&self, k: usize) -> u8 {
        self.s.get(self.i + k).copied().unwrap_or(0)
    }
    fn cur(&self) -> u8 {
        self.at(0)
    }
    fn skip_spaces(&mut self) {
        while self.cur() == b' ' {
            self.i += 1;
        }
    }
}

const WEEKDAY_NAMES: [(&str, i32); 14] = [
    ("Monday", 0),
    ("Mon", 0),
    ("Tuesday", 1),
    ("Tue", 1),
    ("Wednesday", 2),
    ("Wed", 2),
    ("Thursday", 3),
    ("Thu", 3),
    ("Friday", 4),
    ("Fri", 4),
    ("Saturday", 5),
    ("Sat", 5),
    ("Sunday", 6),
    ("Sun", 6),
];

fn parse_weekdays(p: &mut Cur<'_>, c: &mut Spec) -> Result<(), Errno> {
    let mut l: i32 = -1;
    let mut first = true;
    loop {
        let rest = &p.s[p.i..];
        let found = WEEKDAY_NAMES.iter().find(|(name, _)| {
            rest.len() >= name.len() && rest[..name.len()].eq_ignore_ascii_case(name.as_bytes())
        });
        let Some(&(name, nr)) = found else {
            return if first { Ok(()) } else { Err(Errno::Invalid) };
        };
        let skip = name.len();
        if !matches!(p.at(skip), 0 | b'-' | b'.' | b',' | b' ') {
            return Err(Errno::Invalid);
        }
        c.weekdays |= 1 << nr;
        if l >= 0 {
            if l > nr {
                return Err(Errno::Invalid);
            }
            for j in l + 1..nr {
                c.weekdays |= 1 << j;
            }
        }
        p.i += skip;

        if p.cur() == 0 {
            return Ok(());
        }
        if p.cur() == b' ' {
            p.skip_spaces();
            return Ok(());
        }
        match p.cur() {
            b'.' => {
                if l >= 0 || p.at(1) != b'.' {
                    return Err(Errno::Invalid);
                }
                l = nr;
                p.i += 2;
            }
            b'-' => {
                if l >= 0 {
                    return Err(Errno::Invalid);
                }
                l = nr;
                p.i += 1;
            }
            b',' => {
                l = -1;
                p.i += 1;
            }
            _ => {}
        }
        if matches!(p.cur(), 0 | b' ') {
            p.skip_spaces();
            return if l < 0 { Ok(()) } else { Err(Errno::Invalid) };
        }
        first = false;
    }
}

fn parse_component_decimal(p: &mut Cur<'_>, usec: bool) -> Result<i32, Errno> {
    if !p.cur().is_ascii_digit() {
        return Err(Errno::Invalid);
    }
    let (mut value, n) = strtoul(&p.s[p.i..])?;
    let mut e = p.i + n;
    if usec {
        value = value
            .checked_mul(u64::from(USEC_PER_SEC.unsigned_abs()))
            .ok_or(Errno::Range)?;
        let at = |k: usize| p.s.get(k).copied().unwrap_or(0);
        if at(e) == b'.' && at(e + 1) != b'.' {
            e += 1;
            let (add, m) = parse_fraction(&p.s[e..])?;
            e += m;
            value = value.checked_add(u64::from(add)).ok_or(Errno::Range)?;
        }
    }
    let value = i32::try_from(value).map_err(|_| Errno::Range)?;
    p.i = e;
    Ok(value)
}

fn parse_chain(p: &mut Cur<'_>, usec: bool) -> Result<Chain, Errno> {
    if p.cur() == b'*' {
        p.i += 1;
        return Ok(if usec {
            vec![Component {
                start: 0,
                stop: -1,
                repeat: USEC_PER_SEC,
            }]
        } else {
            Vec::new()
        });
    }
    let mut chain = Vec::new();
    loop {
        if chain.len() > COMPONENTS_MAX {
            return Err(Errno::TooMany);
        }
        let start = parse_component_decimal(p, usec)?;
        let mut stop = -1;
        let mut repeat = 0;
        if p.cur() == b'.' && p.at(1) == b'.' {
            p.i += 2;
            stop = parse_component_decimal(p, usec)?;
            repeat = if usec { USEC_PER_SEC } else { 1 };
        }
        if p.cur() == b'/' {
            p.i += 1;
            repeat = parse_component_decimal(p, usec)?;
            if repeat == 0 {
                return Err(Errno::Range);
            }
        } else {
            if start > i32::MAX - repeat {
                return Err(Errno::Range);
            }
            if usec && stop >= 0 && start + repeat > stop {
                return Err(Errno::Invalid);
            }
        }
        if !matches!(p.cur(), 0 | b' ' | b',' | b'-' | b'~' | b':') {
            return Err(Errno::Invalid);
        }
        chain.push(Component {
            start,
            stop,
            repeat,
        });
        if p.cur() == b',' {
            p.i += 1;
            continue;
        }
        return Ok(chain);
    }
}

/// Parses the date part; `Ok(true)` after `@EPOCH`, which also sets the time.
fn parse_date(p: &mut Cur<'_>, c: &mut Spec) -> Result<bool, Errno> {
    if p.cur() == 0 {
        return Ok(false);
    }
    if p.cur() == b'@' {
        let (value, n) = strtoul(&p.s[p.i + 1..])?;
        p.i += 1 + n;
        from_epoch(c, value as i64)?;
        return Ok(true);
    }
    let mut t = Cur { s: p.s, i: p.i };
    let first = parse_chain(&mut t, false)?;
    if matches!(t.cur(), 0 | b':') {
        return Ok(false);
    }
    match t.cur() {
        b'~' => c.end_of_month = true,
        b'-' => {}
        _ => return Err(Errno::Invalid),
    }
    t.i += 1;
    let second = parse_chain(&mut t, false)?;
    if matches!(t.cur(), 0 | b' ') {
        t.skip_spaces();
        p.i = t.i;
        c.month = first;
        c.day = second;
        return Ok(false);
    } else if c.end_of_month {
        return Err(Errno::Invalid);
    }
    match t.cur() {
        b'~' => c.end_of_month = true,
        b'-' => {}
        _ => return Err(Errno::Invalid),
    }
    t.i += 1;
    let third = parse_chain(&mut t, false)?;
    if !matches!(t.cur(), 0 | b' ') {
        return Err(Errno::Invalid);
    }
    t.skip_spaces();
    p.i = t.i;
    c.year = first;
    c.month = second;
    c.day = third;
    Ok(false)
}

/// `@EPOCH`: that second, in UTC.
fn from_epoch(c: &mut Spec, time: i64) -> Result<(), Errno> {
    let days = time.div_euclid(86_400);
    let rem = time.rem_euclid(86_400);
    let (y, m, d) = tm::civil_from_days(days);
    let y = i32::try_from(y).map_err(|_| Errno::Range)?;
    c.utc = true;
    c.year = vec![Component::value(y)];
    c.month = vec![Component::value(m as i32)];
    c.day = vec![Component::value(d as i32)];
    c.hour = vec![Component::value((rem / 3600) as i32)];
    c.minute = vec![Component::value(((rem / 60) % 60) as i32)];
    c.usec = vec![Component::value((rem % 60) as i32 * USEC_PER_SEC)];
    Ok(())
}

fn parse_calendar_time(p: &mut Cur<'_>, c: &mut Spec) -> Result<(), Errno> {
    if p.cur() == 0 {
        c.hour = vec![Component::value(0)];
        c.minute = vec![Component::value(0)];
        c.usec = vec![Component::value(0)];
        return Ok(());
    }
    let h = parse_chain(p, false)?;
    if p.cur() != b':' {
        return Err(Errno::Invalid);
    }
    p.i += 1;
    let m = parse_chain(p, false)?;
    let s = if p.cur() == 0 {
        vec![Component::value(0)]
    } else {
        if p.cur() != b':' {
            return Err(Errno::Invalid);
        }
        p.i += 1;
        let s = parse_chain(p, true)?;
        if p.cur() != 0 {
            return Err(Errno::Invalid);
        }
        s
    };
    c.hour = h;
    c.minute = m;
    c.usec = s;
    Ok(())
}

fn consts(values: &[i32]) -> Chain {
    values.iter().map(|&v| Component::value(v)).collect()
}

/// Parses `expr`. `local_names` are the local zone's standard and DST abbreviations
/// (glibc's `tzname[]`), accepted as a trailing zone meaning local time with that flag.
pub(crate) fn parse(expr: &str, local_names: (&str, &str)) -> Result<Parsed, Errno> {
    let mut c = Spec::default();
    let mut zone = None;
    let mut p: &str = expr;

    if let Some(at) = endswith_no_case(p, " UTC") {
        c.utc = true;
        p = &p[..at];
    } else {
        let mut matched = None;
        for (j, name) in [local_names.0, local_names.1].into_iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let Some(e) = endswith_no_case(p, name) else {
                continue;
            };
            if e == 0 || p.as_bytes()[e - 1] != b' ' {
                continue;
            }
            matched = Some((j, e));
            break;
        }
        if let Some((j, e)) = matched {
            p = &p[..e - 1];
            c.dst = j as i32;
            c.dst_name = Some(if j == 0 { local_names.0 } else { local_names.1 }.to_string());
        } else if let Some((sp, tz)) = p
            .rfind(' ')
            .and_then(|sp| load_timezone(&p[sp + 1..]).map(|tz| (sp, tz)))
        {
            c.timezone = Some(p[sp + 1..].to_string());
            zone = Some(tz);
            p = &p[..sp];
        }
    }

    if p.is_empty() {
        return Err(Errno::Invalid);
    }

    let lower = p.to_ascii_lowercase();
    match lower.as_str() {
        "minutely" => c.usec = consts(&[0]),
        "hourly" => {
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "daily" => {
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "monthly" => {
            c.day = consts(&[1]);
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "annually" | "yearly" | "anually" => {
            c.month = consts(&[1]);
            c.day = consts(&[1]);
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "weekly" => {
            c.weekdays = 1;
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "quarterly" => {
            c.month = consts(&[1, 4, 7, 10]);
            c.day = consts(&[1]);
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        "biannually" | "bi-annually" | "semiannually" | "semi-annually" => {
            c.month = consts(&[1, 7]);
            c.day = consts(&[1]);
            c.hour = consts(&[0]);
            c.minute = consts(&[0]);
            c.usec = consts(&[0]);
        }
        _ => {
            let mut cur = Cur {
                s: p.as_bytes(),
                i: 0,
            };
            parse_weekdays(&mut cur, &mut c)?;
            if !parse_date(&mut cur, &mut c)? {
                parse_calendar_time(&mut cur, &mut c)?;
            }
            if cur.cur() != 0 {
                return Err(Errno::Invalid);
            }
        }
    }

    normalize(&mut c);
    if !valid(&c) {
        return Err(Errno::Invalid);
    }
    Ok(Parsed { spec: c, zone })
}

fn normalize_chain(chain: &mut Chain) {
    for i in chain.iter_mut() {
        if i.stop > i.start && i.repeat > 0 {
            i.stop -= (i.stop - i.start) % i.repeat;
        }
        if (i.stop > i.start && i.repeat > 0 && i.start + i.repeat > i.stop) || i.start == i.stop {
            i.repeat = 0;
            i.stop = -1;
        }
    }
    chain.sort();
    chain.dedup();
}

fn fix_year(chain: &mut Chain) {
    for c in chain.iter_mut() {
        for v in [&mut c.start, &mut c.stop] {
            if (0..70).contains(v) {
                *v += 2000;
            } else if (70..100).contains(v) {
                *v += 1900;
            }
        }
    }
}

fn normalize(c: &mut Spec) {
    if c.timezone.as_deref() == Some("UTC") {
        c.utc = true;
        c.timezone = None;
    }
    if c.weekdays <= 0 || c.weekdays >= BITS_WEEKDAYS {
        c.weekdays = -1;
    }
    if c.end_of_month && c.day.is_empty() {
        c.end_of_month = false;
    }
    fix_year(&mut c.year);
    normalize_chain(&mut c.year);
    normalize_chain(&mut c.month);
    normalize_chain(&mut c.day);
    normalize_chain(&mut c.hour);
    normalize_chain(&mut c.minute);
    normalize_chain(&mut c.usec);
}

/// systemd's `chain_valid()`. It checks the sorted items recursively and, for `~`
/// days, lowers the upper bound by 3 on every step, so the k-th item (from 0) of a
/// `~` list must be at most 28 - 3k; systemd 252 rejects `*~9,26`, and so does this.
fn chain_valid(chain: &Chain, from: i32, to: i32, end_of_month: bool) -> bool {
    let mut to = to;
    chain.iter().all(|c| {
        if end_of_month {
            to -= 3;
        }
        if c.start < from || c.start > to {
            return false;
        }
        if c.repeat > to - from {
            return false;
        }
        if c.stop >= 0 {
            if c.stop < from || c.stop > to {
                return false;
            }
            if c.start + c.repeat > c.stop {
                return false;
            }
        } else {
            if end_of_month && c.start - c.repeat < from {
                return false;
            }
            if !end_of_month && c.start + c.repeat > to {
                return false;
            }
        }
        true
    })
}

fn valid(c: &Spec) -> bool {
    c.weekdays <= BITS_WEEKDAYS
        && chain_valid(&c.year, MIN_YEAR, MAX_YEAR, false)
        && chain_valid(&c.month, 1, 12, false)
        && chain_valid(&c.day, 1, 31, c.end_of_month)
        && chain_valid(&c.hour, 0, 23, false)
        && chain_valid(&c.minute, 0, 59, false)
        && chain_valid(&c.usec, 0, 60 * USEC_PER_SEC - 1, false)
}

const DAY_ABBR: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

fn format_weekdays(f: &mut fmt::Formatter<'_>, bits: i32) -> fmt::Result {
    let mut l: i32 = -1;
    let mut need_comma = false;
    let mut x = 0;
    while x < 7 {
        if bits & (1 << x) != 0 {
            if l < 0 {
                if need_comma {
                    f.write_str(",")?;
                } else {
                    need_comma = true;
                }
                f.write_str(DAY_ABBR[x as usize])?;
                l = x;
            }
        } else if l >= 0 {
            if x > l + 1 {
                f.write_str(if x > l + 2 { ".." } else { "," })?;
                f.write_str(DAY_ABBR[(x - 1) as usize])?;
            }
            l = -1;
        }
        x += 1;
    }
    if l >= 0 && x > l + 1 {
        f.write_str(if x > l + 2 { ".." } else { "," })?;
        f.write_str(DAY_ABBR[(x - 1) as usize])?;
    }
    Ok(())
}

fn format_chain(
    f: &mut fmt::Formatter<'_>,
    width: usize,
    chain: &Chain,
    usec: bool,
) -> fmt::Result {
    let d = if usec { USEC_PER_SEC } else { 1 };
    let is_star = chain.is_empty()
        || (usec
            && chain
                .iter()
                .any(|c| c.start == 0 && c.stop < 0 && c.repeat == USEC_PER_SEC));
    if is_star {
        return f.write_str("*");
    }
    for (n, c) in chain.iter().enumerate() {
        if n > 0 {
            f.write_str(",")?;
        }
        write!(f, "{:0width$}", c.start / d)?;
        if c.start % d > 0 {
            write!(f, ".{:06}", c.start % d)?;
        }
        if c.stop > 0 {
            write!(f, "..{:0width$}", c.stop / d)?;
        }
        if c.stop % d > 0 {
            write!(f, ".{:06}", c.stop % d)?;
        }
        if c.repeat > 0 && !(c.stop > 0 && c.repeat == d) {
            write!(f, "/{}", c.repeat / d)?;
        }
        if c.repeat % d > 0 {
            write!(f, ".{:06}", c.repeat % d)?;
        }
    }
    Ok(())
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weekdays > 0 && self.weekdays <= BITS_WEEKDAYS {
            format_weekdays(f, self.weekdays)?;
            f.write_str(" ")?;
        }
        format_chain(f, 4, &self.year, false)?;
        f.write_str("-")?;
        format_chain(f, 2, &self.month, false)?;
        f.write_str(if self.end_of_month { "~" } else { "-" })?;
        format_chain(f, 2, &self.day, false)?;
        f.write_str(" ")?;
        format_chain(f, 2, &self.hour, false)?;
        f.write_str(":")?;
        format_chain(f, 2, &self.minute, false)?;
        f.write_str(":")?;
        format_chain(f, 2, &self.usec, true)?;
        if self.utc {
            f.write_str(" UTC")?;
        } else if let Some(tz) = &self.timezone {
            write!(f, " {tz}")?;
        } else if let Some(name) = self.dst_name.as_deref().filter(|n| !n.is_empty()) {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(expr: &str) -> String {
        match parse(expr, ("CET", "CEST")) {
            Ok(p) => p.spec.to_string(),
            Err(e) => format!("error: {e:?}"),
        }
    }

    #[test]
    fn normalized_forms() {
        let cases = [
            ("daily", "*-*-* 00:00:00"),
            ("minutely", "*-*-* *:*:00"),
            ("hourly UTC", "*-*-* *:00:00 UTC"),
            ("weekly Europe/Berlin", "Mon *-*-* 00:00:00 Europe/Berlin"),
            ("quarterly", "*-01,04,07,10-01 00:00:00"),
            ("semi-annually", "*-01,07-01 00:00:00"),
            ("anually", "*-01-01 00:00:00"),
            ("Mon-Tue", "Mon,Tue *-*-* 00:00:00"),
            ("sat,sun", "Sat,Sun *-*-* 00:00:00"),
            ("Mon,", "Mon *-*-* 00:00:00"),
            ("Mon..Wed,Fri *-*~3", "Mon..Wed,Fri *-*~03 00:00:00"),
            ("*-02~1..3/1", "*-02~01..03 00:00:00"),
            ("2026-*~7/2", "2026-*~07/2 00:00:00"),
            ("*:0/5", "*-*-* *:00/5:00"),
            ("*-*-* *:*:1.5", "*-*-* *:*:01.500000"),
            ("*-*-* *:*:0/0.5", "*-*-* *:*:00/0.500000"),
            ("1:2:3.1234567", "*-*-* 01:02:03.123457"),
            ("@1700000000", "2023-11-14 22:13:20 UTC"),
            ("99-1-1", "1999-01-01 00:00:00"),
            ("69-01-01", "2069-01-01 00:00:00"),
            ("*-*-1,15,1..5/2 4,2:0", "*-*-01,01..05/2,15 02,04:00:00"),
            ("Mon *-*-* 1..3:0/25", "Mon *-*-* 01..03:00/25:00"),
            ("1..10/4:00", "*-*-* 01..09/4:00:00"),
            ("1..3/5:00", "*-*-* 01:00:00"),
            ("12:00 cest", "*-*-* 12:00:00 CEST"),
            ("Mon..Sun 12:00", "*-*-* 12:00:00"),
            ("*~9,2 *:00", "*-*~02,09 *:00:00"),
        ];
        for (input, want) in cases {
            assert_eq!(norm(input), want, "{input}");
        }
    }

    #[test]
    fn rejected() {
        for bad in [
            "",
            "bogus",
            "*",
            "*/5",
            "*:*/5",
            "00..59/20:00",
            "UTC",
            "Mon..",
            "Wed..Mon",
            "Mon-Tue-Wed",
            "12",
            "*-*-* 24:00",
            "1969-01-01",
            "2200-01-01",
            "*-*~29",
            "5..3:00",
            "*:*:5..5.5",
            "Monday2",
            "*-*-* 1.5:00",
            "02~03-04",
            "*-*-* *:*:5.",
            "*~26,9",
            "*~9,26 *:00",
        ] {
            assert!(
                parse(bad, ("CET", "CEST")).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(parse("0/0:00", ("", "")).err(), Some(Errno::Range));
        let many = vec!["1"; 242].join(",") + ":00";
        assert_eq!(parse(&many, ("", "")).err(), Some(Errno::TooMany));
        let ok = vec!["1"; 241].join(",") + ":00";
        assert!(parse(&ok, ("", "")).is_ok());
    }

    #[test]
    fn fraction_rounds_on_seventh_digit() {
        assert_eq!(parse_fraction(b"5"), Ok((500_000, 1)));
        assert_eq!(parse_fraction(b"1234565"), Ok((123_457, 7)));
        assert_eq!(parse_fraction(b"9999995x"), Ok((1_000_000, 7)));
        assert_eq!(parse_fraction(b"x"), Err(Errno::Invalid));
    }
}
