#!/usr/bin/env bash
# The working-hours horizon from nothing: 2,000 doctors (zones mixed), each with a pattern of
# 40 fifteen-minute slots a day (08:00-13:00 and 14:00-19:00, every day of the week), seeded straight into working_hours, then one timed `roll-horizon` pass
# making every doctor's SCHEDULE_HORIZON_DAYS (14) days ahead: about 2,000 x 14 x 40 = 1.1 M slots. A second pass
# then shows that nothing is made twice (0 slots).
#
#   PG=postgres://postgres@127.0.0.1:5432 loadtest/calendar.sh
#
# Settings (environment): PG, DOCTORS (2000), BIN (target/release/clinic-booking, built if absent).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DOCTORS=${DOCTORS:-2000}
BIN=${BIN:-target/release/clinic-booking}
DB=calendar_load
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
[ -x "$BIN" ] || cargo build --release --bin clinic-booking

psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL="$PG/$DB" RUST_LOG=warn
"$BIN" migrate > /dev/null

# Weekdays are 0 (Monday) to 6; minutes since midnight.
WEEK='['
for day in 0 1 2 3 4 5 6; do
  WEEK+="{\"weekday\":$day,\"start_minute\":480,\"end_minute\":780,\"slot_minutes\":15,\"capacity\":1},"
  WEEK+="{\"weekday\":$day,\"start_minute\":840,\"end_minute\":1140,\"slot_minutes\":15,\"capacity\":1},"
done
WEEK="${WEEK%,}]"
psql -X -q "$DATABASE_URL" <<SQL
INSERT INTO doctor (name, specialty, timezone, created_at)
SELECT 'Dr ' || g, 'general',
       (ARRAY['Europe/Paris','America/New_York','Asia/Tokyo','UTC','Australia/Sydney'])[1 + g % 5], now()
FROM generate_series(1, $DOCTORS) g;
INSERT INTO working_hours (doctor_id, valid_from, weekly, created_at)
SELECT id, to_char(now() - interval '1 day', 'YYYY-MM-DD'), '$WEEK', now() FROM doctor;
SQL

echo "first pass (from nothing):"
"$BIN" roll-horizon
echo "second pass (nothing left to make):"
"$BIN" roll-horizon
psql -X -q -t "$DATABASE_URL" -c "SELECT count(*) || ' slots, ' || count(DISTINCT doctor_id) || ' doctors' FROM time_slot"
