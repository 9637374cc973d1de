//! The Redis store: leases and the run ledger in Redis, decided by Lua scripts.
//!
//! Address: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=PREFIX]` (the `redis` crate's
//! URL form, <https://docs.rs/redis/latest/redis/#connection-parameters>); `prefix` (default
//! `jobguard:`) starts every key, so several installations or test cases can share a
//! server.
//!
//! TLS: `rediss://…` (the scheme of redis-cli's `-u` and of the client) encrypts and
//! checks the server's certificate: it must chain to a root of the system's trust store
//! (`/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`) and name the host of the address
//! (a DNS name or IP address in its subjectAltName). `ssl-ca=PATH` (as redis-cli's
//! `--cacert`) trusts the PEM certificates in that file instead of the system's roots.
//! `rediss://…#insecure` (the client's convention, after any parameters) encrypts without
//! checking the certificate; it cannot be combined with `ssl-ca`. TLS is rustls with the
//! ring provider; client certificates are not supported.
//!
//! Key layout (P is the prefix):
//! - `P schema`: the schema version (set once with `SETNX`).
//! - `P lease:JOB`: hash `holder host token acquired_at expire_at run_id`; never expires
//!   and is never deleted (a released lease has an empty holder and `expire_at` 0).
//! - `P token:JOB`: the job's fencing-token counter (`INCR` at every grant; never expires).
//! - `P run:RUN_ID`: hash of one ledger record, fields named as the SQL stores' columns
//!   (`job slot_usec slot_zone attempt outcome reason exit_status forced trigger_kind host
//!   machine_id boot_id pid pid_start invocation_id started_at finished_at fencing_token
//!   report resolution seq`); absent fields are NULL.
//! - `P runs:JOB`: sorted set of the job's run ids, scored by `started_at`.
//! - `P slot:JOB:SLOT_USEC`: set of the run ids of one (job, slot).
//! - `P slots:JOB`: sorted set of the job's recorded slots (member and score: the slot in µs),
//!   for the newest slot; `P queued:JOB`: the same for slots that had an attempt queued
//!   for a re-run (a hint: `claim` drops a slot that no longer has one queued or
//!   running). Since schema 2, whose migration builds both from the records (putting
//!   slots with a running record into `queued:JOB` too: a host of schema 1 may end that
//!   run with its own finish script, which does not index what it queues).
//! - `P jobs`: set of job names; `P seq`: a counter ordering records started in the same µs.
//!
//! Every decision is one Lua script, which Redis runs atomically, judging time by the
//! server's `TIME` (allowed in scripts since Redis 5 with effects replication, the only
//! mode of Redis 7). `claim` does the done check, the held check, the lease check, the
//! token `INCR`, the run record and the index updates in one script: one round trip
//! (`EVALSHA`; the first call on a server that does not have the script cached adds one
//! `EVAL`). A second non-forced `succeeded` record for a slot is refused inside `finish`.
//! The scripts build key names from the prefix, so this layout is for a single Redis
//! server (or a primary with replicas), not Redis Cluster.
//!
//! Durability is the server's: a Redis without AOF (`appendonly yes`, `appendfsync
//! always` or `everysec`) loses the latest leases and records when it restarts.

use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, Script};

use crate::clock::Clock;
use crate::lease::Lease;
use crate::ledger::{Finish, Outcome, Resolution, Run};
use crate::store::remote::{self, CALL_TIMEOUT, CONNECT_TIMEOUT};
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address, rules,
};

/// The schema (key layout) version this jobguard writes and understands (`P schema`).
pub const SCHEMA_VERSION: i64 = 3;

/// The key prefix when the address names none.
pub const DEFAULT_PREFIX: &str = "jobguard:";

/// Lua shared by the scripts: the time (server's, or the test override) and number format.
const PRELUDE: &str = r#"
local p = ARGV[1]
local function now_us(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%.0f', n) end
"#;

const CLAIM: &str = r#"
local version, job, slot, run_id, forced = ARGV[3], ARGV[5], ARGV[6], ARGV[8], ARGV[9]
local zone, trigger = ARGV[7], ARGV[10]
local holder, host, ttl = ARGV[12], ARGV[13], tonumber(ARGV[18])
local host_now, tolerance = ARGV[19], tonumber(ARGV[20])
local v = redis.call('GET', p .. 'schema')
if v and tonumber(v) > tonumber(version) then return {'newer', {v}, {}} end
if v and tonumber(v) < tonumber(version) then return {'older', {v}, {}} end
if not v then redis.call('SETNX', p .. 'schema', version) end
local now = now_us(ARGV[4])
-- A claim sent again after its answer was lost: the same grant while it holds; never a
-- second record under the same run id.
local rkey = p .. 'run:' .. run_id
if redis.call('EXISTS', rkey) == 1 then
  local r = redis.call('HMGET', rkey, 'job', 'outcome', 'fencing_token')
  local l = redis.call('HMGET', p .. 'lease:' .. job, 'holder', 'host', 'token', 'acquired_at',
    'expire_at', 'renewal')
  if r[1] == job and r[2] == 'running' and l[1] == holder and l[3] == r[3]
     and tonumber(l[5]) > now then
    return {'claimed', {l[1], l[2], l[3], l[4], l[5], '', l[6] or '0'},
      redis.call('HGETALL', rkey)}
  end
  return redis.error_reply('run ' .. run_id .. ' is already recorded and no longer holds its lease')
end
if host_now ~= '' and math.abs(now - tonumber(host_now)) > tolerance then
  return {'skew', {fmt(now)}, {}}
end
-- The state of a slot's records: 'done' (also when one is held), 'held' or nil;
-- whether one is queued; whether one is running.
local function slot_state(s)
  local done, held, queued, running = false, false, false, false
  for _, id in ipairs(redis.call('SMEMBERS', p .. 'slot:' .. job .. ':' .. s)) do
    local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'resolution')
    if f[1] == 'succeeded' or f[2] == 'done' then done = true end
    if f[2] == 'held' then held = true end
    if f[2] == 'queued' then queued = true end
    if f[1] == 'running' then running = true end
  end
  if done then return 'done', queued, running end
  if held then return 'held', queued, running end
  return nil, queued, running
