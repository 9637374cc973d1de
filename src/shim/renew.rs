//! Keeping the lease while the command runs, and knowing until when it surely holds.
//!
//! The command must be dead before its lease could expire by the store's clock. The lease
//! surely lasts until the send time of the last confirmed grant or renewal plus the time to
//! live, on this host's monotonic clock: the store computes the expiry from its own clock
//! when the call arrives, which is later, so an offset between the two clocks does not
//! matter (only their drift over one time to live, which [`FENCE_MARGIN`] covers).
//! [`Renewer`] gives the supervisor ([`super::child::supervise`]) the moment SIGKILL must
//! reach the command: that expiry less [`FENCE_MARGIN`]; the supervisor sends SIGTERM
//! `kill_grace` before it.
//!
//! Store calls run on a thread of their own: a call that hangs (a store cut off behind an
//! open connection, a lock held long) never delays the supervisor, whatever the store
//! client's time-outs. One call is in flight at a time; its answer comes back through a
//! channel, announced on a pipe the supervisor polls. `jobguard check` refuses a job whose
//! `kill_grace` leaves no time to renew ([`crate::guard::lease::check_fence`]).
//!
//! Each renewal writes a fresh renewal generation ([`Renewal`]), so that two copies of
//! one holder resumed from one memory snapshot cannot both keep the lease: the second
//! copy's next renewal is refused and it stops its command
//! ([`crate::store::rules::renew`]).
//!
//! Between calls the store holds nothing on its server: the thread lets go of the store's
//! connection or session ([`Store::rest`]) as the command starts, and after each renewal
//! as soon as it is answered; the next call (a renewal, the outcome) connects again. A
//! running job then costs its server a connection only while it calls, so a fleet can
//! run more jobs at once than the server takes connections (PostgreSQL's
//! `max_connections`, a role's `CONNECTION LIMIT`, MariaDB's `MAX_USER_CONNECTIONS`,
//! ZooKeeper's `maxClientCnxns`), at the cost of one more connection per run and one per
//! renewal (`benches/connections.sh`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use super::child::{Keep, Keeper};
use crate::guard::lease::{FENCE_MARGIN, Lease, next_renewal, renew_every};
use crate::store::{Finished, Store, StoreError};

/// What the renewal thread sends back: when the call was sent, and its answer.
type Answer = (Instant, Result<Option<i64>, StoreError>);

/// Until when a lease of `ttl` confirmed by a call sent at `sent` surely holds, less
/// [`FENCE_MARGIN`]: the moment by which a command must be dead, and the last moment the
/// outcome may be written in the lease's name.
pub fn good_until(sent: Instant, ttl: Duration) -> Instant {
    (sent + ttl).checked_sub(FENCE_MARGIN).unwrap_or(sent)
}

/// A lease as its holder knows it, with the renewal whose answer is in doubt, if any.
#[derive(Debug, Clone)]
pub struct Renewal {
    /// The lease, with the renewal generation last confirmed ([`Lease::renewal`]).
    pub lease: Lease,
    /// The generation of a renewal that was sent and failed with an error: the store may
    /// have applied it. The next renewal sends it again, so that the store, which then
    /// holds it, still takes this holder for itself and not for a copy.
    pending: Option<i64>,
}

impl Renewal {
    /// The grant or confirmed renewal `lease`, with nothing in doubt.
    pub fn new(lease: Lease) -> Self {
        Renewal {
            lease,
            pending: None,
        }
    }

    /// [`Store::renew`] with a fresh generation, or the one in doubt; a confirmed renewal
    /// becomes the lease's generation.
    ///
    /// # Errors
    /// As [`Store::renew`]; the generation stays in doubt.
    pub fn renew(
        &mut self,
        store: &mut dyn Store,
        ttl: Duration,
    ) -> Result<Option<i64>, StoreError> {
        let next = *self.pending.get_or_insert_with(next_renewal);
        let got = store.renew(&self.lease, next, ttl);
        match &got {
            Ok(Some(expire_at)) => {
                self.lease.renewal = next;
                self.lease.expire_at = *expire_at;
                self.pending = None;
            }
            Ok(None) => self.pending = None,
            Err(_) => {}
        }
        got
    }

    /// The generation of the renewal in doubt, if one is.
    pub fn in_doubt(&self) -> Option<i64> {
        self.pending
    }

    /// The generation the next [`Renewal::renew`] writes, drawn now if none is in doubt:
    /// a holder that keeps its outcome on disk writes it there before it sends the
    /// renewal, so that what it kept names every generation the store may hold.
    pub fn draw(&mut self) -> i64 {
        *self.pending.get_or_insert_with(next_renewal)
    }

