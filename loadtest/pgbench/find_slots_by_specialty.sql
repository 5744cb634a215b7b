-- An experiment for issue 31, not the service's statement: findSlots(specialty, 14 days, first
-- 20) read from one partial index, with each slot carrying its doctor's specialty. The service
-- does not have the column; on a scratch copy of a seeded database add it first:
--
--   ALTER TABLE time_slot ADD COLUMN specialty text;
--   UPDATE time_slot s SET specialty = lower(d.specialty) FROM doctor d WHERE d.id = s.doctor_id;
--   CREATE INDEX ix_time_slot_open_specialty ON time_slot (specialty, start_at, doctor_id, id) WHERE open;
--   VACUUM ANALYZE time_slot;
--
-- then, beside loadtest/pgbench/find_slots.sql (the same random specialty and first day):
--   pgbench -n -M prepared -c 64 -j 2 -T 15 -f pgbench/find_slots_by_specialty.sql "$DB"
-- -D worst=1 asks for rheumatology from the first day (its first 13 days are booked out).
\set sp random(1, 20)
\set day random(1, 14)
WITH c AS (SELECT s.start_at, s.doctor_id, s.id FROM time_slot s
   WHERE s.open AND s.specialty = (CASE WHEN :worst = 1 THEN 'rheumatology' ELSE (ARRAY['general', 'cardiology',
  'dermatology', 'pediatrics', 'orthopedics', 'neurology', 'rheumatology', 'ophthalmology', 'dentistry', 'psychiatry',
  'gynecology', 'urology', 'oncology', 'endocrinology', 'gastroenterology', 'pulmonology', 'nephrology', 'allergology',
  'hematology', 'geriatrics'])[:sp] END)
     AND s.start_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END)
     AND s.start_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END + 14)
   ORDER BY s.start_at, s.doctor_id, s.id LIMIT 21)
SELECT s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, s.closed_at, s.closed_reason, d.timezone
FROM c JOIN time_slot s ON s.id = c.id JOIN doctor d ON d.id = s.doctor_id ORDER BY c.start_at, c.doctor_id, c.id;