end
local qkey = p .. 'queued:' .. job
local settled = {}
local picked = false
if ARGV[21] == '1' then
  -- Every queued slot is looked at, so that the queue entries of every done slot are
  -- settled, as the SQL stores do.
  for _, s in ipairs(redis.call('ZRANGE', qkey, 0, -1)) do
    local state, queued, running = slot_state(s)
    if not queued then
      -- A slot with a running record stays: the migration put it here, as its end may
      -- be written by a finish of schema 1, which queues without indexing.
      if not running then redis.call('ZREM', qkey, s) end
    elseif state == 'done' then
      table.insert(settled, s)
    elseif not state and not picked then
      slot, picked, trigger = s, true, 'rerun'
      local any = redis.call('SRANDMEMBER', p .. 'slot:' .. job .. ':' .. s)
      zone = redis.call('HGET', p .. 'run:' .. any, 'slot_zone')
    end
  end
end
local slotkey = p .. 'slot:' .. job .. ':' .. slot
local ids = redis.call('SMEMBERS', slotkey)
local function newest(pred)
  local best, bs, bss, bseq = nil, -1, -1, -1
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'resolution', 'started_at', 'seq')
    local rank = pred(f[1], f[2])
    if rank then
      local s, q = tonumber(f[3]), tonumber(f[4])
      if rank > bs or (rank == bs and (s > bss or (s == bss and q > bseq))) then
        best, bs, bss, bseq = id, rank, s, q
      end
    end
  end
  return best
end
if forced ~= '1' then
  local done = newest(function(o, r)
    if o == 'succeeded' then return 1 elseif r == 'done' then return 0 end
  end)
  if done then return {'done', {}, redis.call('HGETALL', p .. 'run:' .. done)} end
  local held = newest(function(o, r) if r == 'held' then return 0 end end)
  if held then return {'held', {}, redis.call('HGETALL', p .. 'run:' .. held)} end
end
-- Slots further ahead than the clock tolerance were forced or recorded by a clock that
-- was ahead: they do not hold back later slots.
local prev = redis.call('ZREVRANGEBYSCORE', p .. 'slots:' .. job, fmt(now + tolerance), '-inf',
  'LIMIT', 0, 1)[1]
if ARGV[22] == '1' and not picked and prev and tonumber(prev) > tonumber(slot) then
  return {'behind', {prev}, {}}
end
local lkey = p .. 'lease:' .. job
local l = redis.call('HMGET', lkey, 'holder', 'host', 'token', 'acquired_at', 'expire_at', 'run_id',
  'renewal')
-- Whether a record by machine id m and boot id b is from another machine or boot than
-- the claimer's (rules::from_another_boot).
local function elsewhere(m, b)
  return m ~= ARGV[14] or b ~= ARGV[15] or ARGV[14] == ''
end
-- A lease that lapsed less than ARGV[23] µs ago (rules::FOREIGN_GRACE_USEC) while its
-- holder, on another machine or boot, still has this slot running: the holder may be cut
-- off with the outcome in hand.
local function lapsed_holder_keeps_slot()
  if not l[6] or tonumber(l[5]) + tonumber(ARGV[23]) <= now then return false end
  local f = redis.call('HMGET', p .. 'run:' .. l[6], 'outcome', 'slot_usec', 'machine_id',
    'boot_id')
  return f[1] == 'running' and tonumber(f[2]) == tonumber(slot) and elsewhere(f[3], f[4])
end
if l[1] and l[1] ~= '' and l[1] ~= holder
   and (tonumber(l[5]) > now or lapsed_holder_keeps_slot()) then
  local run = {}
  if l[6] then run = redis.call('HGETALL', p .. 'run:' .. l[6]) end
  return {'busy', {l[1], l[2], l[3], l[4], l[5], '', l[7] or '0'}, run}
end
-- An earlier attempt at this slot on another machine or boot, still running under a lease that
-- has passed to a later grant since: when it lapsed is not known here, so the slot waits
-- until a recovery pass judges the attempt.
local earlier, es, eq = nil, -1, -1
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'fencing_token', 'machine_id',
    'started_at', 'seq', 'boot_id')
  if f[1] == 'running' and f[2] ~= l[3] and elsewhere(f[3], f[6]) then
    local s, q = tonumber(f[4]) or 0, tonumber(f[5]) or 0
    if s > es or (s == es and q > eq) then earlier, es, eq = id, s, q end
  end
end
if earlier then
  return {'busy', {l[1] or '', l[2] or '', l[3] or '0', l[4] or '0', l[5] or '0', '', l[7] or '0'},
    redis.call('HGETALL', p .. 'run:' .. earlier)}
end
local token = redis.call('INCR', p .. 'token:' .. job)
local expire = fmt(now + ttl)
redis.call('HSET', lkey, 'holder', holder, 'host', host, 'token', token,
  'acquired_at', fmt(now), 'expire_at', expire, 'run_id', run_id, 'renewal', '0')
local function settle(ids_of_slot, from)
  for _, id in ipairs(ids_of_slot) do
    local r = redis.call('HGET', p .. 'run:' .. id, 'resolution')
    if r and from[r] then redis.call('HSET', p .. 'run:' .. id, 'resolution', 'rerun') end
  end
end
settle(ids, {queued = true, held = true})
redis.call('ZREM', qkey, slot)
-- Queued re-runs of slots that are done by now: nothing is left to re-run.
for _, s in ipairs(settled) do
  settle(redis.call('SMEMBERS', p .. 'slot:' .. job .. ':' .. s), {queued = true})
  redis.call('ZREM', qkey, s)
end
local seq = redis.call('INCR', p .. 'seq')
redis.call('HSET', rkey, 'run_id', run_id, 'job', job, 'slot_usec', slot, 'slot_zone', zone,
  'attempt', #ids + 1, 'outcome', 'running', 'forced', forced, 'trigger_kind', trigger,
  'host', host, 'machine_id', ARGV[14], 'boot_id', ARGV[15], 'pid', ARGV[16],
  'pid_start', ARGV[17], 'started_at', fmt(now), 'fencing_token', token, 'report', '{}',
  'seq', seq)
if ARGV[11] ~= '' then redis.call('HSET', rkey, 'invocation_id', ARGV[11]) end
redis.call('SADD', slotkey, run_id)
redis.call('ZADD', p .. 'runs:' .. job, now, run_id)
redis.call('ZADD', p .. 'slots:' .. job, slot, slot)
redis.call('SADD', p .. 'jobs', job)
return {'claimed', {holder, host, tostring(token), fmt(now), expire, prev or '', '0'},
  redis.call('HGETALL', rkey)}
