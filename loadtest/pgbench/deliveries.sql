-- The delivery queues' own writes for -D m=… booked patients (a relay pass's worth), each with an
-- email address and their partner's webhook endpoint subscribed, as the service makes them (src/db/messages.rs,
-- src/db/webhooks.rs) without any of its reads: the relay's enqueue (per booking the
-- confirmation already leased to its worker, the reminder, the webhook delivery), then the
-- outcomes (the email sent, the delivery succeeded with its logged attempt). Its tps × m is the
-- database's own limit for telling people, beside book.sql's for the bookings themselves.
-- Needs an endpoint (-D e=…) and an appointment id range for the deliveries' foreign key
-- (-D a=… -D n=…, ids a..a+n-1 all present). -D bare=1 leaves out the reminder and the attempt
-- log: the least any durable per-recipient queue writes, one row per message inserted and
-- updated once.
-- The JSON bodies have '=' for ':' (the same bytes to PostgreSQL): pgbench reads :name, digits
-- included, as a variable.
\set b random(1, 100000000000)
\set x random(0, :n - :m)
\set ap :a + :x - 1
BEGIN;
INSERT INTO patient_message (outbox_id, purpose, event, appointment_id, patient_id, channel, recipient, locale,
                             facts, status, attempts, next_attempt_at, locked_until, committed_at, created_at)
SELECT :b::bigint * :m + g, p, 'BOOKED', :b::bigint * :m + g, 296147000000408, 'EMAIL', 'patient296147000000408@example.org', NULL,
       '{"v"=1,"appointment_id"=122742,"doctor"="Hot set 1796296147102935","timezone"="UTC","start_at"="2026-12-04T09=30=00Z","end_at"="2026-12-04T09=45=00Z","at"="2026-12-03T11=09=08.745096Z"}',
       'PENDING', CASE p WHEN 'EVENT' THEN 1 ELSE 0 END,
       CASE p WHEN 'EVENT' THEN now() + interval '2 min' ELSE now() + interval '1 day' END,
       CASE p WHEN 'EVENT' THEN now() + interval '2 min' END, now(), now()
FROM generate_series(1, :m::int) g, (VALUES ('EVENT'), ('REMINDER')) v(p)
WHERE p = 'EVENT' OR :bare::int = 0;
INSERT INTO webhook_delivery (endpoint_id, outbox_id, appointment_id, event_id, event_type, payload, status, attempts,
                              max_attempts, next_attempt_at, lease_token, created_at)
SELECT :e::bigint, :b::bigint * :m + g, :ap::bigint + g, 'msg_' || (:b::bigint * :m + g), 'appointment.booked',
       '{"type"="appointment.booked","timestamp"="2026-12-03T11=09=08.745096Z","data"={"appointment"={"id"="122742","status"="BOOKED","slotId"="1120051","patientId"="296147000000408","startAt"="2026-12-04T09=30=00Z","endAt"="2026-12-04T09=45=00Z","bookedBy"="partner=loadtest","expiresAt"=null},"slot"={"id"="1120051","doctorId"="2001","startAt"="2026-12-04T09=30=00Z","capacity"=2000000000,"bookedCount"=54763}}}',
       'PENDING', 1, 8, now() + interval '1 min', 1, now()
FROM generate_series(1, :m::int) g;
COMMIT;
BEGIN;
UPDATE patient_message SET status = 'SENT', sent_at = now(), locked_until = NULL, last_error = NULL
WHERE outbox_id BETWEEN :b::bigint * :m + 1 AND :b::bigint * :m + :m AND purpose = 'EVENT';
WITH d AS (
  UPDATE webhook_delivery SET status = 'SUCCEEDED', next_attempt_at = NULL, lease_token = NULL, last_status_code = 200,
                              last_attempt_at = now(), last_error = NULL
  WHERE outbox_id BETWEEN :b::bigint * :m + 1 AND :b::bigint * :m + :m
  RETURNING id
)
INSERT INTO webhook_attempt (delivery_id, attempt, started_at, duration_ms, status_code)
SELECT id, 1, now(), 1, 200 FROM d WHERE :bare::int = 0;
COMMIT;
