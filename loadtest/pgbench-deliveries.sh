#!/usr/bin/env bash
# The database's own limit for telling people beside its limit for the bookings (issue 12: "booking
# throughput drops less than 15 %"), on a copy of a database that a load run left with bookings
# (loadtest/features.sh's lt_features, say) and a wide set whose slot ids are LO..HI:
#
#   DB=postgres://postgres@127.0.0.1:55432/lt_features LO=… HI=… loadtest/pgbench-deliveries.sh
#
# Rows alternate, ROUNDS (3) times, each SECONDS_EACH (10): book.sql at 32 clients, then
# deliveries.sql as the service writes and bare (-D bare=1), at 8 clients, in batches of each of
# BATCHES ("16 128") bookings. Each row prints its tps and the CPU PostgreSQL spent per booking (every postgres
# process's ticks, the postmaster's reaped children included, over the row's wall time): with
# deliveries, a booking costs the database the first figure plus one of the others. The copy is
# dropped at the end.
set -euo pipefail
cd "$(dirname "$0")"
DB=${DB:?set DB to the URL of a database with bookings}
LO=${LO:?set LO and HI to the slot ids of the wide set}
HI=${HI:?}
SECONDS_EACH=${SECONDS_EACH:-10}
server=${DB%/*}
copy="${DB##*/}_deliveries"
psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy WITH (FORCE)" -c "CREATE DATABASE $copy TEMPLATE ${DB##*/}"
trap 'psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy WITH (FORCE)"' EXIT
url="$server/$copy"
endpoint=$(psql -X -A -t -q "$url" -c "INSERT INTO webhook_endpoint (owner, owner_role, url, secret, enabled, created_at)
  VALUES ('partner:pgbench', 'partner', 'http://127.0.0.1:9/hook', 'whsec_pgbench', true, now()) RETURNING id")
read -r first count < <(psql -X -A -t -F' ' "$url" -c "SELECT min(id), count(*) FROM appointment")
[ "$(psql -X -A -t "$url" -c "SELECT max(id) - min(id) + 1 FROM appointment")" = "$count" ] \
  || { echo "the appointment ids are not one range" >&2; exit 1; }

ticks() { # every postgres process's CPU ticks, reaped children included
  local t=0 p
  for p in $(pgrep -x postgres); do t=$((t + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo "$t"
}
row() { # label bookings-per-transaction pgbench-arguments…
  local label=$1 per=$2 before after t0 t1 tps
  shift 2
  before=$(ticks); t0=$(date +%s%N)
  tps=$(pgbench -n -M prepared -j 2 -T "$SECONDS_EACH" "$@" "$url" 2>&1 | awk '/^tps/ {print $3}')
  t1=$(date +%s%N)
  sleep 1.5 # the postmaster reaps the clients' backends, and their ticks land in its own
  after=$(ticks)
  awk -v l="$label" -v tps="$tps" -v per="$per" -v d="$((after - before))" -v s="$(( (t1 - t0) / 1000000 ))" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN {
      cores = d / hz / (s / 1000)
      printf "%-22s %8.0f tps  %8.0f bookings/s  postgres %.2f cores, %4.0f µs a booking\n", l, tps, tps * per, cores, cores / (tps * per) * 1e6 }'
}
for _ in $(seq "${ROUNDS:-3}"); do
  row book 1 -c 32 -D lo="$LO" -D hi="$HI" -f pgbench/book.sql
  for m in ${BATCHES:-16 128}; do
    for bare in 0 1; do
      row "deliveries m=$m bare=$bare" "$m" -c 8 -D m="$m" -D bare="$bare" -D e="$endpoint" -D a="$first" -D n="$count" \
        -f pgbench/deliveries.sql
    done
  done
done