    /// A final write (`write`: [`Store::finish`] of the lease it is given), presenting
    /// the confirmed generation and, when that changes nothing and a renewal is in doubt,
    /// the doubtful one: the store holds one of the two if the lease is still this
    /// holder's. A write that takes the doubtful one confirms it.
    ///
    /// # Errors
    /// As `write`.
    pub fn present(
        &mut self,
        mut write: impl FnMut(&Lease) -> Result<Finished, StoreError>,
    ) -> Result<Finished, StoreError> {
        let first = write(&self.lease)?;
        let Some(renewal) = self.pending.filter(|_| !first.recorded && !first.released) else {
            return Ok(first);
        };
        let doubtful = Lease {
            renewal,
            ..self.lease.clone()
        };
        let second = write(&doubtful)?;
        if second.recorded || second.released {
            self.lease = doubtful;
            self.pending = None;
        }
        Ok(second)
    }
}

/// Renews a lease from a thread of its own; a [`Keeper`] for the supervisor.
pub struct Renewer<'scope> {
    job: String,
    ttl: Duration,
    /// SIGTERM → SIGKILL grace of the job.
    kill_grace: Duration,
    /// Send time of the last confirmed grant or renewal.
    confirmed: Instant,
    /// When the next renewal is due.
    next: Instant,
    /// A renewal was sent and has not answered yet.
    in_flight: bool,
    /// The store said the lease is lost.
    lost: bool,
    /// `None` once [`Renewer::into_renewal`] has ended the thread.
    requests: Option<mpsc::Sender<()>>,
    thread: ScopedJoinHandle<'scope, Renewal>,
    answers: mpsc::Receiver<Answer>,
    /// Readable when an answer is waiting in `answers`.
    wake: OwnedFd,
}

impl<'scope> Renewer<'scope> {
    /// Starts the renewal thread in `scope` for `renewal`'s lease of `ttl`, confirmed by
    /// a call sent at `confirmed`. The thread ends with [`Renewer::into_renewal`], or when
    /// the renewer is dropped (after the call in flight, if any, returns).
    ///
    /// # Errors
    /// The errno of `pipe2(2)`.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        store: &'env mut dyn Store,
        renewal: Renewal,
        ttl: Duration,
        kill_grace: Duration,
        confirmed: Instant,
    ) -> Result<Renewer<'scope>, nix::errno::Errno> {
        let (wake, ring) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let (requests, asked) = mpsc::channel::<()>();
        let (answer, answers) = mpsc::channel::<Answer>();
        let job = renewal.lease.job.clone();
        let thread = scope.spawn(move || {
            let mut renewal = renewal;
            // The claim's connection goes as the command starts, each renewal's as soon
            // as it is answered: between calls the server holds nothing for this run.
            store.rest();
            for () in asked {
                let sent = Instant::now();
                let got = renewal.renew(store, ttl);
                if answer.send((sent, got)).is_err() {
                    break;
                }
                let _ = nix::unistd::write(&ring, b"!");
                store.rest();
            }
            renewal
        });
        Ok(Renewer {
            job,
            ttl,
            kill_grace,
            confirmed,
            next: confirmed + renew_every(ttl, kill_grace),
            in_flight: false,
            lost: false,
            requests: Some(requests),
            thread,
            answers,
            wake,
        })
    }

    /// Until when the lease surely holds, less [`FENCE_MARGIN`] (see [`good_until`]).
    pub fn good_until(&self) -> Instant {
        good_until(self.confirmed, self.ttl)
    }

    /// Ends the renewal thread (after the call in flight, if any, returns) and answers the
    /// lease as it stands: its confirmed generation and the one in doubt.
    pub fn into_renewal(mut self) -> Renewal {
        self.requests = None;
        match self.thread.join() {
            Ok(renewal) => renewal,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    fn take(&mut self, (sent, got): Answer) {
        self.in_flight = false;
        let now = Instant::now();
        match got {
            Ok(Some(_)) => {
                self.confirmed = self.confirmed.max(sent);
                self.next = sent + renew_every(self.ttl, self.kill_grace);
            }
            Ok(None) => {
                eprintln!(
                    "jobguard: {}: the lease expired or passed to another holder",
                    self.job
                );
                self.lost = true;
            }
            Err(e) => {
                eprintln!("jobguard: {}: lease renewal failed: {e}", self.job);
                // Retry soon; the supervisor stops the command when the fence comes first.
                // Jittered: jobs started together renew together, and a server's connection
                // limit that refused them all must not meet them all again at once.
                self.next = now + super::jitter((self.ttl / 10).max(Duration::from_millis(100)));
            }
        }
    }
}

impl Keeper for Renewer<'_> {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.as_fd())
    }

    fn step(&mut self, now: Instant) -> Keep {
        let mut drained = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut drained), Ok(n) if n > 0) {}
        while let Ok(a) = self.answers.try_recv() {
            self.take(a);
        }
        if !self.lost && !self.in_flight && now >= self.next {
            self.in_flight = self.requests.as_ref().is_some_and(|r| r.send(()).is_ok());
        }
        // While a call is in flight only its answer (on the pipe) or the fence matter.
        let wake = if self.in_flight || self.lost {
            now + Duration::from_secs(3600)
        } else {
            self.next
        };
        Keep {
            lost: self.lost,
            kill_by: self.good_until(),
            wake,
        }
    }
}
