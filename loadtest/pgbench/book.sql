-- The service's one-slot booking exactly as it sends it (src/db/book_pg.rs): the patient's
-- advisory lock, the conditional seat update, the appointment insert and the outbox insert as data-modifying CTEs, one
-- statement (its own transaction, one round trip). pgbench -D lo=… -D hi=… picks the slots:
-- a capacity-2e9 set commits every time (the success path), a full set refuses every time.
-- Random patients and keys: no overlap, no key collision.
-- 'partner:' || 'pgbench' is one literal to PostgreSQL; pgbench would read :pgbench in it as a variable.
\set s random(:lo, :hi)
\set p random(1, 1000000000000)
\set k random(1, 9000000000000000000)
WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(202440705, hashint8(:p))), s AS (
  UPDATE time_slot SET booked_count = booked_count + 1, version = version + 1
  WHERE id = :s AND booked_count < capacity AND start_at > now() AND closed_at IS NULL AND EXISTS (SELECT FROM l)
  RETURNING *
), a AS (
  INSERT INTO appointment (slot_id, patient_id, status, booked_by, idempotency_key, request_hash, created_at,
                           start_at, end_at, slot_count, expires_at)
  SELECT s.id, :p, 'BOOKED', 'partner:' || 'pgbench', 'pgb-' || :client_id || '-' || :k,
         'a3f5c0ffee0b5e1d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0998877665', now(), s.start_at, s.end_at, 1, NULL
  FROM s
  RETURNING id
), o AS (
  INSERT INTO outbox (kind, appointment_id, slot_id, doctor_id, start_at, capacity, booked_count, version, created_at,
                      slot_closed, appointment_status, appointment_expires_at)
  SELECT 'BOOKED', a.id, s.id, s.doctor_id, s.start_at, s.capacity, s.booked_count, s.version, now(), false,
         'BOOKED', NULL FROM s, a
)
SELECT s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, s.closed_at, s.closed_reason, a.id
FROM s, a;
