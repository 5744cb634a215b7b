-- The slot search as the service sends it for findSlots(specialty, 14 days, first 20): one scan
-- of the specialty's index (src/db/find.rs `across`, its BY_SPECIALTY text), in answer order
-- from the window's start, each row's zone by a scalar subquery, the page's rows read by id at
-- the end; the window's start and the specialty written out where the service binds them.
-- A random specialty of the seed (loadtest/src/seed.rs, 20 of them) and a random first day of
-- the 14; -D worst=1 asks for rheumatology from the first day (its first 13 days are booked out),
-- -D worst=0 for the rest. Run with -M prepared, as the service sends its statements.
\set sp random(1, 20)
\set day random(1, 14)
WITH c AS (SELECT s.start_at, s.doctor_id, s.id, z.tz FROM time_slot s
   CROSS JOIN LATERAL (SELECT (SELECT d.timezone FROM doctor d WHERE d.id = s.doctor_id) AS tz) AS z
   WHERE s.open AND s.start_at >= (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END)) AND s.start_at < (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END)) + interval '14 days'
     AND (s.start_at, s.doctor_id, s.id) > ((date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END)), 0, 0)
     AND s.specialty = lower(CASE WHEN :worst = 1 THEN 'rheumatology' ELSE (ARRAY['general', 'cardiology',
  'dermatology', 'pediatrics', 'orthopedics', 'neurology', 'rheumatology', 'ophthalmology', 'dentistry', 'psychiatry',
  'gynecology', 'urology', 'oncology', 'endocrinology', 'gastroenterology', 'pulmonology', 'nephrology', 'allergology',
  'hematology', 'geriatrics'])[:sp] END)
     AND (NULL::int[] IS NULL OR extract(isodow FROM s.start_at AT TIME ZONE z.tz)::int = ANY(NULL::int[]))
     AND (NULL::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE z.tz)::time) >= NULL::int * 60)
     AND (NULL::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE z.tz)::time) < NULL::int * 60)
   ORDER BY s.start_at, s.doctor_id, s.id LIMIT 21)
SELECT s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, s.closed_at, s.closed_reason, c.tz
FROM c JOIN time_slot s ON s.id = c.id ORDER BY c.start_at, c.doctor_id, c.id;