"#;

/// Schema 1 -> 2: builds the `slots:JOB` and `queued:JOB` indexes from every record.
/// Slots with a `running` record go into `queued:JOB` too: a host of schema 1 may still
/// be running one, and its finish script queues the slot without indexing it; the claim
/// drops such a slot once no record of it is queued or running. Schema 2 -> 3 changes no
/// key: a lease's `renewal` field (the renewal generation, absent: 0) comes with its next
/// grant, and the version refuses the claims of older jobguards, whose grants would leave
/// the previous holder's generation in the lease.
const MIGRATE: &str = r#"
local version = ARGV[3]
local v = redis.call('GET', p .. 'schema')
if v and tonumber(v) >= tonumber(version) then return v end
if v and tonumber(v) >= 2 then
  redis.call('SET', p .. 'schema', version)
  return version
end
for _, job in ipairs(redis.call('SMEMBERS', p .. 'jobs')) do
  for _, id in ipairs(redis.call('ZRANGE', p .. 'runs:' .. job, 0, -1)) do
    local f = redis.call('HMGET', p .. 'run:' .. id, 'slot_usec', 'resolution', 'outcome')
    if f[1] then
      redis.call('ZADD', p .. 'slots:' .. job, f[1], f[1])
      if f[2] == 'queued' or f[3] == 'running' then
        redis.call('ZADD', p .. 'queued:' .. job, f[1], f[1])
      end
    end
  end
end
redis.call('SET', p .. 'schema', version)
return version
"#;

/// Renews (rules::renew): the grant still the holder's and token's, unexpired, and its
/// renewal generation (absent: 0) the one presented (ARGV[7]) or this renewal's (ARGV[8]).
const RENEW: &str = r#"
local job, holder, token, ttl = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local presented, next = ARGV[7], ARGV[8]
local now = now_us(ARGV[2])
local lkey = p .. 'lease:' .. job
local l = redis.call('HMGET', lkey, 'holder', 'token', 'expire_at', 'renewal')
local gen = l[4] or '0'
if l[1] == holder and holder ~= '' and l[2] == token and tonumber(l[3]) > now
   and (gen == presented or gen == next) then
  local until_ = fmt(now + ttl)
  redis.call('HSET', lkey, 'expire_at', until_, 'renewal', next)
  return until_
end
return ''
"#;

const FINISH: &str = r#"
local job, holder, token, run_id = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local outcome, lost = ARGV[7], ARGV[12]
local now = now_us(ARGV[2])
local lkey = p .. 'lease:' .. job
local l = redis.call('HMGET', lkey, 'holder', 'token', 'expire_at', 'renewal', 'acquired_at')
-- rules::holds, and rules::finish's copy of the holder: the same grant, unexpired, under
-- another renewal generation than ARGV[13].
local live = l[1] == holder and holder ~= '' and l[2] == token and tonumber(l[3]) > now
local held = live and (l[4] or '0') == ARGV[13]
local copy = live and not held
local rkey = p .. 'run:' .. run_id
local r = redis.call('HMGET', rkey, 'outcome', 'fencing_token', 'job', 'slot_usec', 'forced',
  'started_at', 'machine_id', 'boot_id', 'pid', 'pid_start')
local recorded = 0
if r[1] == 'running' and r[2] == token and r[3] == job and (lost == '1' or held)
   and not copy then
  if outcome == 'succeeded' and r[5] ~= '1' then
    for _, id in ipairs(redis.call('SMEMBERS', p .. 'slot:' .. job .. ':' .. r[4])) do
      local o = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'forced')
      if id ~= run_id and o[1] == 'succeeded' and o[2] ~= '1' then
        return redis.error_reply('slot already succeeded by run ' .. id)
      end
    end
  end
  -- A kept outcome (ARGV[14] '1') ends when its command ended (ARGV[15], the host's µs),
  -- within the record's start and rules::cut_end.
  local finished = now
  if ARGV[14] == '1' and ARGV[15] ~= '' then
    local bound = now
    local rholder = r[7] .. ':' .. r[8] .. ':' .. r[9] .. ':' .. r[10]
    if l[1] and l[1] ~= '' and l[1] == rholder and l[2] == r[2] then
      bound = tonumber(l[3])
    elseif l[2] and tonumber(l[2]) > tonumber(r[2]) then
      bound = tonumber(l[5])
    end
    bound = math.max(tonumber(r[6]), math.min(now, bound))
    finished = math.min(math.max(tonumber(ARGV[15]), tonumber(r[6])), bound)
  end
  redis.call('HSET', rkey, 'outcome', outcome, 'finished_at', fmt(finished), 'report', ARGV[10])
  local optional = {reason = ARGV[8], exit_status = ARGV[9], resolution = ARGV[11]}
  for k, val in pairs(optional) do
    if val ~= '' then redis.call('HSET', rkey, k, val) else redis.call('HDEL', rkey, k) end
  end
  if ARGV[11] == 'queued' then redis.call('ZADD', p .. 'queued:' .. job, r[4], r[4]) end
  recorded = 1
end
local released = 0
if held then
  redis.call('HSET', lkey, 'holder', '', 'host', '', 'expire_at', '0')
  released = 1
end
return {recorded, released}
"#;

const INTERRUPT: &str = r#"
local run_id, reason, resolution, job, holder, token = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local now = now_us(ARGV[2])
local rkey = p .. 'run:' .. run_id
local lkey = p .. 'lease:' .. job
local changed = 0
if redis.call('HGET', rkey, 'outcome') == 'running' then
  -- The end is rules::cut_end: the run's own lease's expiry, a later grant's start, or now.
  local r = redis.call('HMGET', rkey, 'started_at', 'fencing_token')
  local started, rtoken = tonumber(r[1]), tonumber(r[2])
  local l = redis.call('HMGET', lkey, 'holder', 'token', 'acquired_at', 'expire_at')
  local ended = now
  if l[2] then
    local ltoken = tonumber(l[2])
    if l[1] ~= '' and l[1] == holder and ltoken == rtoken then
      ended = tonumber(l[4])
    elseif ltoken > rtoken then
      ended = tonumber(l[3])
    end
  end
  ended = math.max(started, math.min(now, ended))
  redis.call('HSET', rkey, 'outcome', 'interrupted', 'reason', reason, 'resolution', resolution,
    'finished_at', fmt(ended))
  if resolution == 'queued' then
    local slot = redis.call('HGET', rkey, 'slot_usec')
    redis.call('ZADD', p .. 'queued:' .. job, slot, slot)
  end
  changed = 1
end
local l = redis.call('HMGET', lkey, 'holder', 'token')
if l[1] == holder and holder ~= '' and l[2] == token then
  redis.call('HSET', lkey, 'holder', '', 'host', '', 'expire_at', '0')
end
return changed
"#;

const RESOLVE: &str = r#"
local job, slot, resolution = ARGV[2], ARGV[3], ARGV[4]
local n = 0
local ids = redis.call('SMEMBERS', p .. 'slot:' .. job .. ':' .. slot)
-- Nothing is queued in a done slot: nothing is left to re-run.
if resolution == 'queued' then
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'resolution')
    if f[1] == 'succeeded' or f[2] == 'done' then return 0 end
  end
