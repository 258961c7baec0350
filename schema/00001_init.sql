-- pgadmit schema: admission control for AI gateways.
--
-- Amounts are NUMERIC, deliberately. Counters are running sums of many small
-- amounts (tokens, requests, fractional cost); float8 drifts (0.1 added ten
-- times is not 1.0), which would make the doctor's "reserved equals the sum of
-- open reservations" check fail forever and lets rounding admit past a limit.
-- Integer micro-units would be exact too, but force every caller to agree on a
-- scale. NUMERIC sums are exact, the Go side still speaks float64 (pgx encodes
-- a float64 as its shortest decimal), and the extra CPU is noise next to a
-- network round trip. CHECK constraints keep every amount non-negative, so a
-- bookkeeping bug fails loudly instead of being clamped away.

-- +goose Up

CREATE TABLE gateway_tasks (
    id                         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    status                     text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    async_mode                 boolean     NOT NULL DEFAULT false,
    kind                       text        NOT NULL DEFAULT '',
    payload                    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    remote_task_payload        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    error                      jsonb,
    error_code                 text,
    error_message              text,
    locked_by                  text,
    locked_at                  timestamptz,
    heartbeat_at               timestamptz,
    execution_token            uuid,
    execution_lease_expires_at timestamptz,
    attempt_count              integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    requeue_count              integer     NOT NULL DEFAULT 0 CHECK (requeue_count >= 0),
    last_event_seq             integer     NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    next_run_at                timestamptz NOT NULL DEFAULT now(),
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    finished_at                timestamptz
);
COMMENT ON TABLE gateway_tasks IS
    'One gateway request or async job. Reservations, leases, attempts, events and queue admissions hang off it; recovery decides from its status and execution lease what capacity a dead process still holds.';
COMMENT ON COLUMN gateway_tasks.status IS 'queued -> running -> succeeded | failed | cancelled; the last three are final.';
COMMENT ON COLUMN gateway_tasks.async_mode IS 'Async tasks are requeued by recovery when their execution lease expires; sync tasks are failed (their caller is gone).';
COMMENT ON COLUMN gateway_tasks.kind IS 'Free-form label of the work (model call, image job...), for operators.';
COMMENT ON COLUMN gateway_tasks.payload IS 'Caller-defined request data.';
COMMENT ON COLUMN gateway_tasks.remote_task_payload IS 'Upstream provider state of a running task; reset when recovery fails the task.';
COMMENT ON COLUMN gateway_tasks.error IS 'Structured error detail of a failed task.';
COMMENT ON COLUMN gateway_tasks.error_code IS 'Machine-readable failure reason (server_restarted, requeue_limit_exceeded, ...).';
COMMENT ON COLUMN gateway_tasks.error_message IS 'Human-readable failure reason.';
COMMENT ON COLUMN gateway_tasks.locked_by IS 'Identity of the worker that claimed the task.';
COMMENT ON COLUMN gateway_tasks.locked_at IS 'When the current claim was taken.';
COMMENT ON COLUMN gateway_tasks.heartbeat_at IS 'Last heartbeat of the claiming worker.';
COMMENT ON COLUMN gateway_tasks.execution_token IS 'Fencing token of the current claim: heartbeat and finish must present it, so a worker that lost its lease cannot touch the task.';
COMMENT ON COLUMN gateway_tasks.execution_lease_expires_at IS 'The claim is void after this instant; recovery then reclaims the task and its capacity.';
COMMENT ON COLUMN gateway_tasks.attempt_count IS 'Attempts started (claims), for the attempts table numbering.';
COMMENT ON COLUMN gateway_tasks.requeue_count IS 'Times recovery requeued the task after its lease expired; past the cap the task is failed for good (poison task).';
COMMENT ON COLUMN gateway_tasks.last_event_seq IS 'Last allocated event sequence number; events take seq = last_event_seq + 1 under this row''s lock, so sequences are unique and gapless.';
COMMENT ON COLUMN gateway_tasks.next_run_at IS 'An async queued task is not claimed before this instant.';
COMMENT ON COLUMN gateway_tasks.finished_at IS 'When the task reached a final status.';
COMMENT ON COLUMN gateway_tasks.id IS 'Task identity; reservations, leases, attempts, events and admissions refer to it.';
COMMENT ON COLUMN gateway_tasks.created_at IS 'When the task was created (queue order among equally due tasks).';
COMMENT ON COLUMN gateway_tasks.updated_at IS 'Last change of the row, for operators.';
COMMENT ON INDEX gateway_tasks_pkey IS 'Task lookups by id: claim fencing, finish, FK checks, recovery probes.';

