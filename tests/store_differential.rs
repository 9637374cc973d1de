//! Every store against the pure rules (`jobguard::store::rules`): each real store (a
//! SQLite file, and every server of the tests' table, `servers!` in `common/remote.rs`,
//! on 127.0.0.1 in a fresh namespace each) is
//! driven through one random sequence of claim, renew, finish, finish_kept, interrupt,
//! resolve and unlock calls with random jobs, slots, holders, options and clock moves.
//! The same calls go to `Memory` (`common/memory.rs`), a mirror that moves only by the rules. After every
//! call the store's answer must equal the rules' answer, and the store's lease and records
//! of every job (read with `Store::lease` and `Store::runs`) must equal the mirror's.
//!
//! The seed is printed; `JOBGUARD_DIFF_SEED=N` replays a sequence and
//! `JOBGUARD_DIFF_STEPS=N` sets its length (default 400). A disagreement fails with the
//! seed, the step and every call so far.
//!
//! Renewals present the renewal generation the holder last confirmed, or an earlier one
//! (a copy of the holder resumed from an older snapshot), and write a fresh one or send
//! the last one again (a renewal whose answer was lost); finishes present either.
//!
//! Marks (fenced by a grant's token, current or stale, or not) are compared too.
//!
//! The records of one slot may name different zones (a job whose `timezone` changed): a
//! queued slot is claimed with the zone of its oldest queued record.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobguard::guard::clock::{Clock, ManualClock};
use jobguard::guard::lease::{Holder, Lease};
use jobguard::guard::ledger::{Finish, NewRun, Outcome, Resolution, Run, Slot};
use jobguard::store::rules::{ClaimDecision, RuleError};
use jobguard::store::{Claim, ClaimRequest, ClockCheck, Mark, RunQuery, Store, StoreError};

use common::conformance::{T0, holder};
use common::memory::Memory;

const HOUR: i64 = 3_600_000_000;
const TTL: Duration = Duration::from_secs(60);
const JOBS: [&str; 2] = ["alpha", "beta"];

/// The slots the sequence uses: around the start time, one far ahead (a forced slot or a
/// clock that was ahead).
fn slots() -> [i64; 7] {
    [
        T0 - 4 * HOUR,
        T0 - 3 * HOUR,
        T0 - 2 * HOUR,
        T0 - HOUR,
        T0,
        T0 + HOUR,
        T0 + 240 * HOUR,
    ]
}

/// splitmix64: small, seeded, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// The seed of this process: every store runs the same sequence of calls.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| match std::env::var("JOBGUARD_DIFF_SEED") {
        Ok(s) => s.trim().parse().expect("JOBGUARD_DIFF_SEED is a number"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    })
}