end
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'resolution')
  local o, r = f[1], f[2]
  if (o == 'interrupted' or o == 'lease_lost' or o == 'failed')
     and (not r or (r ~= 'rerun' and r ~= 'done' and r ~= resolution)) then
    redis.call('HSET', p .. 'run:' .. id, 'resolution', resolution)
    n = n + 1
  end
end
-- A slot that is no longer queued leaves `queued:JOB` at the next claim.
if n > 0 and resolution == 'queued' then redis.call('ZADD', p .. 'queued:' .. job, slot, slot) end
return n
"#;

const DELETE: &str = r#"
local job, before = ARGV[2], tonumber(ARGV[3])
local n = 0
for i = 4, #ARGV do
  local slot = ARGV[i]
  local skey = p .. 'slot:' .. job .. ':' .. slot
  local ids = redis.call('SMEMBERS', skey)
  local busy = false
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', p .. 'run:' .. id, 'outcome', 'started_at')
    if f[1] == 'running' or tonumber(f[2]) >= before then busy = true end
  end
  if not busy and #ids > 0 then
    for _, id in ipairs(ids) do
      redis.call('DEL', p .. 'run:' .. id)
      redis.call('ZREM', p .. 'runs:' .. job, id)
      n = n + 1
    end
    redis.call('DEL', skey)
    -- A slot with no record left is no longer recorded, as in the SQL stores.
    redis.call('ZREM', p .. 'slots:' .. job, slot)
    redis.call('ZREM', p .. 'queued:' .. job, slot)
  end
end
return n
"#;

const UNLOCK: &str = r#"
local job = ARGV[3]
local now = now_us(ARGV[2])
local lkey = p .. 'lease:' .. job
local l = redis.call('HMGET', lkey, 'holder', 'host', 'token', 'acquired_at', 'expire_at',
  'renewal')
if not l[1] or l[1] == '' then return {} end
redis.call('HSET', lkey, 'holder', '', 'host', '', 'expire_at', '0')
if tonumber(l[5]) > now then return {l[1], l[2], l[3], l[4], l[5], '', l[6] or '0'} end
return {}
"#;

/// Returns every record of the runs named by a slot set, a job's sorted set or all jobs.
const RUNS: &str = r#"
local job, slot = ARGV[2], ARGV[3]
local ids
if job ~= '' and slot ~= '' then
  ids = redis.call('SMEMBERS', p .. 'slot:' .. job .. ':' .. slot)
elseif job ~= '' then
  ids = redis.call('ZRANGE', p .. 'runs:' .. job, 0, -1)
else
  ids = {}
  for _, j in ipairs(redis.call('SMEMBERS', p .. 'jobs')) do
    for _, id in ipairs(redis.call('ZRANGE', p .. 'runs:' .. j, 0, -1)) do
      table.insert(ids, id)
    end
  end
end
local out = {}
for _, id in ipairs(ids) do table.insert(out, redis.call('HGETALL', p .. 'run:' .. id)) end
return out
"#;

/// Replaces the schedule hash `KEYS[1]` with ARGV[4..8] if it still holds the fingerprint
/// ARGV[1], time ARGV[2] and last declaration ARGV[3] (ARGV[1] empty: if there is none);
/// 1 if replaced, else 0.
const SWAP_SCHEDULE: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'fingerprint', 'defined_at', 'seen_at')
if ARGV[1] == '' then
  if cur[1] then return 0 end
elseif cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[4], 'defined_at', ARGV[5], 'host', ARGV[6],
  'seen_at', ARGV[7], 'horizon', ARGV[8])
return 1
";

/// Inserts a mark ([`Store::insert_mark`]): KEYS mark, lease of the job, the job's index
/// of marks (a sorted set by `marked_at`, for retention); ARGV fenced (`1`/`0`), token,
/// job, run id, host, marked_at, index member, the test clock's time (empty: the server's
/// `TIME`). 1 when inserted. A fenced insert also judges the lease's expiry, so a run
/// frozen between its read of the lease and this script records nothing once it expired.
const INSERT_MARK: &str = r"
if ARGV[1] == '1' then
  local l = redis.call('HMGET', KEYS[2], 'holder', 'token', 'expire_at')
  if not l[1] or l[1] == '' or l[2] ~= ARGV[2] then return 0 end
  local now
  if ARGV[8] ~= '' then
    now = tonumber(ARGV[8])
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if not (tonumber(l[3]) > now) then return 0 end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'job', ARGV[3], 'run_id', ARGV[4], 'host', ARGV[5],
  'token', ARGV[2], 'marked_at', ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
return 1
";

/// Deletes up to ARGV[3] marks of a job recorded before ARGV[2] ([`Store::delete_marks`]):
/// KEYS the job's index of marks; ARGV[1] the marks' key prefix. Answers how many.
const DELETE_MARKS: &str = r"
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, m in ipairs(old) do
  redis.call('DEL', ARGV[1] .. m)
  redis.call('ZREM', KEYS[1], m)
end
return #old
";

/// How many marks one call of [`DELETE_MARKS`] deletes: the server runs nothing else
/// meanwhile.
const DELETE_MARKS_BATCH: i64 = 1000;

/// A mark's member in its job's index, and its key after `PREFIX mark:`: the namespace
/// (no `:` in it, [`crate::mark::check_namespace`]) and the encoded key.
fn mark_member(namespace: &str, key: &str) -> String {
    format!("{namespace}:{}", crate::mark::key_component(key))
}

/// A mark's key: `PREFIX mark:NAMESPACE:KEY`, the key percent-encoded.
fn mark_key(prefix: &str, namespace: &str, key: &str) -> String {
    format!("{prefix}mark:{}", mark_member(namespace, key))
}

