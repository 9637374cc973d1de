//! `jobguard status --fleet`: every host that shares a store of this job list, from their
//! heartbeats ([`crate::ops::fleet`]): which jobs each arms, hosts whose heartbeat stopped,
//! machines that share a machine id, and jobs whose definitions differ between hosts,
//! that a job list refused, or that no live host arms while their schedule is live.
//! `--forget HOST` deletes a host's heartbeats (a host taken out of service).
//!
//! Exit status: 0 when nothing needs a person, 1 ([`exit::ATTENTION`]) when something
//! does, a store's status when one could not be read, 2 when `--forget` names no host.

use crate::cli::{StatusArgs, open_store, report_store_addresses, view};
use crate::exit::{self, Error, Finished};
use crate::joblist::config::{self, ConfigSource};
use crate::ops::fleet::{Fleet, HostView};

/// Runs `jobguard status --fleet`: ends with 0, 1 when something needs a person, or the
/// worst status of the stores that could not be read.
///
/// # Errors
/// 2 when `--forget` names no host.
pub fn run(args: &StatusArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let mut finished = Finished::OK;
    let addresses = report_store_addresses(&set, &mut finished);
    let mut json = Vec::new();
    let mut forgotten = 0;
    let mut first = true;
    for address in addresses {
        let masked = crate::store::address::mask(&address);
        let mut store = match open_store(&address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        if let Some(host) = &args.forget {
            match forget(store.as_mut(), host) {
                Ok(keys) => {
                    for k in &keys {
                        println!("{masked}: forgot the heartbeat of {k}");
                    }
                    forgotten += keys.len();
                }
                Err(e) => finished.report(&Error::from(e).context(&masked)),
            }
            continue;
        }
        let fleet = match crate::ops::fleet::read(store.as_mut()) {
            Ok(f) => f,
            Err(e) => {
                finished.report(&Error::from(e).context(&masked));
                continue;
            }
        };
        if fleet.needs_attention() {
            finished.add(exit::ATTENTION);
        }
        if args.json {
            json.push(serde_json::json!({ "store": masked, "fleet": fleet }));
        } else {
            if !first {
                println!();
            }
            first = false;
            print!("{}", render(&masked, &fleet));
        }
    }
    if let Some(host) = &args.forget {
        if forgotten == 0 && finished == Finished::OK {
            return Err(Error::new(
                exit::USAGE,
                format!("no heartbeat of a host named {host:?} in the job list's stores"),
            ));
        }
        return Ok(finished);
    }
    if args.json {
        println!("{}", serde_json::json!({ "stores": json }));
    }
    Ok(finished)
}

/// Forgets the heartbeats of the host named `host` (its name, its label or its key).
fn forget(
    store: &mut dyn crate::store::Store,
    host: &str,
) -> Result<Vec<String>, crate::store::StoreError> {
    let keys: Vec<String> = store
        .beats()?
        .into_iter()
        .filter(|(key, text)| {
            !crate::ops::pause::is_key(key)
                && (key == host
                    || crate::ops::fleet::Beat::from_json(key, text)
                        .is_ok_and(|b| b.host == host || b.label() == host))
        })
        .map(|(key, _)| key)
        .collect();
    store.forget_beats(&keys)?;
    Ok(keys)
}

/// How long ago, µs, in the largest two units ("9m 3s").
fn ago(usec: i64) -> String {
    let secs = (usec / 1_000_000).max(0);
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (size, name) in units {
        if rest >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{name}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

fn host_state(h: &HostView, now: i64) -> String {
    let mut says = Vec::new();
    if h.silent {
        says.push(format!(
            "silent: no heartbeat for {} (recovery passes every minute)",
            ago(now - h.beat.seen_at)
        ));
    }
    if h.shared_machine_id {
        says.push("shares its machine id with another live host".to_string());
    }
    if h.beat.list_errors > 0 {
        says.push(format!("job list: {} error(s)", h.beat.list_errors));
    }
    if says.is_empty() {
        "ok".into()
    } else {
        says.join("; ")
    }
}

/// The fleet of one store as text: a table of hosts, then one of jobs.
fn render(store: &str, fleet: &Fleet) -> String {
    let now = fleet.now;
    let mut out = format!("store {store}\n");
    if fleet.hosts.is_empty() {
        out.push_str(
            "no host has written a heartbeat (jobguard recover writes one at each pass)\n",
        );
    } else {
        let rows: Vec<Vec<String>> = fleet
            .hosts
            .iter()
            .map(|h| {
                let armed = h.beat.jobs.values().filter(|j| j.armed).count();
                vec![
                    h.label.clone(),
                    h.beat.version.clone(),
                    format!("{} ago", ago(now - h.beat.seen_at)),
                    format!("{armed}/{}", h.beat.jobs.len()),
                    host_state(h, now),
                ]
            })
            .collect();
        out.push_str(&view::table(
            &["HOST", "VERSION", "LAST BEAT", "JOBS", "STATE"],
            &rows,
        ));
    }
    if fleet.hosts.iter().any(|h| h.shared_machine_id) {
        out.push_str(&format!(
            "  {}\n",
            crate::guard::identity::SHARED_MACHINE_ID_FIX
        ));
    }
    if !fleet.jobs.is_empty() {
        let rows: Vec<Vec<String>> = fleet
            .jobs
            .iter()
            .map(|j| {
                let state = j.problem().unwrap_or_else(|| {
                    if !j.paused_on.is_empty() && j.armed_by.is_empty() {
                        format!("paused on {}", j.paused_on.join(", "))
                    } else if j.armed_by.is_empty() {
                        "armed by no host: taken out of the job list of the host that ran it".into()
                    } else {
                        "ok".into()
                    }
                });
                vec![j.job.clone(), j.armed_by.len().to_string(), state]
            })
            .collect();
        out.push_str(&view::table(&["JOB", "HOSTS", "STATE"], &rows));
    }
    for u in &fleet.unreadable {
        out.push_str(&format!("unreadable: {u}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::ago;

    #[test]
    fn ago_shows_the_two_largest_units() {
        assert_eq!(ago(0), "0s");
        assert_eq!(ago(12_000_000), "12s");
        assert_eq!(ago(543_000_000), "9m 3s");
        assert_eq!(ago(3 * 86_400_000_000 + 7_200_000_000 + 5), "3d 2h");
        assert_eq!(ago(3_600_000_000 + 5_000_000), "1h 5s");
    }
}