fn steps() -> usize {
    std::env::var("JOBGUARD_DIFF_STEPS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(400)
}

/// What differs between stores without being a disagreement with the rules.
#[derive(Debug, Clone, Copy)]
struct Traits {
    /// The store reads this host's clock (SQLite): it does not compare clocks, so the rules
    /// see the host's time equal to the store's.
    host_clock: bool,
}

/// An answer in a form both sides can be compared in: the `Debug` text of the value, or
/// `error` for any error (the rules' error kinds map to the store's `Invalid`).
fn claim_text(r: &Result<Claim, String>) -> String {
    match r {
        Ok(c) => format!("{c:?}"),
        Err(_) => "error".to_string(),
    }
}

struct Diff {
    name: &'static str,
    seed: u64,
    store: Box<dyn Store>,
    clock: ManualClock,
    traits: Traits,
    mirror: Memory,
    rng: Rng,
    log: Vec<String>,
    /// Every grant the store answered, for later renewals, finishes and interrupts.
    grants: Vec<(Lease, Run)>,
    /// Every claim request sent, for resending.
    sent: Vec<ClaimRequest>,
    next_run: u32,
    /// The renewal generations each grant (job, token) confirmed, oldest first (0 at the
    /// grant).
    generations: std::collections::BTreeMap<(String, i64), Vec<i64>>,
    /// How often each kind of answer was seen (both sides agreed on it).
    seen: std::collections::BTreeMap<String, usize>,
}

impl Diff {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{}: disagreement with the rules at step {} (JOBGUARD_DIFF_SEED={}):\n{what}\ncalls:\n{}",
            self.name,
            self.log.len(),
            self.seed,
            self.log.join("\n")
        );
    }

    fn compare(&self, what: &str, store: String, rules: String) {
        if store != rules {
            self.fail(&format!("{what}\n store: {store}\n rules: {rules}"));
        }
    }

    /// One of six holders: three machines, machine 1's id under another boot (a reboot,
    /// or a copy of its image), a host without a machine id, and another process of
    /// machine 1's boot; the claim's grace after a lapsed lease tells them apart
    /// (`jobguard::store::rules::FOREIGN_GRACE_USEC`).
    fn some_holder(&mut self) -> Holder {
        let n = 1 + self.rng.below(6) as u32;
        let mut h = holder(n);
        match n {
            4 => h.machine_id = holder(1).machine_id,
            5 => h.machine_id = String::new(),
            6 => {
                h.machine_id = holder(1).machine_id;
                h.boot_id = holder(1).boot_id;
            }
            _ => {}
        }
        h
    }

    fn claim_request(&mut self, now: i64) -> ClaimRequest {
        if !self.sent.is_empty() && self.rng.chance(15) {
            // A claim sent again, as it was; sometimes under another holder.
            let mut req = self.rng.pick(&self.sent);
            if self.rng.chance(20) {
                req.holder = self.some_holder();
            }
            return req;
        }
        self.next_run += 1;
        let slot = self.rng.pick(&slots());
        let mut req = ClaimRequest::new(
            NewRun {
                run_id: format!("{:032x}", self.next_run),
                job: self.rng.pick(&JOBS).to_string(),
                slot: Slot {
                    usec: slot,
                    zone: if self.rng.chance(30) {
                        "UTC"
                    } else {
                        "Europe/Berlin"
                    }
                    .to_string(),
                },
                forced: self.rng.chance(10),
                trigger: self.rng.pick(&["timer", "manual"]).to_string(),
                invocation_id: self.rng.chance(50).then(|| format!("inv{}", self.next_run)),
            },
            self.some_holder(),
            TTL,
        );
        req.queued_first = self.rng.chance(50);
        req.in_order = self.rng.chance(50);
        if self.rng.chance(50) {
            let offset = self.rng.pick(&[
                0,
                1_000_000,
                -1_000_000,
                10_000_000,
                -10_000_000,
                120_000_000,
            ]);
            let tolerance = self
                .rng
                .pick(&[0, 5_000_000, 60_000_000, 300_000_000, i64::MAX]);
            req.clock = Some(ClockCheck {
                host_now: now + offset,
                tolerance,
            });
        }
        req
    }

    fn claim(&mut self) {
        let now = self.clock.now_usec();
        let req = self.claim_request(now);
        self.log.push(format!(
            "now {now}: claim job {} slot {} run {} holder {} forced {} queued_first {} in_order {} clock {:?}",
            req.run.job,
            req.run.slot.usec,
            req.run.run_id,
            req.holder.host,
            req.run.forced,
            req.queued_first,
            req.in_order,
            req.clock
        ));
        let mut for_rules = req.clone();
        if self.traits.host_clock
            && let Some(c) = &mut for_rules.clock
        {
            c.host_now = now;
        }
        let resent = self.mirror.claim_state(&for_rules, now).retried.is_some();
        let expected: Result<Claim, String> = self
            .mirror
            .claim(&for_rules, now)
            .map(|d: ClaimDecision| d.answer())
            .map_err(|e: RuleError| e.to_string());
        let actual = self.store.claim(&req).map_err(|e| e.to_string());
        if let Err(e) = &actual
            && expected.is_ok()
        {
            self.fail(&format!("claim: store error {e}"));
        }
        self.compare("claim", claim_text(&actual), claim_text(&expected));
        let kind = match &actual {
            Ok(Claim::Claimed { run, .. }) if run.run_id != req.run.run_id => "claimed?",
            Ok(Claim::Claimed { run, .. }) if run.trigger == "rerun" => "claimed-queued",
            Ok(Claim::Claimed { .. }) if resent => "claimed-again",
            Ok(Claim::Claimed { .. }) => "claimed",
            Ok(Claim::ClockSkew { .. }) => "clock-skew",
            Ok(Claim::SlotBehind { .. }) => "slot-behind",
            Ok(Claim::SlotDone { .. }) => "slot-done",
            Ok(Claim::SlotHeld { .. }) => "slot-held",
            Ok(Claim::Busy { .. }) => "busy",
            Err(_) => "claim-error",
        };
        *self.seen.entry(kind.to_string()).or_default() += 1;
        if let Ok(Claim::Claimed { lease, run, .. }) = actual {
            self.grants.push((lease, run));
        }
        self.sent.push(req);
    }

    fn renew(&mut self) {
        let Some((mut lease, _)) = self.pick_grant() else {
            return;
        };
        if self.rng.chance(10) {
            lease.token += 1;
        }
        let key = (lease.job.clone(), lease.token);
        let last = self.generations.get(&key).and_then(|g| g.last().copied());
        // A fresh generation, or the last confirmed one again (a renewal whose answer was
        // lost, sent again).
        let next = match last {
            Some(g) if g != 0 && self.rng.chance(20) => g,
            _ => 1 + self.rng.below(1 << 40) as i64,
        };
        let ttl = self.rng.pick(&[TTL, Duration::from_secs(5)]);
        let now = self.clock.now_usec();
        self.log.push(format!(
            "now {now}: renew job {} holder {} token {} generation {} next {next} ttl {ttl:?}",
            lease.job, lease.host, lease.token, lease.renewal
        ));
        let expected = self.mirror.renew(&lease, next, ttl, now);
        let actual = self
            .store
            .renew(&lease, next, ttl)
            .map_err(|e| e.to_string());
        if expected.is_some() && last != Some(next) {
            self.generations
                .entry(key)
                .or_insert_with(|| vec![0])
                .push(next);
        }
        self.compare(
            "renew",
            format!("{actual:?}"),
            format!("{:?}", Ok::<_, String>(expected)),
        );
    }

    fn finish(&mut self) {
        let Some((lease, run)) = self.pick_grant() else {
            return;
        };
        let end = Finish {
            outcome: self
                .rng
                .pick(&[Outcome::Succeeded, Outcome::Failed, Outcome::LeaseLost]),
            reason: self.rng.chance(50).then(|| "exit".to_string()),
            exit_status: self.rng.chance(50).then(|| self.rng.below(3) as i32),
            report: if self.rng.chance(30) {
                [("rows".to_string(), "7".to_string())]
                    .into_iter()
                    .collect()
            } else {
                Default::default()
            },
            resolution: self.rng.pick(&[
                None,
                None,
                Some(Resolution::Queued),
                Some(Resolution::Held),
            ]),
            ended_at: None,
        };
        let kept = self.rng.chance(30);
        let now = self.clock.now_usec();
        // A kept outcome's own end, by a host clock that may be off: before its start,
        // within its run, or after the latest its lease allowed.
        let end = Finish {
            ended_at: (kept && self.rng.chance(70))
                .then(|| now - self.rng.pick(&[-HOUR, 0, 5_000_000, 70_000_000, HOUR])),
            ..end
        };
        self.log.push(format!(
            "now {now}: finish{} job {} run {} token {} generation {} {:?} resolution {:?} ended {:?}",
            if kept { "_kept" } else { "" },
            lease.job,
            run.run_id,
            lease.token,
            lease.renewal,
            end.outcome,
            end.resolution,
            end.ended_at
        ));
        let expected = self
            .mirror
            .finish(&lease, &run.run_id, &end, kept, now)
            .map_err(|e| e.to_string());
        let actual = if kept {
            self.store.finish_kept(&lease, &run.run_id, &end)
        } else {
            self.store.finish(&lease, &run.run_id, &end)
        };
        if let Ok(f) = &actual {
            let kind = format!("finish recorded={} released={}", f.recorded, f.released);
            *self.seen.entry(kind).or_default() += 1;
        } else {
            *self.seen.entry("finish-error".to_string()).or_default() += 1;
        }
        let text = |r: Result<String, ()>| r.unwrap_or_else(|_| "error".to_string());
        self.compare(
            "finish",
            text(actual.map(|f| format!("{f:?}")).map_err(|_| ())),
            text(expected.map(|f| format!("{f:?}")).map_err(|_| ())),
        );
    }

    fn interrupt(&mut self) {
        if self.mirror.runs.is_empty() {
            return;
        }
        let run = self.rng.pick(&self.mirror.runs);
        let resolution = self.rng.pick(&[Resolution::Queued, Resolution::Held]);
        let now = self.clock.now_usec();
        self.log.push(format!(
            "now {now}: interrupt run {} job {} token {} {resolution:?}",
            run.run_id, run.job, run.fencing_token
        ));
        let expected = self.mirror.interrupt(&run, "boot", resolution, now);
        let actual = self
            .store
            .interrupt(&run, "boot", resolution)
            .map_err(|e| e.to_string());
        self.compare(
            "interrupt",
            format!("{actual:?}"),
            format!("{:?}", Ok::<_, String>(expected)),
        );
    }

    /// A mark of one of a few keys, fenced (by a grant's token, current or not) or not.
    fn mark(&mut self) {
        let job = self.rng.pick(&JOBS);
        let key = self.rng.pick(&["a", "b", "c"]);
        let fenced = self.rng.chance(70);
        let grants: Vec<(Lease, Run)> = self
            .grants
            .iter()
            .filter(|(l, _)| l.job == job)
            .cloned()
            .collect();
        let (token, run_id, host) = match grants.is_empty() {
            true => (0, String::new(), "outside".to_string()),
            false => {
                let (l, r) = self.rng.pick(&grants);
                (l.token, r.run_id, r.host)
            }
        };
        let new = Mark {
            namespace: format!("{job}.ns"),
            key: key.to_string(),
            job: job.to_string(),
            run_id,
            host,
            token,
            marked_at: 0,
        };
        let now = self.clock.now_usec();
        self.log.push(format!(
            "now {now}: mark {job} {key} token {token} fenced {fenced}"
        ));
        let expected = self.mirror.mark(&new, fenced, now);
        let kind = match &expected {
            jobguard::store::Marking::New(_) => "mark-new",
            jobguard::store::Marking::Already(_) => "mark-already",
            jobguard::store::Marking::Fenced(_) => "mark-fenced",
        };
        *self.seen.entry(kind.to_string()).or_default() += 1;
        let actual = self.store.mark(&new, fenced).map_err(|e| e.to_string());
        self.compare(
            "mark",
            format!("{actual:?}"),
            format!("{:?}", Ok::<_, String>(expected)),
        );
    }

    fn resolve(&mut self) {
        let job = self.rng.pick(&JOBS);
        let slot = self.rng.pick(&slots());
        let resolution = self.rng.pick(&[
            Resolution::Queued,
            Resolution::Held,
            Resolution::Done,
            Resolution::Rerun,
        ]);
        self.log
            .push(format!("resolve job {job} slot {slot} {resolution:?}"));
        let expected = self.mirror.resolve(job, slot, resolution);
        let actual = self
            .store
            .resolve(job, slot, resolution)
            .map_err(|e| e.to_string());
        self.compare(
            "resolve",
            format!("{actual:?}"),
            format!("{:?}", Ok::<_, String>(expected)),
        );
    }

    fn unlock(&mut self) {
        let job = self.rng.pick(&JOBS);
        let now = self.clock.now_usec();
        self.log.push(format!("now {now}: unlock job {job}"));
        let expected = self.mirror.unlock(job, now);
        let actual = self.store.unlock(job).map_err(|e| e.to_string());
        self.compare(
            "unlock",
            format!("{actual:?}"),
            format!("{:?}", Ok::<_, String>(expected)),
        );
    }

    fn advance(&mut self) {
        let d = self.rng.pick(&[
            1,
            1_000_000,
            30_000_000,
            61_000_000,
            // The grace another machine waits after a lapsed lease (rules::FOREIGN_GRACE_USEC).
            90_000_000,
            600_000_000,
            -5_000_000,
        ]);
        self.log.push(format!("advance {d} µs"));
        self.clock.advance(d);
    }

    /// One of the grants answered so far (half the time the latest, whose lease may still
    /// be held, else any), presenting the renewal generation its holder last confirmed
    /// or, one time in five, an earlier one (a copy of the holder).
    fn pick_grant(&mut self) -> Option<(Lease, Run)> {
        let (mut lease, run) = if self.rng.chance(50) {
            self.grants.last().cloned()?
        } else {
            if self.grants.is_empty() {
                return None;
            }
            self.rng.pick(&self.grants)
        };
        let known = self
            .generations
            .get(&(lease.job.clone(), lease.token))
            .cloned()
            .unwrap_or_else(|| vec![0]);
        lease.renewal = if self.rng.chance(20) {
            self.rng.pick(&known)
        } else {
            *known.last().unwrap_or(&0)
        };
        Some((lease, run))
    }

    /// The store's lease and records of every job against the mirror's.
    fn check_state(&mut self) {
        for job in JOBS {
            let lease = self.store.lease(job).map_err(|e| e.to_string());
            self.compare(
                &format!("lease of {job}"),
                format!("{lease:?}"),
                format!("{:?}", Ok::<_, String>(self.mirror.lease(job))),
            );
            let runs = self
                .store
                .runs(&RunQuery {
                    job: Some(job.to_string()),
                    ..RunQuery::default()
                })
                .map_err(|e| e.to_string());
            let want = self.mirror.runs(job);
            if let Ok(runs) = &runs
                && runs != &want
            {
                let lines = |rs: &[Run]| {
                    rs.iter()
                        .map(|r| format!("  {r:?}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                self.fail(&format!(
                    "records of {job}\n store:\n{}\n rules:\n{}",
                    lines(runs),
                    lines(&want)
                ));
            }
            if let Err(e) = runs {
                self.fail(&format!("records of {job}: {e}"));
            }
        }
    }

    fn run(mut self) {
        let n = steps();
        for _ in 0..n {
            match self.rng.below(100) {
                0..40 => self.claim(),
                40..48 => self.renew(),
                48..63 => self.finish(),
                63..70 => self.interrupt(),
                70..78 => self.resolve(),
                78..82 => self.unlock(),
                82..88 => self.mark(),
                _ => self.advance(),
            }
            self.check_state();
        }
        let claimed = self.mirror.runs.len();
        eprintln!(
            "{}: {n} calls agree (JOBGUARD_DIFF_SEED={}): {claimed} records, {} grants answered; answers {:?}",
            self.name,
            self.seed,
            self.grants.len(),
            self.seen
        );
    }
}