/// The Lua scripts, compiled once per process.
struct Scripts {
    claim: Script,
    renew: Script,
    finish: Script,
    interrupt: Script,
    resolve: Script,
    unlock: Script,
    delete: Script,
    runs: Script,
    migrate: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let s = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            claim: s(CLAIM),
            renew: s(RENEW),
            finish: s(FINISH),
            interrupt: s(INTERRUPT),
            resolve: s(RESOLVE),
            migrate: s(MIGRATE),
            unlock: s(UNLOCK),
            delete: s(DELETE),
            runs: s(RUNS),
        }
    }
}

/// The Redis store: one connection (reconnected after a failure).
pub struct RedisStore {
    client: redis::Client,
    conn: Option<Connection>,
    describe: String,
    prefix: String,
    scripts: Scripts,
    schema_ready: bool,
    test_clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// A failure inside one call, before it is named after the store.
enum Fail {
    Redis(redis::RedisError),
    Data(String),
}

impl From<redis::RedisError> for Fail {
    fn from(e: redis::RedisError) -> Self {
        Fail::Redis(e)
    }
}

fn unavailable(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
}

/// Turns a flat `HGETALL` answer into a run record.
fn run_from_pairs(pairs: &[String]) -> Result<Option<Run>, Fail> {
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut object = serde_json::Map::new();
    for pair in pairs.chunks(2) {
        if let [k, v] = pair {
            object.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    remote::run_from_object(&object)
        .map(Some)
        .map_err(Fail::Data)
}

/// The lease in `fields`: holder, host, token, acquired_at, expire_at, (a field of the
/// claim's answer), renewal (absent, empty: 0).
fn lease_from(job: &str, fields: &[String]) -> Result<Lease, Fail> {
    let int = |i: usize| -> Result<i64, Fail> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Fail::Data(format!("job {job}: malformed lease {fields:?}")))
    };
    Ok(Lease {
        job: job.to_string(),
        holder: fields.first().cloned().unwrap_or_default(),
        host: fields.get(1).cloned().unwrap_or_default(),
        token: int(2)?,
        acquired_at: int(3)?,
        expire_at: int(4)?,
        renewal: match fields.get(6).map(String::as_str) {
            None | Some("") => 0,
            Some(_) => int(6)?,
        },
    })
}

impl RedisStore {
    /// Parses `address` and prepares a store; connects on the first call.
    ///
    /// # Errors
    /// [`StoreError::Address`] when the address is not a Redis URL the client accepts,
    /// `prefix=` holds more than letters, digits and `_:-.` (at most 48), or `ssl-ca=`
    /// names a file without a readable PEM certificate or comes without `rediss://` or
    /// with `#insecure`.
    pub fn open(address: &str) -> Result<RedisStore, StoreError> {
        super::tls_provider();
        let describe = address::mask(address);
        let address = &remote::encode_password(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        if let Some(key) = remote::given_twice(address, &[&["prefix"], &["ssl-ca", "ssl_ca"]]) {
            return Err(bad(format!("{key} is given more than once")));
        }
        let (rest, ours) = remote::take_params(address, &["prefix", "ssl-ca", "ssl_ca"]);
        let mut ours = ours.into_iter();
        let prefix = ours
            .next()
            .flatten()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        if !remote::plain_name(&prefix, true) {
            return Err(bad(format!(
                "prefix {prefix:?} is not plain (letters, digits, _:-.)"
            )));
        }
        let ca = match (ours.next().flatten(), ours.next().flatten()) {
            (Some(ca), _) | (None, Some(ca)) => Some(ca),
            (None, None) => None,
        };
        let client = match ca {
            None => redis::Client::open(rest),
            Some(ca) => {
                if !rest
                    .get(..9)
                    .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
                {
                    return Err(bad("ssl-ca needs a rediss:// address".to_string()));
                }
                if rest.ends_with("#insecure") {
                    return Err(bad(
                        "ssl-ca checks the certificate; #insecure does not: choose one".to_string(),
                    ));
                }
                let pem = remote::read_ca_file("ssl-ca", &ca, true).map_err(&bad)?;
                redis::Client::build_with_tls(
                    rest,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
        }
        .map_err(|e| bad(format!("not a redis address: {e}")))?;
        Ok(RedisStore {
            client,
            conn: None,
            describe,
            prefix,
            scripts: Scripts::new(),
            schema_ready: false,
            test_clock: None,
        })
    }

    /// Judges time by `clock` instead of the server's `TIME`: the scripts still make every
    /// decision, with `clock`'s time passed in. Only for tests that move time (the store
    /// conformance suite); jobguard itself never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.test_clock = Some(clock);
    }

    fn test_now(&self) -> String {
        self.test_clock
            .as_ref()
            .map(|c| c.now_usec().to_string())
            .unwrap_or_default()
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        let store = self.describe.clone();
        match fail {
            Fail::Data(detail) => StoreError::Invalid {
                store,
                detail: format!("{op}: {detail}"),
            },
            Fail::Redis(e) => {
                let detail = format!("{op}: {}", self.explain(op, &e));
                if unavailable(&e) {
                    StoreError::Unavailable { store, detail }
                } else {
                    StoreError::Invalid { store, detail }
                }
            }
        }
    }

    /// What went wrong, in words: a socket deadline that passed is "timed out after N s"
    /// (not the C library's "Resource temporarily unavailable"); a `rediss://` connection
    /// that gets no TLS answer says that the server may not speak TLS (a plain Redis
    /// reads the TLS greeting as a command and never answers it).
    fn explain(&self, op: &str, e: &redis::RedisError) -> String {
        let connect = op.ends_with("connect");
        let tls = self
            .describe
            .get(..9)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
        let mut text = if e.is_timeout() {
            let limit = if connect {
                CONNECT_TIMEOUT
            } else {
                CALL_TIMEOUT
            };
            format!("no answer: timed out after {} s", limit.as_secs())
        } else {
            e.to_string()
        };
        if connect && tls && !e.is_connection_refusal() {
            text.push_str(
                " (TLS handshake: a rediss:// address needs a server that speaks TLS on this port; \
                 a plain Redis does not answer it)",
            );
        }
        text
    }

    /// Runs `f` on the connection (connecting first if needed) with read and write
    /// deadlines of [`CALL_TIMEOUT`]; a failed connection is dropped.
    fn call<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&mut Connection, &Scripts, &str) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        if self.conn.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(CONNECT_TIMEOUT)
                .and_then(|c| {
                    c.set_read_timeout(Some(CALL_TIMEOUT))?;
                    c.set_write_timeout(Some(CALL_TIMEOUT))?;
                    Ok(c)
                })
                .map_err(|e| self.error(&format!("{op}: connect"), Fail::Redis(e)))?;
            self.conn = Some(conn);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.error(op, Fail::Data("no connection".to_string())));
        };
        match f(conn, &self.scripts, &self.prefix) {
            Ok(v) => Ok(v),
            Err(Fail::Redis(e)) if unavailable(&e) => {
                self.conn = None;
                Err(self.error(op, Fail::Redis(e)))
            }
            Err(e) => Err(self.error(op, e)),
        }
    }

    /// Settings of the server that can lose a lease or a record, one sentence each:
    /// no persistence (`appendonly no`, and no `save` points either), and a
    /// `maxmemory-policy` other than `noeviction` (an evicted lease key is a lost lock).
    /// Read with `CONFIG GET`; where that command is not allowed (managed servers), from
    /// `INFO persistence` and `INFO memory` (which tell AOF but not `save`). See
    /// <https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/>.
    ///
    /// # Errors
    /// As any call: [`StoreError::Unavailable`] when the server cannot be reached.
    pub fn weak_settings(&mut self) -> Result<Vec<String>, StoreError> {
        type Pairs = Vec<(String, String)>;
        let config: Result<Pairs, StoreError> = self.call("config get", |c, _, _| {
            Ok(redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendonly")
                .arg("save")
                .arg("maxmemory-policy")
                .query(c)?)
        });
        let (aof, save, policy) = match config {
            Ok(pairs) => {
                let get = |k: &str| {
                    pairs
                        .iter()
                        .find(|(key, _)| key == k)
                        .map(|(_, v)| v.clone())
                };
                (
                    get("appendonly").map(|v| v == "yes"),
                    get("save"),
                    get("maxmemory-policy"),
                )
            }
            Err(StoreError::Invalid { .. }) => {
                let info: String = self.call("info", |c, _, _| {
                    Ok(redis::cmd("INFO")
                        .arg("persistence")
                        .arg("memory")
                        .query(c)?)
                })?;
                let get = |k: &str| {
                    info.lines()
                        .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix(':'))
                        .map(str::to_string)
                };
                (
                    get("aof_enabled").map(|v| v == "1"),
                    None,
                    get("maxmemory_policy"),
                )
            }
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        match (aof, save.as_deref().map(str::trim)) {
            (Some(false), Some("")) => out.push(
                "Redis keeps nothing on disk (appendonly no, save \"\"): a restart forgets \
                 every lease and record; set appendonly yes"
                    .to_string(),
            ),
            (Some(false), Some(points)) => out.push(format!(
                "Redis writes snapshots only (appendonly no, save \"{points}\"): a restart \
                 forgets what came after the last one; set appendonly yes"
            )),
            (Some(false), None) => out.push(
                "Redis has no append-only file (aof_enabled:0): a restart forgets what came \
                 after the last snapshot; set appendonly yes"
                    .to_string(),
            ),
            _ => {}
        }
        if let Some(policy) = policy.filter(|p| p != "noeviction") {
            out.push(format!(
                "Redis maxmemory-policy is {policy}: when memory runs short it may evict a \
                 lease key, and a lost lease lets a second host run the slot; set noeviction"
            ));
        }
        Ok(out)
    }

    fn newer_schema(&self, version: i64) -> StoreError {
        StoreError::Invalid {
            store: self.describe.clone(),
            detail: format!(
                "schema version {version} is newer than this jobguard knows ({SCHEMA_VERSION}); upgrade jobguard"
            ),
        }
    }

    fn ready(&mut self) -> Result<(), StoreError> {
        if self.schema_ready {
            return Ok(());
        }
        self.init()
    }
}

