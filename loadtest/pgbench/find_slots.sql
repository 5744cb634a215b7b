-- The slot search as the service sends it for findSlots(specialty, 14 days, first 20): the
-- specialty's doctors (src/db/find.rs `doctors`), then the per-doctor statement
-- (`per_doctor_pg`) with their ids and zones, each doctor from the window's start. A random
-- specialty of the seed (loadtest/src/seed.rs, 20 of them) and a random first day of the 14;
-- -D worst=1 asks for rheumatology from the first day (its first 13 days are booked out), -D worst=0
-- for the rest. Run with -M prepared (the \gset arrays go as parameters, as the service sends them).
\set sp random(1, 20)
\set day random(1, 14)
SELECT array_agg(id ORDER BY id) AS ids, array_agg(timezone ORDER BY id) AS tzs,
       array_agg(NULL::timestamptz) AS starts, array_agg(NULL::bigint) AS after_ids,
       date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
         + make_interval(days => CASE WHEN :worst = 1 THEN 1 ELSE :day END) AS from_at
FROM doctor
WHERE lower(specialty) = lower(CASE WHEN :worst = 1 THEN 'rheumatology' ELSE (ARRAY['general', 'cardiology',
  'dermatology', 'pediatrics', 'orthopedics', 'neurology', 'rheumatology', 'ophthalmology', 'dentistry', 'psychiatry',
  'gynecology', 'urology', 'oncology', 'endocrinology', 'gastroenterology', 'pulmonology', 'nephrology', 'allergology',
  'hematology', 'geriatrics'])[:sp] END)
\gset
WITH c AS (SELECT t.start_at, d.id AS doctor_id, t.id
   FROM unnest(:ids::bigint[], :tzs::text[], :starts::timestamptz[], :after_ids::bigint[]) AS d(id, tz, after_start, after_id)
   CROSS JOIN LATERAL (SELECT s.start_at, s.id FROM time_slot s
     WHERE s.open AND s.doctor_id = d.id
       AND s.start_at >= GREATEST(:from_at::timestamptz, d.after_start) AND s.start_at < :from_at::timestamptz + interval '14 days'
       AND (d.after_start IS NULL OR (s.start_at, s.id) > (d.after_start, d.after_id))
       AND (NULL::int[] IS NULL OR extract(isodow FROM s.start_at AT TIME ZONE d.tz)::int = ANY(NULL::int[]))
       AND (NULL::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE d.tz)::time) >= NULL::int * 60)
       AND (NULL::int IS NULL OR extract(epoch FROM (s.start_at AT TIME ZONE d.tz)::time) < NULL::int * 60)
     ORDER BY s.start_at, s.id LIMIT 21) AS t
   ORDER BY 1, 2, 3 LIMIT 21)
SELECT s.id, s.doctor_id, s.start_at, s.end_at, s.capacity, s.booked_count, s.version, s.closed_at, s.closed_reason
FROM c JOIN time_slot s ON s.id = c.id ORDER BY c.start_at, c.doctor_id, c.id;