fn diff(name: &'static str, store: Box<dyn Store>, clock: ManualClock, traits: Traits) -> Diff {
    let seed = seed();
    eprintln!("{name}: JOBGUARD_DIFF_SEED={seed}");
    Diff {
        name,
        seed,
        store,
        clock,
        traits,
        mirror: Memory::default(),
        rng: Rng(seed),
        log: Vec::new(),
        grants: Vec::new(),
        sent: Vec::new(),
        next_run: 0,
        generations: Default::default(),
        seen: Default::default(),
    }
}

#[test]
fn sqlite_agrees_with_the_rules() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::new(T0);
    let store = jobguard::store::open_with_clock(
        &format!("sqlite://{}", dir.path().join("jobguard.db").display()),
        Arc::new(clock.clone()),
    )
    .expect("open the SQLite store");
    diff("sqlite", store, clock, Traits { host_clock: true }).run();
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
mod remote {
    use super::*;
    use common::remote::{Judge, Namespace, Server};

    fn remote(server: &'static Server) {
        let name = server.name;
        let Some(ns) = Namespace::new(server, &format!("store_differential::{name}")) else {
            return;
        };
        let clock = ManualClock::new(T0);
        let store: Box<dyn Store> = common::remote::open(server, &ns.address(), Some(&clock))
            .unwrap_or_else(|e: StoreError| panic!("open {name}: {e}"));
        diff(
            name,
            store,
            clock,
            Traits {
                host_clock: server.clock == Judge::Host,
            },
        )
        .run();
        drop(ns);
    }

    /// Each shared server against the rules: `remote::NAME::agrees_with_the_rules`.
    /// etcd and ZooKeeper decide with the rules themselves; for them this checks what
    /// they add: the key or node layout, the snapshot reads and the conditional writes.
    macro_rules! agrees {
        ($name:ident $judge:ident) => {
            mod $name {
                #[test]
                fn agrees_with_the_rules() {
                    super::remote(crate::common::remote::server(stringify!($name)));
                }
            }
        };
    }
    common::remote::each_server!(agrees);
}