/// The first element of a script's answer as an integer (µs).
fn first_number(values: &[String]) -> Result<i64, Fail> {
    values
        .first()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Fail::Data(format!("expected a number, got {values:?}")))
}

/// Opens the store at `address` for [`crate::store::registry`]; `clock` is not used: the server's clock judges.
///
/// # Errors
/// As [`RedisStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let _ = clock;
    Ok(Box::new(RedisStore::open(address)?))
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn init(&mut self) -> Result<(), StoreError> {
        let version: Option<String> = self.call("init", |c, _, p| {
            // SETNX: hosts starting together agree on the first version written.
            redis::cmd("SETNX")
                .arg(format!("{p}schema"))
                .arg(SCHEMA_VERSION)
                .exec(c)?;
            Ok(redis::cmd("GET").arg(format!("{p}schema")).query(c)?)
        })?;
        let version: i64 = version.as_deref().unwrap_or("0").parse().map_err(|_| {
            self.error(
                "init",
                Fail::Data(format!("bad schema version {version:?}")),
            )
        })?;
        if version > SCHEMA_VERSION {
            return Err(self.newer_schema(version));
        }
        if version < SCHEMA_VERSION {
            // One script: atomic, and hosts starting together migrate once.
            let _: String = self.call("migrate", |c, s, p| {
                Ok(s.migrate.arg(p).arg("").arg(SCHEMA_VERSION).invoke(c)?)
            })?;
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        if let Some(clock) = &self.test_clock {
            return Ok(clock.now_usec());
        }
        let (secs, micros): (i64, i64) =
            self.call("read time", |c, _, _| Ok(redis::cmd("TIME").query(c)?))?;
        Ok(secs.saturating_mul(1_000_000).saturating_add(micros))
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        let now = self.test_now();
        let new = &req.run;
        let holder = req.holder.id();
        let (kind, lease, run): (String, Vec<String>, Vec<String>) =
            self.call("claim", |c, s, p| {
                Ok(s.claim
                    .arg(p)
                    .arg("")
                    .arg(SCHEMA_VERSION)
                    .arg(&now)
                    .arg(&new.job)
                    .arg(new.slot.usec)
                    .arg(&new.slot.zone)
                    .arg(&new.run_id)
                    .arg(if new.forced { "1" } else { "0" })
                    .arg(&new.trigger)
                    .arg(new.invocation_id.as_deref().unwrap_or(""))
                    .arg(&holder)
                    .arg(&req.holder.host)
                    .arg(&req.holder.machine_id)
                    .arg(&req.holder.boot_id)
                    .arg(req.holder.pid)
                    .arg(req.holder.pid_start)
                    .arg(rules::duration_usec(req.ttl))
                    .arg(
                        req.clock
                            .map(|c| c.host_now.to_string())
                            .unwrap_or_default(),
                    )
                    .arg(rules::tolerance_usec(req))
                    .arg(if req.queued_first { "1" } else { "0" })
                    .arg(if req.in_order { "1" } else { "0" })
                    .arg(rules::FOREIGN_GRACE_USEC)
                    .invoke(c)?)
            })?;
        let data = |e: Fail| self.error("claim", e);
        let run = run_from_pairs(&run).map_err(data)?;
        let need_run =
            |run: Option<Run>| run.ok_or_else(|| data(Fail::Data(format!("{kind}: no record"))));
        match kind.as_str() {
            "newer" => {
                let v = lease.first().and_then(|v| v.parse().ok()).unwrap_or(0);
                Err(self.newer_schema(v))
            }
            "older" => {
                self.init()?;
                self.claim(req)
            }
            "skew" => Ok(Claim::ClockSkew {
                store_now: first_number(&lease).map_err(data)?,
            }),
            "behind" => Ok(Claim::SlotBehind {
                newest: first_number(&lease).map_err(data)?,
            }),
            "done" => Ok(Claim::SlotDone { by: need_run(run)? }),
            "held" => Ok(Claim::SlotHeld { by: need_run(run)? }),
            "busy" => Ok(Claim::Busy {
                lease: lease_from(&new.job, &lease).map_err(data)?,
                run,
            }),
            "claimed" => Ok(Claim::Claimed {
                lease: lease_from(&new.job, &lease).map_err(data)?,
                run: need_run(run)?,
                previous_slot: match lease.get(5).map(String::as_str) {
                    None | Some("") => None,
                    Some(v) => Some(
                        v.parse()
                            .map_err(|_| data(Fail::Data(format!("bad slot {v:?}"))))?,
                    ),
                },
            }),
            other => Err(data(Fail::Data(format!("unknown answer {other:?}")))),
        }
    }

    fn renew(
        &mut self,
        lease: &Lease,
        next: i64,
        ttl: Duration,
    ) -> Result<Option<i64>, StoreError> {
        self.ready()?;
        let now = self.test_now();
        let until: String = self.call("renew", |c, s, p| {
            Ok(s.renew
                .arg(p)
                .arg(&now)
                .arg(&lease.job)
                .arg(&lease.holder)
                .arg(lease.token)
                .arg(rules::duration_usec(ttl))
                .arg(lease.renewal)
                .arg(next)
                .invoke(c)?)
        })?;
        if until.is_empty() {
            return Ok(None);
        }
        until
            .parse()
            .map(Some)
            .map_err(|_| self.error("renew", Fail::Data(format!("bad expiry {until:?}"))))
    }

    fn finish_as(
        &mut self,
        lease: &Lease,
        run_id: &str,
        finish: &Finish,
        kept: bool,
    ) -> Result<Finished, StoreError> {
        let report = super::finish_report_json(&self.describe, run_id, finish)?;
        self.ready()?;
        let now = self.test_now();
        let (recorded, released): (i64, i64) = self.call("finish", |c, s, p| {
            Ok(s.finish
                .arg(p)
                .arg(&now)
                .arg(&lease.job)
                .arg(&lease.holder)
                .arg(lease.token)
                .arg(run_id)
                .arg(finish.outcome.as_str())
                .arg(finish.reason.as_deref().unwrap_or(""))
                .arg(
                    finish
                        .exit_status
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                )
                .arg(&report)
                .arg(finish.resolution.map(Resolution::as_str).unwrap_or(""))
                .arg(if finish.outcome == Outcome::LeaseLost || kept {
                    "1"
                } else {
                    "0"
                })
                .arg(lease.renewal)
                .arg(if kept { "1" } else { "0" })
                .arg(finish.ended_at.map(|t| t.to_string()).unwrap_or_default())
                .invoke(c)?)
        })?;
        Ok(Finished {
            recorded: recorded == 1,
            released: released == 1,
        })
    }

    fn interrupt(
        &mut self,
        run: &Run,
        reason: &str,
        resolution: Resolution,
    ) -> Result<bool, StoreError> {
        self.ready()?;
        let holder = run.holder().id();
        let now = self.test_now();
        let changed: i64 = self.call("interrupt", |c, s, p| {
            Ok(s.interrupt
                .arg(p)
                .arg(&now)
                .arg(&run.run_id)
                .arg(reason)
                .arg(resolution.as_str())
                .arg(&run.job)
                .arg(&holder)
                .arg(run.fencing_token)
                .invoke(c)?)
        })?;
        Ok(changed == 1)
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        let fields: Vec<Option<String>> = self.call("read lease", |c, _, p| {
            Ok(redis::cmd("HMGET")
                .arg(format!("{p}lease:{job}"))
                .arg(&[
                    "holder",
                    "host",
                    "token",
                    "acquired_at",
                    "expire_at",
                    "run_id",
                    "renewal",
                ])
                .query(c)?)
        })?;
        let fields: Vec<String> = fields.into_iter().map(Option::unwrap_or_default).collect();
        if fields.first().is_none_or(|h| h.is_empty()) {
            return Ok(None);
        }
        lease_from(job, &fields)
            .map(Some)
            .map_err(|e| self.error("read lease", e))
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        self.ready()?;
        let fields: Vec<Option<String>> = self.call("read a mark", |c, _, p| {
            Ok(redis::cmd("HMGET")
                .arg(mark_key(p, namespace, key))
                .arg(&["job", "run_id", "host", "token", "marked_at"])
                .query(c)?)
        })?;
        let bad = |what: String| self.error("read a mark", Fail::Data(what));
        let [Some(job), run_id, host, token, marked_at] =
            <[Option<String>; 5]>::try_from(fields).map_err(|_| bad("5 fields".into()))?
        else {
            return Ok(None);
        };
        let number = |name: &str, v: Option<String>| -> Result<i64, StoreError> {
            let v = v.unwrap_or_default();
            v.parse()
                .map_err(|_| bad(format!("mark {namespace} {key}: {name} {v:?}")))
        };
        Ok(Some(Mark {
            namespace: namespace.to_string(),
            key: key.to_string(),
            job,
            run_id: run_id.unwrap_or_default(),
            host: host.unwrap_or_default(),
            token: number("token", token)?,
            marked_at: number("marked_at", marked_at)?,
        }))
    }

    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        self.ready()?;
        let now = self.test_now();
        let inserted: i64 = self.call("mark", |c, _, p| {
            Ok(redis::Script::new(INSERT_MARK)
                .key(mark_key(p, &mark.namespace, &mark.key))
                .key(format!("{p}lease:{}", mark.job))
                .key(format!("{p}marks:{}", mark.job))
                .arg(if fenced { "1" } else { "0" })
                .arg(mark.token)
                .arg(&mark.job)
                .arg(&mark.run_id)
                .arg(&mark.host)
                .arg(mark.marked_at)
                .arg(mark_member(&mark.namespace, &mark.key))
                .arg(&now)
                .invoke(c)?)
        })?;
        Ok(inserted == 1)
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let mut n = 0;
        loop {
            let deleted: i64 = self.call("delete marks", |c, _, p| {
                Ok(redis::Script::new(DELETE_MARKS)
                    .key(format!("{p}marks:{job}"))
                    .arg(format!("{p}mark:"))
                    .arg(before)
                    .arg(DELETE_MARKS_BATCH)
                    .invoke(c)?)
            })?;
            n += usize::try_from(deleted).unwrap_or(0);
            if deleted < DELETE_MARKS_BATCH {
                return Ok(n);
            }
        }
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let n: i64 = self.call("count marks", |c, _, p| {
            Ok(redis::cmd("ZCOUNT")
                .arg(format!("{p}marks:{job}"))
                .arg("-inf")
                .arg(format!("({before}"))
                .query(c)?)
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        self.ready()?;
        let fields: Vec<Option<String>> = self.call("read the schedule", |c, _, p| {
            Ok(redis::cmd("HMGET")
                .arg(format!("{p}schedule:{job}"))
                .arg(&["fingerprint", "defined_at", "host", "seen_at", "horizon"])
                .query(c)?)
        })?;
        let bad = |what: String| self.error("read the schedule", Fail::Data(what));
        let [Some(fingerprint), Some(defined_at), host, seen_at, horizon] =
            <[Option<String>; 5]>::try_from(fields).map_err(|_| bad("5 fields".into()))?
        else {
            return Ok(None);
        };
        let number = |name: &str, v: Option<String>| -> Result<i64, StoreError> {
            let v = v.unwrap_or_default();
            v.parse().map_err(|_| bad(format!("{name} {v:?}")))
        };
        Ok(Some(ScheduleDecl {
            job: job.to_string(),
            fingerprint,
            defined_at: number("defined_at", Some(defined_at))?,
            host: host.unwrap_or_default(),
            seen_at: number("seen_at", seen_at)?,
            horizon: number("horizon", horizon)?,
        }))
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        self.ready()?;
        let (fp, at, seen) = expected.map_or((String::new(), String::new(), String::new()), |e| {
            (
                e.fingerprint.clone(),
                e.defined_at.to_string(),
                e.seen_at.to_string(),
            )
        });
        let swapped: i64 = self.call("declare the schedule", |c, _, p| {
            Ok(redis::Script::new(SWAP_SCHEDULE)
                .key(format!("{p}schedule:{}", new.job))
                .arg(&fp)
                .arg(&at)
                .arg(&seen)
                .arg(&new.fingerprint)
                .arg(new.defined_at)
                .arg(&new.host)
                .arg(new.seen_at)
                .arg(new.horizon)
                .invoke(c)?)
        })?;
        Ok(swapped == 1)
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.ready()?;
        let job = query.job.clone().unwrap_or_default();
        let slot = match (&query.job, query.slot) {
            (Some(_), Some(slot)) => slot.to_string(),
            _ => String::new(),
        };
        let records: Vec<Vec<String>> = self.call("read runs", |c, s, p| {
            Ok(s.runs.arg(p).arg(&job).arg(&slot).invoke(c)?)
        })?;
        let mut runs = Vec::with_capacity(records.len());
        for pairs in &records {
            let seq = pairs
                .chunks(2)
                .find(|p| p.first().is_some_and(|k| k == "seq"))
                .and_then(|p| p.get(1))
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0);
            if let Some(run) = run_from_pairs(pairs).map_err(|e| self.error("read runs", e))? {
                runs.push((run, seq));
            }
        }
        if let Some(from) = query.slots_from {
            crate::store::rules::window(&mut runs, from, |(r, _)| r);
        }
        runs.retain(|(r, _)| {
            (query.outcomes.is_empty() || query.outcomes.contains(&r.outcome))
                && (query.resolutions.is_empty()
                    || r.resolution.is_some_and(|x| query.resolutions.contains(&x)))
                && query.slot.is_none_or(|s| r.slot.usec == s)
        });
        runs.sort_by(|(a, aq), (b, bq)| (b.started_at, bq).cmp(&(a.started_at, aq)));
        let mut runs: Vec<Run> = runs.into_iter().map(|(r, _)| r).collect();
        if query.limit > 0 {
            runs.truncate(query.limit);
        }
        Ok(runs)
    }

    fn resolve(
        &mut self,
        job: &str,
        slot: i64,
        resolution: Resolution,
    ) -> Result<usize, StoreError> {
        self.ready()?;
        let n: i64 = self.call("resolve", |c, s, p| {
            Ok(s.resolve
                .arg(p)
                .arg(job)
                .arg(slot)
                .arg(resolution.as_str())
                .invoke(c)?)
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn unlock(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        let now = self.test_now();
        let fields: Vec<String> = self.call("unlock", |c, s, p| {
            Ok(s.unlock.arg(p).arg(&now).arg(job).invoke(c)?)
        })?;
        if fields.is_empty() {
            return Ok(None);
        }
        lease_from(job, &fields)
            .map(Some)
            .map_err(|e| self.error("unlock", e))
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        self.ready()?;
        let mut n = 0;
        for chunk in slots.chunks(200) {
            let deleted: i64 = self.call("delete runs", |c, s, p| {
                let mut call = s.delete.prepare_invoke();
                call.arg(p).arg(job).arg(started_before);
                for slot in chunk {
                    call.arg(slot);
                }
                Ok(call.invoke(c)?)
            })?;
            n += usize::try_from(deleted).unwrap_or(0);
        }
        Ok(n)
    }
}