-- Claiming the next runnable async task: queued, due, oldest first.
CREATE INDEX gateway_tasks_runnable_idx ON gateway_tasks (next_run_at, created_at)
    WHERE status = 'queued' AND async_mode;
COMMENT ON INDEX gateway_tasks_runnable_idx IS 'Serves TaskClaimNext (FOR UPDATE SKIP LOCKED over due queued async tasks).';
-- Recovery: running tasks whose execution lease expired.
CREATE INDEX gateway_tasks_lease_expiry_idx ON gateway_tasks (execution_lease_expires_at)
    WHERE status = 'running';
COMMENT ON INDEX gateway_tasks_lease_expiry_idx IS 'Serves recovery''s search for running tasks with an expired execution lease.';
-- Retention: finished tasks by age.
CREATE INDEX gateway_tasks_finished_idx ON gateway_tasks (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
COMMENT ON INDEX gateway_tasks_finished_idx IS 'Serves prune of events of long-finished tasks.';

CREATE TABLE gateway_task_attempts (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id       uuid        NOT NULL REFERENCES gateway_tasks (id) ON DELETE CASCADE,
    attempt_no    integer     NOT NULL CHECK (attempt_no > 0),
    status        text        NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    retryable     boolean     NOT NULL DEFAULT false,
    error_code    text,
    error_message text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    UNIQUE (task_id, attempt_no)
);
COMMENT ON TABLE gateway_task_attempts IS 'One execution attempt of a task (one claim). Reservations and leases can be attached to it.';
COMMENT ON COLUMN gateway_task_attempts.attempt_no IS '1-based attempt number within the task.';
COMMENT ON COLUMN gateway_task_attempts.retryable IS 'Whether the failure may succeed on another attempt.';
COMMENT ON COLUMN gateway_task_attempts.id IS 'Attempt identity; reservations and leases can be attached to it.';
COMMENT ON COLUMN gateway_task_attempts.task_id IS 'The task this attempt runs.';
COMMENT ON COLUMN gateway_task_attempts.status IS 'running until the attempt ends; then succeeded, failed or cancelled.';
COMMENT ON COLUMN gateway_task_attempts.error_code IS 'Machine-readable reason a failed attempt ended (execution_lease_expired, ...).';
COMMENT ON COLUMN gateway_task_attempts.error_message IS 'Human-readable reason a failed attempt ended.';
COMMENT ON COLUMN gateway_task_attempts.started_at IS 'When the attempt began (its claim).';
COMMENT ON COLUMN gateway_task_attempts.finished_at IS 'When the attempt ended; NULL while running.';
COMMENT ON INDEX gateway_task_attempts_pkey IS 'Attempt lookups by id (attach, FK checks).';
COMMENT ON INDEX gateway_task_attempts_task_id_attempt_no_key IS 'One attempt per number within a task; also lists a task''s attempts in order.';
CREATE INDEX gateway_task_attempts_running_idx ON gateway_task_attempts (task_id)
    WHERE status = 'running';
COMMENT ON INDEX gateway_task_attempts_running_idx IS 'Serves recovery failing the running attempts of dead tasks.';

CREATE TABLE gateway_task_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id     uuid        NOT NULL REFERENCES gateway_tasks (id) ON DELETE CASCADE,
    seq         integer     NOT NULL CHECK (seq > 0),
    event_type  text        NOT NULL,
    status      text,
    phase       text,
    progress    numeric     NOT NULL DEFAULT 0,
    message     text,
    payload     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    simulated   boolean     NOT NULL DEFAULT false,
    platform_id text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT gateway_task_events_task_seq_key UNIQUE (task_id, seq)
);
COMMENT ON TABLE gateway_task_events IS 'Append-only log of what happened to a task, numbered per task.';
COMMENT ON COLUMN gateway_task_events.seq IS 'Per-task sequence number, allocated from gateway_tasks.last_event_seq; unique with task_id.';
COMMENT ON COLUMN gateway_task_events.event_type IS 'task.queued, task.running, task.completed, task.failed, ...';
COMMENT ON COLUMN gateway_task_events.platform_id IS 'Upstream platform the event concerns, if any.';
COMMENT ON COLUMN gateway_task_events.simulated IS 'True for events produced by a dry run.';
COMMENT ON COLUMN gateway_task_events.id IS 'Surrogate key, for deleting events in batches.';
COMMENT ON COLUMN gateway_task_events.task_id IS 'The task the event belongs to.';
COMMENT ON COLUMN gateway_task_events.status IS 'Task status the event reports, if any.';
COMMENT ON COLUMN gateway_task_events.phase IS 'Caller-defined phase within the status (e.g. streaming).';
COMMENT ON COLUMN gateway_task_events.progress IS 'Progress the event reports, caller-defined scale.';
COMMENT ON COLUMN gateway_task_events.message IS 'Human-readable note.';
COMMENT ON COLUMN gateway_task_events.payload IS 'Caller-defined event data.';
COMMENT ON COLUMN gateway_task_events.created_at IS 'When the event was appended.';
COMMENT ON INDEX gateway_task_events_pkey IS 'Event lookups by id (prune deletes by it).';
COMMENT ON CONSTRAINT gateway_task_events_task_seq_key ON gateway_task_events IS
    'Sequence numbers never repeat within a task, even under concurrent appends; its index also serves reading a task''s events in order.';
COMMENT ON INDEX gateway_task_events_task_seq_key IS 'Enforces unique (task_id, seq); serves reading a task''s events in order and pruning them per task.';

CREATE TABLE gateway_task_admissions (
    task_id     uuid        NOT NULL REFERENCES gateway_tasks (id) ON DELETE CASCADE,
    scope_type  text        NOT NULL CHECK (scope_type <> ''),
    scope_key   text        NOT NULL CHECK (scope_key <> ''),
    limit_value numeric     NOT NULL CHECK (limit_value >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, scope_type, scope_key)
);
COMMENT ON TABLE gateway_task_admissions IS 'queue_size limits: one row per (unfinished task, queue scope). A scope admits a new task only while it has fewer rows than its limit; finishing the task deletes its rows.';
COMMENT ON COLUMN gateway_task_admissions.limit_value IS 'The queue_size limit in force when the task was admitted.';
COMMENT ON COLUMN gateway_task_admissions.task_id IS 'The admitted, unfinished task holding a place in the queue.';
COMMENT ON COLUMN gateway_task_admissions.scope_type IS 'Kind of queue scope (api_key, team, model...).';
COMMENT ON COLUMN gateway_task_admissions.scope_key IS 'Which scope of that kind.';
COMMENT ON COLUMN gateway_task_admissions.created_at IS 'When the task was admitted.';
COMMENT ON INDEX gateway_task_admissions_pkey IS 'One place per task and queue scope; deletes of a task''s admissions.';
CREATE INDEX gateway_task_admissions_scope_idx ON gateway_task_admissions (scope_type, scope_key);
COMMENT ON INDEX gateway_task_admissions_scope_idx IS 'Serves counting the admitted tasks of a queue scope at admission time.';

CREATE TABLE gateway_rate_limit_counters (
    scope_type     text        NOT NULL CHECK (scope_type <> ''),
    scope_key      text        NOT NULL CHECK (scope_key <> ''),
    metric         text        NOT NULL CHECK (metric <> '' AND metric NOT IN ('concurrent', 'queue_size')),
    window_seconds integer     NOT NULL CHECK (window_seconds > 0),
    window_start   timestamptz NOT NULL,
    reset_at       timestamptz NOT NULL,
    limit_value    numeric     NOT NULL CHECK (limit_value >= 0),
    used_value     numeric     NOT NULL DEFAULT 0 CHECK (used_value >= 0),
    reserved_value numeric     NOT NULL DEFAULT 0 CHECK (reserved_value >= 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_type, scope_key, metric, window_seconds, window_start),
    CHECK (reset_at = window_start + make_interval(secs => window_seconds))
);
COMMENT ON TABLE gateway_rate_limit_counters IS
    'One row per scope, metric and fixed window (aligned to the Unix epoch). Admission adds to reserved_value; commit moves the actual amount to used_value; release gives the reservation back.';
COMMENT ON COLUMN gateway_rate_limit_counters.window_seconds IS
    'Window length. Part of the key: the reference keyed only on window_start, so a per-minute and a per-day counter of the same metric shared one row at midnight.';
COMMENT ON COLUMN gateway_rate_limit_counters.window_start IS 'Start of the fixed window, floor(epoch / window_seconds) * window_seconds.';
COMMENT ON COLUMN gateway_rate_limit_counters.reset_at IS 'End of the window, when its capacity is whole again.';
COMMENT ON COLUMN gateway_rate_limit_counters.limit_value IS 'Limit of the last admission; informational, every admission brings its own limit.';
COMMENT ON COLUMN gateway_rate_limit_counters.used_value IS 'Sum of actual amounts of committed reservations; may exceed the limit when actuals overshoot their estimates.';
COMMENT ON COLUMN gateway_rate_limit_counters.reserved_value IS 'Sum of amounts of open (reserved) reservations of this window.';
COMMENT ON COLUMN gateway_rate_limit_counters.scope_type IS 'Kind of scope the limit applies to (api_key, team, model, account...).';
COMMENT ON COLUMN gateway_rate_limit_counters.scope_key IS 'Which scope of that kind.';
COMMENT ON COLUMN gateway_rate_limit_counters.metric IS 'What is counted (requests, tokens, cost...); concurrent and queue_size are kept elsewhere.';
COMMENT ON COLUMN gateway_rate_limit_counters.created_at IS 'When the window''s first admission created the row.';
COMMENT ON COLUMN gateway_rate_limit_counters.updated_at IS 'Last admission or settlement in the window.';
COMMENT ON INDEX gateway_rate_limit_counters_pkey IS 'The counter of a scope, metric and window: admission locks and updates rows through it, in its order.';
-- Retention: windows by end time.
CREATE INDEX gateway_rate_limit_counters_reset_idx ON gateway_rate_limit_counters (reset_at);
COMMENT ON INDEX gateway_rate_limit_counters_reset_idx IS 'Serves prune of ended windows.';

CREATE TABLE gateway_rate_limit_reservations (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id         uuid        REFERENCES gateway_tasks (id) ON DELETE SET NULL,
    attempt_id      uuid        REFERENCES gateway_task_attempts (id) ON DELETE SET NULL,
    scope_type      text        NOT NULL,
    scope_key       text        NOT NULL,
    metric          text        NOT NULL,
    window_seconds  integer     NOT NULL,
    window_start    timestamptz NOT NULL,
    limit_value     numeric     NOT NULL CHECK (limit_value >= 0),
    reserved_amount numeric     NOT NULL CHECK (reserved_amount > 0),
    actual_amount   numeric     CHECK (actual_amount >= 0),
    status          text        NOT NULL DEFAULT 'reserved'
        CHECK (status IN ('reserved', 'committed', 'released')),
    reason          text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finalized_at    timestamptz,
    CHECK ((status = 'reserved') = (finalized_at IS NULL)),
    CHECK ((status = 'committed') = (actual_amount IS NOT NULL))
);
COMMENT ON TABLE gateway_rate_limit_reservations IS
    'The ledger behind reserved_value and used_value: one row per admitted window limit. Open rows sum to the counter''s reserved_value, committed rows'' actual amounts to its used_value.';
COMMENT ON COLUMN gateway_rate_limit_reservations.task_id IS 'Owning task; NULL for admissions not tied to a task (settled by the caller, or released by prune once their window has long ended). Deleting a task keeps its ledger rows (SET NULL) so the counters stay equal to their ledger.';
COMMENT ON COLUMN gateway_rate_limit_reservations.attempt_id IS 'Attempt the reservation was attached to, once that attempt row exists.';
COMMENT ON COLUMN gateway_rate_limit_reservations.reserved_amount IS 'Estimated amount held in the counter''s reserved_value while status = reserved.';
COMMENT ON COLUMN gateway_rate_limit_reservations.actual_amount IS 'Amount really used, set on commit; may be above reserved_amount (overage is recorded, not lost).';
COMMENT ON COLUMN gateway_rate_limit_reservations.status IS 'reserved (open) -> committed | released; a finished row never changes again.';
COMMENT ON COLUMN gateway_rate_limit_reservations.reason IS 'Why it was released (caller reason, execution_lease_expired, ...).';
COMMENT ON COLUMN gateway_rate_limit_reservations.id IS 'Reservation identity, held by the caller''s grant for commit or release.';
COMMENT ON COLUMN gateway_rate_limit_reservations.scope_type IS 'Scope kind of the counter this reservation draws on.';
COMMENT ON COLUMN gateway_rate_limit_reservations.scope_key IS 'Scope of the counter this reservation draws on.';
COMMENT ON COLUMN gateway_rate_limit_reservations.metric IS 'Metric of the counter this reservation draws on.';
COMMENT ON COLUMN gateway_rate_limit_reservations.window_seconds IS 'Window length of the counter this reservation draws on.';
COMMENT ON COLUMN gateway_rate_limit_reservations.window_start IS 'Window of the counter this reservation draws on.';
COMMENT ON COLUMN gateway_rate_limit_reservations.limit_value IS 'Limit in force at admission, for audits.';
COMMENT ON COLUMN gateway_rate_limit_reservations.created_at IS 'When it was admitted.';
COMMENT ON COLUMN gateway_rate_limit_reservations.updated_at IS 'Last change (settlement or attach).';
COMMENT ON COLUMN gateway_rate_limit_reservations.finalized_at IS 'When it was committed or released; NULL while open.';
COMMENT ON INDEX gateway_rate_limit_reservations_pkey IS 'Commit, release and attach find reservations by id.';
-- Counter lookup of open reservations (commit/release lock counters through it; doctor sums it).
CREATE INDEX gateway_rate_limit_reservations_open_counter_idx ON gateway_rate_limit_reservations
    (scope_type, scope_key, metric, window_seconds, window_start) WHERE status = 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_open_counter_idx IS 'Serves the doctor''s per-counter sums of open reservations.';
CREATE INDEX gateway_rate_limit_reservations_open_task_idx ON gateway_rate_limit_reservations (task_id)
    WHERE status = 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_open_task_idx IS 'Serves recovery releasing open reservations of dead or finished tasks.';
CREATE INDEX gateway_rate_limit_reservations_open_window_idx ON gateway_rate_limit_reservations (window_start)
    WHERE status = 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_open_window_idx IS 'Serves prune releasing open reservations whose window ended long ago (a caller that never settled).';
CREATE INDEX gateway_rate_limit_reservations_finalized_idx ON gateway_rate_limit_reservations (finalized_at, id)
    WHERE status <> 'reserved';
COMMENT ON INDEX gateway_rate_limit_reservations_finalized_idx IS
    'Serves prune of finished reservations: keyset pages in (finalized_at, id) order, each read straight from the index without a sort.';
CREATE INDEX gateway_rate_limit_reservations_attempt_idx ON gateway_rate_limit_reservations (attempt_id)
    WHERE attempt_id IS NOT NULL;
COMMENT ON INDEX gateway_rate_limit_reservations_attempt_idx IS 'Serves the ON DELETE SET NULL of attempts.';

CREATE TABLE gateway_concurrency_leases (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id     uuid        REFERENCES gateway_tasks (id) ON DELETE SET NULL,
    attempt_id  uuid        REFERENCES gateway_task_attempts (id) ON DELETE SET NULL,
    scope_type  text        NOT NULL CHECK (scope_type <> ''),
    scope_key   text        NOT NULL CHECK (scope_key <> ''),
    lease_value numeric     NOT NULL CHECK (lease_value > 0),
    limit_value numeric     NOT NULL CHECK (limit_value >= 0),
    expires_at  timestamptz NOT NULL,
    released_at timestamptz,
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE gateway_concurrency_leases IS
    'One row per held concurrency slot ("concurrent" limits). A lease counts while released_at IS NULL AND expires_at > now(); a crashed holder''s lease lapses by itself at expires_at.';
COMMENT ON COLUMN gateway_concurrency_leases.lease_value IS 'Slots held (usually 1).';
COMMENT ON COLUMN gateway_concurrency_leases.limit_value IS 'Concurrency limit in force when the lease was taken.';
COMMENT ON COLUMN gateway_concurrency_leases.expires_at IS 'Heartbeats (renew) push this forward; past it the lease no longer counts.';
COMMENT ON COLUMN gateway_concurrency_leases.released_at IS 'When the holder (or recovery) gave the slot back.';
COMMENT ON COLUMN gateway_concurrency_leases.reason IS 'Why the lease ended (committed, released, expired, task_finished, ...).';
COMMENT ON COLUMN gateway_concurrency_leases.id IS 'Lease identity, held by the caller''s grant for renew and release.';
COMMENT ON COLUMN gateway_concurrency_leases.task_id IS 'Owning task; NULL for leases not tied to a task (they lapse at expiry). Deleting a task keeps its leases (SET NULL).';
COMMENT ON COLUMN gateway_concurrency_leases.attempt_id IS 'Attempt the lease was attached to, once that attempt row exists.';
COMMENT ON COLUMN gateway_concurrency_leases.scope_type IS 'Kind of scope whose slots are limited (model, account...).';
COMMENT ON COLUMN gateway_concurrency_leases.scope_key IS 'Which scope of that kind.';
COMMENT ON COLUMN gateway_concurrency_leases.created_at IS 'When the slot was taken.';
COMMENT ON INDEX gateway_concurrency_leases_pkey IS 'Renew and release find leases by id.';
-- Counting live leases of a scope at admission: index-only scan over the live part.
CREATE INDEX gateway_concurrency_leases_live_scope_idx ON gateway_concurrency_leases
    (scope_type, scope_key, expires_at) INCLUDE (lease_value) WHERE released_at IS NULL;
COMMENT ON INDEX gateway_concurrency_leases_live_scope_idx IS 'Serves the live-lease sum of a scope in ReserveApply and inspect.';
CREATE INDEX gateway_concurrency_leases_live_expiry_idx ON gateway_concurrency_leases (expires_at)
    WHERE released_at IS NULL;
COMMENT ON INDEX gateway_concurrency_leases_live_expiry_idx IS 'Serves recovery releasing expired leases.';
CREATE INDEX gateway_concurrency_leases_live_task_idx ON gateway_concurrency_leases (task_id)
    WHERE released_at IS NULL;
COMMENT ON INDEX gateway_concurrency_leases_live_task_idx IS 'Serves releasing the leases of a finished or requeued task.';
CREATE INDEX gateway_concurrency_leases_released_idx ON gateway_concurrency_leases (released_at)
    WHERE released_at IS NOT NULL;
COMMENT ON INDEX gateway_concurrency_leases_released_idx IS 'Serves prune of released leases.';
CREATE INDEX gateway_concurrency_leases_attempt_idx ON gateway_concurrency_leases (attempt_id)
    WHERE attempt_id IS NOT NULL;
COMMENT ON INDEX gateway_concurrency_leases_attempt_idx IS 'Serves the ON DELETE SET NULL of attempts.';

-- +goose Down

DROP TABLE gateway_concurrency_leases;
DROP TABLE gateway_rate_limit_reservations;
DROP TABLE gateway_rate_limit_counters;
DROP TABLE gateway_task_admissions;
DROP TABLE gateway_task_events;
DROP TABLE gateway_task_attempts;
DROP TABLE gateway_tasks;
